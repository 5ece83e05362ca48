/// \file
/// Chapter 15's reduction tree: partial attention results of P ranks merged pairwise in ⌈log₂P⌉ rounds, the
/// schedule of a binomial-tree reduce. The same schedule drives the in-process version here and the MPI
/// program (structured_mpi.cpp). Header-only: tree_reduce() calls the contract's merge_packed().
#pragma once

#include <cstddef>
#include <vector>

#include "15_structured/structured.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// ⌈log₂P⌉: the rounds of a binomial tree over P ranks (0 for P ≤ 1).
inline std::size_t ceil_log2(std::size_t P) {
  std::size_t rounds = 0;
  while (P > 1 && (std::size_t{1} << rounds) < P) ++rounds;
  return rounds;
}

/// What rank \p rank does in round \p round of the binomial tree over P ranks: at round k the ranks that are
/// multiples of 2^(k+1) receive from rank + 2^k (when it exists) and merge; the ranks 2^k past such a multiple
/// send to it and are done. Rank 0 ends with the whole result.
struct TreeStep {
  bool receives = false;    ///< merge what \p partner sends
  bool sends = false;       ///< send to \p partner
  std::size_t partner = 0;  ///< the other rank of the exchange
};
inline TreeStep tree_step(std::size_t rank, std::size_t round, std::size_t P) {
  const std::size_t half = std::size_t{1} << round, span = half << 1;
  if (rank % span == 0 && rank + half < P) return {true, false, rank + half};
  if (rank % span == half) return {false, true, rank - half};
  return {};
}

// [tree_reduce]
/// Merges \p parts (P packed results, rows × (d_v + 1) floats each, as merge_packed() reads them) along the
/// binomial tree; parts[0] ends with the merge of all. \return the rounds taken, ⌈log₂P⌉.
inline std::size_t tree_reduce(std::vector<std::vector<float>>& parts, std::size_t rows, std::size_t d_v) {
  const std::size_t P = parts.size(), rounds = ceil_log2(P);
  for (std::size_t round = 0; round < rounds; ++round)
    for (std::size_t rank = 0; rank < P; ++rank) {
      const TreeStep step = tree_step(rank, round, P);
      if (step.receives) merge_packed(parts[step.partner].data(), parts[rank].data(), rows, d_v);
    }
  return rounds;
}
// [tree_reduce]

/// @}

}  // namespace attn::ch15
