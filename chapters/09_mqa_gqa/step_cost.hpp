/// \file
/// What one decode step moves and computes, for the story's table and the benchmarks' roofline. Inline, because
/// it counts the cache with the contract's kv_cache_bytes(): each track's executable uses its own.
#pragma once

#include <cstddef>

#include "09_mqa_gqa/mqa_gqa.hpp"

namespace attn::ch09 {

/// What one decode step moves and computes, per layer: K and V of g heads read once, h queries each doing
/// n dot products of d_k (Q·Kᵀ) and n multiply-adds of d_v rows (A·V).
struct StepCost {
  double bytes;  // K and V read
  double flops;  // 2·h·n·d_k + 2·h·n·d_v
};
inline StepCost step_cost(std::size_t h, std::size_t g, std::size_t n, std::size_t d_k, std::size_t bytes_per_element) {
  const double hn = static_cast<double>(h) * static_cast<double>(n);
  return {static_cast<double>(kv_cache_bytes(1, g, d_k, n, bytes_per_element)), 4.0 * hn * static_cast<double>(d_k)};
}

}  // namespace attn::ch09
