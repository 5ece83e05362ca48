/// \file
/// Chapter 02, the Q/K/V computation: the contract the learner implements in
/// exercises/02_qkv_trace/qkv_trace.cpp. Book page: book/02_qkv_trace.md.
/// scaled_dot_product_attention() is the course's "full attention": every later chapter compares with it.
#pragma once

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch02 Chapter 02: Q, K, V and the computation
/// The boxes of the flowchart X → Q, K, V → QKᵀ → ÷√d_k → softmax → A·V, one function each.
/// @{

/// A linear projection: one row of \p X in, one row out, `X · W`.
/// \param X (n, d_in) one token per row.
/// \param W (d_in, d_out) the projection (W_Q, W_K or W_V).
/// \return (n, d_out).
/// \throws std::invalid_argument naming both shapes when X's columns differ from W's rows.
Matrix project(const Matrix& X, const Matrix& W);

/// The scaled scores `S = Q Kᵀ / √d_k`: S(i, j) is how well query i matches key j.
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys; n_kv may differ from n_q (cross-attention, decoding).
/// \return (n_q, n_kv).
/// \throws std::invalid_argument naming both shapes when Q and K differ in d_k.
Matrix scaled_scores(const Matrix& Q, const Matrix& K);

/// Row-wise numerically stable softmax: row i of the result is softmax(S(i, :)).
/// -inf marks a masked entry (weight exactly 0); a row whose entries are all -inf gives all zeros, never NaN.
/// \param S (rows, cols) scores.
/// \return (rows, cols) weights, each row summing to 1 (or 0 when fully masked).
/// \throws std::invalid_argument naming the position of a NaN or +inf entry.
Matrix softmax_rows(const Matrix& S);

/// The causal mask of decoder attention: query i may attend to key j only when j ≤ i + (n_kv - n_q),
/// i.e. to itself and the past. With n_q = n_kv that is j ≤ i; with fewer queries than keys (the last
/// n_q positions of a sequence, as when decoding with a cache) the queries are aligned to the end.
/// \return (n_q, n_kv), true = allowed.
/// \throws std::invalid_argument when n_q > n_kv (queries without keys for their own positions), or when the
///         mask's n_q × n_kv bytes do not fit in std::size_t or the memory available (attn::checked_allocation()).
Mask causal_mask(std::size_t n_q, std::size_t n_kv);

/// Scaled dot-product attention, `softmax(Q Kᵀ / √d_k) · V`, with an optional mask.
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param V (n_kv, d_v) values.
/// \param mask (n_q, n_kv), true = may attend; empty (the default) = every pair allowed. A query with no
///        allowed key (a fully masked row, or n_kv = 0) gets an output row of zeros.
/// \return (n_q, d_v): row i is the weighted average of V's rows with the weights of query i.
/// \throws std::invalid_argument naming the shapes when Q, K, V or the mask do not fit together (a mask
///         with one dimension 0 is refused, not taken for "no mask"), naming the first NaN/Inf of Q, K or V,
///         and when a score could overflow float (attn::require_attention_inputs(): the course's overflow
///         policy, attn/checks.hpp).
Matrix scaled_dot_product_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& mask = Mask());

/// @}

}  // namespace attn
