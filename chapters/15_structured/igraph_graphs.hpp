/// \file
/// Chapter 15's graphs from igraph (Debian's libigraph-dev): its built-in graphs and its shortest paths.
/// Optional: without igraph the chapter's karate club part is skipped with a message (have_igraph()).
#pragma once

#include <string>

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

/// Hop distances computed by igraph (igraph_distances(), unweighted), kUnreachable between components.
/// \throws std::invalid_argument from check_graph(); std::runtime_error without igraph.
Hops igraph_hop_distances(const Graph& g);

/// @}

}  // namespace attn::ch15
