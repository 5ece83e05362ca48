/// \file
/// Chapter 13's second scheme, DeepSpeed-Ulysses, in one process: the sequence split over P ranks as in
/// the ring, but instead of passing key/value blocks around, one all-to-all turns "all h heads of n/P
/// tokens" into "h/P heads of all n tokens", every rank runs ordinary (chapter 05) attention on its heads,
/// and a second all-to-all brings O back. The exchanges are real copies between per-rank buffers, and the
/// bytes each rank sends are counted. Given code, not an exercise. Book page: book/13_ring.md.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::ch13 {

/// What ulysses_in_one_process() returns.
struct UlyssesRun {
  Tensor3 O;                            ///< (h, n, d_v) every head's output, tokens in order
  std::vector<std::size_t> bytes_sent;  ///< float32 bytes each rank sent in the two all-to-alls
};

/// Ulysses over \p P ranks: rank r owns tokens even_chunk(r, P, n) of every head; after the first
/// all-to-all rank s owns heads even_chunk(s, P, h) of every token (h/P of them when P divides h).
/// \param Q (h, n, d_k) queries, head by head.
/// \param K (h, n, d_k) keys.
/// \param V (h, n, d_v) values.
/// \param P number of ranks, 1 ≤ P ≤ h (Ulysses splits the heads; a rank with none would idle).
/// \param causal apply the causal mask.
/// \throws std::invalid_argument naming h and P when P = 0 or P > h, or naming the shapes.
UlyssesRun ulysses_in_one_process(const Tensor3& Q, const Tensor3& K, const Tensor3& V, std::size_t P, bool causal);

/// The formula for the bytes rank \p rank sends: Q, K and V of its rows_r tokens for the h - g_r heads
/// other ranks own, then O of the other n - rows_r tokens for its own g_r heads (g_r = even_chunk(rank, P,
/// h) heads): ((h - g_r)·rows_r·(2·d_k + d_v) + g_r·(n - rows_r)·d_v)·4, float32; when P divides h and n,
/// (h/P)·((P-1)·rows_r·(2·d_k + d_v) + (n - rows_r)·d_v)·4.
/// \throws std::invalid_argument naming the sizes unless rank < P ≤ h, or when the count does not fit.
std::size_t ulysses_bytes_sent(std::size_t rank, std::size_t P, std::size_t n, std::size_t h, std::size_t d_k,
                               std::size_t d_v);

}  // namespace attn::ch13
