/// \file
/// Chapter 11, positions: the contract the learner implements in exercises/11_positions/positions.cpp.
/// Book page: book/11_positions.md.
///
/// Attention by itself is blind to order: permute the tokens and the outputs permute with them. Models
/// tell positions apart by adding an encoding to X (sinusoidal), by rotating q and k by their position
/// (RoPE), or by biasing the scores by distance (ALiBi). The last two, and every mask of the course, are
/// modifiers of the scores: the learner's flex_attention_tiles() applies them in chapter 05's tile loop, the
/// tiles a block mask (make_block_mask()) leaves empty skipped; chapters/11_positions/flex.hpp is the same
/// loop made fast.
///
/// One alignment rule for every mask and bias (ALiBi, DocumentMask, and flex.hpp's causal, sliding-window and
/// prefix-LM masks, as chapter 02's causal mask): with n_q ≤ n_kv, the queries are the last n_q positions, so
/// query i sits at position i + offset, offset = n_kv − n_q (a decoder's new tokens after its cache: the
/// bottom-right alignment). PyTorch's `is_causal=True` aligns to the top left instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/flash_cpu.hpp"
#include "attn/tensor.hpp"

namespace attn {

namespace ch11 {

/// What a tile of B_r queries × B_c keys holds under a mask_mod.
enum class Tile : std::uint8_t { empty, partial, full };

/// How many tiles of \p B cover \p n items: ⌈n / B⌉, written so that it cannot wrap for any n.
/// \throws std::invalid_argument when B is 0 (no number of empty tiles covers anything).
constexpr std::size_t tiles_of(std::size_t n, std::size_t B) {
  if (B == 0) throw std::invalid_argument("tiles_of: a tile size B = 0; tiles hold at least one item");
  return n / B + (n % B != 0 ? 1 : 0);
}

/// Which tiles a mask_mod leaves empty, partial or full, per head: computed once, reused by every call
/// with the same mask (as FlexAttention's create_block_mask).
struct BlockMask {
  std::size_t heads = 0, n_q = 0, n_kv = 0, B_r = 0, B_c = 0, T_r = 0, T_c = 0;
  std::vector<Tile> tiles;  ///< (heads, T_r, T_c)
  /// The tile of query block \p i and key block \p j of head \p h.
  /// \throws std::out_of_range naming h, i and j when one is past heads, T_r or T_c, or when `tiles` (public, so
  ///         perhaps edited) does not hold them: one comparison per tile, never a read past the end.
  Tile at(std::size_t h, std::size_t i, std::size_t j) const {
    const std::size_t index = (h * T_r + i) * T_c + j;
    if (h >= heads || i >= T_r || j >= T_c || index >= tiles.size())
      throw std::out_of_range(
          fmt::format("BlockMask::at: tile (h, i, j) = ({}, {}, {}) of a mask of {} heads × {} × "
                      "{} tiles, {} stored",
                      h, i, j, heads, T_r, T_c, tiles.size()));
    return tiles[index];
  }
  /// How many tiles are in state \p t, over all heads.
  std::size_t count(Tile t) const { return static_cast<std::size_t>(std::count(tiles.begin(), tiles.end(), t)); }
};

}  // namespace ch11

/// \defgroup ch11 Chapter 11: positions
/// Sinusoidal encodings, RoPE, ALiBi and document masks.
/// @{

/// The Transformer's sinusoidal position encodings: PE(p, 2i) = sin(p·ω_i), PE(p, 2i + 1) = cos(p·ω_i),
/// ω_i = 10000^(−2i/d). With odd \p d the last column is a sine.
/// \param n positions 0 … n − 1.
/// \param d the model width.
/// \return (n, d).
/// \throws std::invalid_argument when n·d floats do not fit in memory (naming the estimate), before allocating.
Matrix sinusoidal_encoding(std::size_t n, std::size_t d);

/// Rotary position embedding (RoPE), in place: row p of \p X is at position \p first_position + p, and each
/// pair of columns (2i, 2i + 1) is rotated by the angle position·θ_i, θ_i = base^(−2i/d). Then for a query
/// at m and a key at n, q_mᵀ k_n depends on m − n only, and every row keeps its norm.
/// \param X (n, d) queries or keys of one head, d even; rotated in place.
/// \param first_position the position of row 0 (a decoder's cache length).
/// \param base 10000 in the RoFormer paper and most models.
/// \throws std::invalid_argument naming X's shape when d is odd; when base ≤ 1 or an entry of X is NaN or
///         infinite; naming first_position when the last row's position first_position + n − 1 passes 2^64 − 1
///         (X is unchanged in every case).
void apply_rope(Matrix& X, std::size_t first_position = 0, float base = 10000.0f);

/// ALiBi's per-head slopes, the paper's (Press et al. 2022, and every model trained with ALiBi): for h a power of
/// two the geometric sequence m_k = 2^(−8k/h), k = 1 … h. For any other h, with c the largest power of two below
/// h: the c slopes of c heads, then every other slope of 2c heads (2^(−8/2c), 2^(−24/2c), …, the ones halfway
/// between), the first h − c of them. h = 6: 1/4, 1/16, 1/64, 1/256, then 1/2, 1/8.
/// \param h number of heads (≥ 1).
/// \return (h): for h a power of two, decreasing from 2^(−8/h) to 2^(−8).
/// \throws std::invalid_argument when h is 0, or naming the estimate when h floats would not fit in memory
///         (before allocating).
Vector alibi_slopes(std::size_t h);

/// ALiBi's bias for one head: bias(i, j) = −slope·|i + n_kv − n_q − j|, added to the scaled scores (queries
/// aligned to the end of the keys, as chapter 02's causal mask aligns them).
/// \param n_q number of queries.
/// \param n_kv number of keys (≥ n_q).
/// \param slope the head's slope (≥ 0).
/// \return (n_q, n_kv).
/// \throws std::invalid_argument when slope is negative or not finite, n_q > n_kv, or n_q·n_kv floats do not fit
///         in memory (naming the estimate), before allocating.
Matrix alibi_bias(std::size_t n_q, std::size_t n_kv, float slope);

/// A mask_mod for packed sequences: several documents concatenated into one sequence, and a token may
/// attend only to tokens of its own document (causal within it when \p causal).
struct DocumentMask {
  std::vector<std::size_t> document;  ///< (n_kv) the document of each token, non-decreasing
  bool causal = true;                 ///< also hide later tokens of the same document
  std::size_t offset = 0;             ///< n_kv − n_q: query q is token q + offset (the file's alignment rule)
  /// May query \p q see key \p kv? (Every head alike.)
  /// \throws std::out_of_range when q + offset (computed without wrapping) or kv is past the end of `document`.
  bool operator()(std::size_t head, std::size_t q, std::size_t kv) const;
};

/// A score_mod: the scaled score \p s of query \p q and key \p kv in head \p head, rewritten (ALiBi adds
/// a bias, soft-capping squashes it); it returns a finite score. chapters/11_positions/modifiers.hpp has the
/// course's, as callables this converts from.
using ScoreModFn = std::function<float(float s, std::size_t head, std::size_t q, std::size_t kv)>;

/// A mask_mod: may query \p q see key \p kv in head \p head? (DocumentMask is one.)
using MaskModFn = std::function<bool(std::size_t head, std::size_t q, std::size_t kv)>;

/// Which tiles of the (n_q, n_kv) score matrix, cut into tiles of \p B_r queries × \p B_c keys (the last
/// row and column of tiles ragged), \p mask_mod leaves empty (no pair allowed), full (every pair allowed)
/// or partial, for each head: T_r = ⌈n_q / B_r⌉, T_c = ⌈n_kv / B_c⌉ (ch11::tiles_of()).
/// \param mask_mod evaluated once on every (head, q, kv).
/// \param heads heads of the mask (1 when every head has the same).
/// \param n_q queries, the rows of the score matrix.
/// \param n_kv keys, its columns.
/// \param B_r queries per tile.
/// \param B_c keys per tile.
/// \return the block mask: its sizes, and tiles (heads, T_r, T_c).
/// \throws std::invalid_argument naming B_r and B_c when one is 0, when mask_mod is empty, when heads·n_q·n_kv (its
///         mask_mod calls) passes 64 bits (attn::checked_product()), or when the tiles would not fit in memory
///         (attn::checked_allocation()).
ch11::BlockMask make_block_mask(const MaskModFn& mask_mod, std::size_t heads, std::size_t n_q, std::size_t n_kv,
                                std::size_t B_r, std::size_t B_c);

/// Attention of one head with a score_mod and a mask_mod, in chapter 05's tiles: for each block of B_r
/// queries and each tile of B_c keys (the block mask's B_r and B_c), the scaled scores S = Q_i K_jᵀ / √d_k,
/// score_mod on each, -inf where mask_mod refuses, then the online softmax over the tiles. A tile the block
/// mask marks empty is skipped: no score, no score_mod or mask_mod call; a full tile needs no mask_mod call.
/// O = softmax(score_mod(S) with refused pairs at -inf)·V; a query that may see no key gets zeros and
/// lse = -inf.
/// \param Q (n_q, d_k) queries. \param K (n_kv, d_k) keys. \param V (n_kv, d_v) values.
/// \param head the head these are (the modifiers and the block mask take it).
/// \param score_mod rewrites each scaled score (ScoreModFn).
/// \param mask_mod may query q see key kv (MaskModFn); called only in partial tiles.
/// \param block_mask make_block_mask() of \p mask_mod for these n_q, n_kv, with 1 head or more than \p head.
/// \return O (n_q, d_v), lse (n_q) and tiles_visited, the tiles that were not skipped.
/// \throws std::invalid_argument naming the shapes when Q, K, V or the block mask do not fit together, when
///         a modifier is empty, or naming the first NaN/Inf of Q, K or V or a score that could overflow.
FlashOutput flex_attention_tiles(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t head,
                                 const ScoreModFn& score_mod, const MaskModFn& mask_mod,
                                 const ch11::BlockMask& block_mask);

/// @}

}  // namespace attn
