/// \file
/// Chapter 16's building blocks that the course has not needed before (chapter code): a PyTorch-layout
/// Linear and GELU, as the reference model computes them, the weights' checks and head pruning. (LayerNorm is an
/// exercise: real_model.hpp.)
#pragma once

#include <cstddef>
#include <vector>

#include "16_real_model/real_model.hpp"
#include "attn/tensor.hpp"

namespace attn::ch16 {

/// Checks every weight of a layer against the width \p d of its input, before any product: W_Q, W_K, W_V, W_O
/// (d, d); b_Q, b_K, b_V, b_O, both LayerNorms' γ and β (d); W_1 (d_ff, d) with d_ff = W_1's rows ≥ 1, b_1
/// (d_ff), W_2 (d, d_ff), b_2 (d); heads ≥ 1 dividing d; ln_eps positive and finite. What linear() alone would
/// let through — a half-width W_Q read past its end per head, a (1, d) W_O broadcast over the rows — is refused.
/// \param where the caller's name, first in the message.
/// \param W the layer's weights.
/// \param d the width of the layer's input, which every weight must fit.
/// \param d_from where \p d comes from, for the message ("X's columns").
/// \throws std::invalid_argument naming the weight, its shape and the shape it needs (and where d and d_ff come from).
void check_layer_weights(const char* where, const EncoderLayerWeights& W, std::size_t d,
                         const char* d_from = "X's columns");

/// x·Wᵀ + b, with W stored as PyTorch's Linear stores it: (out, in).
/// \param X (n, in). \param W (out, in). \param b (out).
/// \return (n, out). \throws std::invalid_argument naming the shapes when they do not fit, naming the first NaN/Inf
///         of X or b, or naming the first entry of the output that is not finite (a NaN/Inf in W, or an overflow).
Matrix linear(const Matrix& X, const Matrix& W, const Vector& b);

/// GELU with the error function, BERT's "gelu": x·½·(1 + erf(x/√2)) elementwise (not the tanh approximation).
/// \param X (n, d). \return (n, d). \throws std::invalid_argument naming the first NaN/Inf of X.
Matrix gelu(const Matrix& X);

/// Head pruning by masking: every head whose \p keep_head entry is false gets an output of zeros, so its columns
/// of W_O add nothing to the layer; the kept heads are unchanged. encoder_layer() calls it when given a head mask.
/// \param heads (h, n, d_k) every head's attention output, before the merge.
/// \param keep_head (h) true = keep the head.
/// \return (h, n, d_k).
/// \throws std::invalid_argument naming both sizes when keep_head's size is not h.
Tensor3 prune_heads(const Tensor3& heads, const std::vector<bool>& keep_head);

/// A one-row matrix (1, n), as read_tensor() returns a one-dimensional tensor, as the vector (n).
/// \throws std::invalid_argument naming the shape when \p M has more than one row.
Vector row_vector(const Matrix& M);

}  // namespace attn::ch16
