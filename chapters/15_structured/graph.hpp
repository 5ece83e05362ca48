/// \file
/// Chapter 15's given code: graphs as edge lists, their masks and distances, trees from parent arrays, and
/// the chapter's data (the karate club's split, the article's sentences with their dependency trees).
/// Book page: book/15_structured.md.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "15_structured/structured.hpp"
#include "attn/rng.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// An undirected simple graph on the nodes 0 … n−1: no self-loop, no edge twice.
struct Graph {
  std::size_t n = 0;                                       ///< number of nodes
  std::vector<std::pair<std::size_t, std::size_t>> edges;  ///< each edge once, either way round
};

/// Checks that \p g is a simple graph.
/// \throws std::invalid_argument naming the edge when a node id is ≥ n, an edge is a self-loop or an edge
///         appears twice; and when n is more than the chapter's limit of 2²⁰ nodes (the dense (n, n) tables
///         below are refused on their own when they would not fit in memory).
/// O(n + E log E) time.
void check_graph(const Graph& g);

/// Who hears whom on \p g: node i hears its neighbours, and itself when \p self_loops (GAT's convention:
/// a node keeps its own features in the mix). Validates \p g with check_graph().
Neighbours neighbour_lists(const Graph& g, bool self_loops);

/// The complete graph's lists: every node hears every node, itself included (chapter 02's attention).
/// \throws std::invalid_argument when n is more than 2²⁰, or naming the estimate when the n² ids would not fit in
///         memory, before allocating.
Neighbours complete_lists(std::size_t n);

/// The (n, n) mask of \p g: true where i hears j (the diagonal too when \p self_loops).
/// \throws std::invalid_argument as check_graph() does, or naming the estimate when the mask would not fit in
///         memory, before allocating.
Mask adjacency_mask(const Graph& g, bool self_loops);

/// Breadth-first hop distances on \p g: (n, n), 0 on the diagonal, kUnreachable between components.
/// O(n·(n + E)) time. \throws std::invalid_argument as check_graph() does, or naming the estimate when the
/// table would not fit in memory, before allocating.
Hops hop_distances(const Graph& g);

/// Checks a parent array: exactly one root (−1), every other entry a node id < n other than i itself, and
/// no cycle (every node reaches the root). O(n) time and memory: each node's chain is walked once.
/// \throws std::invalid_argument naming the first offending node, or when n is more than 2²⁰.
void check_parents(const std::vector<long>& parent);

/// The tree of \p parent as an undirected graph (one edge per child), for tree distances.
Graph tree_graph(const std::vector<long>& parent);

/// Zachary's karate club (1977): 34 members, the faction each joined when the club split (0: the
/// instructor's, node 0; 1: the administrator's, node 33), as the split is usually labelled.
const std::vector<std::size_t>& karate_factions();

/// A sentence of the article the course follows with its dependency tree (Universal Dependencies v2
/// conventions, annotated by hand for this course: content words head, the clause after the comma attached
/// to the first clause's predicate as parataxis).
struct ParsedSentence {
  std::string name;                   ///< e.g. "zh-cat"
  std::vector<std::string> tokens;    ///< (n) chapter 01's tokens
  std::vector<long> parent;           ///< (n) head of each token, −1 for the root
  std::vector<std::string> relation;  ///< (n) the UD relation to the head ("root" for the root)
  std::size_t pronoun = 0;            ///< index of 它 / it
  std::size_t antecedent = 0;         ///< what it refers to
};

/// The article's example sentences (chapter 01's six) with their trees.
const std::vector<ParsedSentence>& parsed_sentences();

/// The operator token of a MAX expression (tokens 0 … 9 are the digits).
inline constexpr std::size_t kMaxToken = 10;

/// A nested MAX expression in the style of ListOps (Nangia and Bowman 2018), as its tree: operators are inner
/// nodes, digits leaves, in prefix order (an operator before its arguments).
struct MaxExpression {
  std::vector<std::size_t> tokens;  ///< (n) a digit 0 … 9, or kMaxToken
  std::vector<long> parent;         ///< (n) each token's operator, −1 for the root
  std::vector<std::size_t> target;  ///< (n) at an operator the largest digit below it; chapter 12's kIgnore at a digit
};

/// A random MAX expression: the root is an operator with 2 or 3 arguments; an argument is another operator
/// (while \p depth allows, with probability one half) or a digit drawn uniformly.
/// \throws std::invalid_argument when depth is 0 or more than 8.
MaxExpression make_max_expression(Rng& rng, std::size_t depth);

/// @}

}  // namespace attn::ch15
