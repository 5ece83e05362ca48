/// \file
/// Chapter 11, positions: the contract the learner implements in exercises/11_positions/positions.cpp.
/// Book page: book/11_positions.md.
///
/// Attention by itself is blind to order: permute the tokens and the outputs permute with them. Models
/// tell positions apart by adding an encoding to X (sinusoidal), by rotating q and k by their position
/// (RoPE), or by biasing the scores by distance (ALiBi). The last two, and every mask of the course, are
/// modifiers of the scores: chapters/11_positions/flex.hpp runs them inside chapter 05's tiled kernel.
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
/// \throws std::invalid_argument naming X's shape when d is odd; when base ≤ 1 or an entry of X is NaN or
///         infinite (X is then unchanged).
void apply_rope(Matrix& X, std::size_t first_position = 0, float base = 10000.0f);

/// ALiBi's per-head slopes: a geometric sequence m_k = 2^(−8(k + 1)/h), k = 0 … h − 1 (the paper's choice
/// for h a power of two; used here for every h).
/// \param h number of heads (≥ 1).
/// \return (h), decreasing from 2^(−8/h) to 2^(−8).
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
  std::vector<std::size_t> document;  ///< (n) the document of each token, non-decreasing
  bool causal = true;                 ///< also hide later tokens of the same document
  /// May query \p q see key \p kv? (Every head alike.)
  /// \throws std::out_of_range when q or kv is past the end of `document`.
  bool operator()(std::size_t head, std::size_t q, std::size_t kv) const;
};

/// @}

}  // namespace attn
