// Chapter 08's presented code: random projections for the Performer, and the quadratic form of linear
// attention (what associativity lets us skip). Book page: book/08_linear.md.
#include "08_linear/features.hpp"

#include <cmath>

#include <fmt/format.h>

namespace attn::ch08 {

Matrix gaussian_features(std::size_t m, std::size_t d, Rng& rng) { return rng.normal(m, d); }  // (m, d)

// [orthogonal_features]
Matrix orthogonal_features(std::size_t m, std::size_t d, Rng& rng) {
  require(d >= 1 || m == 0, fmt::format("orthogonal_features: {} features of width d = 0; d must be at least 1", m));
  Matrix Omega = rng.normal(m, d);  // (m, d), Gaussian rows to be orthogonalised block by block
  for (std::size_t block = 0; block < m; block += d) {
    const std::size_t end = std::min(m, block + d);  // at most d directions can be orthogonal in d dimensions
    for (std::size_t r = block; r < end; ++r) {
      auto w = xt::row(Omega, r);  // (d)
      // Gram–Schmidt: remove the parts along the earlier rows of the block (done twice for stability).
      for (int pass = 0; pass < 2; ++pass)
        for (std::size_t p = block; p < r; ++p) {
          const auto u = xt::row(Omega, p);  // (d), unit length by now
          const float along = xt::sum(w * u)();
          w -= along * u;
        }
      const float norm = std::sqrt(xt::sum(w * w)());
      w /= norm;
    }
    // Unit directions would all have length 1; a Gaussian vector's length is χ-distributed. Drawing it
    // separately keeps each row's distribution N(0, I) (so the estimator stays unbiased).
    for (std::size_t r = block; r < end; ++r) {
      const Matrix g = rng.normal(1, d);  // (1, d)
      const float length = std::sqrt(xt::sum(g * g)());
      xt::row(Omega, r) *= length;
    }
  }
  return Omega;
}
// [orthogonal_features]

namespace {

/// Features are weights: finite and ≥ 0, else a row's sum can be 0 or negative and the weights garbage.
void require_features(const char* where, const char* name, const Matrix& phi) {
  require_finite(where, name, phi.data(), phi.size());
  for (std::size_t e = 0; e < phi.size(); ++e)
    require(phi.data()[e] >= 0.0f, fmt::format("{}: {}[{}] = {}; features must be ≥ 0", where, name, e, phi.data()[e]));
}

}  // namespace

// [quadratic_form]
Matrix linear_attention_weights(const Matrix& phiQ, const Matrix& phiK, const Mask& mask) {
  require(phiQ.shape(1) == phiK.shape(1),
          fmt::format("linear_attention_weights: phiQ is {} and phiK is {}; queries and keys need the same m features",
                      shape_str(phiQ), shape_str(phiK)));
  require_features("linear_attention_weights", "phiQ", phiQ);
  require_features("linear_attention_weights", "phiK", phiK);
  // Every φ(q)·φ(k) a float: m · max φ(q) · max φ(k) within the course's bound (else inf, and inf / inf in a row).
  require_bounded_products("linear_attention_weights", "phiQ", phiQ.data(), phiQ.size(), "phiK", phiK.data(),
                           phiK.size(), phiQ.shape(1));
  Matrix W = matmul(phiQ, phiK, /*transpose_b=*/true);              // (n_q, n_kv): W(i, j) = φ(q_i)·φ(k_j)
  require_mask_fits("linear_attention_weights", mask, phiQ, phiK);  // (0, 3) is not "no mask"
  const bool masked = mask.size() > 0;
  for (std::size_t i = 0; i < W.shape(0); ++i) {
    double sum = 0.0;
    for (std::size_t j = 0; j < W.shape(1); ++j) {
      if (masked && !mask(i, j)) W(i, j) = 0.0f;
      sum += W(i, j);
    }
    if (sum > 0.0)
      for (std::size_t j = 0; j < W.shape(1); ++j) W(i, j) = static_cast<float>(W(i, j) / sum);
  }
  return W;
}

Matrix quadratic_linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V, const Mask& mask) {
  require(phiK.shape(0) == V.shape(0),
          fmt::format("quadratic_linear_attention: phiK is {} and V is {}; one value per key is needed",
                      shape_str(phiK), shape_str(V)));
  require_finite("quadratic_linear_attention", "V", V.data(), V.size());
  return matmul(linear_attention_weights(phiQ, phiK, mask), V);  // (n_q, n_kv)·(n_kv, d_v) = (n_q, d_v)
}
// [quadratic_form]

// [flop_counts]
/// Softmax attention: Q Kᵀ and A·V, 2·n²·d each, plus n² exponentials (counted as one FLOP each here).
double softmax_flops(double n, double d) {
  require(std::isfinite(n) && std::isfinite(d) && n >= 0 && d >= 0,
          fmt::format("softmax_flops: n = {} and d = {}; counts are finite and ≥ 0", n, d));
  return 4.0 * n * n * d + n * n;
}
/// Linear attention with m features: φ(K)ᵀV and φ(Q)·(φ(K)ᵀV), 2·n·m·d_v each, the normaliser 4·n·m, and
/// elu+1 on 2·n·m entries. The causal recurrence does the same work, one token at a time.
double linear_flops(double n, double m, double d_v) {
  require(std::isfinite(n) && std::isfinite(m) && std::isfinite(d_v) && n >= 0 && m >= 0 && d_v >= 0,
          fmt::format("linear_flops: n = {}, m = {} and d_v = {}; counts are finite and ≥ 0", n, m, d_v));
  return 4.0 * n * m * d_v + 4.0 * n * m + 2.0 * n * m;
}
// [flop_counts]

}  // namespace attn::ch08
