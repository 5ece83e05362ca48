/// \file
/// Chapter 12's model backward: the plumbing around the learner's layer_backward() (learning.hpp) — the
/// unembedding, the layers stacked last to first, the head masks and the embedding rows — and the two attribution
/// methods that read gradients at the input (gradient × input, integrated gradients). Header-only because it calls
/// the contract, which each track supplies (chapter code in model.cpp may not). Book page: book/12_learning.md.
#pragma once

#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn::ch12 {

/// The backward pass: given dlogits = ∂L/∂logits (n, vocab), adds ∂L/∂θ into \p grads (same shapes as the
/// model) and returns ∂L/∂X0 (n, d_model), the gradient at the embedded input. \p tokens says which rows
/// of the embedding receive ∂L/∂X0 (none when empty: the input was not a token sequence). Each layer's own
/// backward is the learner's layer_backward().
/// \throws std::invalid_argument, before \p grads is touched, when the trace or \p grads do not have the model's
///         layers, heads and shapes, dlogits is not (n, vocab) or holds a NaN/Inf, tokens is neither empty nor
///         (n), a token is ≥ vocab, or \p keep is not empty and not (layers) × (heads) (require_backward_inputs()).
// [backward]
inline Matrix backward(const Model& model, const Trace& tr, const Matrix& dlogits,
                       const std::vector<std::size_t>& tokens, Model& grads, const HeadMask& keep = HeadMask()) {
  require_backward_inputs(model, tr, dlogits, tokens, grads, keep);          // before grads is touched
  const Matrix d_unembed = matmul_transpose_a(tr.residual.back(), dlogits);  // (d, vocab)
  Matrix dX = matmul(dlogits, model.unembed, true);                          // (n, d): ∂L/∂(final stream)
  // Every layer's gradients first, grads only after: a layer that refuses its dY (a gradient past float's range,
  // overflowed on the way down) leaves grads as it was.
  std::vector<LayerGrads> layer_grads(model.config.layers);
  for (std::size_t l = model.config.layers; l-- > 0;) {
    // The stream after layer l is that layer's output: its gradient goes in, the gradient at its input comes out.
    layer_grads[l] = layer_backward(model, tr, l, dX, keep.empty() ? std::vector<bool>() : keep[l]);
    dX = layer_grads[l].dX;  // (n, d)
  }
  grads.unembed += d_unembed;
  for (std::size_t l = 0; l < model.config.layers; ++l) {
    Layer& G = grads.layers[l];
    const Layer& g = layer_grads[l].dW;
    G.W_Q += g.W_Q;
    G.W_K += g.W_K;
    G.W_V += g.W_V;
    G.W_O += g.W_O;
  }
  for (std::size_t t = 0; t < tokens.size(); ++t) xt::row(grads.embed, tokens[t]) += xt::row(dX, t);
  return dX;
}
// [backward]

namespace detail {

/// ∂logit(row, target)/∂X0 at the embedded input \p X0: (n, d_model).
inline Matrix logit_input_gradient(const Model& model, const Matrix& X0, std::size_t row, std::size_t target,
                                   const HeadMask& keep) {
  const Trace tr = forward_embedded(model, X0, keep);
  Matrix seed = xt::zeros<float>(tr.logits.shape());  // (n, vocab): only the answer's logit
  seed(row, target) = 1.0f;
  Model unused = zeros_like(model);
  return backward(model, tr, seed, {}, unused, keep);
}

inline void require_answer(const Model& model, std::size_t n, std::size_t row, std::size_t target) {
  require(row < n && target < model.config.vocab,
          fmt::format("attribution: row {} of {} positions, target {} of a vocabulary of {}", row, n, target,
                      model.config.vocab));
}

}  // namespace detail

/// Gradient × input (Shrikumar et al. 2016) for the logit of \p target at position \p row: per position j,
/// Σ_d X0(j, d)·∂logit/∂X0(j, d), X0 the embedded \p tokens. Returns (n).
/// \throws std::invalid_argument when row ≥ n or target ≥ vocab (and as forward() does).
// [attribution_methods]
inline Vector gradient_times_input(const Model& model, const std::vector<std::size_t>& tokens, std::size_t row,
                                   std::size_t target, const HeadMask& keep = HeadMask()) {
  const Matrix X0 = embed_tokens(model, tokens);  // (n, d)
  detail::require_answer(model, tokens.size(), row, target);
  return xt::sum(X0 * detail::logit_input_gradient(model, X0, row, target, keep), {1});  // (n)
}

/// Integrated gradients (Sundararajan et al. 2017) from the all-zero input: per position j,
/// Σ_d X0(j, d)·mean over α of ∂logit/∂X0(j, d) at α·X0, α at the midpoints of \p steps equal intervals of
/// (0, 1]. For a model linear in X0 it equals gradient × input. Returns (n).
/// \throws std::invalid_argument when steps is 0 or above 100,000, row ≥ n or target ≥ vocab.
inline Vector integrated_gradients(const Model& model, const std::vector<std::size_t>& tokens, std::size_t row,
                                   std::size_t target, std::size_t steps, const HeadMask& keep = HeadMask()) {
  // Past 10^5 midpoints the rule's error (∝ 1/steps²) is far below float32's rounding of each gradient: more
  // steps only take longer (SIZE_MAX of them would never end).
  constexpr std::size_t kMaxSteps = 100000;
  require(steps > 0 && steps <= kMaxSteps,
          fmt::format("integrated_gradients: steps = {}; the path integral needs 1 to {} points", steps, kMaxSteps));
  const Matrix X0 = embed_tokens(model, tokens);  // (n, d)
  detail::require_answer(model, tokens.size(), row, target);
  Matrix mean_grad = xt::zeros<float>(X0.shape());  // (n, d)
  for (std::size_t k = 0; k < steps; ++k) {
    const float alpha = (static_cast<float>(k) + 0.5f) / static_cast<float>(steps);  // midpoint rule
    mean_grad += detail::logit_input_gradient(model, alpha * X0, row, target, keep) / static_cast<float>(steps);
  }
  return xt::sum(X0 * mean_grad, {1});  // (n)
}
// [attribution_methods]

}  // namespace attn::ch12
