/// \file
/// Chapter 10's fast CPU FlashAttention backward: the algorithm of flash_backward() arranged for speed and for
/// two cores, race-free and bit-identical whatever the thread count. Chapter code, not an exercise: read it
/// once flash_backward() is yours.
#pragma once

#include <cstddef>

#include "attn/tensor.hpp"

namespace attn::ch10 {

/// How the fast backward cuts the work.
struct BackwardConfig {
  std::size_t B_r = 64;   ///< query rows per tile (the inner loop); 64 beat 128 and 256 in `ch10_backward bench`
  std::size_t B_c = 128;  ///< keys per block: a block owns its rows of dK and dV
  /// Independent streams of work per head. Lane l handles the key blocks j with j mod lanes = l, in order,
  /// and adds its dQ contributions into a dQ of its own; the lanes' dQs are summed in lane order at the end.
  /// The result depends on the lanes, never on the threads: any thread count gives the same bits.
  std::size_t lanes = 2;
  int threads = 2;  ///< std::threads taking (head, lane) items; OpenBLAS runs single-threaded inside them
};

/// Every head's gradients: dQ (h, n_q, d_k), dK (h, n_kv, d_k), dV (h, n_kv, d_v).
struct HeadsGrads {
  Tensor3 dQ, dK, dV;
};

/// FlashAttention-2's backward over \p h heads, multithreaded over (head, lane) items. The same results as
/// attn::flash_backward() head by head up to float rounding (its exp is chapter 05's vectorised polynomial).
/// It recomputes the scores with chapter 05's fast forward's own kernel, so that they have the forward's bits
/// whatever the tile sizes, where that kernel runs (AVX2 or AVX-512, and both B_c whole key panels, as the
/// defaults are); elsewhere both use OpenBLAS and agree to rounding.
/// Extra memory: D (h, n_q), K and V packed (h, n_kv rounded up to a panel, d_k or d_v) or Kᵀ (h, d_k, n_kv) and
/// Vᵀ (h, d_v, n_kv), (lanes − 1) more dQ buffers, and per thread two (B_r, B_c) tiles; nothing n×n.
/// \param Q (h, n_q, d_k) queries.
/// \param K (h, n_kv, d_k) keys.
/// \param V (h, n_kv, d_v) values.
/// \param O (h, n_q, d_v) the forward's output.
/// \param lse (h, n_q) the forward's log-sum-exp (chapter 05's flash_attention_fast() returns both).
/// \param dO (h, n_q, d_v) ∂L/∂O.
/// \param causal query i sees key j only when j ≤ i + n_kv − n_q.
/// \param config tile sizes, lanes and threads. Tiles larger than n_q or n_kv are cut to them and lanes to the
///        number of key blocks: the result is the same bits, without memory that would hold nothing.
/// \return dQ, dK, dV.
/// \throws std::invalid_argument naming the shapes when they do not fit, when a tile size, the lanes or the
///         thread count is 0, when causal and n_q > n_kv, naming the first NaN/Inf of Q, K, V, O or dO or NaN/+inf
///         of lse, when a score, a product dO Vᵀ or a sum dO ∘ O could overflow (attn/checks.hpp; P = exp(s − lse)
///         is taken no higher than 1, as in flash_backward()), or when its buffers would not fit in memory
///         (naming the estimate, before allocating).
HeadsGrads flash_backward_fast(const Tensor3& Q, const Tensor3& K, const Tensor3& V, const Tensor3& O,
                               const Matrix& lse, const Tensor3& dO, bool causal, const BackwardConfig& config = {});

}  // namespace attn::ch10
