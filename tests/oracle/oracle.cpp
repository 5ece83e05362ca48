// Attention by its definitions, in float64. Slow on purpose: every line is a formula from the book.
#include "oracle/oracle.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace attn::oracle {

std::vector<double> Mat::row(std::size_t i) const {
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(i * cols),
                             v.begin() + static_cast<std::ptrdiff_t>((i + 1) * cols));
}

std::vector<double> softmax(const std::vector<double>& logits) {
  double max = -std::numeric_limits<double>::infinity();
  for (double x : logits) max = std::max(max, x);
  std::vector<double> p(logits.size(), 0.0);
  if (std::isinf(max) && max < 0) return p;  // everything masked (or empty)
  double sum = 0.0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    p[j] = std::exp(logits[j] - max);
    sum += p[j];
  }
  for (double& x : p) x /= sum;
  return p;
}

Mat matmul(const Mat& a, const Mat& b) {
  if (a.cols != b.rows) throw std::invalid_argument("oracle::matmul: inner sizes differ");
  Mat c(a.rows, b.cols);
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < b.cols; ++j) {
      double s = 0.0;
      for (std::size_t k = 0; k < a.cols; ++k) s += a(i, k) * b(k, j);
      c(i, j) = s;
    }
  return c;
}

Mat transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}

std::vector<double> attention_weights(const std::vector<double>& q, const Mat& K) {
  if (q.size() != K.cols) throw std::invalid_argument("oracle::attention_weights: q and K differ in d_k");
  std::vector<double> scores(K.rows);
  for (std::size_t j = 0; j < K.rows; ++j) {
    double dot = 0.0;
    for (std::size_t k = 0; k < K.cols; ++k) dot += q[k] * K(j, k);
    scores[j] = dot / std::sqrt(static_cast<double>(K.cols));
  }
  return softmax(scores);
}

std::vector<double> weighted_sum(const std::vector<double>& w, const Mat& V) {
  if (w.size() != V.rows) throw std::invalid_argument("oracle::weighted_sum: w and V differ in n");
  std::vector<double> out(V.cols, 0.0);
  for (std::size_t j = 0; j < V.rows; ++j)
    for (std::size_t c = 0; c < V.cols; ++c) out[c] += w[j] * V(j, c);
  return out;
}

Mat attention_matrix(const Mat& Q, const Mat& K, const std::vector<bool>* allowed) {
  if (Q.cols != K.cols) throw std::invalid_argument("oracle::attention_matrix: Q and K differ in d_k");
  if (allowed && allowed->size() != Q.rows * K.rows)
    throw std::invalid_argument("oracle::attention_matrix: mask is not n_q x n_kv");
  Mat A(Q.rows, K.rows);
  const double scale = 1.0 / std::sqrt(static_cast<double>(Q.cols));
  for (std::size_t i = 0; i < Q.rows; ++i) {
    std::vector<double> scores(K.rows);
    for (std::size_t j = 0; j < K.rows; ++j) {
      if (allowed && !(*allowed)[i * K.rows + j]) {
        scores[j] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double dot = 0.0;
      for (std::size_t k = 0; k < Q.cols; ++k) dot += Q(i, k) * K(j, k);
      scores[j] = dot * scale;
    }
    const std::vector<double> p = softmax(scores);
    for (std::size_t j = 0; j < K.rows; ++j) A(i, j) = p[j];
  }
  return A;
}

Mat attention(const Mat& Q, const Mat& K, const Mat& V, const std::vector<bool>* allowed) {
  if (K.rows != V.rows) throw std::invalid_argument("oracle::attention: K and V differ in n_kv");
  return matmul(attention_matrix(Q, K, allowed), V);
}

}  // namespace attn::oracle
