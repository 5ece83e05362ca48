/// \file
/// Chapter 11, positions: the contract the learner implements in exercises/11_positions/positions.cpp.
/// Book page: book/11_positions.md.
///
/// Attention by itself is blind to order: permute the tokens and the outputs permute with them. Models
/// tell positions apart by adding an encoding to X (sinusoidal), by rotating q and k by their position
/// (RoPE), or by biasing the scores by distance (ALiBi). The last two, and every mask of the course, are
/// modifiers of the scores: chapters/11_positions/flex.hpp runs them inside chapter 05's tiled kernel.
///
/// One alignment rule for every mask and bias (ALiBi, DocumentMask, and flex.hpp's causal, sliding-window and
/// prefix-LM masks, as chapter 02's causal mask): with n_q ≤ n_kv, the queries are the last n_q positions, so
/// query i sits at position i + offset, offset = n_kv − n_q (a decoder's new tokens after its cache: the
/// bottom-right alignment). PyTorch's `is_causal=True` aligns to the top left instead.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

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
/// \throws std::invalid_argument when d is odd, base ≤ 1 or an entry of X is NaN or infinite (X is then unchanged).
void apply_rope(Matrix& X, std::size_t first_position = 0, float base = 10000.0f);

/// ALiBi's per-head slopes, the paper's (Press et al. 2022, and every model trained with ALiBi): for h a power of
/// two the geometric sequence m_k = 2^(−8k/h), k = 1 … h. For any other h, with c the largest power of two below
/// h: the c slopes of c heads, then every other slope of 2c heads (2^(−8/2c), 2^(−24/2c), …, the ones halfway
/// between), the first h − c of them. h = 6: 1/4, 1/16, 1/64, 1/256, then 1/2, 1/8.
/// \param h number of heads (≥ 1).
/// \return (h): for h a power of two, decreasing from 2^(−8/h) to 2^(−8).
/// \throws std::invalid_argument when h is 0.
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
  /// \throws std::out_of_range when q + offset or kv is past the end of `document`.
  bool operator()(std::size_t head, std::size_t q, std::size_t kv) const;
};

/// @}

}  // namespace attn
