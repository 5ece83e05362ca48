/// \file
/// A seeded random source: every random tensor in the course comes from one, so runs repeat exactly.
#pragma once

#include <cstdint>
#include <random>

#include "attn/tensor.hpp"

namespace attn {

/// Deterministic random tensors (std::mt19937_64 with libstdc++'s distributions: the same seed gives
/// the same numbers on every run of the same build).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}

  /// (rows, cols) with entries ~ N(mean, stddev²).
  /// \throws std::invalid_argument when mean or stddev is not finite or stddev ≤ 0, or when rows·cols floats do not
  ///         fit in memory (naming the estimate, before allocating).
  Matrix normal(std::size_t rows, std::size_t cols, float mean = 0.0f, float stddev = 1.0f);
  /// (rows, cols) with entries ~ U[low, high).
  /// \throws std::invalid_argument when low or high is not finite, low > high or high − low overflows, or when
  ///         rows·cols floats do not fit in memory (naming the estimate, before allocating).
  Matrix uniform(std::size_t rows, std::size_t cols, float low = 0.0f, float high = 1.0f);

  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace attn
