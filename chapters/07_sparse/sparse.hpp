/// \file
/// Chapter 07, sparse attention: the contract the learner implements in exercises/07_sparse/sparse.cpp.
/// Book page: book/07_sparse.md. The reference answers are in solutions/07_sparse/sparse.cpp.
///
/// A sparsity pattern is an attn::Mask, (n_q, n_kv), true = the pair may attend: the same mask that
/// chapter 02's attn::scaled_dot_product_attention() takes, so the dense masked attention of chapter 02 is
/// the reference every sparse kernel here must equal. Patterns combine by union (attn::mask_union() in
/// patterns.hpp); Longformer, BigBird and the Sparse Transformer's strided pattern are such unions, built
/// at the end of this header from the three builders you write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "07_sparse/patterns.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch07 Chapter 07: sparse attention
/// Masks that keep a few pairs per row, and kernels that compute attention over those pairs only.
/// @{

/// The local (sliding-window) pattern: query i may attend to key j when |i - j| ≤ w, or, when \p causal,
/// when i - w ≤ j ≤ i. Every row allows its own position, so no row is ever empty.
/// \param n sequence length (n_q = n_kv = n); n = 0 gives an empty (0, 0) mask.
/// \param w keys on each side (w ≥ n simply allows every pair, or every past pair when causal).
/// \param causal only the present and the w positions before it.
/// \return (n, n), true = allowed. Row i allows min(i, w) + 1 + min(n - 1 - i, w) keys (causal: min(i, w) + 1).
/// \throws std::invalid_argument when the (n, n) mask would not fit in memory (attn::checked_allocation(), naming
///         the estimate, before allocating).
Mask local_window_mask(std::size_t n, std::size_t w, bool causal = false);

/// Global tokens (Longformer's [CLS], BigBird's global set): each listed position attends to every key,
/// and every query attends to it. Nothing else is allowed.
/// \param n sequence length.
/// \param global positions that see and are seen by all; duplicates are harmless.
/// \return (n, n), true where row or column is a global position.
/// \throws std::invalid_argument naming the position and n when a position is ≥ n, or when the (n, n) mask would
///         not fit in memory (naming the estimate, before allocating).
Mask global_mask(std::size_t n, const std::vector<std::size_t>& global);

/// The dilated window: query i may attend to keys j = i + k·\p dilation for |k| ≤ w (when \p causal,
/// -w ≤ k ≤ 0). The window spans 2·w·dilation + 1 positions with only 2·w + 1 keys: dilation widens what
/// one layer sees without adding work. dilation = 1 is local_window_mask().
/// \param n sequence length.
/// \param w keys on each side.
/// \param dilation distance between the keys, ≥ 1.
/// \param causal only the keys at or before i (k ≤ 0).
/// \return (n, n), true = allowed; the diagonal is always allowed.
/// \throws std::invalid_argument when dilation is 0, or when the (n, n) mask would not fit in memory (naming the
///         estimate, before allocating).
Mask dilated_mask(std::size_t n, std::size_t w, std::size_t dilation, bool causal = false);

/// Sliding-window attention that touches only the window: row i of the output is the softmax-weighted
/// average of V's rows j with |i - j| ≤ w (causal: i - w ≤ j ≤ i), scores q_i·k_j / √d_k. Equal to
/// `scaled_dot_product_attention(Q, K, V, local_window_mask(n, w, causal))` at O(n·w·d) work instead of
/// O(n²·d).
/// \param Q (n, d_k) queries.
/// \param K (n, d_k) keys.
/// \param V (n, d_v) values.
/// \param w keys on each side.
/// \param causal only the past and the present.
/// \return (n, d_v).
/// \throws std::invalid_argument naming the shapes when Q, K and V do not have n rows each or Q and K
///         differ in d_k, or the inputs (attn::require_attention_inputs(): a NaN/Inf, or Q and K large enough
///         for a score to overflow). Any w works, SIZE_MAX included (w ≥ n - 1 is dense attention).
Matrix sliding_window_attention(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t w, bool causal = false);

/// The block-sparse layout of a mask: cut the (n_q, n_kv) mask into tiles of B_r rows and B_c columns
/// (the last tile of a row or column may be smaller), and keep, for every query tile, the key tiles that
/// hold at least one allowed pair, in increasing order. A tile whose pairs are all allowed is *full* (the
/// kernel needs no mask there); a tile with some allowed pairs is *partial* and keeps its piece of the mask.
/// \param mask (n_q, n_kv), true = allowed.
/// \param B_r query rows per tile, ≥ 1.
/// \param B_c key columns per tile, ≥ 1.
/// \return the layout (see attn::BlockLayout for its fields); layout.tiles() = the tiles kept.
/// \throws std::invalid_argument when B_r or B_c is 0.
BlockLayout block_layout(const Mask& mask, std::size_t B_r, std::size_t B_c);

/// @}

/// \defgroup ch07_models Chapter 07: the published patterns, as unions
/// Built from the three mask builders above (so they work once those do) and attn::mask_union().
/// @{

// [published]
/// Longformer (Beltagy et al., 2020): a sliding window of w on each side plus global tokens.
/// \return (n, n). \throws std::invalid_argument as local_window_mask() and global_mask() do.
inline Mask longformer_mask(std::size_t n, std::size_t w, const std::vector<std::size_t>& global) {
  return mask_union(local_window_mask(n, w), global_mask(n, global));
}

/// BigBird (Zaheer et al., 2020): window + global tokens + r random keys per row (seeded, repeatable).
/// \return (n, n). \throws std::invalid_argument as longformer_mask() and random_mask() do.
inline Mask bigbird_mask(std::size_t n, std::size_t w, const std::vector<std::size_t>& global, std::size_t r,
                         std::uint64_t seed) {
  return mask_union(longformer_mask(n, w, global), random_mask(n, r, seed));
}

/// The Sparse Transformer's strided pattern (Child et al., 2019), causal: the last \p stride positions
/// (local, j > i - stride) plus every stride-th position before (i - j divisible by stride). With
/// stride ≈ √n each row keeps about 2√n keys: O(n√n) pairs in all.
/// \return (n, n). \throws std::invalid_argument when stride is 0, or as local_window_mask() does.
inline Mask strided_mask(std::size_t n, std::size_t stride) {
  require(stride >= 1, "strided_mask: the stride must be at least 1");
  return mask_union(local_window_mask(n, stride - 1, /*causal=*/true), dilated_mask(n, n, stride, /*causal=*/true));
}
// [published]

/// @}

}  // namespace attn
