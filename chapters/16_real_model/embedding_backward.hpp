/// \file
/// Chapter 16's backward pass (chapter code): the gradient of one number of the sentence embedding with
/// respect to the embedded input X0, through all six post-LayerNorm BERT layers, and the two explanations
/// that read it — gradient × input and integrated gradients, with chapter 12's definitions (its
/// model_backward.hpp) on this model. Each attention head's backward is chapter 10's attention_backward();
/// what is new here is the rest of a BERT layer: Linear with bias, erf-GELU, LayerNorm and the residuals.
#pragma once

#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "16_real_model/layers.hpp"
#include "16_real_model/real_model.hpp"
#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn::ch16 {

/// LayerNorm's backward, row by row: for Y = LayerNorm(Z)·γ + β (layer_norm()), with x̂ = (z − mean)·r and
/// r = 1/√(var + ε) recomputed from Z, and g = dY ∘ γ,
///     dZ = r·(g − mean(g) − x̂·mean(g ∘ x̂))
/// (the two mean terms: every z moves the row's mean and variance). β adds nothing to dZ.
/// \param Z (n, d) LayerNorm's input.
/// \param gamma (d) its scale.
/// \param eps its ε > 0.
/// \param dY (n, d) ∂L/∂Y.
/// \return dZ (n, d) ∂L/∂Z.
/// \throws std::invalid_argument naming the shapes when Z, γ and dY do not fit, or when ε ≤ 0.
Matrix layer_norm_backward(const Matrix& Z, const Vector& gamma, float eps, const Matrix& dY);

/// erf-GELU's backward, elementwise: gelu(u) = u·Φ(u), so gelu'(u) = Φ(u) + u·φ(u), Φ the standard normal
/// distribution function ½(1 + erf(u/√2)) and φ its density e^(−u²/2)/√(2π).
/// \param U (n, d_ff) GELU's input.
/// \param dY (n, d_ff) ∂L/∂gelu(U).
/// \return dU (n, d_ff) = dY ∘ gelu'(U); at u = ±∞ the limits gelu'(+∞) = 1 and gelu'(−∞) = 0.
/// \throws std::invalid_argument naming both shapes when they differ.
Matrix gelu_backward(const Matrix& U, const Matrix& dY);

/// What one encoder layer's forward keeps for its backward (the forward of encoder_layer(), all heads kept).
struct LayerTrace {
  Matrix X;        ///< (n, d) the layer's input
  Matrix Q, K, V;  ///< (n, d) the projections; head i owns columns i·d_k … (i + 1)·d_k − 1
  Matrix Z1;       ///< (n, d) X + attention's output after W_O: the first LayerNorm's input
  Matrix H;        ///< (n, d) the first LayerNorm's output
  Matrix U;        ///< (n, d_ff) H·W_1ᵀ + b_1: GELU's input
  Matrix Z2;       ///< (n, d) H + the feed-forward's output: the second LayerNorm's input
  Matrix out;      ///< (n, d) the layer's output
};

/// One post-LayerNorm BERT layer's forward, as encoder_layer() computes it (each head attends with chapter
/// 02's scaled_dot_product_attention(), exact like chapter 05's flash kernel), keeping what the backward needs.
/// \param X (n, d) the layer's input, n ≥ 1.
/// \param W the layer's weights.
/// \return the trace; its out is (n, d).
/// \throws std::invalid_argument naming the shapes when X is empty or X and the weights do not fit
///         (check_layer_weights(): no weight broadcast), or when d is not divisible by W.heads.
LayerTrace encoder_layer_traced(const Matrix& X, const EncoderLayerWeights& W);

/// One layer's backward to its input, given dOut = ∂L/∂out:
///   dZ2 = LayerNorm₂'s backward, dU = gelu_backward(U, dZ2·W_2), dH = dZ2 (residual) + dU·W_1,
///   dZ1 = LayerNorm₁'s backward, dMerged = dZ1·W_O, per head chapter 10's attention_backward() on the
///   head's columns of Q, K, V and dMerged, and dX = dZ1 (residual) + dQ·W_Q + dK·W_K + dV·W_V.
/// The biases only shift values, so they pass the gradient through (their own gradients are not needed here).
/// \param trace encoder_layer_traced() of this layer, n tokens.
/// \param W the layer's weights.
/// \param dOut (n, d) ∂L/∂out.
/// \return dX (n, d) ∂L/∂X.
/// \throws std::invalid_argument naming the shapes when dOut is not the trace's out shape, or when the trace
///         does not fit the weights (check_layer_weights() included).
Matrix encoder_layer_backward(const LayerTrace& trace, const EncoderLayerWeights& W, const Matrix& dOut);

/// The number whose gradient the explanations read, and that gradient.
struct ProjectionGradient {
  double value = 0.0;  ///< f(X0)
  Matrix dX0;          ///< (n, d) ∂f/∂X0
};

/// f(X0) = mean over the rows of encode(X0) · u: the mean-pooled output (before normalisation) projected on a
/// fixed direction u, with its gradient at X0 through every layer (encoder_layer_traced(), then
/// encoder_layer_backward() from the last layer to the first). With u the full sentence's embedding, f is the
/// length of the embedding along its own direction: "how much of the embedding there is".
/// Why not the cosine of the embedding with the full sentence's: at the full sentence that cosine is 1, its
/// maximum, so its gradient vanishes there and gradient × input would rank tokens by rounding noise. The pool
/// before normalisation has the same direction and a gradient that says which tokens build it.
/// \param layers the encoder's layers, applied in order (none: f = mean(X0)·u).
/// \param X0 (n, d) the embedded input (embed()), n ≥ 1.
/// \param u (d) the direction.
/// \return f(X0) and ∂f/∂X0 (n, d).
/// \throws std::invalid_argument naming the shapes when X0 has no rows or u is not (d), naming the first NaN/Inf
///         of X0 or u, and as encoder_layer_traced() does.
ProjectionGradient embedding_projection_gradient(const std::vector<EncoderLayerWeights>& layers, const Matrix& X0,
                                                 const Vector& u);

/// Gradient × input (chapter 12's definition) of f = embedding_projection_gradient(): per token j,
/// Σ_c X0(j, c)·∂f/∂X0(j, c).
/// \param layers the encoder's layers. \param X0 (n, d) the embedded input. \param u (d) the direction.
/// \return (n). \throws std::invalid_argument as embedding_projection_gradient() does.
Vector gradient_times_input(const std::vector<EncoderLayerWeights>& layers, const Matrix& X0, const Vector& u);

/// Integrated gradients (chapter 12's definition) of f along the straight path from \p baseline to X0: per token j,
/// Σ_c (X0 − B)(j, c)·(mean over α of ∂f/∂X0(j, c) at B + α·(X0 − B)), α at the midpoints of \p steps equal
/// intervals of (0, 1]. Chapter 12's baseline is the all-zero input; on the real model the chapter takes the
/// sentence with every word turned into [MASK], a point among real embeddings from which the path stays smooth.
/// The relevances sum to f(X0) − f(B) up to the midpoint rule's error, which falls as 1/steps².
/// \param layers the encoder's layers. \param X0 (n, d) the embedded input. \param baseline (n, d) B.
/// \param u (d) the direction. \param steps the number of points on the path, 1 to 10,000.
/// \return (n). \throws std::invalid_argument naming steps when it is 0 or above 10,000, naming both shapes when
///         the baseline's is not X0's, and as embedding_projection_gradient() does.
Vector integrated_gradients(const std::vector<EncoderLayerWeights>& layers, const Matrix& X0, const Matrix& baseline,
                            const Vector& u, std::size_t steps);

// The forward of a layer and what reads it are inline: they call the learner's layer_norm() (real_model.hpp), so each
// track's program runs its own (chapter code compiled once, in backward.cpp, must not call the contract).

namespace detail {

/// Head i's columns of a (n, d) matrix, as a (n, d_k) copy.
inline Matrix head_columns(const Matrix& M, std::size_t i, std::size_t d_k) {
  return xt::view(M, xt::all(), xt::range(i * d_k, (i + 1) * d_k));
}

inline std::size_t head_size(std::size_t d, const EncoderLayerWeights& W, const char* where) {
  require(W.heads > 0 && d % W.heads == 0, fmt::format("{}: d = {} is not divisible by h = {}", where, d, W.heads));
  return d / W.heads;
}

}  // namespace detail

inline LayerTrace encoder_layer_traced(const Matrix& X, const EncoderLayerWeights& W) {
  require(X.shape(0) > 0 && X.shape(1) == W.W_Q.shape(1),
          fmt::format("encoder_layer_traced: X {} does not fit W_Q {} (out, in), or has no rows", shape_str(X),
                      shape_str(W.W_Q)));
  check_layer_weights("encoder_layer_traced", W, X.shape(1));  // no weight broadcast or read past its end
  const std::size_t n = X.shape(0), d = X.shape(1), d_k = detail::head_size(d, W, "encoder_layer_traced");
  LayerTrace t;
  t.X = X;
  t.Q = linear(X, W.W_Q, W.b_Q);             // (n, d)
  t.K = linear(X, W.W_K, W.b_K);             // (n, d)
  t.V = linear(X, W.W_V, W.b_V);             // (n, d)
  Matrix merged = xt::empty<float>({n, d});  // (n, d): head i's output in its d_k columns
  for (std::size_t i = 0; i < W.heads; ++i)
    xt::view(merged, xt::all(), xt::range(i * d_k, (i + 1) * d_k)) =
        scaled_dot_product_attention(detail::head_columns(t.Q, i, d_k), detail::head_columns(t.K, i, d_k),
                                     detail::head_columns(t.V, i, d_k));  // (n, d_k)
  t.Z1 = X + linear(merged, W.W_O, W.b_O);
  t.H = layer_norm(t.Z1, W.ln1_gamma, W.ln1_beta, W.ln_eps);
  t.U = linear(t.H, W.W_1, W.b_1);  // (n, d_ff)
  t.Z2 = t.H + linear(gelu(t.U), W.W_2, W.b_2);
  t.out = layer_norm(t.Z2, W.ln2_gamma, W.ln2_beta, W.ln_eps);
  return t;
}

inline ProjectionGradient embedding_projection_gradient(const std::vector<EncoderLayerWeights>& layers,
                                                        const Matrix& X0, const Vector& u) {
  require(X0.shape(0) > 0 && u.shape(0) == X0.shape(1),
          fmt::format("embedding_projection_gradient: X0 {} needs a row and u {} its d", shape_str(X0), shape_str(u)));
  require_finite("embedding_projection_gradient", "X0", X0.data(), X0.size());
  require_finite("embedding_projection_gradient", "u", u.data(), u.size());
  const std::size_t n = X0.shape(0), d = X0.shape(1);
  std::vector<LayerTrace> traces;
  traces.reserve(layers.size());  // X points into the last trace: no reallocation may move it
  const Matrix* X = &X0;
  for (const EncoderLayerWeights& W : layers) {
    traces.push_back(encoder_layer_traced(*X, W));
    X = &traces.back().out;
  }
  ProjectionGradient r;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < d; ++c) r.value += static_cast<double>((*X)(i, c)) * u(c);
  r.value /= static_cast<double>(n);
  // f = (1/n) Σ_i out_i · u: every row of the output receives u / n.
  r.dX0 = xt::empty<float>({n, d});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < d; ++c) r.dX0(i, c) = u(c) / static_cast<float>(n);
  for (std::size_t l = layers.size(); l-- > 0;) r.dX0 = encoder_layer_backward(traces[l], layers[l], r.dX0);
  return r;
}

// [attribution]
inline Vector gradient_times_input(const std::vector<EncoderLayerWeights>& layers, const Matrix& X0, const Vector& u) {
  return xt::sum(X0 * embedding_projection_gradient(layers, X0, u).dX0, {1});  // (n)
}

inline Vector integrated_gradients(const std::vector<EncoderLayerWeights>& layers, const Matrix& X0,
                                   const Matrix& baseline, const Vector& u, std::size_t steps) {
  // Past 10^4 midpoints the rule's error (∝ 1/steps²) is far below float32's rounding of each gradient, and each
  // step is a forward and a backward of the whole model: more steps only take longer.
  constexpr std::size_t kMaxSteps = 10000;
  require(steps > 0 && steps <= kMaxSteps,
          fmt::format("integrated_gradients: steps = {}; the path integral needs 1 to {} points", steps, kMaxSteps));
  require(baseline.shape() == X0.shape(), fmt::format("integrated_gradients: the baseline {} is not X0's shape {}",
                                                      shape_str(baseline), shape_str(X0)));
  const Matrix step = X0 - baseline;                // (n, d) the path's direction
  Matrix mean_grad = xt::zeros<float>(X0.shape());  // (n, d)
  for (std::size_t k = 0; k < steps; ++k) {
    const float alpha = (static_cast<float>(k) + 0.5f) / static_cast<float>(steps);  // midpoint rule
    mean_grad += embedding_projection_gradient(layers, baseline + alpha * step, u).dX0 / static_cast<float>(steps);
  }
  return xt::sum(step * mean_grad, {1});  // (n)
}
// [attribution]

}  // namespace attn::ch16
