// Chapter 15's oracle: float64 loops, shares nothing with the tracks or chapters/.
#include "oracle/15_structured_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::oracle {

namespace {

double leaky(double x, double slope) { return x > 0 ? x : slope * x; }

/// Row-wise softmax of S (−inf = excluded; a row of only −inf gives zeros), times H.
Mat mix(const Mat& S, const Mat& H) {
  Mat out(S.rows, H.cols);
  for (std::size_t i = 0; i < S.rows; ++i) {
    const std::vector<double> w = softmax(S.row(i));
    for (std::size_t j = 0; j < S.cols; ++j)
      for (std::size_t c = 0; c < H.cols; ++c) out(i, c) += w[j] * H(j, c);
  }
  return out;
}

}  // namespace

Mat gat_scores(const Mat& H, const std::vector<double>& a, double slope) {
  Mat E(H.rows, H.rows);
  for (std::size_t i = 0; i < H.rows; ++i)
    for (std::size_t j = 0; j < H.rows; ++j) {
      double x = 0;
      for (std::size_t c = 0; c < H.cols; ++c) x += a[c] * H(i, c) + a[H.cols + c] * H(j, c);
      E(i, j) = leaky(x, slope);
    }
  return E;
}

Mat gatv2_scores(const Mat& L, const Mat& R, const std::vector<double>& a, double slope) {
  Mat E(L.rows, R.rows);
  for (std::size_t i = 0; i < L.rows; ++i)
    for (std::size_t j = 0; j < R.rows; ++j)
      for (std::size_t c = 0; c < L.cols; ++c) E(i, j) += a[c] * leaky(L(i, c) + R(j, c), slope);
  return E;
}

Mat gat_head(const Mat& X, const Mat& W, const std::vector<double>& a, const std::vector<bool>& allowed, double slope) {
  const Mat H = matmul(X, W);
  Mat S = gat_scores(H, a, slope);
  for (std::size_t k = 0; k < S.v.size(); ++k)
    if (!allowed[k]) S.v[k] = -std::numeric_limits<double>::infinity();
  return mix(S, H);
}

std::vector<bool> subtree_relation(const std::vector<long>& parent) {
  const std::size_t n = parent.size();
  std::vector<std::vector<std::size_t>> children(n);
  for (std::size_t i = 0; i < n; ++i)
    if (parent[i] >= 0) children[static_cast<std::size_t>(parent[i])].push_back(i);
  std::vector<bool> allowed(n * n, false);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::size_t> stack{i};
    while (!stack.empty()) {
      const std::size_t j = stack.back();
      stack.pop_back();
      allowed[i * n + j] = true;
      for (std::size_t c : children[j]) stack.push_back(c);
    }
  }
  return allowed;
}

Mat node_logits(const Mat& X, const Mat& W, const std::vector<double>& a, const std::vector<double>& b,
                const Mat& W_out, const std::vector<bool>& allowed, const std::vector<std::size_t>& hops, int structure,
                double slope, bool residual) {
  const Mat H = matmul(X, W);
  Mat S = gat_scores(H, a, slope);
  for (std::size_t k = 0; k < S.v.size(); ++k) {
    if (structure == 1 && !allowed[k]) S.v[k] = -std::numeric_limits<double>::infinity();
    if (structure == 2) S.v[k] += b[std::min(hops[k], b.size() - 1)];
  }
  Mat Z = mix(S, H);
  if (residual)
    for (std::size_t k = 0; k < Z.v.size(); ++k) Z.v[k] += H.v[k];
  return matmul(Z, W_out);
}

}  // namespace attn::oracle
