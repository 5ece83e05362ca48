// Chapter 15's own code on bad input: the graphs (graph.hpp, igraph_graphs.hpp), the node classifier
// (node_model.hpp) and the reduction tree (reduction.hpp). Chapter code, not an exercise, so these run on the
// solution track only. A bad parameter must be an std::invalid_argument naming it, never a crash, a shift past
// 63 bits, a read past a buffer or a silently meaningless answer.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <vector>

#include "15_structured/csr.hpp"
#include "15_structured/graph.hpp"
#include "15_structured/igraph_graphs.hpp"
#include "15_structured/node_model.hpp"
#include "15_structured/reduction.hpp"
#include "attn/rng.hpp"
#include "support/throws.hpp"

namespace {

namespace ch15 = attn::ch15;
using attn::Matrix;

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
    CHECK_THROWS_NAMING(ch15::init_node_model(4, 3, std::size_t{1} << 42, 2, 1), std::invalid_argument, "available");
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

  TEST_CASE("ceil_log2 answers for every P without shifting past 63 bits; tree_step refuses a rank or round outside") {
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

// The defects issue 47 found in the chapter's own code, each with the call that found it: a crash, a hang, an
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
