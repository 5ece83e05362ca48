/// \file
/// Chapter 15's graphs from igraph (Debian's libigraph-dev): its built-in graphs and its shortest paths.
/// Optional: without igraph the chapter's karate club part is skipped with a message (have_igraph()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "15_structured/graph.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// Whether the chapter was built with igraph.
bool have_igraph();

/// One of igraph's built-in graphs (igraph_famous(), e.g. "Zachary"), checked with check_graph().
/// \throws std::invalid_argument naming \p name when igraph does not know it or the graph is not simple;
///         std::runtime_error when the chapter was built without igraph.
Graph famous_graph(const std::string& name);

/// A stochastic block model drawn by igraph (igraph_sbm_game(), seeded): blocks of \p block_sizes nodes,
/// numbered block after block; each pair inside a block is an edge with probability \p p_in, each pair
/// across blocks with \p p_out. No self-loops, undirected.
/// \throws std::invalid_argument naming the probabilities when one lies outside [0, 1], or when there are
///         no blocks, more than 1024 blocks or more than 65536 nodes; std::runtime_error without igraph.
Graph sbm_graph(const std::vector<std::size_t>& block_sizes, double p_in, double p_out, std::uint64_t seed);

/// Hop distances computed by igraph (igraph_distances(), unweighted), kUnreachable between components.
/// \throws std::invalid_argument from check_graph(), or naming the estimate when igraph's (n, n) distances and
///         the table would not fit in memory, before allocating; std::runtime_error without igraph.
Hops igraph_hop_distances(const Graph& g);

/// @}

}  // namespace attn::ch15
