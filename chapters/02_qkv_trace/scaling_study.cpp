// Why the scores are divided by √d_k, measured. Book page: book/02_qkv_trace.md.
//
// The argument: with q and k of independent unit-variance entries, q·k = Σ_c q_c k_c is a sum of d_k
// terms of variance 1, so its variance is d_k. Raw scores therefore spread wider as d_k grows, softmax
// turns the widest of them into a near one-hot row, and the Jacobian of a near one-hot softmax is near
// zero: the gradient that should teach W_Q and W_K vanishes. Dividing by √d_k brings the variance back
// to 1 whatever d_k is. This file measures each link of that chain instead of asserting it.
// It uses chapter 01's stable_softmax (one query's row at a time), not chapter 02's contract.
#include "02_qkv_trace/scaling_study.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "01_intuition/intuition.hpp"
#include "attn/checks.hpp"
#include "attn/rng.hpp"

namespace attn::ch02 {
namespace {

/// Mean and variance (divided by count − 1) of \p values, in float64 with two passes.
std::pair<double, double> mean_and_variance(const std::vector<double>& values) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double sq = 0;
  for (double v : values) sq += (v - mean) * (v - mean);
  return {mean, sq / static_cast<double>(values.size() - 1)};
}

/// Running sums for one setting (raw or scaled scores).
struct Accumulator {
  std::vector<double> scores;  // every q·k (or q·k/√d_k) seen, for the variance
  double max_weight = 0;       // Σ over trials of the row's largest weight
  double jacobian = 0;         // Σ over trials of ‖J‖_F

  void add(const Vector& s) {  // s: (n_keys) one query's scores
    scores.insert(scores.end(), s.begin(), s.end());
    const Vector p = stable_softmax(s);  // (n_keys)
    max_weight += xt::amax(p)();
    jacobian += softmax_jacobian_norm(p);
  }
};

}  // namespace

// [jacobian]
double softmax_jacobian_norm(const Vector& p) {
  for (std::size_t i = 0; i < p.size(); ++i)
    require(p(i) >= 0.0f && p(i) <= 1.0f,  // false for NaN too
            fmt::format("softmax_jacobian_norm: p[{}] = {}; a probability is in [0, 1]", i, p(i)));
  // ∂p_i/∂s_j = p_i (δ_ij − p_j). A one-hot p makes every entry 0:
  // either p_i = 0, or p_i = 1 and then δ_ij − p_j = 0 for every j.
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    for (std::size_t j = 0; j < p.size(); ++j) {
      const double J_ij = double{p(i)} * ((i == j ? 1.0 : 0.0) - double{p(j)});
      sum += J_ij * J_ij;
    }
  return std::sqrt(sum);
}
// [jacobian]

ScalingStudy measure_scaling(const std::vector<std::size_t>& d_ks, std::size_t n_keys, std::size_t trials,
                             std::uint64_t seed) {
  require(n_keys >= 2 && trials >= 2 && trials <= kMaxScalingTrials,
          fmt::format("measure_scaling: {} keys, {} trials; a variance needs 2 of each, and at most {} trials", n_keys,
                      trials, kMaxScalingTrials));
  for (const std::size_t d_k : d_ks) {  // before any work: a width refused late would waste the ones before it
    const double work = static_cast<double>(trials) * static_cast<double>(n_keys) *
                        (static_cast<double>(d_k) + static_cast<double>(n_keys));  // the scores and the Jacobians
    require(d_k > 0 && work <= kMaxScalingWork,
            fmt::format("measure_scaling: d_k = {} with {} keys and {} trials; d_k must be positive and trials × "
                        "n_keys × (d_k + n_keys) at most {:.0e} multiply-adds (minutes of work past it)",
                        d_k, n_keys, trials, kMaxScalingWork));
    checked_allocation("measure_scaling: one trial's keys n_keys × d_k × 4 bytes", {n_keys, d_k, sizeof(float)});
  }
  checked_allocation("measure_scaling: the scores kept, 2 × trials × n_keys × 8 bytes",
                     {2, trials, n_keys, sizeof(double)});
  ScalingStudy study{n_keys, trials, {}};
  for (const std::size_t d_k : d_ks) {
    // Each d_k draws from its own stream: adding a width does not change the others' numbers.
    // [measure_scaling]
    Rng rng(seed + d_k);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_k));
    Accumulator raw, scaled;
    for (std::size_t t = 0; t < trials; ++t) {
      const Matrix q = rng.normal(1, d_k);       // (1, d_k)      one query, entries ~ N(0, 1)
      const Matrix K = rng.normal(n_keys, d_k);  // (n_keys, d_k) fresh keys, entries ~ N(0, 1)
      const Matrix S = matmul(q, K, true);       // (1, n_keys)   q·k for every key
      const Vector s = xt::row(S, 0);            // (n_keys)
      raw.add(s);
      scaled.add(Vector(s * scale));
    }
    // [measure_scaling]
    ScalingRow row;
    row.d_k = d_k;
    row.var_unscaled = mean_and_variance(raw.scores).second;
    row.var_scaled = mean_and_variance(scaled.scores).second;
    const auto per_trial = static_cast<double>(trials);
    row.max_weight_unscaled = raw.max_weight / per_trial;
    row.max_weight_scaled = scaled.max_weight / per_trial;
    row.jacobian_unscaled = raw.jacobian / per_trial;
    row.jacobian_scaled = scaled.jacobian / per_trial;
    study.rows.push_back(row);
  }
  return study;
}

}  // namespace attn::ch02
