// Seeded random tensors.
#include "attn/rng.hpp"

namespace attn {

Matrix Rng::normal(std::size_t rows, std::size_t cols, float mean, float stddev) {
  std::normal_distribution<float> dist(mean, stddev);
  Matrix m = xt::empty<float>({rows, cols});  // (rows, cols)
  for (float& x : m) x = dist(engine_);
  return m;
}

Matrix Rng::uniform(std::size_t rows, std::size_t cols, float low, float high) {
  std::uniform_real_distribution<float> dist(low, high);
  Matrix m = xt::empty<float>({rows, cols});  // (rows, cols)
  for (float& x : m) x = dist(engine_);
  return m;
}

}  // namespace attn
