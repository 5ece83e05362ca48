// Chapter 15's own code on bad input: the graphs (graph.hpp, igraph_graphs.hpp), the node classifier
// (node_model.hpp) and the reduction tree (reduction.hpp). Chapter code, not an exercise, so these run on the
// solution track only. A bad parameter must be an std::invalid_argument naming it, never a crash, a shift past
// 63 bits, a read past a buffer or a silently meaningless answer.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <vector>

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
