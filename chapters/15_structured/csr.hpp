/// \file
/// Chapter 15's sparse graph attention: the graph in compressed sparse rows (CSR) and a multi-head kernel that
/// touches only the edges, O(E·d) work and memory instead of the dense mask's O(n²·d). Chapter code (not an
/// exercise); its benchmark against dense masked attention is in bench.cpp (`./course bench 15`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "15_structured/structured.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// A graph in compressed sparse rows: node i hears the senders cols[row_start[i]] … cols[row_start[i + 1] − 1].
struct Csr {
  std::size_t n = 0;                   ///< nodes
  std::vector<std::size_t> row_start;  ///< (n + 1), row_start[0] = 0, non-decreasing
  std::vector<std::uint32_t> cols;     ///< (E) sender ids, 4 bytes each: half the index traffic of size_t
};

/// The CSR form of \p in (node i hears in[i]).
/// \throws std::invalid_argument naming the node when a sender id is ≥ n, or when n ≥ 2³².
Csr csr_of(const Neighbours& in);

/// A random graph for the benchmark: every node hears itself and \p degree senders drawn uniformly (repeats
/// possible), sorted so that the gathers walk memory forwards.
/// \throws std::invalid_argument when n·(degree + 1) overflows or n ≥ 2³².
Csr random_csr(std::size_t n, std::size_t degree, std::uint64_t seed);

/// Multi-head attention over the edges of \p g: for node i and head c, the softmax over i's senders j of
/// q_i·k_j / √d_k (columns [c·d_k, (c+1)·d_k) of Q and K) weights the same columns of V. One pass per node and
/// head with the online softmax, so no score is stored; a node with no sender gets zeros. \p threads split
/// the nodes; the result does not depend on their number.
/// \param Q (n, heads·d_k) queries of all heads, side by side.
/// \param K (n, heads·d_k) keys.
/// \param V (n, heads·d_k) values (d_v = d_k).
/// \param g the graph, g.n = n.
/// \param heads the number of heads; it divides Q's columns.
/// \param threads worker threads, ≥ 1.
/// \return (n, heads·d_k).
/// \throws std::invalid_argument naming the shapes when Q, K, V and g do not fit, heads does not divide the
///         columns, the CSR is malformed (row_start not (n + 1) non-decreasing from 0 to E, a sender ≥ n),
///         or threads is 0.
Matrix csr_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Csr& g, std::size_t heads,
                     std::size_t threads = 1);

/// @}

}  // namespace attn::ch15
