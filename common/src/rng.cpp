// Seeded random tensors.
#include "attn/rng.hpp"

#include <cmath>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

Matrix Rng::normal(std::size_t rows, std::size_t cols, float mean, float stddev) {
  // std::normal_distribution requires stddev > 0; NaN parameters would fill the matrix with NaN.
  require(std::isfinite(mean) && std::isfinite(stddev) && stddev > 0.0f,
          fmt::format("Rng::normal: mean = {} and stddev = {}; both finite, stddev above 0", mean, stddev));
  checked_allocation("Rng::normal: rows × cols floats", {rows, cols, sizeof(float)});
  std::normal_distribution<float> dist(mean, stddev);
  Matrix m = xt::empty<float>({rows, cols});  // (rows, cols)
  for (float& x : m) x = dist(engine_);
  return m;
}

Matrix Rng::uniform(std::size_t rows, std::size_t cols, float low, float high) {
  // std::uniform_real_distribution requires low ≤ high and a finite width.
  require(std::isfinite(low) && std::isfinite(high) && low <= high && std::isfinite(high - low),
          fmt::format("Rng::uniform: low = {} and high = {}; both finite, low ≤ high", low, high));
  checked_allocation("Rng::uniform: rows × cols floats", {rows, cols, sizeof(float)});
  std::uniform_real_distribution<float> dist(low, high);
  Matrix m = xt::empty<float>({rows, cols});  // (rows, cols)
  for (float& x : m) x = dist(engine_);
  return m;
}

}  // namespace attn
