// Chapter 04, reference solutions. Book page: book/04_complexity.md.
// Counting is arithmetic on the shapes; the fit is a least-squares line in log-log space; the guard
// compares the count with the limit before chapter 02's attention allocates anything.
#include "04_complexity/complexity.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"

namespace attn {

namespace {
double d(std::size_t v) { return static_cast<double>(v); }
}  // namespace

// [attention_flops]
AttentionFlops attention_flops(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
  const double pairs = d(n_q) * d(n_kv);  // one score per (query, key) pair: the n² of the title
  AttentionFlops f;
  f.scores = 2.0 * pairs * d(d_k);        // each score: d_k multiplies and d_k adds
  f.softmax = 5.0 * pairs;                // scale, subtract the max, exp, sum, normalise
  f.weighted_sum = 2.0 * pairs * d(d_v);  // each output entry: n_kv multiply-adds, n_q·d_v entries
  return f;
}
// [attention_flops]

// [attention_bytes]
AttentionBytes attention_bytes(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
  constexpr double kFloat = sizeof(float);
  AttentionBytes b;
  b.inputs = kFloat * (d(n_q) * d(d_k) + d(n_kv) * d(d_k) + d(n_kv) * d(d_v));  // Q, K, V
  b.output = kFloat * d(n_q) * d(d_v);                                          // O
  b.score_matrix = kFloat * d(n_q) * d(n_kv);                                   // S or A
  b.peak_extra = 2.0 * b.score_matrix + b.output;        // S is still alive while A and then O exist
  b.moved = b.inputs + b.output + 4.0 * b.score_matrix;  // S: write + read; A: write + read
  return b;
}
// [attention_bytes]

// [fit_power_law]
PowerLawFit fit_power_law(const std::vector<double>& x, const std::vector<double>& y) {
  require(
      x.size() == y.size() && x.size() >= 2,
      fmt::format("fit_power_law: x has {} values and y has {}; one y per x, at least two points", x.size(), y.size()));
  const std::size_t k = x.size();
  std::vector<double> u(k), v(k);  // (k) the points in log-log space
  for (std::size_t i = 0; i < k; ++i) {
    require(x[i] > 0 && y[i] > 0 && std::isfinite(x[i]) && std::isfinite(y[i]),
            fmt::format("fit_power_law: point [{}] is (x, y) = ({}, {}); a log needs positive, finite values", i, x[i],
                        y[i]));
    u[i] = std::log(x[i]);
    v[i] = std::log(y[i]);
  }
  require(std::any_of(x.begin(), x.end(), [&](double xi) { return xi != x[0]; }),
          fmt::format("fit_power_law: every x is {}; a slope needs at least two different x", x[0]));
  double mean_u = 0, mean_v = 0;
  for (std::size_t i = 0; i < k; ++i) {
    mean_u += u[i] / d(k);
    mean_v += v[i] / d(k);
  }
  // Centred sums: slope = Σ(u-ū)(v-v̄) / Σ(u-ū)², which avoids cancelling large Σu² against k·ū².
  double s_uu = 0, s_uv = 0, s_vv = 0;
  for (std::size_t i = 0; i < k; ++i) {
    s_uu += (u[i] - mean_u) * (u[i] - mean_u);
    s_uv += (u[i] - mean_u) * (v[i] - mean_v);
    s_vv += (v[i] - mean_v) * (v[i] - mean_v);
  }
  PowerLawFit fit;
  fit.exponent = s_uv / s_uu;
  fit.coefficient = std::exp(mean_v - fit.exponent * mean_u);  // the line passes through (ū, v̄)
  // R² = 1 - residual / total; for a least-squares line the residual is s_vv - slope·s_uv.
  fit.r_squared = s_vv > 0 ? 1.0 - (s_vv - fit.exponent * s_uv) / s_vv : 1.0;
  return fit;
}
// [fit_power_law]

// [guarded_attention]
Matrix guarded_attention(const Matrix& Q, const Matrix& K, const Matrix& V, double limit_bytes) {
  require(Q.shape(1) == K.shape(1) && K.shape(0) == V.shape(0),
          fmt::format("guarded_attention: Q is {}, K is {} and V is {}; Q and K need the same d_k, K and V "
                      "one row per key",
                      shape_str(Q), shape_str(K), shape_str(V)));
  // NaN compares false with every estimate: it would let any size through.
  require(!std::isnan(limit_bytes), "guarded_attention: limit_bytes is nan; give the memory it may use in bytes");
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0);
  const AttentionBytes bytes = attention_bytes(n_q, n_kv, K.shape(1), V.shape(1));
  // Decide from the shapes alone: asking the allocator and catching std::bad_alloc would be too late,
  // since Linux may promise memory it does not have and kill the process when it is touched.
  if (bytes.peak_extra > limit_bytes) throw memory_refusal(n_q, n_kv, bytes.peak_extra, limit_bytes);
  return scaled_dot_product_attention(Q, K, V);  // (n_q, d_v)
}
// [guarded_attention]

}  // namespace attn
