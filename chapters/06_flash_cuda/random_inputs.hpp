/// \file
/// Random inputs made where they are used: the value at index i of a stream is a pure function of
/// (seed, i), so every GPU thread draws its own element without a shared generator state, and the host
/// computes the very same values in its tests. The timing run draws Q, K and V this way on the GPU: on
/// one CPU core, the ladder's 1.6·10⁹ normal values would take a large share of a GPU machine's few minutes.
/// Book page: book/06_flash_cuda.md.
#pragma once

#include <cmath>
#include <cstdint>

#include "06_flash_cuda/host_device.hpp"

namespace attn::ch06 {

/// 64 random bits for index \p i of stream \p seed: splitmix64's finaliser applied to seed + (i + 1)·φ·2⁶⁴,
/// a bijection of the counter, so neighbouring indices give unrelated bits.
ATTN_HOST_DEVICE inline std::uint64_t hash_bits(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1): the top 24 bits (a float's mantissa) scaled to [0, 2), minus 1.
ATTN_HOST_DEVICE inline float hash_uniform(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(hash_bits(seed, i) >> 40) * 0x1.0p-23f - 1.0f;
}

/// Standard normal by Box–Muller from the two 32-bit halves of one hash: u₁ in (0, 1] (never 0, so the
/// logarithm is finite), u₂ in [0, 1), z = √(−2 ln u₁)·cos(2π u₂). With 24-bit u₁, |z| ≤ √(48 ln 2) ≈ 5.8
/// (a normal value beyond that has probability 10⁻⁸: nothing a timing input misses).
ATTN_HOST_DEVICE inline float hash_normal(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t bits = hash_bits(seed, i);
  const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * 0x1.0p-24f;        // (0, 1]
  const float u2 = static_cast<float>((bits >> 8) & 0xFFFFFFull) * 0x1.0p-24f;  // [0, 1)
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
}

}  // namespace attn::ch06
