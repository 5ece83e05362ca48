/// \file
/// Chapter 02's measurement of why the scores are divided by √d_k. Not an exercise: the chapter presents
/// it. Book page: book/02_qkv_trace.md ("Why divide by √d_k: measured").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::ch02 {

/// What one width d_k gave, averaged over the trials, once with raw scores q·k and once with q·k/√d_k.
struct ScalingRow {
  std::size_t d_k = 0;
  double var_unscaled = 0;         ///< variance of q·k over all (query, key) pairs (theory: d_k)
  double var_scaled = 0;           ///< variance of q·k/√d_k (theory: 1)
  double max_weight_unscaled = 0;  ///< mean of the largest softmax weight of a query's row, raw scores
  double max_weight_scaled = 0;    ///< the same with the scale (1/n_keys = uniform, 1 = one-hot)
  double jacobian_unscaled = 0;    ///< mean Frobenius norm of the softmax Jacobian diag(p) - p pᵀ, raw scores
  double jacobian_scaled = 0;      ///< the same with the scale (0 = saturated: no gradient reaches the scores)
};

/// The study's setup and its rows, one per d_k.
struct ScalingStudy {
  std::size_t n_keys = 0;  ///< keys each query is scored against (the softmax's length)
  std::size_t trials = 0;  ///< queries per d_k, each against its own fresh keys
  std::vector<ScalingRow> rows;
};

/// The most work measure_scaling() does for one width: trials × n_keys × (d_k + n_keys) multiply-adds, the scores
/// and each row's n_keys × n_keys Jacobian (the chapter's study does about 10^8; 10^10 takes seconds).
inline constexpr double kMaxScalingWork = 1e10;

/// The most queries measure_scaling() draws for one width: each costs a few small allocations whatever its size
/// (the chapter's study draws 500; 10^6 take a second or two).
inline constexpr std::size_t kMaxScalingTrials = 1'000'000;

/// Frobenius norm of the softmax Jacobian at \p p: J(i, j) = ∂p_i/∂s_j = p_i (δ_ij − p_j).
/// \param p (n) a probability vector (a softmax output).
/// \return ‖J‖_F; 0 for a one-hot p (a saturated softmax passes no gradient back to its scores).
/// \throws std::invalid_argument naming the entry when one is NaN or outside [0, 1].
double softmax_jacobian_norm(const Vector& p);

/// For every d_k in \p d_ks: \p trials queries q (d_k), each against \p n_keys fresh keys K (n_keys, d_k),
/// all entries drawn from N(0, 1), scored with and without ÷√d_k, pushed through softmax.
/// Deterministic for a given \p seed.
/// \throws std::invalid_argument when a d_k is 0, n_keys or trials is below 2, trials is above kMaxScalingTrials,
///         trials × n_keys × (d_k + n_keys) is above kMaxScalingWork, or the keys of a trial or the scores kept
///         (2 × trials × n_keys doubles) are past the memory available (attn::checked_allocation()), before any work.
ScalingStudy measure_scaling(const std::vector<std::size_t>& d_ks, std::size_t n_keys, std::size_t trials,
                             std::uint64_t seed);

}  // namespace attn::ch02
