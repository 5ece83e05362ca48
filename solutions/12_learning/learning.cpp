// Chapter 12, reference solutions. Book page: book/12_learning.md.
// RoPE's backward and the attention layer's as the chain rule reads (attention itself is chapter 10's);
// cross-entropy as PyTorch's F.cross_entropy(ignore_index) computes it; AdamW as Loshchilov & Hutter 2019
// (and torch.optim.AdamW); the training step as PyTorch's forward, loss.backward(), opt.step(); the induction
// score as Olsson et al. 2022; rollout as Abnar & Zuidema 2020.
#include "12_learning/learning.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "10_backward/backward.hpp"
#include "12_learning/model_backward.hpp"
#include "attn/checks.hpp"

namespace attn {

// [rope_backward]
void rope_backward(Matrix& G, std::size_t first_position, float base) {
  const std::size_t n = G.shape(0), d = G.shape(1);
  require(d % 2 == 0,
          fmt::format("rope_backward: G is {}; RoPE rotates pairs of columns, so d must be even", shape_str(G)));
  require(std::isfinite(base) && base > 1.0f,
          fmt::format("rope_backward: base = {} must be a finite number above 1", base));
  require_finite("rope_backward", "G", G.data(), G.size());
  // The last row's position first_position + n − 1 must not wrap past 2^64 back to 0 (apply_rope()'s check).
  if (n > 0) checked_sum("rope_backward: the last position, first_position + n - 1", {first_position, n - 1});
  for (std::size_t p = 0; p < n; ++p) {
    const double position = static_cast<double>(first_position + p);
    for (std::size_t i = 0; i < d / 2; ++i) {
      // The angle apply_rope turned by, computed as it does (in double); the transpose of a rotation turns back.
      const double angle =
          position * std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const float g0 = G(p, 2 * i), g1 = G(p, 2 * i + 1);
      G(p, 2 * i) = c * g0 + s * g1;  // Rᵀ = [[c, s], [−s, c]]: the forward's [[c, −s], [s, c]] transposed
      G(p, 2 * i + 1) = -s * g0 + c * g1;
    }
  }
}
// [rope_backward]

// [layer_backward]
LayerGrads layer_backward(const ch12::Model& model, const ch12::Trace& tr, std::size_t l, const Matrix& dY,
                          const std::vector<bool>& keep) {
  const ch12::Config& c = model.config;
  ch12::require_trace("layer_backward", model, tr);
  require(l < c.layers,
          fmt::format("layer_backward: layer {} of a model with {} layers (0 is the first)", l, c.layers));
  const Matrix& X = tr.residual[l];  // (n, d) the layer's input
  const std::size_t n = X.shape(0), d_k = c.d_model / c.heads;
  require(dY.shape() == X.shape(),
          fmt::format("layer_backward: dY is {}; the layer's output is {}", shape_str(dY), shape_str(X)));
  require_finite("layer_backward", "dY", dY.data(), dY.size());
  require(
      keep.empty() || keep.size() == c.heads,
      fmt::format("layer_backward: keep has {} flags for {} heads; give one per head, or none", keep.size(), c.heads));
  const ch12::Layer& W = model.layers[l];
  LayerGrads g;
  // Y = X + heads·W_O: the gradient of a product is the other factor, transposed, on the same side.
  g.dW.W_O = matmul_transpose_a(tr.heads_out[l], dY);              // (d, d) headsᵀ·dY
  const Matrix dheads = matmul(dY, W.W_O, true);                   // (n, d) dY·W_Oᵀ
  Matrix dQ = xt::zeros<float>({n, c.d_model}), dK = dQ, dV = dQ;  // (n, d) each, the heads' columns side by side
  const Mask causal = causal_mask(n, n);
  for (std::size_t h = 0; h < c.heads; ++h) {
    if (!keep.empty() && !keep[h]) continue;        // an ablated head added nothing, so it passes nothing back
    const std::size_t lo = h * d_k, hi = lo + d_k;  // the head's columns
    const Matrix dO = xt::view(dheads, xt::all(), xt::range(lo, hi));                       // (n, d_k)
    AttentionGrads a = attention_backward(tr.q[l][h], tr.k[l][h], tr.v[l][h], dO, causal);  // chapter 10
    // The trace's q and k were rotated after the projection: their gradients turn back before reaching it.
    rope_backward(a.dQ, 0, c.rope_base);
    rope_backward(a.dK, 0, c.rope_base);
    xt::view(dQ, xt::all(), xt::range(lo, hi)) = a.dQ;
    xt::view(dK, xt::all(), xt::range(lo, hi)) = a.dK;
    xt::view(dV, xt::all(), xt::range(lo, hi)) = a.dV;
  }
  g.dW.W_Q = matmul_transpose_a(X, dQ);  // (d, d) Xᵀ·dQ
  g.dW.W_K = matmul_transpose_a(X, dK);
  g.dW.W_V = matmul_transpose_a(X, dV);
  // X reaches Y twice: straight through the residual stream, and through the three projections.
  g.dX = dY + (matmul(dQ, W.W_Q, true) + matmul(dK, W.W_K, true) + matmul(dV, W.W_V, true));  // (n, d)
  return g;
}
// [layer_backward]

// [cross_entropy]
LossAndGrad cross_entropy(const Matrix& logits, const std::vector<std::size_t>& targets) {
  const std::size_t rows = logits.shape(0), vocab = logits.shape(1);
  require(vocab > 0, fmt::format("cross_entropy: logits are {}; the vocabulary is empty", shape_str(logits)));
  require(targets.size() == rows,
          fmt::format("cross_entropy: logits are {} but there are {} targets", shape_str(logits), targets.size()));
  require_finite("cross_entropy", "logits", logits.data(), logits.size());
  std::size_t counted = 0;
  for (std::size_t t : targets) counted += t < vocab ? 1 : 0;
  LossAndGrad out;
  out.dlogits = xt::zeros<float>({rows, vocab});  // (rows, vocab)
  if (counted == 0) return out;
  const double inv_c = 1.0 / static_cast<double>(counted);
  for (std::size_t r = 0; r < rows; ++r) {
    if (targets[r] >= vocab) continue;
    // log-sum-exp with the row's maximum subtracted: exp never overflows, and the sum is kept in double.
    double top = logits(r, 0);
    for (std::size_t j = 1; j < vocab; ++j) top = std::max(top, static_cast<double>(logits(r, j)));
    double sum = 0.0;
    for (std::size_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(logits(r, j)) - top);
    const double log_z = top + std::log(sum);
    out.loss += (log_z - static_cast<double>(logits(r, targets[r]))) * inv_c;
    for (std::size_t j = 0; j < vocab; ++j) {
      const double p = std::exp(static_cast<double>(logits(r, j)) - log_z);
      out.dlogits(r, j) = static_cast<float>((p - (j == targets[r] ? 1.0 : 0.0)) * inv_c);
    }
  }
  return out;
}
// [cross_entropy]

// [adamw_step]
void adamw_step(Matrix& param, const Matrix& grad, Matrix& m, Matrix& v, std::size_t t, const AdamW& s) {
  require(grad.shape() == param.shape() && m.shape() == param.shape() && v.shape() == param.shape(),
          fmt::format("adamw_step: param {}, grad {}, m {}, v {} must all have one shape", shape_str(param),
                      shape_str(grad), shape_str(m), shape_str(v)));
  require(t >= 1, "adamw_step: t = 0; steps count from 1 (the bias corrections divide by 1 − βᵗ)");
  // Settings out of range give NaN weights without a word: β = 1 makes 1 − βᵗ zero, β > 1 a negative v, ε = 0
  // divides 0 by 0 for a zero gradient.
  require(std::isfinite(s.lr) && s.lr >= 0.0f, fmt::format("adamw_step: lr = {}; it must be finite and ≥ 0", s.lr));
  require(s.beta1 >= 0.0 && s.beta1 < 1.0 && s.beta2 >= 0.0 && s.beta2 < 1.0,
          fmt::format("adamw_step: beta1 = {}, beta2 = {}; both must be in [0, 1)", s.beta1, s.beta2));
  require(std::isfinite(s.eps) && s.eps > 0.0f, fmt::format("adamw_step: eps = {}; it must be finite and > 0", s.eps));
  require(std::isfinite(s.weight_decay) && s.weight_decay >= 0.0f,
          fmt::format("adamw_step: weight_decay = {}; it must be finite and ≥ 0", s.weight_decay));
  require_finite("adamw_step", "grad", grad.data(), grad.size());
  require_finite("adamw_step", "param", param.data(), param.size());
  require_finite("adamw_step", "m", m.data(), m.size());
  require_finite("adamw_step", "v", v.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i)  // a mean of squares: a negative one makes √v̂ NaN
    require(
        v.data()[i] >= 0.0f,
        fmt::format("adamw_step: v[{}] = {}; the second moment is a mean of squares, never negative", i, v.data()[i]));
  const double c1 = 1.0 - std::pow(s.beta1, static_cast<double>(t));
  const double c2 = 1.0 - std::pow(s.beta2, static_cast<double>(t));
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = grad.data()[i];
    float& mi = m.data()[i];
    float& vi = v.data()[i];
    // The moments are stored in float but updated in double, with β and 1 − β exactly as given: each rounds once.
    mi = static_cast<float>(s.beta1 * static_cast<double>(mi) + (1.0 - s.beta1) * g);
    vi = static_cast<float>(s.beta2 * static_cast<double>(vi) + (1.0 - s.beta2) * g * g);
    const double m_hat = static_cast<double>(mi) / c1, v_hat = static_cast<double>(vi) / c2;
    float& p = param.data()[i];
    // Decoupled weight decay: it shrinks θ itself, untouched by Adam's per-coordinate scaling.
    p -= static_cast<float>(static_cast<double>(s.lr) * (m_hat / (std::sqrt(v_hat) + static_cast<double>(s.eps)) +
                                                         static_cast<double>(s.weight_decay) * static_cast<double>(p)));
  }
}
// [adamw_step]

// [train_step]
double train_step(ch12::Model& model, ch12::Model& m, ch12::Model& v, std::size_t t,
                  const std::vector<ch12::Sequence>& batch, const AdamW& settings) {
  require(!batch.empty(), "train_step: the batch is empty; a step needs at least one sequence");
  require(t >= 1, "train_step: t = 0; steps count from 1 (adamw_step's bias corrections divide by 1 − βᵗ)");
  require(ch12::same_shapes(model, m) && ch12::same_shapes(model, v),
          "train_step: m and v must have the model's layers and shapes (make them with ch12::zeros_like(model))");
  std::vector<std::size_t> first_row{0};  // (batch + 1) where each sequence's rows start in the stacked logits
  for (std::size_t b = 0; b < batch.size(); ++b) {
    require(batch[b].targets.size() == batch[b].tokens.size(),
            fmt::format("train_step: sequence {} has {} tokens and {} targets; give one target per token", b,
                        batch[b].tokens.size(), batch[b].targets.size()));
    first_row.push_back(checked_sum("train_step: the batch's tokens", {first_row.back(), batch[b].tokens.size()}));
  }
  checked_allocation("train_step: the batch's logits (Σ n)·vocab floats",
                     {first_row.back(), model.config.vocab, sizeof(float)});
  std::vector<ch12::Trace> traces;
  Matrix logits = Matrix::from_shape({first_row.back(), model.config.vocab});  // (Σ n, vocab): all rows, one loss
  std::vector<std::size_t> targets;
  for (std::size_t b = 0; b < batch.size(); ++b) {
    traces.push_back(ch12::forward(model, batch[b].tokens));
    xt::view(logits, xt::range(first_row[b], first_row[b + 1]), xt::all()) = traces.back().logits;
    targets.insert(targets.end(), batch[b].targets.begin(), batch[b].targets.end());
  }
  const LossAndGrad lg = cross_entropy(logits, targets);
  ch12::Model grads = ch12::zeros_like(model);  // this step's gradients only: every sequence adds its share
  for (std::size_t b = 0; b < batch.size(); ++b) {
    const Matrix dlogits = xt::view(lg.dlogits, xt::range(first_row[b], first_row[b + 1]), xt::all());  // (n, vocab)
    ch12::backward(model, traces[b], dlogits, batch[b].tokens, grads);
  }
  const std::vector<Matrix*> P = ch12::parameters(model), G = ch12::parameters(grads), M = ch12::parameters(m),
                             V = ch12::parameters(v);
  for (std::size_t i = 0; i < P.size(); ++i) adamw_step(*P[i], *G[i], *M[i], *V[i], t, settings);
  return lg.loss;
}
// [train_step]

// [induction_score]
double induction_score(const Matrix& A, const std::vector<std::size_t>& tokens) {
  const std::size_t n = tokens.size();
  require(A.shape(0) == n && A.shape(1) == n,
          fmt::format("induction_score: A is {} for {} tokens; it must be ({}, {})", shape_str(A), n, n, n));
  require_finite("induction_score", "A", A.data(), A.size());
  double sum = 0.0;
  std::size_t queries = 0;
  for (std::size_t i = 1; i < n; ++i)
    for (std::size_t j = i; j-- > 0;)
      if (tokens[j] == tokens[i]) {  // the latest earlier occurrence: look one step past it
        sum += static_cast<double>(A(i, j + 1));
        ++queries;
        break;
      }
  return queries == 0 ? 0.0 : sum / static_cast<double>(queries);
}
// [induction_score]

// [attention_rollout]
Matrix attention_rollout(const std::vector<Matrix>& layers) {
  require(!layers.empty(), "attention_rollout: no layers");
  const std::size_t n = layers.front().shape(0);
  Matrix rollout = xt::eye<float>(n);  // (n, n): before any layer, each position holds only itself
  for (std::size_t l = 0; l < layers.size(); ++l) {
    require(
        layers[l].shape(0) == n && layers[l].shape(1) == n,
        fmt::format("attention_rollout: layer {} is {}; every layer must be ({}, {})", l, shape_str(layers[l]), n, n));
    require_finite("attention_rollout", "a layer's attention", layers[l].data(), layers[l].size());
    const Matrix mixed = 0.5f * layers[l] + 0.5f * xt::eye<float>(n);  // (n, n): the residual keeps half
    rollout = matmul(mixed, rollout);                                  // later layers multiply on the left
  }
  return rollout;
}
// [attention_rollout]

}  // namespace attn
