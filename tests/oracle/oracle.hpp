/// \file
/// The oracle: attention written as the definitions read, in float64 loops, for clarity and not for speed.
/// Every test compares a track's float32 result against these functions (or a closed form), never
/// against the other track. It deliberately shares no code with common/ or the solutions.
#pragma once

#include <cstddef>
#include <vector>

namespace attn::oracle {

/// A dense float64 matrix, row-major: (rows, cols).
struct Mat {
  std::size_t rows = 0, cols = 0;
  std::vector<double> v;  ///< rows * cols values, row by row

  Mat() = default;
  Mat(std::size_t r, std::size_t c, double fill = 0.0) : rows(r), cols(c), v(r * c, fill) {}
  double& operator()(std::size_t i, std::size_t j) { return v[i * cols + j]; }
  double operator()(std::size_t i, std::size_t j) const { return v[i * cols + j]; }
  std::vector<double> row(std::size_t i) const;
};

/// softmax(x)_j = exp(x_j) / Σ_k exp(x_k), computed as exp(x_j - max) / Σ exp(x_k - max).
/// -inf entries get weight 0; when every entry is -inf the result is all zeros (nothing to attend to).
/// Empty in, empty out.
std::vector<double> softmax(const std::vector<double>& logits);

/// (rows, inner) · (inner, cols) → (rows, cols).
Mat matmul(const Mat& a, const Mat& b);

/// Aᵀ: (rows, cols) → (cols, rows).
Mat transpose(const Mat& a);

/// Weights of one query over n keys: softmax_j(q · K_j / √d_k). q: (d_k), K: (n, d_k) → (n).
std::vector<double> attention_weights(const std::vector<double>& q, const Mat& K);

/// Σ_j w_j V_j: w (n), V (n, d_v) → (d_v).
std::vector<double> weighted_sum(const std::vector<double>& w, const Mat& V);

/// Full scaled dot-product attention, softmax(Q Kᵀ / √d_k) V, row by row.
/// Q: (n_q, d_k), K: (n_kv, d_k), V: (n_kv, d_v) → (n_q, d_v). When \p allowed is given (n_q × n_kv,
/// row-major, true = may attend), disallowed pairs get weight 0 and a row with none allowed outputs 0.
Mat attention(const Mat& Q, const Mat& K, const Mat& V, const std::vector<bool>* allowed = nullptr);

/// The attention matrix itself, softmax(Q Kᵀ / √d_k) with the same masking rule: (n_q, n_kv).
Mat attention_matrix(const Mat& Q, const Mat& K, const std::vector<bool>* allowed = nullptr);

}  // namespace attn::oracle
