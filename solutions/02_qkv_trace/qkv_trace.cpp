// Chapter 02, reference solutions. Book page: book/02_qkv_trace.md.
// Clear first, fast second: BLAS for the products (attn::matmul, which reads Kᵀ without copying it),
// one pass over the scores for the softmax.
#include "02_qkv_trace/qkv_trace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace attn {

// [project]
Matrix project(const Matrix& X, const Matrix& W) {
  require(X.shape(1) == W.shape(0),
          fmt::format("project: X is {} and W is {}; X needs one column per row of W", shape_str(X), shape_str(W)));
  return matmul(X, W);  // (n, d_out)
}
// [project]

// [scaled_scores]
Matrix scaled_scores(const Matrix& Q, const Matrix& K) {
  require(Q.shape(1) == K.shape(1),
          fmt::format("scaled_scores: Q is {} and K is {}; queries and keys need the same d_k", shape_str(Q),
                      shape_str(K)));
  // The scale rides along inside the matrix product (sgemm's alpha): no second pass over the (n_q, n_kv) matrix.
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(Q.shape(1), 1)));
  return matmul(Q, K, /*transpose_b=*/true, scale);  // (n_q, n_kv)
}
// [scaled_scores]

// [softmax_rows]
Matrix softmax_rows(const Matrix& S) {
  require_finite("softmax_rows", "S", S.data(), S.size(), /*allow_minus_inf=*/true);
  const std::size_t rows = S.shape(0), cols = S.shape(1);
  Matrix A = xt::zeros<float>({rows, cols});  // (rows, cols)
  for (std::size_t i = 0; i < rows; ++i) {
    const float* s = S.data() + i * cols;
    float* a = A.data() + i * cols;
    const float m = cols ? *std::max_element(s, s + cols) : -std::numeric_limits<float>::infinity();
    if (std::isinf(m)) continue;  // every entry masked: the row stays zero, not 0/0
    // The sum in double: a float running sum of n terms errs by up to n·u (63u on a row of 2^20 scores), and every
    // weight with it; in double the row's length costs nothing at float's precision.
    double sum = 0.0;
    for (std::size_t j = 0; j < cols; ++j) sum += (a[j] = std::exp(s[j] - m));  // each term <= 1
    const float inv = static_cast<float>(1.0 / sum);                            // sum >= 1: the max contributed exp(0)
    for (std::size_t j = 0; j < cols; ++j) a[j] *= inv;
  }
  return A;
}
// [softmax_rows]

// [causal_mask]
Mask causal_mask(std::size_t n_q, std::size_t n_kv) {
  require(n_q <= n_kv, fmt::format("causal_mask: {} queries but only {} keys; the queries are the last n_q "
                                   "positions, so n_q <= n_kv",
                                   n_q, n_kv));
  checked_allocation("causal_mask: the mask n_q × n_kv", {n_q, n_kv});  // 2^32 × 2^32 must not wrap to 0 bytes
  const std::size_t offset = n_kv - n_q;     // query i sits at position i + offset of the sequence
  Mask mask = xt::zeros<bool>({n_q, n_kv});  // (n_q, n_kv)
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j <= i + offset; ++j) mask(i, j) = true;
  return mask;
}
// [causal_mask]

// [scaled_dot_product_attention]
Matrix scaled_dot_product_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& mask) {
  require(K.shape(0) == V.shape(0), fmt::format("scaled_dot_product_attention: K is {} and V is {}; one value "
                                                "per key is needed",
                                                shape_str(K), shape_str(V)));
  require_mask_fits("scaled_dot_product_attention", mask, Q, K);      // (0, 3) is not "no mask"
  require_attention_inputs("scaled_dot_product_attention", Q, K, V);  // finite, and no score can overflow
  const bool masked = mask.size() > 0;
  Matrix S = scaled_scores(Q, K);  // (n_q, n_kv)
  if (masked) {
    // A disallowed pair scores -inf: softmax gives it weight exactly 0 (and a row with none allowed, zeros).
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < S.size(); ++i)
      if (!mask.data()[i]) S.data()[i] = kMasked;
  }
  const Matrix A = softmax_rows(S);  // (n_q, n_kv)
  return matmul(A, V);               // (n_q, d_v)
}
// [scaled_dot_product_attention]

}  // namespace attn
