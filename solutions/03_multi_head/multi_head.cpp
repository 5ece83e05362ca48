// Chapter 03, reference solutions. Book page: book/03_multi_head.md.
// Multi-head attention is chapter 02's attention run h times on narrower slices: the only new code is
// the bookkeeping that cuts the columns into heads and glues them back.
#include "03_multi_head/multi_head.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"

namespace attn {

// [split_heads]
Tensor3 split_heads(const Matrix& X, std::size_t h) {
  const std::size_t n = X.shape(0), d_model = X.shape(1);
  require(h > 0 && d_model % h == 0,
          fmt::format("split_heads: X is {} and h = {}; d_model = {} must be a multiple of the number of heads",
                      shape_str(X), h, d_model));
  const std::size_t d_k = d_model / h;
  Tensor3 heads = xt::zeros<float>({h, n, d_k});  // (h, n, d_k)
  // Head i owns columns [i·d_k, (i+1)·d_k) of every row: a copy, no arithmetic.
  for (std::size_t i = 0; i < h; ++i)
    for (std::size_t t = 0; t < n; ++t) {
      const float* from = X.data() + t * d_model + i * d_k;
      std::copy(from, from + d_k, heads.data() + (i * n + t) * d_k);
    }
  return heads;
}
// [split_heads]

// [merge_heads]
Matrix merge_heads(const Tensor3& heads) {
  const std::size_t h = heads.shape(0), n = heads.shape(1), d_k = heads.shape(2);
  Matrix X = xt::zeros<float>({n, h * d_k});  // (n, h·d_k)
  for (std::size_t i = 0; i < h; ++i)
    for (std::size_t t = 0; t < n; ++t) {
      const float* from = heads.data() + (i * n + t) * d_k;
      std::copy(from, from + d_k, X.data() + t * h * d_k + i * d_k);
    }
  return X;
}
// [merge_heads]

namespace {

void require_fits(const char* where, const Matrix& X, const MultiHeadWeights& W) {
  const std::size_t d = X.shape(1);
  for (const Matrix* M : {&W.W_Q, &W.W_K, &W.W_V, &W.W_O})
    require(
        M->shape(0) == d && M->shape(1) == d,
        fmt::format("{}: X is {} but the weights are W_Q {}, W_K {}, W_V {}, W_O {}; each must be "
                    "(d_model, d_model) = ({}, {})",
                    where, shape_str(X), shape_str(W.W_Q), shape_str(W.W_K), shape_str(W.W_V), shape_str(W.W_O), d, d));
  // A NaN in W_O (or in a removed head's columns) would reach the output unseen by chapter 02's checks of Q, K, V.
  require_finite(where, "X", X.data(), X.size());
  const std::pair<const char*, const Matrix*> weights[] = {
      {"W_Q", &W.W_Q}, {"W_K", &W.W_K}, {"W_V", &W.W_V}, {"W_O", &W.W_O}};
  for (const auto& [name, M] : weights) require_finite(where, name, M->data(), M->size());
}

// [attend_heads]
// The layer, with a switch per head: project at full width (three products, not 3·h), split, attend
// per head with chapter 02's function, leave a removed head at zero, merge, mix with W_O.
Matrix attend_heads(const Matrix& X, const MultiHeadWeights& W, const std::vector<bool>& keep_head, const Mask& mask) {
  const std::size_t h = keep_head.size();
  const Tensor3 Q = split_heads(project(X, W.W_Q), h);  // (h, n, d_k)
  const Tensor3 K = split_heads(project(X, W.W_K), h);  // (h, n, d_k)
  const Tensor3 V = split_heads(project(X, W.W_V), h);  // (h, n, d_k)
  Tensor3 heads = xt::zeros<float>(Q.shape());          // (h, n, d_k)
  for (std::size_t i = 0; i < h; ++i) {
    if (!keep_head[i]) continue;        // an ablated head says nothing: zeros reach W_O
    const Matrix Q_i = xt::view(Q, i);  // (n, d_k)
    const Matrix K_i = xt::view(K, i);  // (n, d_k)
    const Matrix V_i = xt::view(V, i);  // (n, d_k)
    xt::view(heads, i) = scaled_dot_product_attention(Q_i, K_i, V_i, mask);  // (n, d_k), ÷√d_k inside
  }
  return matmul(merge_heads(heads), W.W_O);  // (n, d_model)
}
// [attend_heads]

}  // namespace

// [multi_head_attention]
Matrix multi_head_attention(const Matrix& X, const MultiHeadWeights& W, std::size_t h, const Mask& mask) {
  require_fits("multi_head_attention", X, W);
  require(h > 0 && X.shape(1) % h == 0,
          fmt::format("multi_head_attention: X is {} and h = {}; d_model must be a multiple of h", shape_str(X), h));
  return attend_heads(X, W, std::vector<bool>(h, true), mask);
}
// [multi_head_attention]

// [multi_head_attention_ablated]
Matrix multi_head_attention_ablated(const Matrix& X, const MultiHeadWeights& W, const std::vector<bool>& keep_head) {
  require_fits("multi_head_attention_ablated", X, W);
  const std::size_t h = keep_head.size();
  require(h > 0 && X.shape(1) % h == 0,
          fmt::format("multi_head_attention_ablated: X is {} and keep_head has {} entries (one per head); "
                      "d_model must be a multiple of the number of heads",
                      shape_str(X), h));
  return attend_heads(X, W, keep_head, Mask());
}
// [multi_head_attention_ablated]

}  // namespace attn
