// Chapter 12, reference solutions. Book page: book/12_learning.md.
// Cross-entropy as PyTorch's F.cross_entropy(ignore_index) computes it; AdamW as Loshchilov & Hutter 2019
// (and torch.optim.AdamW); the induction score as Olsson et al. 2022; rollout as Abnar & Zuidema 2020.
#include "12_learning/learning.hpp"

#include <cmath>

#include <fmt/format.h>

namespace attn {

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
