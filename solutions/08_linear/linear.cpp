// Chapter 08, reference solutions. Book page: book/08_linear.md.
// The products go through BLAS (attn::matmul); the recurrence is a plain loop over tokens whose body
// touches only the (m, d_v) state, never the past tokens.
#include "08_linear/linear.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace attn {

namespace {

/// The largest entry of \p n values (0 for none): the scale that features are divided by.
float largest(const float* values, std::size_t n) { return n ? *std::max_element(values, values + n) : 0.0f; }

void require_decay(const char* where, float decay) {
  require(decay > 0.0f && decay <= 1.0f, fmt::format("{}: the decay is {}; it must be in (0, 1]", where, decay));
}

// [remember_and_read]
/// One token of the recurrence on raw rows: S (m, d_v), z (m), phi_q (m), phi_k (m), v (d_v), o (d_v).
/// φ(k) enters scaled by \p k_scale (a constant for the whole sequence, which cancels in the ratio), so the
/// caller need not copy φ(K) to rescale it.
void remember_and_read(float* S, float* z, const float* phi_q, const float* phi_k, const float* v, float* o,
                       std::size_t m, std::size_t d_v, float decay, float k_scale) {
  // Remember: S ← λ·S + φ(k)ᵀ v and z ← λ·z + φ(k). m·d_v multiply-adds, for token 10 as for token 10⁶.
  for (std::size_t r = 0; r < m; ++r) {
    const float k = phi_k[r] * k_scale;
    z[r] = decay * z[r] + k;
    float* S_r = S + r * d_v;
    for (std::size_t c = 0; c < d_v; ++c) S_r[c] = decay * S_r[c] + k * v[c];
  }
  // Read: o = φ(q) S / (φ(q)·z). Dividing φ(q) by its largest entry cancels in the ratio and keeps tiny
  // features from underflowing in the products.
  std::fill(o, o + d_v, 0.0f);
  const float q_max = largest(phi_q, m);
  if (!(q_max > 0.0f)) return;  // this query weighs every key 0: nothing to read
  float denominator = 0.0f;
  for (std::size_t r = 0; r < m; ++r) {
    const float w = phi_q[r] / q_max;
    denominator += w * z[r];
    const float* S_r = S + r * d_v;
    for (std::size_t c = 0; c < d_v; ++c) o[c] += w * S_r[c];
  }
  if (!(denominator > 0.0f)) {
    std::fill(o, o + d_v, 0.0f);
    return;
  }
  for (std::size_t c = 0; c < d_v; ++c) o[c] /= denominator;
}
// [remember_and_read]

}  // namespace

// [elu_plus_one]
Matrix elu_plus_one(const Matrix& X) {
  require_finite("elu_plus_one", "X", X.data(), X.size());
  Matrix phi = X;  // (n, d)
  // elu(x) + 1: the line x + 1 above zero, exp(x) below; both are 1 with slope 1 at 0, and always > 0.
  for (float& x : phi) x = x > 0.0f ? x + 1.0f : std::exp(x);
  return phi;
}
// [elu_plus_one]

// [positive_random_features]
Matrix positive_random_features(const Matrix& X, const Matrix& Omega) {
  require(X.shape(1) == Omega.shape(1),
          fmt::format("positive_random_features: X is {} and Omega is {}; both need d_k columns", shape_str(X),
                      shape_str(Omega)));
  require_finite("positive_random_features", "X", X.data(), X.size());
  require_finite("positive_random_features", "Omega", Omega.data(), Omega.size());
  const std::size_t n = X.shape(0), d_k = X.shape(1), m = Omega.shape(0);
  // x̂ = x / d_k^{1/4}, so that q̂·k̂ = q·k/√d_k: the softmax's own scaling, split between q and k.
  const float to_hat = 1.0f / std::sqrt(std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1))));
  Matrix phi = matmul(X, Omega, /*transpose_b=*/true, to_hat);  // (n, m): ω_r·x̂
  const float inv_sqrt_m = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(m, 1)));
  for (std::size_t i = 0; i < n; ++i) {
    float half_norm2 = 0.0f;  // ‖x̂‖²/2
    for (std::size_t c = 0; c < d_k; ++c) half_norm2 += 0.5f * (X(i, c) * to_hat) * (X(i, c) * to_hat);
    // E_ω[exp(ω·q̂ − ‖q̂‖²/2) exp(ω·k̂ − ‖k̂‖²/2)] = exp(‖q̂+k̂‖²/2 − ‖q̂‖²/2 − ‖k̂‖²/2) = exp(q̂·k̂).
    float row_max = 0.0f;
    for (std::size_t r = 0; r < m; ++r)
      row_max = std::max(row_max, phi(i, r) = std::exp(phi(i, r) - half_norm2) * inv_sqrt_m);
    // Every feature of the row 0 (or inf): exp under- or overflowed float, and the row would weigh nothing (or NaN)
    // in linear attention without a word. Refused, naming the row.
    require(
        m == 0 || (row_max > 0.0f && std::isfinite(row_max)),
        fmt::format("positive_random_features: the features of row {} are {} (‖x̂‖²/2 = {}): exp left float's range; "
                    "scale X down",
                    i, row_max, half_norm2));
  }
  return phi;
}
// [positive_random_features]

// [linear_attention]
Matrix linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V) {
  require(phiQ.shape(1) == phiK.shape(1),
          fmt::format("linear_attention: phiQ is {} and phiK is {}; queries and keys need the same m features",
                      shape_str(phiQ), shape_str(phiK)));
  require(phiK.shape(0) == V.shape(0),
          fmt::format("linear_attention: phiK is {} and V is {}; one value per key is needed", shape_str(phiK),
                      shape_str(V)));
  require_attention_inputs("linear_attention", phiQ, phiK, V);  // finite, and no φ(q)·φ(k) can overflow
  // Features are weights: a negative one could make a denominator 0 or negative and the output garbage.
  for (const Matrix* phi : {&phiQ, &phiK})
    for (std::size_t e = 0; e < phi->size(); ++e)
      require(phi->data()[e] >= 0.0f, fmt::format("linear_attention: {}[{}] = {}; features must be ≥ 0",
                                                  phi == &phiQ ? "phiQ" : "phiK", e, phi->data()[e]));
  const std::size_t n_q = phiQ.shape(0), m = phiQ.shape(1), d_v = V.shape(1);
  Matrix O = xt::zeros<float>({n_q, d_v});  // (n_q, d_v)
  // One constant for all keys cancels between numerator and denominator: divide by the largest feature.
  const float k_max = largest(phiK.data(), phiK.size());
  if (!(k_max > 0.0f)) return O;  // every key weighs 0 for every query
  // The answer is a weighted mean of V's rows, a float whenever V is; the sums on the way are not: n_kv·m terms of
  // up to max φ(k)·max|v|. Values that large enter scaled by a power of two, undone at the end (a copy only then).
  const double v_max = V.size() ? static_cast<double>(xt::amax(xt::abs(V))()) : 0.0;
  const double sums = static_cast<double>(phiK.shape(0)) * static_cast<double>(std::max<std::size_t>(m, 1)) *
                      std::max(static_cast<double>(k_max), 1.0) * v_max;
  const float v_scale =
      sums > kMaxScoreBound
          ? std::max(static_cast<float>(std::exp2(std::floor(std::log2(kMaxScoreBound / sums)))), 0x1p-126f)
          : 1.0f;
  const Matrix V_scaled = v_scale < 1.0f ? Matrix(V * v_scale) : Matrix();  // (n_kv, d_v) only when scaled
  // The associativity step: sum over the keys once, for all queries. Its size does not depend on n.
  // sgemm reads φ(K) transposed in place: no (m, n_kv) copy, which at large n would cost more than the product.
  const Matrix KV = matmul_transpose_a(phiK, v_scale < 1.0f ? V_scaled : V, 1.0f / k_max);  // (m, d_v)  φ(K)ᵀ V
  Vector z = xt::zeros<float>({m});  // (m)       φ(K)ᵀ 1, row by row (contiguous)
  for (std::size_t j = 0; j < phiK.shape(0); ++j)
    for (std::size_t r = 0; r < m; ++r) z(r) += phiK(j, r);
  z /= k_max;
  // The queries go in blocks of kRows: a block's rescaled copy and its numerator are still in cache when they
  // are used, so at large n only φ(Q) is read and O written (a whole-sequence copy would fall out of L3).
  constexpr std::size_t kRows = 1024;
  for (std::size_t i0 = 0; i0 < n_q; i0 += kRows) {
    const std::size_t rows = std::min(kRows, n_q - i0);
    Matrix q = xt::view(phiQ, xt::range(i0, i0 + rows), xt::all());  // (rows, m) each row ÷ its largest entry
    for (std::size_t i = 0; i < rows; ++i) {
      const float q_max = largest(q.data() + i * m, m);
      if (q_max > 0.0f) xt::row(q, i) /= q_max;
    }
    const Matrix numerator = matmul(q, KV);  // (rows, d_v)  φ(q_i) φ(K)ᵀV
    for (std::size_t i = 0; i < rows; ++i) {
      float denominator = 0.0f;  // φ(q_i)·φ(K)ᵀ1 = Σ_j φ(q_i)·φ(k_j)
      for (std::size_t r = 0; r < m; ++r) denominator += q(i, r) * z(r);
      if (!(denominator > 0.0f)) continue;  // this query weighs every key 0: a row of zeros, not 0/0
      for (std::size_t c = 0; c < d_v; ++c) O(i0 + i, c) = numerator(i, c) / denominator / v_scale;
    }
  }
  return O;
}
// [linear_attention]

// [recurrent_step]
Vector recurrent_step(RecurrentState& state, const Vector& phi_q, const Vector& phi_k, const Vector& v, float decay) {
  const std::size_t m = state.S.shape(0), d_v = state.S.shape(1);
  require(state.z.size() == m && phi_q.size() == m && phi_k.size() == m && v.size() == d_v,
          fmt::format("recurrent_step: the state is S {} and z {}, but phi_q is {}, phi_k {} and v {}; "
                      "they must be (m, d_v), (m), (m), (m) and (d_v)",
                      shape_str(state.S), shape_str(state.z), shape_str(phi_q), shape_str(phi_k), shape_str(v)));
  require_decay("recurrent_step", decay);
  require_attention_inputs("recurrent_step", phi_q, phi_k, v);
  require_finite("recurrent_step", "state.S", state.S.data(), state.S.size());
  require_finite("recurrent_step", "state.z", state.z.data(), state.z.size());
  // The new state and its read, sums of m terms, must stay floats: checked before the state changes.
  const auto max_abs = [](const auto& x) { return x.size() ? static_cast<double>(xt::amax(xt::abs(x))()) : 0.0; };
  const double k_max = max_abs(phi_k), terms = static_cast<double>(std::max<std::size_t>(m, 1));
  require(
      terms * (max_abs(state.S) + k_max * max_abs(v)) <= kMaxScoreBound &&
          terms * (max_abs(state.z) + k_max) <= kMaxScoreBound,
      fmt::format("recurrent_step: m = {} times (max|state.S| = {:.3g} + max|phi_k| = {:.3g} times max|v| = {:.3g}) "
                  "could overflow float in the new state; scale v or phi_k down",
                  m, max_abs(state.S), k_max, max_abs(v)));
  Vector o = xt::zeros<float>({d_v});  // (d_v)
  remember_and_read(state.S.data(), state.z.data(), phi_q.data(), phi_k.data(), v.data(), o.data(), m, d_v, decay,
                    1.0f);
  return o;
}
// [recurrent_step]

// [causal_linear_attention]
Matrix causal_linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V, float decay) {
  require(phiQ.shape(0) == phiK.shape(0) && phiK.shape(0) == V.shape(0) && phiQ.shape(1) == phiK.shape(1),
          fmt::format("causal_linear_attention: phiQ is {}, phiK is {} and V is {}; they must be (n, m), (n, m) "
                      "and (n, d_v)",
                      shape_str(phiQ), shape_str(phiK), shape_str(V)));
  require_decay("causal_linear_attention", decay);
  require_attention_inputs("causal_linear_attention", phiQ, phiK, V);
  const std::size_t n = phiQ.shape(0), m = phiQ.shape(1), d_v = V.shape(1);
  Matrix O = xt::zeros<float>({n, d_v});  // (n, d_v)
  const float k_max = largest(phiK.data(), phiK.size());
  if (!(k_max > 0.0f)) return O;
  RecurrentState state = RecurrentState::zeros(m, d_v);  // S (m, d_v), z (m): all the memory there is
  for (std::size_t t = 0; t < n; ++t)                    // one token at a time, as an RNN reads
    remember_and_read(state.S.data(), state.z.data(), phiQ.data() + t * m, phiK.data() + t * m, V.data() + t * d_v,
                      O.data() + t * d_v, m, d_v, decay, 1.0f / k_max);  // φ(K) scaled as in linear_attention
  return O;
}
// [causal_linear_attention]

}  // namespace attn
