// Chapter 11's oracle: float64 loops written from the definitions (see 11_positions_oracle.hpp).
#include "oracle/11_positions_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::oracle {

Mat sinusoidal(std::size_t n, std::size_t d) {
  Mat pe(n, d);
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t c = 0; c < d; ++c) {
      const double w = std::pow(10000.0, -static_cast<double>(c - c % 2) / static_cast<double>(d));
      pe(p, c) = c % 2 == 0 ? std::sin(static_cast<double>(p) * w) : std::cos(static_cast<double>(p) * w);
    }
  return pe;
}

Mat rope(const Mat& X, std::size_t first, double base) {
  Mat out = X;
  for (std::size_t p = 0; p < X.rows; ++p)
    for (std::size_t i = 0; i + 1 < X.cols; i += 2) {
      const double angle =
          static_cast<double>(first + p) * std::pow(base, -static_cast<double>(i) / static_cast<double>(X.cols));
      out(p, i) = std::cos(angle) * X(p, i) - std::sin(angle) * X(p, i + 1);
      out(p, i + 1) = std::sin(angle) * X(p, i) + std::cos(angle) * X(p, i + 1);
    }
  return out;
}

Mat modified_attention(const Mat& Q, const Mat& K, const Mat& V, const ScoreFn& score, const MaskFn& allowed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(Q.cols == 0 ? 1 : Q.cols));
  Mat O(Q.rows, V.cols);
  for (std::size_t i = 0; i < Q.rows; ++i) {
    std::vector<double> logits(K.rows, -std::numeric_limits<double>::infinity());
    for (std::size_t j = 0; j < K.rows; ++j) {
      if (!allowed(i, j)) continue;
      double s = 0.0;
      for (std::size_t c = 0; c < Q.cols; ++c) s += Q(i, c) * K(j, c);
      logits[j] = score(s * scale, i, j);
    }
    const std::vector<double> w = softmax(logits);
    for (std::size_t j = 0; j < K.rows; ++j)
      for (std::size_t c = 0; c < V.cols; ++c) O(i, c) += w[j] * V(j, c);
  }
  return O;
}

std::vector<double> modified_log_sum_exp(const Mat& Q, const Mat& K, const ScoreFn& score, const MaskFn& allowed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(Q.cols == 0 ? 1 : Q.cols));
  std::vector<double> lse(Q.rows, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < Q.rows; ++i) {
    std::vector<double> logits;
    for (std::size_t j = 0; j < K.rows; ++j) {
      if (!allowed(i, j)) continue;
      double s = 0.0;
      for (std::size_t c = 0; c < Q.cols; ++c) s += Q(i, c) * K(j, c);
      logits.push_back(score(s * scale, i, j));
    }
    if (logits.empty()) continue;
    const double m = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (const double x : logits) sum += std::exp(x - m);
    lse[i] = m + std::log(sum);
  }
  return lse;
}

std::vector<double> alibi_slopes(std::size_t h) {
  const double log2h = std::log2(static_cast<double>(h));
  if (std::floor(log2h) == log2h) {
    const double start = std::pow(2.0, -std::pow(2.0, -(log2h - 3.0)));
    std::vector<double> slopes;
    for (std::size_t i = 0; i < h; ++i) slopes.push_back(start * std::pow(start, static_cast<double>(i)));
    return slopes;
  }
  const std::size_t c = static_cast<std::size_t>(std::pow(2.0, std::floor(log2h)));
  std::vector<double> slopes = alibi_slopes(c);
  const std::vector<double> twice = alibi_slopes(2 * c);
  for (std::size_t i = 0; slopes.size() < h; i += 2) slopes.push_back(twice[i]);
  return slopes;
}

}  // namespace attn::oracle
