/// \file
/// Chapter 08's race, shared by the story's quick measurement (outside the book) and the benchmarks: the
/// contenders on the same inputs, each timed as one call on one core, and the crossover found by bisection.
/// Inline, because the linear contenders are the contract's functions: each track's executable (the
/// reference's and the learner's) races its own code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "08_linear/linear.hpp"
#include "attn/bench.hpp"
#include "attn/blas_threads.hpp"
#include "attn/measure.hpp"

namespace attn::ch08 {

/// The contenders on random inputs of length n (d_k = d_v = m = d), each timed as one call.
/// Every timing runs on one core: the recurrence is sequential, so the comparison is core against core (and
/// on a busy machine one BLAS thread is also far steadier than several). Chapter 05's flash kernel gets one
/// thread too, which it runs on the calling thread, with OpenBLAS single-threaded inside.
struct Contenders {
  /// \throws std::invalid_argument naming n or d when it is 0 (a race needs a token and a width), or when the inputs,
  ///         5 × n × d floats, would not fit in memory (naming n, d and the estimate, before allocating).
  Contenders(std::size_t n, std::size_t d)
      : inputs(random_inputs(3, 1, checked(n, d), d, n)),
        Q(inputs.head(0, 0)),
        K(inputs.head(1, 0)),
        V(inputs.head(2, 0)),
        phiQ(elu_plus_one(Q)),
        phiK(elu_plus_one(K)) {}
  BlasThreads one_blas_thread{1};  // while the contenders live
  const RandomInputs& inputs;      // the run's input cache: Q, K, V drawn from Rng(n)
  const Matrix &Q, &K, &V;         // (n, d) each
  Matrix phiQ, phiK;               // (n, d) each
  void softmax() const { benchmark::DoNotOptimize(scaled_dot_product_attention(Q, K, V)); }
  void linear() const { benchmark::DoNotOptimize(linear_attention(phiQ, phiK, V)); }
  void causal() const { benchmark::DoNotOptimize(causal_linear_attention(phiQ, phiK, V)); }
  void flash() const { benchmark::DoNotOptimize(ch05::flash_attention_fast(Q, K, V, false, one_core())); }
  void flash_causal() const { benchmark::DoNotOptimize(ch05::flash_attention_fast(Q, K, V, true, one_core())); }
  static ch05::FastConfig one_core() {
    ch05::FastConfig config;
    config.threads = 1;
    return config;
  }

 private:
  static std::size_t checked(std::size_t n, std::size_t d) {
    require(n > 0 && d > 0,
            fmt::format("Contenders: n = {} and d = {}; a race needs at least one token of width 1", n, d));
    // Before the input cache allocates them: Q, K, V, φ(Q) and φ(K), (n, d) floats each.
    checked_allocation(
        fmt::format("Contenders: the race's inputs for n = {} and d = {}, 5 × n × d floats", n, d).c_str(),
        {5, n, d, sizeof(float)});
    return n;
  }
};

/// Seconds of one call of a contender at length n and width d.
using Timer = std::function<double(std::size_t n, std::size_t d)>;

/// A Timer for one contender: its CPU seconds per call (attn::cpu_seconds()), on fresh Contenders(n, d).
/// \throws std::invalid_argument when \p contender is null.
inline Timer cpu_timer(void (Contenders::*contender)() const) {
  require(contender != nullptr, "cpu_timer: no contender to time (a null member pointer)");
  return [contender](std::size_t n, std::size_t d) {
    const Contenders c(n, d);
    return cpu_seconds([&] { (c.*contender)(); });
  };
}

// [bisection]
/// The smallest n in [lo, hi] from which the linear contender is faster than the quadratic one, by bisection on
/// the sign of t_quadratic(n) − t_linear(n) (assumed to change once). Returns lo when linear already wins
/// at lo, and 0 when it does not win even at hi.
/// \throws std::invalid_argument naming lo, hi and d unless 1 ≤ lo ≤ hi and d ≥ 1, or when a timer is empty.
inline std::size_t measured_crossover(std::size_t lo, std::size_t hi, std::size_t d,
                                      const Timer& quadratic = cpu_timer(&Contenders::softmax),
                                      const Timer& linear = cpu_timer(&Contenders::linear)) {
  require(
      lo >= 1 && lo <= hi && d >= 1 && quadratic && linear,
      fmt::format("measured_crossover: lo = {}, hi = {}, d = {}; the search needs 1 ≤ lo ≤ hi, d ≥ 1 and two timers",
                  lo, hi, d));
  const auto linear_wins = [&](std::size_t n) { return linear(n, d) < quadratic(n, d); };
  if (linear_wins(lo)) return lo;
  if (!linear_wins(hi)) return 0;
  while (hi - lo > std::max<std::size_t>(1, lo / 16)) {  // stop at ~6% resolution: timings are noisier
    const std::size_t mid = lo + (hi - lo) / 2;
    (linear_wins(mid) ? hi : lo) = mid;
  }
  return hi;
}
// [bisection]

}  // namespace attn::ch08
