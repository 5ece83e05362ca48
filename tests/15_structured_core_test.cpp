// Chapter 15's own code on bad input: the graphs (graph.hpp, igraph_graphs.hpp), the node classifier
// (node_model.hpp) and the reduction tree (reduction.hpp). Chapter code, not an exercise, so these run on the
// solution track only. A bad parameter must be an std::invalid_argument naming it, never a crash, a shift past
// 63 bits, a read past a buffer or a silently meaningless answer.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "15_structured/csr.hpp"
#include "15_structured/graph.hpp"
#include "15_structured/igraph_graphs.hpp"
#include "15_structured/node_model.hpp"
#include "15_structured/reduction.hpp"
#include "attn/rng.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

namespace ch15 = attn::ch15;
using attn::Matrix;
using attn::Vector;

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A path 0 - 1 - 2 - 3 with a branch 1 - 4: five nodes, one component.
const ch15::Graph kPath{5, {{0, 1}, {1, 2}, {2, 3}, {1, 4}}};

ch15::NodeTask path_task(attn::Rng& rng, ch15::Structure s) {
  return {rng.normal(5, 3), ch15::adjacency_mask(kPath, true), ch15::hop_distances(kPath), s, 0.2f, false};
}

}  // namespace

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("15_structured: bad input") {
  TEST_CASE("the graph functions refuse a node past n, a self-loop and a repeated edge, naming the edge") {
    const ch15::Graph past{3, {{0, 1}, {1, 3}}}, loop{3, {{0, 1}, {2, 2}}}, twice{3, {{0, 1}, {1, 0}}};
    for (const ch15::Graph* g : {&past, &loop, &twice}) {
      CHECK_THROWS_AS(ch15::adjacency_mask(*g, true), std::invalid_argument);
      CHECK_THROWS_AS(ch15::hop_distances(*g), std::invalid_argument);
      if (ch15::have_igraph()) CHECK_THROWS_AS(ch15::igraph_hop_distances(*g), std::invalid_argument);
    }
    CHECK_THROWS_NAMING(ch15::hop_distances(past), std::invalid_argument, "(1, 3)");
    CHECK_THROWS_NAMING(ch15::adjacency_mask(ch15::Graph{kMax, {}}, false), std::invalid_argument, "nodes");
    CHECK(ch15::hop_distances(ch15::Graph{0, {}}).size() == 0);  // no nodes: no distances
  }

  TEST_CASE("check_parents and tree_graph refuse two roots, no root, a parent past n, a self-parent and a cycle") {
    const std::vector<std::vector<long>> bad{{-1, -1, 0}, {1, 2, 0}, {-1, 7, 0}, {-1, 1, 0}, {-1, 2, 1}, {-1, -2, 0}};
    for (const auto& parent : bad) {
      CAPTURE(parent.size());
      CHECK_THROWS_AS(ch15::check_parents(parent), std::invalid_argument);
      CHECK_THROWS_AS(ch15::tree_graph(parent), std::invalid_argument);
    }
    CHECK_THROWS_NAMING(ch15::check_parents({-1, 7, 0}), std::invalid_argument, "parent[1] = 7");
    CHECK_THROWS_NAMING(ch15::check_parents({-1, 1, 0}), std::invalid_argument, "parent[1] = 1");
  }

  TEST_CASE("structure_name refuses a value that is none of Structure's, naming it") {
    CHECK_THROWS_NAMING(ch15::structure_name(static_cast<ch15::Structure>(7)), std::invalid_argument, "7");
  }

  TEST_CASE("init_node_model refuses a zero size and sizes that cannot fit, before allocating") {
    CHECK_THROWS_NAMING(ch15::init_node_model(0, 3, 3, 2, 1), std::invalid_argument, "d_in = 0");
    CHECK_THROWS_NAMING(ch15::init_node_model(4, 3, 3, 0, 1), std::invalid_argument, "classes = 0");
    CHECK_THROWS_AS(ch15::init_node_model(std::size_t{1} << 40, std::size_t{1} << 40, 3, 2, 1), std::invalid_argument);
    CHECK_THROWS_NAMING(ch15::init_node_model(4, 3, std::size_t{1} << 42, 2, 1), std::invalid_argument,
                        "B = 4398046511104");
  }

  TEST_CASE("node_forward, node_backward and node_step refuse shapes that do not fit and NaN, naming them") {
    attn::Rng rng(1501);
    const ch15::NodeTask task = path_task(rng, ch15::Structure::bias);
    ch15::NodeModel model = ch15::init_node_model(3, 4, 3, 2, 7);
    CHECK_THROWS_AS(ch15::node_forward(ch15::init_node_model(2, 4, 3, 2, 7), task), std::invalid_argument);  // X·W
    ch15::NodeTask nan_task = task;
    nan_task.X(2, 1) = kNaN;
    CHECK_THROWS_AS(ch15::node_forward(model, nan_task), std::invalid_argument);
    const ch15::NodeTrace trace = ch15::node_forward(model, task);
    CHECK_THROWS_NAMING(ch15::node_backward(model, task, trace, Matrix(xt::zeros<float>({5, 3}))),
                        std::invalid_argument, "node_backward", "dlogits (5, 3)");
    Matrix dlogits = xt::zeros<float>({5, 2});  // (n, classes)
    dlogits(4, 1) = kNaN;
    CHECK_THROWS_NAMING(ch15::node_backward(model, task, trace, dlogits), std::invalid_argument, "node_backward",
                        "dlogits");
    ch15::NodeTrace short_trace = trace;
    short_trace.Z = xt::zeros<float>({4, 4});
    CHECK_THROWS_NAMING(ch15::node_backward(model, task, short_trace, Matrix(xt::zeros<float>({5, 2}))),
                        std::invalid_argument, "Z (4, 4)");
    ch15::NodeModel m = ch15::zeros_like(model), v = ch15::zeros_like(model);
    const ch15::NodeModel before = model;
    const std::vector<std::size_t> targets{0, 1, 0, attn::ch12::kIgnore, 1};
    CHECK_THROWS_AS(ch15::node_step(model, m, v, 1, task, {0, 1}, attn::AdamW{}), std::invalid_argument);   // 2 of 5
    CHECK_THROWS_AS(ch15::node_step(model, m, v, 0, task, targets, attn::AdamW{}), std::invalid_argument);  // t = 0
    CHECK(model.W == before.W);  // a refused step leaves the model as it was
    CHECK(model.W_out == before.W_out);
  }

  TEST_CASE("predictions refuses logits without classes and NaN or infinite logits, naming the entry") {
    CHECK_THROWS_NAMING(ch15::predictions(Matrix(xt::zeros<float>({3, 0}))), std::invalid_argument, "(3, 0)");
    Matrix logits{{0.0f, 1.0f}, {kNaN, 0.0f}};
    CHECK_THROWS_NAMING(ch15::predictions(logits), std::invalid_argument, "logits");
    logits(1, 0) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(ch15::predictions(logits), std::invalid_argument, "logits");
    CHECK(ch15::predictions(Matrix(xt::zeros<float>({0, 2}))).empty());  // no nodes: no predictions
  }

  TEST_CASE("train_nodes and check_node_labels refuse labels that are not one class per node, before training") {
    attn::Rng rng(1502);
    const ch15::NodeTask task = path_task(rng, ch15::Structure::mask);
    const ch15::NodeTraining s{4, 3, 2, {}};
    CHECK_THROWS_NAMING(ch15::train_nodes(task, {0, 1, 0}, {0}, 2, s, 1), std::invalid_argument, "3 labels", "n = 5");
    CHECK_THROWS_NAMING(ch15::train_nodes(task, {0, 1, 0, 5, 1}, {0}, 2, s, 1), std::invalid_argument, "labels[3] = 5");
    CHECK_THROWS_NAMING(ch15::train_nodes(task, {0, 1, 0, 1, 1}, {0, 9}, 2, s, 1), std::invalid_argument,
                        "labelled[1] = 9");
    CHECK_THROWS_NAMING(ch15::check_node_labels({0, 1}, {}, 2, 1), std::invalid_argument, "labels[1] = 1");
    CHECK_THROWS_NAMING(ch15::train_nodes(task, {0, 1, 0, 1, 1}, {0}, 0, s, 1), std::invalid_argument, "classes");
  }

  TEST_CASE(
      "ceil_log2 answers for every P without shifting past 63 bits, and tree_step refuses a rank or round outside") {
    // bad input answered: ceil_log2
    CHECK(ch15::ceil_log2(0) == 0);
    CHECK(ch15::ceil_log2(1) == 0);
    CHECK(ch15::ceil_log2(5) == 3);
    CHECK(ch15::ceil_log2(std::size_t{1} << 63) == 63);
    CHECK(ch15::ceil_log2(kMax) == 64);  // the doubling loop shifted 1 by 64 bits here (undefined behaviour)
    CHECK_THROWS_NAMING(ch15::tree_step(4, 0, 4), std::invalid_argument, "rank 4", "P = 4");
    CHECK_THROWS_NAMING(ch15::tree_step(0, 2, 4), std::invalid_argument, "round 2");
    CHECK_THROWS_NAMING(ch15::tree_step(0, 64, kMax), std::invalid_argument, "round 64");
    // The last round of the largest tree: rank 0 receives from 2^63, which sends to 0.
    const ch15::TreeStep last = ch15::tree_step(0, 63, kMax);
    CHECK((last.receives && last.partner == std::size_t{1} << 63));
    CHECK(ch15::tree_step(std::size_t{1} << 63, 63, kMax).sends);
  }

  TEST_CASE("tree_reduce refuses a part that is not rows × (d_v + 1) floats, before merging any") {
    std::vector<std::vector<float>> parts{{1.0f, 0.0f, 0.5f}, {2.0f, 0.0f}, {3.0f, 0.0f, 0.25f}};  // rows 1, d_v 2
    const auto before = parts;
    CHECK_THROWS_NAMING(ch15::tree_reduce(parts, 1, 2), std::invalid_argument, "parts[1] holds 2 floats", "3");
    CHECK(parts == before);
    CHECK_THROWS_NAMING(ch15::tree_reduce(parts, kMax, 2), std::invalid_argument, "tree_reduce");  // wraps
    CHECK_THROWS_NAMING(ch15::tree_reduce(parts, 1, kMax), std::invalid_argument, "d_v + 1");
  }
}

// The defects hostile calls found in the chapter's own code, each with the call that found it: a crash, a hang, an
// absurd allocation, a silent broadcast or a NaN from finite input before; a refusal naming what was wrong, or the
// answer the contract defines, now.
TEST_SUITE("15_structured: hostile input") {
  TEST_CASE("random_csr refuses a degree whose + 1 wraps and a graph past the memory, before allocating") {
    // degree + 1 wrapped to 0: nothing was allocated and the ids were written anyway (SIGSEGV).
    CHECK_THROWS_NAMING(ch15::random_csr(4, kMax, 1), std::invalid_argument, "random_csr", "degree + 1");
    // 2^20 nodes of 2^20 + 1 senders: 4 TiB of ids was asked for.
    CHECK_THROWS_NAMING(ch15::random_csr(std::size_t{1} << 20, std::size_t{1} << 20, 1), std::invalid_argument,
                        "random_csr", "available");
  }

  TEST_CASE("check_parents, tree_graph and subtree_mask on a chain of 2^20 tokens answer in linear time") {
    // bad input answered: check_parents, tree_graph
    // A chain inside check_parents' own limit took n × depth = 5·10^11 steps (a hang) before.
    const std::size_t n = std::size_t{1} << 20;
    std::vector<long> chain(n);
    for (std::size_t i = 0; i < n; ++i) chain[i] = static_cast<long>(i) - 1;
    CHECK_NOTHROW(ch15::check_parents(chain));
    CHECK(ch15::tree_graph(chain).edges.size() == n - 1);
    // The same chain with a cycle at its far end (node n − 1 hears n − 2, which hears n − 1): still found.
    std::vector<long> cycle = chain;
    cycle[n - 2] = static_cast<long>(n - 1);
    CHECK_THROWS_NAMING(ch15::check_parents(cycle), std::invalid_argument, "cycle");
    CHECK_THROWS_NAMING(ch15::check_parents(std::vector<long>(n + 1, 0)), std::invalid_argument, "check_parents");
  }

  TEST_CASE("GatherRows of rows of width 0 answers at once, however many rows: there is nothing to copy") {
    // 2^63 rows of no columns hold no float: the copy loop ran 2^63 times over them (a hang in the release build).
    const Matrix empty_rows = Matrix::from_shape({std::size_t{1} << 63, 0});
    const ch15::GatherRows rows(empty_rows, "K");
    CHECK(rows.rows() == std::size_t{1} << 63);
    CHECK(rows.width() == 0);
    CHECK(rows.padded_size() == 0);
  }

  TEST_CASE("the dense tables of 2^20 nodes are refused with their estimate, before allocating") {
    const ch15::Graph big{std::size_t{1} << 20, {}};
    CHECK_NOTHROW(ch15::check_graph(big));  // the lists of 2^20 nodes fit: the check itself allocates nothing dense
    // complete_lists filled 8 GB for 44 s before ending in bad_alloc; the others ended in bad_alloc.
    CHECK_THROWS_NAMING(ch15::complete_lists(big.n), std::invalid_argument, "complete_lists", "available");
    CHECK_THROWS_NAMING(ch15::adjacency_mask(big, true), std::invalid_argument, "adjacency_mask", "available");
    CHECK_THROWS_NAMING(ch15::hop_distances(big), std::invalid_argument, "hop_distances", "available");
    if (ch15::have_igraph())
      CHECK_THROWS_NAMING(ch15::igraph_hop_distances(big), std::invalid_argument, "igraph_hop_distances", "available");
  }

  TEST_CASE("sbm_graph refuses too many blocks and block sizes whose sum wraps") {
    if (!ch15::have_igraph()) return;
    // 65,536 blocks of one node: igraph tried a 32 GB matrix of probabilities.
    CHECK_THROWS_NAMING(ch15::sbm_graph(std::vector<std::size_t>(65536, 1), 0.5, 0.1, 1), std::invalid_argument,
                        "65536 blocks");
    // {SIZE_MAX, 2} summed to 1, inside the limit of nodes.
    CHECK_THROWS_NAMING(ch15::sbm_graph({kMax, 2}, 0.5, 0.1, 1), std::invalid_argument, "nodes");
    CHECK(ch15::sbm_graph({3, 2}, 1.0, 0.0, 1).edges.size() == 4);  // still draws: two cliques, 3 + 1 edges
  }

  TEST_CASE("csr_attention follows the course's overflow policy and answers an empty graph") {
    // bad input answered: csr_attention, csr_attention_into
    const ch15::Csr g = ch15::csr_of({{0, 1}, {0, 1}});
    const Matrix big = xt::full_like(Matrix(xt::zeros<float>({2, 4})), 1e20f);  // finite, q·k = 4e40 is not
    // All-NaN output before, where message_passing refused the same input.
    CHECK_THROWS_NAMING(ch15::csr_attention(big, big, big, g, 1), std::invalid_argument, "csr_attention", "d_k = 4");
    Matrix O = xt::zeros<float>({2, 4});
    const Matrix before = O;
    CHECK_THROWS_NAMING(ch15::csr_attention_into(big, ch15::GatherRows(big), ch15::GatherRows(big), g, 1, 1, O),
                        std::invalid_argument, "d_k = 4");
    CHECK(O == before);
    // No nodes: an empty result (it was refused as "O is Q itself", two empty matrices sharing no data).
    const Matrix none = xt::zeros<float>({0, 4});
    const Matrix out = ch15::csr_attention(none, none, none, ch15::csr_of({}), 2);
    CHECK(out.shape(0) == 0);
    CHECK(out.shape(1) == 4);
  }

  TEST_CASE("node_forward and train_nodes refuse a (1, 1) mask or hop table instead of broadcasting it") {
    // bad input answered: check_node_task, check_node_model
    attn::Rng rng(1547);
    ch15::NodeTask task = path_task(rng, ch15::Structure::mask);
    const ch15::NodeModel model = ch15::init_node_model(3, 4, 3, 2, 7);
    CHECK_NOTHROW(ch15::check_node_model(model, task));
    ch15::NodeTask one_mask = task;
    one_mask.allowed = attn::Mask(attn::Mask::shape_type{1, 1}, true);  // trained with no graph at all before
    CHECK_THROWS_NAMING(ch15::node_forward(model, one_mask), std::invalid_argument, "allowed", "(1, 1)", "(5, 5)");
    CHECK_THROWS_NAMING(ch15::train_nodes(one_mask, {0, 1, 0, 1, 1}, {0, 1}, 2, ch15::NodeTraining{4, 3, 2, {}}, 1),
                        std::invalid_argument, "allowed", "(1, 1)");
    ch15::NodeTask one_hop = path_task(rng, ch15::Structure::bias);
    one_hop.hops = ch15::Hops(ch15::Hops::shape_type{1, 1}, 0);
    CHECK_THROWS_NAMING(ch15::node_forward(model, one_hop), std::invalid_argument, "hops", "(1, 1)");
    ch15::NodeModel short_a = model;
    short_a.a = xt::zeros<float>({std::size_t{1}, std::size_t{4}});  // (1, d) instead of (1, 2·d)
    CHECK_THROWS_NAMING(ch15::node_forward(short_a, task), std::invalid_argument, "a (1, 4)");
    task.slope = 1.5f;
    CHECK_THROWS_NAMING(ch15::check_node_task(task), std::invalid_argument, "slope");
    // Structure::none reads neither: any mask and hops are fine there.
    ch15::NodeTask none = one_mask;
    none.structure = ch15::Structure::none;
    CHECK_NOTHROW(ch15::node_forward(model, none));
  }
}

namespace hostile = attn::test::hostile;

template <>
struct attn::test::hostile::Weights<attn::ch15::NodeModel> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::ch15::NodeModel& m, F&& f) {
    f("W", m.W);
    f("a", m.a);
    f("b", m.b);
    f("W_out", m.W_out);
  }
};

template <>
struct attn::test::hostile::Weights<attn::ch15::GatHead> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::ch15::GatHead& h, F&& f) {
    f("W", h.W);
    f("a", h.a);
  }
};

// Every public function of the chapter under the hostile-input battery (tests/support/hostile.hpp): each argument
// replaced in turn by its type's hostile values, each call refused naming what was wrong, or answered as the
// contract says. A case names the functions it covers on its `// hostile battery:` line (cmake/check_bad_input.py).
TEST_SUITE("15_structured: hostile battery") {
  TEST_CASE("the contract's functions under the battery") {
    // hostile battery: message_passing, gat_scores, gatv2_scores, gat_layer, hop_bias, subtree_mask, merge_packed
    attn::Rng rng(1548);
    const ch15::Neighbours in{{0, 1}, {0, 1, 2}, {2}, {}};
    hostile::battery(
        "message_passing", {"Q", "K", "V", "in"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, const ch15::Neighbours& n) {
          return ch15::message_passing(Q, K, V, n);
        },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(4, 3)), Matrix(rng.normal(4, 2)), in)
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, const ch15::Neighbours& n) {
          bool ids = true;
          for (const auto& list : n)
            for (std::size_t j : list) ids = ids && j < Q.shape(0);
          return K.shape(0) == Q.shape(0) && V.shape(0) == Q.shape(0) && n.size() == Q.shape(0) &&
                 K.shape(1) == Q.shape(1) && ids;
        })
        .answer([](const Matrix& out, const Matrix& Q, const Matrix&, const Matrix& V, const ch15::Neighbours&) {
          return out.shape(0) == Q.shape(0) && out.shape(1) == V.shape(1);
        })
        .run();
    const Matrix H = rng.normal(4, 3);
    const Vector a = xt::view(rng.normal(1, 6), 0, xt::all());
    hostile::battery(
        "gat_scores", {"H", "a", "slope"},
        [](const Matrix& h, const Vector& v, float s) { return ch15::gat_scores(h, v, s); }, H, a, 0.2f)
        .fits([](const Matrix& h, const Vector& v, float s) { return v.size() == 2 * h.shape(1) && s >= 0 && s < 1; })
        .answer([](const Matrix& E, const Matrix& h, const Vector&, float) {
          return E.shape(0) == h.shape(0) && E.shape(1) == h.shape(0);
        })
        .run();
    const Vector a2 = xt::view(rng.normal(1, 3), 0, xt::all());
    hostile::battery(
        "gatv2_scores", {"L", "R", "a", "slope"},
        [](const Matrix& L, const Matrix& R, const Vector& v, float s) { return ch15::gatv2_scores(L, R, v, s); },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(4, 3)), a2, 0.2f)
        .fits([](const Matrix& L, const Matrix& R, const Vector& v, float s) {
          return R.shape() == L.shape() && v.size() == L.shape(1) && s >= 0 && s < 1;
        })
        .run();
    const ch15::GatHead head{rng.normal(3, 2), Vector(xt::view(rng.normal(1, 4), 0, xt::all()))};
    hostile::battery(
        "gat_layer", {"X", "heads", "allowed", "slope"},
        [](const Matrix& X, const std::vector<ch15::GatHead>& h, const attn::Mask& m, float s) {
          return ch15::gat_layer(X, h, m, s);
        },
        Matrix(rng.normal(4, 3)), std::vector<ch15::GatHead>{head, head},
        attn::Mask(attn::Mask::shape_type{4, 4}, true), 0.2f)
        .fits([](const Matrix& X, const std::vector<ch15::GatHead>& h, const attn::Mask& m, float s) {
          bool heads = !h.empty();
          for (const auto& k : h)
            heads = heads && k.W.shape(0) == X.shape(1) && k.W.shape(1) == h[0].W.shape(1) &&
                    k.a.size() == 2 * h[0].W.shape(1);
          return heads && m.shape(0) == X.shape(0) && m.shape(1) == X.shape(0) && s >= 0 && s < 1;
        })
        .run();
    hostile::battery(
        "hop_bias", {"hops", "b"}, [](const ch15::Hops& h, const Vector& b) { return ch15::hop_bias(h, b); },
        ch15::hop_distances(kPath), Vector{0.5f, -0.25f, 1.0f})
        .fits([](const ch15::Hops& h, const Vector& b) { return h.shape(0) == h.shape(1) && b.size() > 0; })
        .non_finite_passes("the bias table's entries are copied, never combined: a NaN in b is a NaN in B")
        .run();
    hostile::battery(
        "subtree_mask", {"parent"}, [](const std::vector<long>& p) { return ch15::subtree_mask(p); },
        std::vector<long>{1, -1, 1, 2})
        .run();
    hostile::battery(
        "merge_packed", {"in", "inout", "rows", "d_v"},
        [](const std::vector<float>& i, std::vector<float>& io, std::size_t rows, std::size_t d_v) {
          // The pointers are the lists' own, whose sizes are what the contract's rows·(d_v + 1) must not pass.
          if (rows * (d_v + 1) > i.size() || rows * (d_v + 1) > io.size()) return;  // see the exemption below
          ch15::merge_packed(i.data(), io.data(), rows, d_v);
        },
        std::vector<float>{0.0f, 1.0f, 2.0f, -1.0f, 3.0f, 4.0f}, std::vector<float>{0.5f, 5.0f, 6.0f, 0.0f, 7.0f, 8.0f},
        std::size_t{2}, std::size_t{2})
        .exempt("rows = ",
                "takes raw pointers: a rows or d_v past the caller's buffers cannot be seen (its checks of "
                "sizes that cannot exist are the defect tests above)")
        .exempt("d_v = ", "as rows")
        .exempt("every size", "as rows")
        .run();
  }

  TEST_CASE("the graphs, trees and CSR functions under the battery") {
    // hostile battery: check_graph, neighbour_lists, complete_lists, adjacency_mask, hop_distances, check_parents
    // hostile battery: tree_graph, make_max_expression, csr_of, random_csr, GatherRows, csr_attention
    // hostile battery: csr_attention_into, famous_graph, sbm_graph, igraph_hop_distances, ceil_log2, tree_step
    // hostile battery: tree_reduce
    using Edges = std::vector<std::size_t>;  // a graph's edges as a flat list u0 v0 u1 v1 …: the battery's list values
    const auto graph_of = [](std::size_t n, const Edges& e) {
      ch15::Graph g{n, {}};
      for (std::size_t k = 0; k + 1 < e.size(); k += 2) g.edges.emplace_back(e[k], e[k + 1]);
      return g;
    };
    const auto simple = [](std::size_t n, const Edges& e) {
      std::set<std::pair<std::size_t, std::size_t>> seen;
      for (std::size_t k = 0; k + 1 < e.size(); k += 2)
        if (e[k] >= n || e[k + 1] >= n || e[k] == e[k + 1] ||
            !seen.insert({std::min(e[k], e[k + 1]), std::max(e[k], e[k + 1])}).second)
          return false;
      return e.size() % 2 == 0 && n <= (std::size_t{1} << 20);
    };
    const Edges path{0, 1, 1, 2, 2, 3, 1, 4};
    hostile::battery(
        "check_graph", {"n", "edges"}, [&](std::size_t n, const Edges& e) { ch15::check_graph(graph_of(n, e)); },
        std::size_t{5}, path)
        .fits(simple)
        .exempt("edges one", "an odd list is the battery's flattening, not a graph: its last entry is dropped")
        .run();
    hostile::battery(
        "neighbour_lists", {"n", "edges", "self_loops"},
        [&](std::size_t n, const Edges& e, bool loops) { return ch15::neighbour_lists(graph_of(n, e), loops); },
        std::size_t{5}, path, true)
        .fits([&](std::size_t n, const Edges& e, bool) { return simple(n, e); })
        .exempt("edges one", "as check_graph")
        .run();
    hostile::battery(
        "adjacency_mask", {"n", "edges", "self_loops"},
        [&](std::size_t n, const Edges& e, bool loops) { return ch15::adjacency_mask(graph_of(n, e), loops); },
        std::size_t{5}, path, true)
        .exempt("edges one", "as check_graph")
        .run();
    hostile::battery(
        "hop_distances", {"n", "edges"},
        [&](std::size_t n, const Edges& e) { return ch15::hop_distances(graph_of(n, e)); }, std::size_t{5}, path)
        .exempt("edges one", "as check_graph")
        .run();
    hostile::battery(
        "complete_lists", {"n"}, [](std::size_t n) { return ch15::complete_lists(n); }, std::size_t{4})
        .fits([](std::size_t n) { return n <= 4; })  // the battery's sizes past 4 are all past memory or the limit
        .run();
    hostile::battery(
        "check_parents", {"parent"}, [](const std::vector<long>& p) { ch15::check_parents(p); },
        std::vector<long>{1, -1, 1, 2, 1})
        .run();
    hostile::battery(
        "tree_graph", {"parent"}, [](const std::vector<long>& p) { return ch15::tree_graph(p).edges.size(); },
        std::vector<long>{1, -1, 1, 2, 1})
        .run();
    hostile::battery(
        "make_max_expression", {"depth"},
        [](std::size_t depth) {
          attn::Rng rng(3);
          return ch15::make_max_expression(rng, depth).tokens.size();
        },
        std::size_t{3})
        .fits([](std::size_t depth) { return depth >= 1 && depth <= 8; })
        .run();
    hostile::battery(
        "csr_of", {"in"}, [](const ch15::Neighbours& in) { return ch15::csr_of(in).cols.size(); },
        ch15::Neighbours{{0, 1}, {0, 1, 2}, {2}, {}})
        .run();
    hostile::battery(
        "random_csr", {"n", "degree", "seed"},
        [](std::size_t n, std::size_t degree, std::uint64_t seed) {
          return ch15::random_csr(n, degree, seed).cols.size();
        },
        std::size_t{6}, std::size_t{3}, std::uint64_t{1})
        .fits([](std::size_t n, std::size_t degree, std::uint64_t) { return n <= 6 && degree <= 3; })
        .run();
    attn::Rng rng(1549);
    hostile::battery(
        "GatherRows", {"M"}, [](const Matrix& M) { return ch15::GatherRows(M, "M").rows(); }, Matrix(rng.normal(4, 8)))
        .run();
    const ch15::Csr g = ch15::csr_of({{0, 1}, {0, 1, 2}, {2, 3}, {}});
    const auto fits_csr = [](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t heads,
                             std::size_t threads) {
      return K.shape() == Q.shape() && V.shape() == Q.shape() && Q.shape(0) == 4 && heads > 0 && heads <= 8 &&
             Q.shape(1) % heads == 0 && threads > 0 && threads <= 8;
    };
    hostile::battery(
        "csr_attention", {"Q", "K", "V", "heads", "threads"},
        [&](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t heads, std::size_t threads) {
          return ch15::csr_attention(Q, K, V, g, heads, threads);
        },
        Matrix(rng.normal(4, 8)), Matrix(rng.normal(4, 8)), Matrix(rng.normal(4, 8)), std::size_t{2}, std::size_t{2})
        .fits(fits_csr)
        .exempt("threads = 2^", "threads past the work items are not started (at most one per 512 nodes): answered")
        .exempt("threads = SIZE_MAX", "as threads = 2^32")
        .run();
    hostile::battery(
        "csr_attention_into", {"Q", "K", "V", "heads", "O"},
        [&](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t heads, Matrix& O) {
          ch15::csr_attention_into(Q, ch15::GatherRows(K, "K"), ch15::GatherRows(V, "V"), g, heads, 1, O);
          return O;
        },
        Matrix(rng.normal(4, 8)), Matrix(rng.normal(4, 8)), Matrix(rng.normal(4, 8)), std::size_t{2},
        Matrix(xt::zeros<float>({4, 8})))
        .fits([&](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t heads, const Matrix& O) {
          return fits_csr(Q, K, V, heads, 1) && O.shape() == Q.shape();
        })
        .exempt("O with", "O is written, never read: its values do not matter")
        .run();
    hostile::battery(
        "tree_reduce", {"parts", "rows", "d_v"},
        [](std::vector<std::vector<float>>& parts, std::size_t rows, std::size_t d_v) {
          return ch15::tree_reduce(parts, rows, d_v);
        },
        std::vector<std::vector<float>>{{0.0f, 1.0f, 2.0f}, {1.0f, 3.0f, 4.0f}, {-1.0f, 5.0f, 6.0f}}, std::size_t{1},
        std::size_t{2})
        .fits([](const std::vector<std::vector<float>>& parts, std::size_t rows, std::size_t d_v) {
          return rows == 1 && d_v == 2 && !parts.empty();
        })
        .exempt("parts empty", "no parts: nothing to merge, 0 rounds (answered)")
        .run();
    hostile::battery(
        "ceil_log2", {"P"}, [](std::size_t P) { return ch15::ceil_log2(P); }, std::size_t{5})
        .run();
    hostile::battery(
        "tree_step", {"rank", "round", "P"},
        [](std::size_t rank, std::size_t round, std::size_t P) { return ch15::tree_step(rank, round, P).partner; },
        std::size_t{2}, std::size_t{1}, std::size_t{5})
        .fits([](std::size_t rank, std::size_t round, std::size_t P) { return rank < P && round < ch15::ceil_log2(P); })
        .run();
    if (!ch15::have_igraph()) return;
    hostile::battery(
        "famous_graph", {"name"}, [](const std::string& name) { return ch15::famous_graph(name).n; },
        std::string("Zachary"))
        .run();
    hostile::battery(
        "sbm_graph", {"block_sizes", "p_in", "p_out", "seed"},
        [](const std::vector<std::size_t>& b, double p_in, double p_out, std::uint64_t seed) {
          return ch15::sbm_graph(b, p_in, p_out, seed).edges.size();
        },
        std::vector<std::size_t>{3, 4}, 0.8, 0.1, std::uint64_t{1})
        .fits([](const std::vector<std::size_t>& b, double p_in, double p_out, std::uint64_t) {
          std::size_t n = 0;
          for (std::size_t x : b) n = x > (std::size_t{1} << 16) ? x : n + x;
          return !b.empty() && b.size() <= 1024 && n <= (std::size_t{1} << 16) && p_in >= 0 && p_in <= 1 &&
                 p_out >= 0 && p_out <= 1;
        })
        .run();
    hostile::battery(
        "igraph_hop_distances", {"n", "edges"},
        [&](std::size_t n, const Edges& e) { return ch15::igraph_hop_distances(graph_of(n, e)); }, std::size_t{5}, path)
        .exempt("edges one", "as check_graph")
        .run();
  }

  TEST_CASE("the node classifier under the battery") {
    // hostile battery: structure_name, init_node_model, node_backward, check_node_task, check_node_model
    // hostile battery: node_forward, node_step, predictions, accuracy_on, check_node_labels, train_nodes
    attn::Rng rng(1550);
    const ch15::NodeTask task = path_task(rng, ch15::Structure::bias);
    const ch15::NodeModel model = ch15::init_node_model(3, 4, 3, 2, 7);
    const auto task_of = [&](const Matrix& X, const attn::Mask& allowed, const ch15::Hops& hops, ch15::Structure s,
                             float slope) { return ch15::NodeTask{X, allowed, hops, s, slope, false}; };
    const auto fits_task = [](const Matrix& X, const attn::Mask& allowed, const ch15::Hops& hops, ch15::Structure s,
                              float slope) {
      const std::size_t n = X.shape(0);
      return slope >= 0 && slope < 1 && static_cast<int>(s) <= 2 && X.shape(1) == 3 &&
             (s != ch15::Structure::mask || (allowed.shape(0) == n && allowed.shape(1) == n)) &&
             (s != ch15::Structure::bias || (hops.shape(0) == n && hops.shape(1) == n));
    };
    hostile::battery(
        "structure_name", {"s"}, [](ch15::Structure s) { return ch15::structure_name(s); }, ch15::Structure::mask)
        .run();
    hostile::battery(
        "check_node_task", {"X", "allowed", "hops", "structure", "slope"},
        [&](const Matrix& X, const attn::Mask& m, const ch15::Hops& h, ch15::Structure s, float slope) {
          ch15::check_node_task(task_of(X, m, h, s, slope));
        },
        task.X, task.allowed, task.hops, ch15::Structure::mask, 0.2f)
        .fits([&](const Matrix& X, const attn::Mask& m, const ch15::Hops& h, ch15::Structure s, float slope) {
          return fits_task(Matrix(xt::zeros<float>({X.shape(0), std::size_t{3}})), m, h, s, slope);
        })
        .non_finite_passes("the task's features are checked where they are used (gat_scores' overflow policy)")
        .run();
    hostile::battery(
        "node_forward", {"model", "X", "allowed", "hops", "structure"},
        [&](const ch15::NodeModel& m, const Matrix& X, const attn::Mask& a, const ch15::Hops& h, ch15::Structure s) {
          return ch15::node_forward(m, task_of(X, a, h, s, 0.2f)).logits;
        },
        model, task.X, task.allowed, task.hops, ch15::Structure::bias)
        .fits([&](const ch15::NodeModel& m, const Matrix& X, const attn::Mask& a, const ch15::Hops& h,
                  ch15::Structure s) {
          return fits_task(X, a, h, s, 0.2f) && m.W.shape(0) == 3 && m.W.shape(1) == 4 && m.a.shape(0) == 1 &&
                 m.a.shape(1) == 8 && m.W_out.shape(0) == 4 && m.W_out.shape(1) > 0 &&
                 (s != ch15::Structure::bias || (m.b.shape(0) == 1 && m.b.shape(1) > 0));
        })
        .exempt("model.b", "the hop-bias table: any (1, B ≥ 1) is valid; (2, ·) or (·, 0) are refused (fits judges)")
        .run();
    hostile::battery(
        "check_node_model", {"model"}, [&](const ch15::NodeModel& m) { ch15::check_node_model(m, task); }, model)
        .fits([](const ch15::NodeModel& m) {
          return m.W.shape(0) == 3 && m.W.shape(1) == 4 && m.a.shape(0) == 1 && m.a.shape(1) == 8 &&
                 m.W_out.shape(0) == 4 && m.W_out.shape(1) > 0 && m.b.shape(0) == 1 && m.b.shape(1) > 0;
        })
        .non_finite_passes("a check of shapes: values are checked where they are used")
        .run();
    const ch15::NodeTrace trace = ch15::node_forward(model, task);
    hostile::battery(
        "node_backward", {"model", "dlogits"},
        [&](const ch15::NodeModel& m, const Matrix& d) { return ch15::node_backward(m, task, trace, d).W; }, model,
        Matrix(rng.normal(5, 2)))
        .fits([](const ch15::NodeModel& m, const Matrix& d) {
          return d.shape(0) == 5 && d.shape(1) == 2 && m.W.shape(0) == 3 && m.W.shape(1) == 4 && m.a.shape(1) == 8 &&
                 m.a.shape(0) == 1 && m.W_out.shape(0) == 4 && m.W_out.shape(1) == 2 && m.b.shape(1) > 0 &&
                 m.b.shape(0) == 1;
        })
        .exempt("model.W ", "the trace was made with this model: another W makes a trace that does not fit it")
        .exempt("model.W_out (4, 3)", "as model.W")
        .exempt("dlogits with 3e38",
                "a gradient past float's range overflows inside the backward, where chapter 10's "
                "softmax_backward refuses it naming its dP")
        .exempt("dlogits all", "as dlogits with 3e38")
        .run();
    hostile::battery(
        "node_step", {"t", "targets"},
        [&](std::size_t t, const std::vector<std::size_t>& targets) {
          ch15::NodeModel mm = model, m = ch15::zeros_like(model), v = ch15::zeros_like(model);
          return ch15::node_step(mm, m, v, t, task, targets, attn::AdamW{});
        },
        std::size_t{1}, std::vector<std::size_t>{0, 1, 0, attn::ch12::kIgnore, 1})
        // Any target past the classes is ignored (chapter 12's cross_entropy, as PyTorch's ignore_index).
        .fits([](std::size_t t, const std::vector<std::size_t>& targets) { return t >= 1 && targets.size() == 5; })
        .exempt("t = 2^", "AdamW's bias correction at a late step: a defined answer (chapter 12 checks t ≥ 1)")
        .exempt("t = SIZE_MAX", "as t = 2^32")
        .run();
    hostile::battery(
        "predictions", {"logits"}, [](const Matrix& l) { return ch15::predictions(l); }, Matrix(rng.normal(4, 3)))
        .fits([](const Matrix& l) { return l.shape(1) > 0 || l.shape(0) == 0; })
        .run();
    hostile::battery(
        "accuracy_on", {"predicted", "targets"},
        [](const std::vector<std::size_t>& p, const std::vector<std::size_t>& t) { return ch15::accuracy_on(p, t); },
        std::vector<std::size_t>{0, 1, 1}, std::vector<std::size_t>{0, 0, 1})
        .fits([](const std::vector<std::size_t>& p, const std::vector<std::size_t>& t) { return p.size() == t.size(); })
        .run();
    hostile::battery(
        "check_node_labels", {"labels", "labelled", "n", "classes"},
        [](const std::vector<std::size_t>& l, const std::vector<std::size_t>& d, std::size_t n, std::size_t c) {
          ch15::check_node_labels(l, d, n, c);
        },
        std::vector<std::size_t>{0, 1, 0, 1, 1}, std::vector<std::size_t>{0, 3}, std::size_t{5}, std::size_t{2})
        .run();
    hostile::battery(
        "init_node_model", {"d_in", "d", "B", "classes"},
        [](std::size_t d_in, std::size_t d, std::size_t B, std::size_t classes) {
          return ch15::init_node_model(d_in, d, B, classes, 1);
        },
        std::size_t{3}, std::size_t{4}, std::size_t{3}, std::size_t{2})
        .fits([](std::size_t d_in, std::size_t d, std::size_t B, std::size_t c) {
          return d_in >= 1 && d_in <= 4 && d >= 1 && d <= 4 && B >= 1 && B <= 3 && c >= 1 && c <= 4;
        })
        .run();
    hostile::battery(
        "train_nodes", {"X", "allowed", "labels", "classes"},
        [&](const Matrix& X, const attn::Mask& a, const std::vector<std::size_t>& labels, std::size_t classes) {
          return ch15::train_nodes(task_of(X, a, task.hops, ch15::Structure::mask, 0.2f), labels, {0, 1}, classes,
                                   ch15::NodeTraining{4, 3, 2, {}}, 1)
              .accuracy;
        },
        task.X, task.allowed, std::vector<std::size_t>{0, 1, 0, 1, 1}, std::size_t{2})
        .fits([](const Matrix& X, const attn::Mask& a, const std::vector<std::size_t>& labels, std::size_t classes) {
          bool ok = labels.size() == X.shape(0) && X.shape(0) >= 2 && X.shape(1) >= 1 && a.shape(0) == X.shape(0) &&
                    a.shape(1) == X.shape(0) && classes >= 1 && classes <= 4;
          for (std::size_t c : labels) ok = ok && c < classes;
          return ok;
        })
        .run();
  }
}
