/// \file
/// Chapter 07's presented code (chapters/07_sparse/patterns.cpp and kernels.cpp): what the chapter shows
/// but does not ask the learner to write. Pattern arithmetic (union, density, random keys, receptive
/// field) and the two kernels that touch only allowed pairs: per-row index lists and block-sparse tiles
/// with the online softmax. Book page: book/07_sparse.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \addtogroup ch07
/// @{

/// Either pattern allows the pair: the elementwise OR of two masks of the same shape.
/// \param a (n_q, n_kv)
/// \param b (n_q, n_kv)
/// \return (n_q, n_kv)
/// \throws std::invalid_argument naming both shapes when they differ.
Mask mask_union(const Mask& a, const Mask& b);

/// BigBird's random keys: each row allows \p r keys drawn without replacement (fewer when r > n), from a
/// generator seeded with \p seed, so the same seed gives the same pattern.
/// \return (n, n). \throws std::invalid_argument when the (n, n) mask would not fit in memory (naming the estimate,
///         before allocating).
Mask random_mask(std::size_t n, std::size_t r, std::uint64_t seed);

/// The number of allowed (query, key) pairs: the edges of the attention graph, the work a sparse kernel does
/// (0 for an empty mask).
std::size_t allowed_pairs(const Mask& mask);

/// allowed_pairs / (n_q · n_kv): 1 for full attention (0 for an empty mask).
double mask_density(const Mask& mask);

/// The most layers receptive_field() stacks: far more than any model has; each layer costs n³ steps.
inline constexpr std::size_t kMaxReceptiveLayers = 65536;

/// Which positions information can travel from to each query in \p layers layers of attention under
/// \p mask: R_1 = M, R_{L+1} = R_L ∘ M (boolean matrix product; i reaches j in L hops).
/// \param mask (n, n).
/// \param layers how many attention layers are stacked.
/// \return (n, n), true where key j can influence query i after \p layers layers (layers = 0: identity).
/// \throws std::invalid_argument when the mask is not square, or when layers is above kMaxReceptiveLayers.
Mask receptive_field(const Mask& mask, std::size_t layers);

/// A mask as per-row index lists (compressed sparse rows): the allowed keys of query i are
/// cols[row_start[i]] .. cols[row_start[i + 1] - 1], in increasing order.
struct SparseRows {
  std::size_t n_q = 0, n_kv = 0;
  std::vector<std::size_t> row_start;  ///< (n_q + 1)
  std::vector<std::size_t> cols;       ///< (allowed pairs) key index of each allowed pair
};

/// The index lists of \p mask (n_q, n_kv): O(allowed pairs) memory. Any mask has them (an empty one: n_q + 1
/// zeros in row_start, no cols).
SparseRows sparse_rows(const Mask& mask);

/// Attention over index lists: for each query, scores only for its listed keys, a stable softmax over
/// them, and the weighted sum of their values. Work O(allowed pairs · d); a query with no key gets zeros.
/// \param Q (n_q, d_k)
/// \param K (n_kv, d_k)
/// \param V (n_kv, d_v)
/// \param rows from sparse_rows() of an (n_q, n_kv) mask.
/// \return (n_q, d_v), equal to scaled_dot_product_attention(Q, K, V, mask).
/// \throws std::invalid_argument naming the shapes when they do not fit together, the first bad entry of
///         the lists (a column ≥ n_kv, a decreasing row_start), or the inputs (attn::require_attention_inputs():
///         a NaN/Inf, or Q and K large enough for a score to overflow).
Matrix row_sparse_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const SparseRows& rows);

/// A block-sparse layout (what attn::block_layout() builds from a mask): the (n_q, n_kv) pairs cut into
/// tiles of B_r × B_c, and for each query tile the key tiles that hold allowed pairs.
struct BlockLayout {
  static constexpr std::size_t kFull = std::numeric_limits<std::size_t>::max();  ///< tile_mask of a full tile

  std::size_t n_q = 0, n_kv = 0, B_r = 0, B_c = 0;
  /// (T_r + 1), T_r = ⌈n_q / B_r⌉: query tile r owns entries row_start[r] .. row_start[r + 1] - 1.
  std::vector<std::size_t> row_start;
  std::vector<std::size_t> col_tile;   ///< (tiles) key tile c of each entry, increasing within a query tile
  std::vector<std::size_t> tile_mask;  ///< (tiles) index into masks of a partial tile, kFull for a full one
  /// The partial tiles' pieces of the mask, each (rows of its tile, columns of its tile), true = allowed.
  std::vector<Mask> masks;

  std::size_t tiles() const { return col_tile.size(); }
  std::size_t partial_tiles() const { return masks.size(); }
  /// Score entries the kernel computes: the sizes of the kept tiles summed (≥ the allowed pairs).
  std::size_t computed_pairs() const;
};

/// The layout of the sliding window (|i - j| ≤ w, or i - w ≤ j ≤ i when causal) built straight from the
/// band, without an (n, n) mask: at n = 65,536 the mask alone would take 4 GiB. Equal to
/// block_layout(local_window_mask(n, w, causal), B_r, B_c) (the tests check it); with w ≥ n and not
/// causal every tile is full, which is dense tiled attention.
/// \throws std::invalid_argument when a tile size is 0, or when a bound on the layout's tiles or partial masks does
///         not fit in memory (naming the estimate, before building anything).
BlockLayout window_block_layout(std::size_t n, std::size_t w, bool causal, std::size_t B_r, std::size_t B_c);

/// Block-sparse attention with the online softmax (FlashAttention's running max m and sum ℓ): for each
/// query tile, visit only its kept key tiles; S = Q_tile K_tileᵀ / √d_k by one sgemm, masked inside
/// partial tiles, then m, ℓ and the output are rescaled and P·V_tile is added by a second sgemm. Query
/// tiles are independent and shared among \p threads threads (OpenBLAS runs single-threaded meanwhile:
/// attn::SingleThreadedBlas). An exception in any thread (say, std::bad_alloc) reaches the caller.
/// \param Q (n_q, d_k)
/// \param K (n_kv, d_k)
/// \param V (n_kv, d_v)
/// \param layout of an (n_q, n_kv) mask.
/// \param threads worker threads, ≥ 1.
/// \return (n_q, d_v), equal to scaled_dot_product_attention(Q, K, V, mask); a query with no allowed key gets zeros.
/// \throws std::invalid_argument naming the shapes when they do not fit together, the layout, or the inputs
///         (attn::require_attention_inputs(): a NaN/Inf, or Q and K large enough for a score to overflow).
Matrix block_sparse_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const BlockLayout& layout,
                              std::size_t threads = 1);

/// @}

}  // namespace attn
