/// \file
/// Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): how much of input
/// token j can reach position i through the layers, read as a maximum flow. Computed with Boost.Graph's
/// Edmonds–Karp (the algorithm the paper's own code uses), not written here: the course's code is the graph.
/// Book page: book/12_learning.md.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::ch12 {

/// Whether this build has Boost.Graph (Debian's libboost-graph-dev); without it attention_flow() throws
/// std::runtime_error and the chapter skips flow with a message.
bool attention_flow_available();

/// Attention flow into position \p position. The graph has a node per (layer boundary l = 0 … L, position);
/// an edge from (l, j) to (l + 1, i) whose capacity is Ã_l(i, j), Ã_l = ½·A_l + ½·I (the
/// residual stream counted as half of each layer, as in rollout; zero weights give no edge). Entry j of the result is
/// the value of the maximum flow from input node (0, j) to output node (L, \p position): the most attention that can
/// pass from token j to the position when no edge carries more than its weight. Where rollout multiplies weights along
/// paths and adds the paths up, flow is limited by each path's narrowest edge and by edges the paths share.
/// \param layers (L) per layer its head-averaged attention, (n, n) each, first layer first.
/// \param position the output position i the flow goes to, 0 … n − 1.
/// \return (n): flow from each input token; with causal layers 0 for tokens after \p position (no path).
/// \throws std::invalid_argument when \p layers is empty, a matrix is not (n, n) with the first's n, an
///         entry is negative or not finite, or position ≥ n.
Vector attention_flow(const std::vector<Matrix>& layers, std::size_t position);

}  // namespace attn::ch12
