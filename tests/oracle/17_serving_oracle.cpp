// Chapter 17's oracle (17_serving_oracle.hpp): float64 loops over contiguous keys and values.
#include "oracle/17_serving_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::oracle {

namespace {

/// The scaled scores of query head i over the keys of its KV head: (n).
std::vector<double> head_scores(const Mat& q, const Heads& K, std::size_t i) {
  const std::size_t h = q.rows, g = K.size(), d_k = q.cols;
  const Mat& k = K[i * g / h];
  std::vector<double> s(k.rows);
  for (std::size_t t = 0; t < k.rows; ++t) {
    double dot = 0.0;
    for (std::size_t c = 0; c < d_k; ++c) dot += q(i, c) * k(t, c);
    s[t] = dot / std::sqrt(static_cast<double>(d_k));
  }
  return s;
}

}  // namespace

Mat decode_attention(const Mat& q, const Heads& K, const Heads& V) {
  const std::size_t h = q.rows, g = K.size(), d_v = V[0].cols;
  Mat O(h, d_v);
  for (std::size_t i = 0; i < h; ++i) {
    const std::vector<double> w = softmax(head_scores(q, K, i));
    const Mat& v = V[i * g / h];
    for (std::size_t t = 0; t < w.size(); ++t)
      for (std::size_t c = 0; c < d_v; ++c) O(i, c) += w[t] * v(t, c);
  }
  return O;
}

std::vector<double> decode_lse(const Mat& q, const Heads& K) {
  std::vector<double> lse(q.rows, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < q.rows; ++i) {
    const std::vector<double> s = head_scores(q, K, i);
    if (s.empty()) continue;
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (const double x : s) sum += std::exp(x - m);
    lse[i] = m + std::log(sum);
  }
  return lse;
}

Heads prefill_attention(const Heads& Q, const Heads& K, const Heads& V, std::size_t first) {
  const std::size_t h = Q.size(), g = K.size();
  Heads O;
  for (std::size_t i = 0; i < h; ++i) {
    const Mat &q = Q[i], &k = K[i * g / h], &v = V[i * g / h];
    Mat o(q.rows, v.cols);
    for (std::size_t t = 0; t < q.rows; ++t) {
      const std::size_t seen = first + t + 1;  // keys 0 … first + t
      std::vector<double> s(seen);
      for (std::size_t u = 0; u < seen; ++u) {
        double dot = 0.0;
        for (std::size_t c = 0; c < q.cols; ++c) dot += q(t, c) * k(u, c);
        s[u] = dot / std::sqrt(static_cast<double>(q.cols));
      }
      const std::vector<double> w = softmax(s);
      for (std::size_t u = 0; u < seen; ++u)
        for (std::size_t c = 0; c < v.cols; ++c) o(t, c) += w[u] * v(u, c);
    }
    O.push_back(o);
  }
  return O;
}

}  // namespace attn::oracle
