// Chapter 16's oracle: a BERT encoder layer as plain float64 loops.
#include "oracle/16_real_model_oracle.hpp"

#include <algorithm>
#include <cmath>

namespace attn::oracle {

namespace {

// x·Wᵀ + b for every row of X: (n, in) with W (out, in) → (n, out).
Mat linear(const Mat& X, const Mat& W, const std::vector<double>& b) {
  Mat Y(X.rows, W.rows);
  for (std::size_t i = 0; i < X.rows; ++i)
    for (std::size_t o = 0; o < W.rows; ++o) {
      double s = b[o];
      for (std::size_t k = 0; k < X.cols; ++k) s += X(i, k) * W(o, k);
      Y(i, o) = s;
    }
  return Y;
}

// Columns [c0, c0 + w) of M.
Mat columns(const Mat& M, std::size_t c0, std::size_t w) {
  Mat out(M.rows, w);
  for (std::size_t i = 0; i < M.rows; ++i)
    for (std::size_t j = 0; j < w; ++j) out(i, j) = M(i, c0 + j);
  return out;
}

}  // namespace

Mat layer_norm(const Mat& X, const std::vector<double>& g, const std::vector<double>& b, double eps) {
  Mat Y(X.rows, X.cols);
  for (std::size_t i = 0; i < X.rows; ++i) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < X.cols; ++j) mean += X(i, j);
    mean /= static_cast<double>(X.cols);
    for (std::size_t j = 0; j < X.cols; ++j) var += (X(i, j) - mean) * (X(i, j) - mean);
    var /= static_cast<double>(X.cols);
    for (std::size_t j = 0; j < X.cols; ++j) Y(i, j) = (X(i, j) - mean) / std::sqrt(var + eps) * g[j] + b[j];
  }
  return Y;
}

Mat embed(const std::vector<int>& ids, const Mat& word, const Mat& position, const Mat& token_type,
          const std::vector<double>& g, const std::vector<double>& b, double eps) {
  Mat X(ids.size(), word.cols);
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (std::size_t j = 0; j < word.cols; ++j)
      X(t, j) = word(static_cast<std::size_t>(ids[t]), j) + position(t, j) + token_type(0, j);
  return layer_norm(X, g, b, eps);
}

std::vector<double> mean_pool_normalized(const Mat& H) {
  std::vector<double> e(H.cols, 0.0);
  for (std::size_t i = 0; i < H.rows; ++i)
    for (std::size_t j = 0; j < H.cols; ++j) e[j] += H(i, j) / static_cast<double>(H.rows);
  double norm = 0.0;
  for (double v : e) norm += v * v;
  norm = std::max(std::sqrt(norm), 1e-12);
  for (double& v : e) v /= norm;
  return e;
}

Mat bert_layer(const Mat& X, const BertLayer& W, const std::vector<bool>& keep) {
  const std::size_t n = X.rows, d = X.cols, d_k = d / W.heads;
  const Mat Q = linear(X, W.W_Q, W.b_Q), K = linear(X, W.W_K, W.b_K), V = linear(X, W.W_V, W.b_V);
  Mat concat(n, d, 0.0);  // a left-out head contributes zeros
  for (std::size_t h = 0; h < W.heads; ++h) {
    if (!keep.empty() && !keep[h]) continue;
    const Mat O = attention(columns(Q, h * d_k, d_k), columns(K, h * d_k, d_k), columns(V, h * d_k, d_k));
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < d_k; ++j) concat(i, h * d_k + j) = O(i, j);
  }
  Mat H = linear(concat, W.W_O, W.b_O);
  for (std::size_t k = 0; k < H.v.size(); ++k) H.v[k] += X.v[k];
  H = layer_norm(H, W.ln1_gamma, W.ln1_beta, W.eps);
  Mat F = linear(H, W.W_1, W.b_1);
  for (double& x : F.v) x = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  F = linear(F, W.W_2, W.b_2);
  for (std::size_t k = 0; k < F.v.size(); ++k) F.v[k] += H.v[k];
  return layer_norm(F, W.ln2_gamma, W.ln2_beta, W.eps);
}

}  // namespace attn::oracle
