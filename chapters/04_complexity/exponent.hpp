/// \file
/// The exponent of a benchmark's measured times, for the summary rows of the chapters after 04: chapter 04's
/// fit_power_law over the points a benchmark recorded (attn::bench_record(): n → seconds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "04_complexity/complexity.hpp"

namespace attn {

/// The exponent e of y ≈ c·x^e (fit_power_law) over the points of \p y_by_n with \p lo ≤ n ≤ \p hi, where
/// x = n · \p x_per_n (1: x is n itself; a graph's edges per node, say); 0 when fewer than two points are there.
inline double exponent_between(const std::map<std::size_t, double>& y_by_n, std::size_t lo = 0,
                               std::size_t hi = SIZE_MAX, double x_per_n = 1.0) {
  std::vector<double> x, y;
  for (const auto& [n, value] : y_by_n)
    if (n >= lo && n <= hi) {
      x.push_back(static_cast<double>(n) * x_per_n);
      y.push_back(value);
    }
  return x.size() < 2 ? 0.0 : fit_power_law(x, y).exponent;
}

}  // namespace attn
