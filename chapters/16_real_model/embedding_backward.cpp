// Chapter 16's backward pass: a BERT layer's pieces (Linear, erf-GELU, LayerNorm, residuals) backwards, chapter
// 10's attention backward per head, and the explanations that read the gradient at the input.
#include "16_real_model/embedding_backward.hpp"

#include <cmath>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "10_backward/backward.hpp"
#include "16_real_model/layers.hpp"

namespace attn::ch16 {

Matrix layer_norm_backward(const Matrix& Z, const Vector& gamma, float eps, const Matrix& dY) {
  require(gamma.shape(0) == Z.shape(1) && dY.shape() == Z.shape(),
          fmt::format("layer_norm_backward: Z {} with γ {} and dY {} do not fit", shape_str(Z), shape_str(gamma),
                      shape_str(dY)));
  require(eps > 0.0f && std::isfinite(eps), fmt::format("layer_norm_backward: ε = {} must be positive", eps));
  const std::size_t n = Z.shape(0), d = Z.shape(1);
  Matrix dZ = xt::empty<float>({n, d});  // (n, d)
  std::vector<double> x_hat(d), g(d);
  for (std::size_t i = 0; i < n; ++i) {
    // The forward's statistics, in double as layer_norm() computes them.
    double mean = 0.0, var = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean += Z(i, j);
    mean /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) var += (Z(i, j) - mean) * (Z(i, j) - mean);
    var /= static_cast<double>(d);
    const double r = 1.0 / std::sqrt(var + static_cast<double>(eps));
    double mean_g = 0.0, mean_gx = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      x_hat[j] = (Z(i, j) - mean) * r;
      g[j] = static_cast<double>(dY(i, j)) * gamma(j);  // ∂L/∂x̂
      mean_g += g[j];
      mean_gx += g[j] * x_hat[j];
    }
    mean_g /= static_cast<double>(d);
    mean_gx /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) dZ(i, j) = static_cast<float>(r * (g[j] - mean_g - x_hat[j] * mean_gx));
  }
  return dZ;
}

Matrix gelu_backward(const Matrix& U, const Matrix& dY) {
  require(dY.shape() == U.shape(),
          fmt::format("gelu_backward: U {} and dY {} differ in shape", shape_str(U), shape_str(dY)));
  Matrix dU = dY;  // (n, d_ff)
  constexpr double inv_sqrt2 = 0.70710678118654752, inv_sqrt_2pi = 0.39894228040143268;
  for (std::size_t k = 0; k < dU.size(); ++k) {
    const double u = U.data()[k];
    const double Phi = 0.5 * (1.0 + std::erf(u * inv_sqrt2)), phi = inv_sqrt_2pi * std::exp(-0.5 * u * u);
    // u·φ(u) → 0 as |u| → ∞ (φ falls faster than u grows); at u = ±∞ it would be ∞ · 0 = NaN, so it is 0 there.
    const double u_phi = phi == 0.0 ? 0.0 : u * phi;
    dU.data()[k] = static_cast<float>(dU.data()[k] * (Phi + u_phi));
  }
  return dU;
}

// [layer_backward]
Matrix encoder_layer_backward(const LayerTrace& t, const EncoderLayerWeights& W, const Matrix& dOut) {
  require(dOut.shape() == t.out.shape(), fmt::format("encoder_layer_backward: dOut {} is not the layer's output {}",
                                                     shape_str(dOut), shape_str(t.out)));
  check_layer_weights("encoder_layer_backward", W, t.X.shape(1));
  const std::size_t n = t.X.shape(0), d = t.X.shape(1), d_k = detail::head_size(d, W, "encoder_layer_backward");
  require(t.Q.shape() == t.X.shape() && t.K.shape() == t.X.shape() && t.V.shape() == t.X.shape() &&
              t.Z1.shape() == t.X.shape() && t.Z2.shape() == t.X.shape() && t.out.shape() == t.X.shape() &&
              t.U.shape(0) == n && t.U.shape(1) == W.W_1.shape(0) && W.W_Q.shape(1) == d,
          fmt::format("encoder_layer_backward: a trace of X {}, U {} does not fit W_Q {} and W_1 {}", shape_str(t.X),
                      shape_str(t.U), shape_str(W.W_Q), shape_str(W.W_1)));
  // The feed-forward block: out = LN₂(H + GELU(H·W_1ᵀ + b_1)·W_2ᵀ + b_2). A Linear y = x·Wᵀ + b sends dy back
  // as dx = dy·W; the residual sends dZ2 to H unchanged.
  const Matrix dZ2 = layer_norm_backward(t.Z2, W.ln2_gamma, W.ln_eps, dOut);              // (n, d)
  const Matrix dU = gelu_backward(t.U, matmul(dZ2, W.W_2, false, 1.0f, "dG = dZ2·W_2"));  // (n, d_ff)
  const Matrix dH = dZ2 + matmul(dU, W.W_1, false, 1.0f, "dH = dU·W_1");                  // (n, d)
  // The attention block: H = LN₁(X + merged·W_Oᵀ + b_O), each head chapter 10's backward on its columns.
  const Matrix dZ1 = layer_norm_backward(t.Z1, W.ln1_gamma, W.ln_eps, dH);      // (n, d)
  const Matrix dMerged = matmul(dZ1, W.W_O, false, 1.0f, "dMerged = dZ1·W_O");  // (n, d)
  Matrix dQ = xt::empty<float>({n, d}), dK = xt::empty<float>({n, d}), dV = xt::empty<float>({n, d});
  for (std::size_t i = 0; i < W.heads; ++i) {
    const AttentionGrads g =
        attention_backward(detail::head_columns(t.Q, i, d_k), detail::head_columns(t.K, i, d_k),
                           detail::head_columns(t.V, i, d_k), detail::head_columns(dMerged, i, d_k));
    auto cols = xt::range(i * d_k, (i + 1) * d_k);
    xt::view(dQ, xt::all(), cols) = g.dQ;  // (n, d_k) each
    xt::view(dK, xt::all(), cols) = g.dK;
    xt::view(dV, xt::all(), cols) = g.dV;
  }
  return dZ1 + matmul(dQ, W.W_Q, false, 1.0f, "dX = dQ·W_Q") + matmul(dK, W.W_K, false, 1.0f, "dX = dK·W_K") +
         matmul(dV, W.W_V, false, 1.0f, "dX = dV·W_V");  // (n, d): the residual and the three projections
}
// [layer_backward]

}  // namespace attn::ch16
