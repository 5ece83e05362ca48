// Chapter 16's building blocks: Linear in PyTorch's layout and erf-GELU, as BERT computes them, the weights'
// checks and head pruning.
#include "16_real_model/layers.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn::ch16 {

void check_layer_weights(const char* where, const EncoderLayerWeights& W, std::size_t d, const char* d_from) {
  require(W.heads > 0 && d % W.heads == 0,
          fmt::format("{}: d = {} ({}) is not divisible by h = {}", where, d, d_from, W.heads));
  const std::size_t d_ff = W.W_1.shape(0);
  require(d_ff > 0, fmt::format("{}: W_1 is {}; the feed-forward needs d_ff ≥ 1 rows", where, shape_str(W.W_1)));
  const auto matrix = [&](const char* name, const Matrix& M, std::size_t rows, std::size_t cols) {
    require(M.shape(0) == rows && M.shape(1) == cols,
            fmt::format("{}: {} is {}; d = {} ({}) and d_ff = {} (W_1's rows) need ({}, {})", where, name, shape_str(M),
                        d, d_from, d_ff, rows, cols));
  };
  const auto vector = [&](const char* name, const Vector& v, std::size_t size) {
    require(v.shape(0) == size, fmt::format("{}: {} is {}; d = {} ({}) and d_ff = {} (W_1's rows) need ({})", where,
                                            name, shape_str(v), d, d_from, d_ff, size));
  };
  matrix("W_Q", W.W_Q, d, d);
  matrix("W_K", W.W_K, d, d);
  matrix("W_V", W.W_V, d, d);
  matrix("W_O", W.W_O, d, d);
  matrix("W_1", W.W_1, d_ff, d);
  matrix("W_2", W.W_2, d, d_ff);
  vector("b_Q", W.b_Q, d);
  vector("b_K", W.b_K, d);
  vector("b_V", W.b_V, d);
  vector("b_O", W.b_O, d);
  vector("b_1", W.b_1, d_ff);
  vector("b_2", W.b_2, d);
  vector("ln1_gamma", W.ln1_gamma, d);
  vector("ln1_beta", W.ln1_beta, d);
  vector("ln2_gamma", W.ln2_gamma, d);
  vector("ln2_beta", W.ln2_beta, d);
  require(W.ln_eps > 0.0f && std::isfinite(W.ln_eps), fmt::format("{}: ln_eps = {} must be positive", where, W.ln_eps));
}

Matrix linear(const Matrix& X, const Matrix& W, const Vector& b) {
  require(X.shape(1) == W.shape(1) && b.shape(0) == W.shape(0),
          fmt::format("linear: X {} · Wᵀ with W {} (out, in) and b {} do not fit", shape_str(X), shape_str(W),
                      shape_str(b)));
  require_finite("linear", "X", X.data(), X.size());
  require_finite("linear", "b", b.data(), b.size());
  Matrix Y = matmul(X, W, /*transpose_b=*/true);  // (n, out): PyTorch stores W as (out, in)
  // The bias row by row: xtensor's broadcast of b over the rows walks the matrix element by element with its
  // index stepper, slower than the product itself on a batch of short sentences.
  const std::size_t n = Y.shape(0), out = Y.shape(1);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < out; ++j) Y.data()[i * out + j] += b.data()[j];
  // W is not scanned before (its out·in entries, per call, would cost as much as the product for a short
  // sentence); a NaN or infinity in it, or a product past float's range, shows in Y, which is n·out entries.
  const auto bad = std::find_if(Y.begin(), Y.end(), [](float v) { return !std::isfinite(v); });
  if (bad != Y.end()) {
    const auto at = static_cast<std::size_t>(bad - Y.begin()), cols = Y.shape(1);
    throw std::invalid_argument(
        fmt::format("linear: output ({}, {}) is {}: W {} holds a NaN or infinity, or X·Wᵀ "
                    "overflows float",
                    at / cols, at % cols, *bad, shape_str(W)));
  }
  return Y;
}

Tensor3 prune_heads(const Tensor3& heads, const std::vector<bool>& keep_head) {
  require(keep_head.size() == heads.shape(0), fmt::format("prune_heads: keep_head has {} entries for {} heads {}",
                                                          keep_head.size(), heads.shape(0), shape_str(heads)));
  Tensor3 out = heads;  // (h, n, d_k)
  for (std::size_t i = 0; i < keep_head.size(); ++i)
    if (!keep_head[i]) xt::view(out, i, xt::all(), xt::all()) = 0.0f;
  return out;
}

Matrix gelu(const Matrix& X) {
  require_finite("gelu", "X", X.data(), X.size());  // GELU(−∞) would be −∞ · 0 = NaN
  Matrix Y = X;                                     // (n, d)
  float* y = Y.data();
  // libm's erf, within 1 ulp, one float at a time: the lesson's reference on every machine. The fast forward's
  // GELU (vector_kernels.cpp) is the vectorised one.
  for (std::size_t i = 0; i < Y.size(); ++i)
    y[i] = 0.5f * y[i] * (1.0f + std::erf(y[i] * 0.70710678118654752f));  // x/√2
  return Y;
}

Vector row_vector(const Matrix& M) {
  require(M.shape(0) == 1, fmt::format("row_vector: expected one row, got {}", shape_str(M)));
  return xt::view(M, 0, xt::all());
}

}  // namespace attn::ch16
