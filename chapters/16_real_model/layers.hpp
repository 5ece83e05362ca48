/// \file
/// Chapter 16's building blocks that the course has not needed before (chapter code): a PyTorch-layout
/// Linear, LayerNorm and GELU, each as the reference model computes it.
#pragma once

#include "attn/tensor.hpp"

namespace attn::ch16 {

/// x·Wᵀ + b, with W stored as PyTorch's Linear stores it: (out, in).
/// \param X (n, in). \param W (out, in). \param b (out).
/// \return (n, out). \throws std::invalid_argument naming the shapes when they do not fit, naming the first NaN/Inf
///         of X or b, or naming the first entry of the output that is not finite (a NaN/Inf in W, or an overflow).
Matrix linear(const Matrix& X, const Matrix& W, const Vector& b);

/// LayerNorm over each row: (x − mean) / √(var + ε) · γ + β, var the biased variance (as PyTorch).
/// \param X (n, d). \param gamma (d). \param beta (d). \param eps ε > 0.
/// \return (n, d). \throws std::invalid_argument naming the shapes when they do not fit, when ε ≤ 0 or is not
///         finite, or naming the first NaN/Inf of X, γ or β.
Matrix layer_norm(const Matrix& X, const Vector& gamma, const Vector& beta, float eps);

/// GELU with the error function, BERT's "gelu": x·½·(1 + erf(x/√2)) elementwise (not the tanh approximation).
/// \param X (n, d). \return (n, d). \throws std::invalid_argument naming the first NaN/Inf of X.
Matrix gelu(const Matrix& X);

/// A one-row matrix (1, n), as read_tensor() returns a one-dimensional tensor, as the vector (n).
/// \throws std::invalid_argument naming the shape when \p M has more than one row.
Vector row_vector(const Matrix& M);

}  // namespace attn::ch16
