// Chapter 15's given graph code: validation, neighbour lists, masks, breadth-first distances, trees from
// parent arrays, and the chapter's data. Nothing here calls the chapter's contract (both tracks share it).
#include "15_structured/graph.hpp"

#include <algorithm>
#include <deque>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "12_learning/model.hpp"
#include "attn/checks.hpp"

namespace attn::ch15 {

namespace {
// The chapter's graphs and trees have at most 2²⁰ nodes: their lists then fit in a few hundred MB. The dense
// (n, n) tables are checked on their own, against the memory available (checked_allocation()): at 2²⁰ nodes a
// mask alone is 1 TiB.
constexpr std::size_t kMaxNodes = std::size_t{1} << 20;
}  // namespace

void check_graph(const Graph& g) {
  require(g.n <= kMaxNodes,
          fmt::format("check_graph: n = {} nodes is more than the chapter's limit of {}", g.n, kMaxNodes));
  std::set<std::pair<std::size_t, std::size_t>> seen;
  for (const auto& [u, v] : g.edges) {
    require(u < g.n && v < g.n, fmt::format("check_graph: edge ({}, {}) names a node id ≥ n = {}", u, v, g.n));
    require(u != v, fmt::format("check_graph: edge ({}, {}) is a self-loop; the graph must be simple", u, v));
    require(seen.insert({std::min(u, v), std::max(u, v)}).second,
            fmt::format("check_graph: edge ({}, {}) appears twice", u, v));
  }
}

Neighbours neighbour_lists(const Graph& g, bool self_loops) {
  check_graph(g);
  std::vector<std::set<std::size_t>> sets(g.n);
  for (const auto& [u, v] : g.edges) {
    sets[u].insert(v);
    sets[v].insert(u);
  }
  Neighbours in(g.n);
  for (std::size_t i = 0; i < g.n; ++i) {
    if (self_loops) sets[i].insert(i);
    in[i].assign(sets[i].begin(), sets[i].end());
  }
  return in;
}

Neighbours complete_lists(std::size_t n) {
  require(n <= kMaxNodes, fmt::format("complete_lists: n = {} is more than {}", n, kMaxNodes));
  checked_allocation("complete_lists: n lists of n node ids", {n, n, sizeof(std::size_t)});  // before filling any
  Neighbours in(n);
  for (auto& list : in)
    for (std::size_t j = 0; j < n; ++j) list.push_back(j);
  return in;
}

Mask adjacency_mask(const Graph& g, bool self_loops) {
  check_graph(g);
  checked_allocation("adjacency_mask: the mask of n × n nodes, 1 byte each", {g.n, g.n, sizeof(bool)});
  const Neighbours in = neighbour_lists(g, self_loops);
  Mask mask(Mask::shape_type{g.n, g.n}, false);  // (n, n)
  for (std::size_t i = 0; i < g.n; ++i)
    for (std::size_t j : in[i]) mask(i, j) = true;
  return mask;
}

Hops hop_distances(const Graph& g) {
  check_graph(g);
  checked_allocation("hop_distances: the table of n × n nodes' distances", {g.n, g.n, sizeof(std::size_t)});
  const Neighbours in = neighbour_lists(g, false);
  Hops hops(Hops::shape_type{g.n, g.n}, kUnreachable);  // (n, n)
  for (std::size_t source = 0; source < g.n; ++source) {
    std::deque<std::size_t> frontier{source};
    hops(source, source) = 0;
    while (!frontier.empty()) {
      const std::size_t u = frontier.front();
      frontier.pop_front();
      for (std::size_t v : in[u])
        if (hops(source, v) == kUnreachable) {
          hops(source, v) = hops(source, u) + 1;
          frontier.push_back(v);
        }
    }
  }
  return hops;
}

void check_parents(const std::vector<long>& parent) {
  const std::size_t n = parent.size();
  require(n <= kMaxNodes, fmt::format("check_parents: {} tokens is more than {}", n, kMaxNodes));
  std::size_t roots = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const long p = parent[i];
    if (p == -1) {
      ++roots;
      continue;
    }
    require(p >= 0 && static_cast<std::size_t>(p) < n,
            fmt::format("check_parents: parent[{}] = {} is not a node id in [0, {}) nor -1 for the root", i, p, n));
    require(static_cast<std::size_t>(p) != i, fmt::format("check_parents: parent[{}] = {} is the node itself", i, p));
  }
  require(n == 0 || roots == 1,
          fmt::format("check_parents: a tree has one root (parent −1), this array has {}", roots));
  // Every node must reach the root, or its chain of parents is a cycle. Walking up from every node would take
  // n × depth steps (a chain of 2²⁰ tokens: 5·10¹¹); each node is walked once instead: a walk stops at a node
  // already known to reach the root, and a walk that meets its own path has found a cycle. O(n) in all.
  enum : unsigned char { kUnseen, kOnPath, kReaches };
  std::vector<unsigned char> state(n, kUnseen);
  std::vector<std::size_t> path;
  for (std::size_t i = 0; i < n; ++i) {
    path.clear();
    long at = static_cast<long>(i);
    while (at != -1 && state[static_cast<std::size_t>(at)] == kUnseen) {
      state[static_cast<std::size_t>(at)] = kOnPath;
      path.push_back(static_cast<std::size_t>(at));
      at = parent[static_cast<std::size_t>(at)];
    }
    require(at == -1 || state[static_cast<std::size_t>(at)] == kReaches,
            fmt::format("check_parents: the parents of node {} go round a cycle and never reach the root", i));
    for (std::size_t p : path) state[p] = kReaches;
  }
}

Graph tree_graph(const std::vector<long>& parent) {
  check_parents(parent);
  Graph g{parent.size(), {}};
  for (std::size_t i = 0; i < parent.size(); ++i)
    if (parent[i] != -1) g.edges.emplace_back(static_cast<std::size_t>(parent[i]), i);
  return g;
}

const std::vector<std::size_t>& karate_factions() {
  // 0 = the instructor's faction, 1 = the administrator's, members numbered 0 … 33 as igraph numbers them.
  static const std::vector<std::size_t> factions{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0,
                                                 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  return factions;
}

const std::vector<ParsedSentence>& parsed_sentences() {
  // Universal Dependencies v2, by hand: the predicate of the first clause is the root; the second clause
  // ("it was tired") hangs from it as parataxis, its predicate (the adjective; "was"/"is" a copula) heading
  // the pronoun. Chinese classifiers (只) attach to their noun as clf, demonstratives (那本) as det.
  static const std::vector<ParsedSentence> sentences{
      {"zh-cat",
       {"猫", "坐在", "垫子上", "它", "很累"},
       {1, -1, 1, 4, 1},
       {"nsubj", "root", "obl", "nsubj", "parataxis"},
       3,
       0},
      {"en-cat",
       {"the", "cat", "sat", "on", "the", "mat", "it", "was", "tired"},
       {1, 2, -1, 5, 5, 2, 8, 8, 2},
       {"det", "nsubj", "root", "case", "det", "obl", "nsubj", "cop", "parataxis"},
       6,
       1},
      {"zh-pet",
       {"小明", "养了", "只", "猫", "它", "很可爱"},
       {1, -1, 3, 1, 5, 1},
       {"nsubj", "root", "clf", "obj", "nsubj", "parataxis"},
       4,
       3},
      {"en-pet",
       {"xiaoming", "has", "a", "cat", "it", "is", "cute"},
       {1, -1, 3, 1, 6, 6, 1},
       {"nsubj", "root", "det", "obj", "nsubj", "cop", "parataxis"},
       4,
       3},
      {"zh-book",
       {"那本", "书", "我", "读完了", "它", "真的", "很棒"},
       {1, 3, 3, -1, 6, 6, 3},
       {"det", "obj", "nsubj", "root", "nsubj", "advmod", "parataxis"},
       4,
       1},
      {"en-book",
       {"i", "finished", "that", "book", "it", "is", "really", "great"},
       {1, -1, 3, 1, 7, 7, 7, 1},
       {"nsubj", "root", "det", "obj", "nsubj", "cop", "advmod", "parataxis"},
       4,
       3},
  };
  return sentences;
}

namespace {

/// Appends an operator under \p parent and its arguments; returns the largest digit below it.
std::size_t grow_operator(MaxExpression& e, long parent, std::size_t depth, Rng& rng) {
  const std::size_t me = e.tokens.size();
  e.tokens.push_back(kMaxToken);
  e.parent.push_back(parent);
  e.target.push_back(0);
  std::uniform_int_distribution<std::size_t> arity(2, 3), digit(0, 9);
  std::bernoulli_distribution nest(0.5);
  std::size_t largest = 0;
  for (std::size_t a = arity(rng.engine()); a > 0; --a) {
    if (depth > 1 && nest(rng.engine())) {
      largest = std::max(largest, grow_operator(e, static_cast<long>(me), depth - 1, rng));
      continue;
    }
    const std::size_t d = digit(rng.engine());
    e.tokens.push_back(d);
    e.parent.push_back(static_cast<long>(me));
    e.target.push_back(ch12::kIgnore);
    largest = std::max(largest, d);
  }
  e.target[me] = largest;
  return largest;
}

}  // namespace

MaxExpression make_max_expression(Rng& rng, std::size_t depth) {
  require(depth >= 1 && depth <= 8, fmt::format("make_max_expression: depth = {} (need 1 … 8)", depth));
  MaxExpression e;
  grow_operator(e, -1, depth, rng);
  return e;
}

}  // namespace attn::ch15
