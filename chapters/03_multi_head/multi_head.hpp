/// \file
/// Chapter 03, multi-head attention: the contract the learner implements in
/// exercises/03_multi_head/multi_head.cpp. Book page: book/03_multi_head.md.
/// split_heads() and merge_heads() are also what chapter 09 (MQA/GQA) builds on.
#pragma once

#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch03 Chapter 03: several heads
/// MultiHead(X) = Concat(head_1, …, head_h) · W_O, with head_i = Attention(X·W_Q^i, X·W_K^i, X·W_V^i):
/// project once at full width, cut the columns into h heads, attend per head, glue the heads back.
/// @{

/// The four projections of one multi-head layer, each (d_model, d_model). Columns
/// [i·d_k, (i+1)·d_k) of W_Q, W_K and W_V belong to head i (d_k = d_model / h); rows
/// [i·d_k, (i+1)·d_k) of W_O read head i's output.
struct MultiHeadWeights {
  Matrix W_Q;  ///< (d_model, d_model) queries of all heads, side by side
  Matrix W_K;  ///< (d_model, d_model) keys of all heads
  Matrix W_V;  ///< (d_model, d_model) values of all heads
  Matrix W_O;  ///< (d_model, d_model) mixes the concatenated heads back into one representation
};

/// Cuts the columns of \p X into \p h heads: head i gets columns [i·d_k, (i+1)·d_k), d_k = d_model / h.
/// \param X (n, d_model) one token per row, e.g. Q = X·W_Q for all heads at once.
/// \param h the number of heads, ≥ 1.
/// \return (h, n, d_k): heads(i, t, c) = X(t, i·d_k + c).
/// \throws std::invalid_argument naming X's shape and h when h is 0 or d_model is not divisible by h.
Tensor3 split_heads(const Matrix& X, std::size_t h);

/// The inverse of split_heads(): glues the heads side by side again (the "Concat" of the formula).
/// \param heads (h, n, d_k).
/// \return (n, h·d_k): row t is head 0's row t, then head 1's row t, …
Matrix merge_heads(const Tensor3& heads);

/// Multi-head self-attention: Q = X·W_Q, K = X·W_K, V = X·W_V (all heads at once), split into \p h heads,
/// scaled dot-product attention per head (chapter 02, with d_k = d_model / h), merge, then ·W_O.
/// \param X (n, d_model) the input sequence.
/// \param W the four (d_model, d_model) projections.
/// \param h the number of heads; d_model must be divisible by it.
/// \param mask (n, n), true = may attend, shared by every head; empty (the default) = no mask.
/// \return (n, d_model).
/// \throws std::invalid_argument naming the shapes when X and the weights do not fit, or d_model % h ≠ 0; naming
///         the first NaN/Inf of X or of a weight (W_Q, W_K, W_V, W_O).
Matrix multi_head_attention(const Matrix& X, const MultiHeadWeights& W, std::size_t h, const Mask& mask = Mask());

/// The same layer with some heads removed ("ablated"): a removed head's output is replaced by zeros before
/// the merge, so its rows of W_O contribute nothing. With every head kept this is multi_head_attention().
/// \param X (n, d_model) the input sequence.
/// \param W the four (d_model, d_model) projections.
/// \param keep_head (h) true = the head takes part, false = it is removed; its size is the number of heads.
/// \return (n, d_model).
/// \throws std::invalid_argument when keep_head is empty, d_model is not divisible by its size, or the
///         shapes do not fit; naming the first NaN/Inf of X or of a weight (a removed head's too).
Matrix multi_head_attention_ablated(const Matrix& X, const MultiHeadWeights& W, const std::vector<bool>& keep_head);

/// @}

}  // namespace attn
