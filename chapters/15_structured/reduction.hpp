/// \file
/// Chapter 15's reduction tree: partial attention results of P ranks merged pairwise in ⌈log₂P⌉ rounds, the
/// schedule of a binomial-tree reduce. The same schedule drives the in-process version here and the MPI
/// program (structured_mpi.cpp). Header-only: tree_reduce() calls the contract's merge_packed().
#pragma once

#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "15_structured/structured.hpp"
#include "attn/checks.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// ⌈log₂P⌉: the rounds of a binomial tree over P ranks (0 for P ≤ 1), for every P (64 for P above 2^63).
inline std::size_t ceil_log2(std::size_t P) {
  std::size_t rounds = 0;
  // Halving P − 1 instead of doubling 1 << rounds: the shift would pass 63 bits for P above 2^63.
  for (std::size_t rest = P > 1 ? P - 1 : 0; rest > 0; rest >>= 1) ++rounds;
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
/// \throws std::invalid_argument when rank ≥ P or round ≥ ceil_log2(P) (the tree has no such round).
inline TreeStep tree_step(std::size_t rank, std::size_t round, std::size_t P) {
  require(rank < P && round < ceil_log2(P),
          fmt::format("tree_step: rank {} in round {} of a tree over P = {} ranks; need rank < P and round < {}", rank,
                      round, P, ceil_log2(P)));
  const std::size_t half = std::size_t{1} << round;  // round < ceil_log2(P) ≤ 64
  // rank's place in its span of 2^(round + 1) ranks (the span is every rank when that is 2^64).
  const std::size_t place = round < 63 ? rank % (half << 1) : rank;
  if (place == 0 && half < P - rank) return {true, false, rank + half};
  if (place == half) return {false, true, rank - half};
  return {};
}

// [tree_reduce]
/// Merges \p parts (P packed results, rows × (d_v + 1) floats each, as merge_packed() reads them) along the
/// binomial tree; parts[0] ends with the merge of all. \return the rounds taken, ⌈log₂P⌉.
/// \throws std::invalid_argument naming the part when one does not hold rows × (d_v + 1) floats, or when that count
///         does not fit in std::size_t (before any merge: \p parts is then unchanged).
inline std::size_t tree_reduce(std::vector<std::vector<float>>& parts, std::size_t rows, std::size_t d_v) {
  const std::size_t floats = checked_product("tree_reduce: rows × (d_v + 1) floats per part",
                                             {rows, checked_sum("tree_reduce: d_v + 1", {d_v, 1})});
  for (std::size_t r = 0; r < parts.size(); ++r)
    require(parts[r].size() == floats,
            fmt::format("tree_reduce: parts[{}] holds {} floats; rows = {} and d_v = {} need "
                        "rows × (d_v + 1) = {}",
                        r, parts[r].size(), rows, d_v, floats));
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
