// Chapter 11, reference solutions. Book page: book/11_positions.md.
// The formulas are the papers': Vaswani et al. 2017 (sinusoidal), Su et al. 2021 (RoFormer, RoPE),
// Press et al. 2022 (ALiBi). The modifier kernel that runs them inside FlashAttention is
// chapters/11_positions/flex.hpp.
#include "11_positions/positions.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

// [sinusoidal_encoding]
Matrix sinusoidal_encoding(std::size_t n, std::size_t d) {
  checked_allocation("sinusoidal_encoding: the encoding n × d floats", {n, d, sizeof(float)});  // before allocating
  Matrix PE = xt::zeros<float>({n, d});                                                         // (n, d)
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t c = 0; c < d; ++c) {
      // Columns 2i and 2i + 1 share the frequency ω_i = 10000^(−2i/d): a sine and a cosine, one rotating pair.
      const double omega = std::pow(10000.0, -static_cast<double>(c - c % 2) / static_cast<double>(d));
      const double angle = static_cast<double>(p) * omega;
      PE(p, c) = static_cast<float>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  return PE;
}
// [sinusoidal_encoding]

// [apply_rope]
void apply_rope(Matrix& X, std::size_t first_position, float base) {
  const std::size_t n = X.shape(0), d = X.shape(1);
  require(d % 2 == 0,
          fmt::format("apply_rope: X is {}; RoPE rotates pairs of columns, so d must be even", shape_str(X)));
  require(std::isfinite(base) && base > 1.0f,
          fmt::format("apply_rope: base = {} must be a finite number above 1", base));
  require_finite("apply_rope", "X", X.data(), X.size());  // a NaN would rotate into its pair's other column
  for (std::size_t p = 0; p < n; ++p) {
    const double position = static_cast<double>(first_position + p);
    for (std::size_t i = 0; i < d / 2; ++i) {
      // θ_i = base^(−2i/d); the angle is computed in double so that large positions keep their digits.
      const double angle =
          position * std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const float x0 = X(p, 2 * i), x1 = X(p, 2 * i + 1);
      X(p, 2 * i) = c * x0 - s * x1;  // the 2×2 rotation of the pair (x0, x1)
      X(p, 2 * i + 1) = s * x0 + c * x1;
    }
  }
}
// [apply_rope]

// [alibi]
Vector alibi_slopes(std::size_t h) {
  require(h > 0, "alibi_slopes: h = 0; there must be at least one head");
  Vector slopes = xt::zeros<float>({h});  // (h)
  for (std::size_t k = 0; k < h; ++k)
    slopes(k) = static_cast<float>(std::exp2(-8.0 * static_cast<double>(k + 1) / static_cast<double>(h)));
  return slopes;
}

Matrix alibi_bias(std::size_t n_q, std::size_t n_kv, float slope) {
  require(std::isfinite(slope) && slope >= 0.0f,
          fmt::format("alibi_bias: slope = {}; ALiBi's slopes are finite and non-negative (a penalty for distance)",
                      slope));
  require(n_q <= n_kv,
          fmt::format("alibi_bias: {} queries but only {} keys; queries are the last n_q positions", n_q, n_kv));
  checked_allocation("alibi_bias: the bias n_q × n_kv floats", {n_q, n_kv, sizeof(float)});  // before allocating
  const std::size_t offset = n_kv - n_q;        // query i sits at position i + offset
  Matrix bias = xt::zeros<float>({n_q, n_kv});  // (n_q, n_kv)
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_kv; ++j) {
      const std::size_t q = i + offset, distance = q > j ? q - j : j - q;
      bias(i, j) = -slope * static_cast<float>(distance);
    }
  return bias;
}
// [alibi]

// [document_mask]
bool DocumentMask::operator()(std::size_t /*head*/, std::size_t q, std::size_t kv) const {
  return document.at(q) == document.at(kv) && (!causal || kv <= q);
}
// [document_mask]

}  // namespace attn
