/// \file
/// Tensor types of the course, and the only place that includes xtensor (a later xtensor is a
/// one-file change). Shapes are row-major: a sequence is (n, d), heads are (h, n, d_k).
///
/// A pitfall of xtensor 0.24 that every chapter avoids: expressions are lazy, and a reducer kept as
/// `auto` (`auto m = xt::amax(s, {1}, xt::keep_dims); xt::exp(s - m)`) can read freed memory. Assign
/// every reduction, and every value used twice, to a concrete attn::Matrix / attn::Vector.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <xtensor-blas/xlinalg.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "attn/blas_threads.hpp"  // OpenBLAS runs every product below: its thread count lives there

namespace attn {

using Vector = xt::xtensor<float, 1>;    ///< (n)
using Matrix = xt::xtensor<float, 2>;    ///< (rows, cols), row-major
using Tensor3 = xt::xtensor<float, 3>;   ///< (h, n, d_k), row-major
using MatrixD = xt::xtensor<double, 2>;  ///< float64 twin, for sums that must not lose digits
/// Which (query, key) pairs may attend: (n_q, n_kv), true = allowed. An empty (0, 0) mask means "no mask".
using Mask = xt::xtensor<bool, 2>;

/// The shape of any xtensor expression as text, e.g. "(5, 8)", for error messages.
template <class E>
std::string shape_str(const E& e) {
  std::string s = "(";
  const auto& shape = e.shape();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (i + 1 < shape.size()) s += ", ";
  }
  return s + ")";
}

/// Throws std::invalid_argument with \p message when \p ok is false. The message should name the
/// function and the shapes involved: "attention_weights: q is (4) but K is (5, 6)".
void require(bool ok, const std::string& message);

/// Throws std::invalid_argument naming the first non-finite element of \p values (NaN or ±Inf), e.g.
/// "softmax: logits[2] is nan". \p allow_minus_inf lets -inf through, the course's encoding of "masked".
void require_finite(const char* where, const char* what, const float* values, std::size_t count,
                    bool allow_minus_inf = false);

/// alpha · A · B, or alpha · A · Bᵀ when \p transpose_b: one OpenBLAS sgemm, with no copy of the
/// transpose (BLAS reads B row by row instead). A (m, k), B (k, n) or (n, k) → (m, n).
/// \param A (m, k) the left factor.
/// \param B (k, n), or (n, k) when \p transpose_b.
/// \param transpose_b multiply by Bᵀ instead of B.
/// \param alpha the factor the product is scaled by.
/// \param product what the product computes, for the error message, e.g. "dQ = dS·K": the message then
///        names the product and its two factors by the names after '=' ("dS is (3, 5) and K is (4, 8)").
/// \throws std::invalid_argument naming the product and the shapes of both factors, as multiplied (Bᵀ
///         transposed), when the inner sizes differ.
Matrix matmul(const Matrix& A, const Matrix& B, bool transpose_b = false, float alpha = 1.0f,
              const char* product = nullptr);

/// alpha · Aᵀ · B: one OpenBLAS sgemm that reads A transposed, so no (k, m) copy of Aᵀ is made.
/// A (n, m), B (n, k) → (m, k): a sum over the n rows of both, e.g. φ(K)ᵀV in linear attention.
/// \param A (n, m) the left factor, read transposed.
/// \param B (n, k) the right factor.
/// \param alpha the factor the product is scaled by.
/// \param product what the product computes, for the error message, e.g. "dK = dSᵀ·Q" (see matmul()).
/// \throws std::invalid_argument naming the product and the shapes of both factors, as multiplied (Aᵀ
///         transposed), when A and B differ in rows.
Matrix matmul_transpose_a(const Matrix& A, const Matrix& B, float alpha = 1.0f, const char* product = nullptr);

}  // namespace attn
