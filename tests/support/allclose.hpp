/// \file
/// The one float comparison of the test suite: CHECK_ALLCLOSE(actual, expected, atol, rtol) passes when
/// every |actual - expected| <= atol + rtol·|expected|, and otherwise reports the largest difference and
/// the first mismatches. actual is a float32 tensor from a track; expected comes from the float64 oracle.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attn/tensor.hpp"
#include "oracle/oracle.hpp"

namespace attn::test {

/// The result of comparing two tensors: whether they agree and, if not, a report for the failure message.
struct Comparison {
  bool ok = true;
  std::string report;
};

/// Elementwise comparison of \p actual (float32, flattened row-major) with \p expected (float64).
/// Equal infinities match; NaN matches nothing.
inline Comparison compare(const std::vector<std::size_t>& actual_shape, const float* actual,
                          const std::vector<std::size_t>& expected_shape, const double* expected, double atol,
                          double rtol) {
  Comparison c;
  if (actual_shape != expected_shape) {
    c.ok = false;
    c.report = fmt::format("shape differs: actual ({}) vs expected ({})", fmt::join(actual_shape, ", "),
                           fmt::join(expected_shape, ", "));
    return c;
  }
  std::size_t size = 1, mismatches = 0, worst = 0;
  for (std::size_t s : actual_shape) size *= s;
  double worst_diff = 0.0;
  std::string first;
  for (std::size_t i = 0; i < size; ++i) {
    const double a = actual[i], e = expected[i];
    const bool same_inf = std::isinf(a) && std::isinf(e) && (a > 0) == (e > 0);
    const double diff = same_inf ? 0.0 : std::fabs(a - e);
    const bool bad = !same_inf && !(diff <= atol + rtol * std::fabs(e));  // NaN lands here too
    if (!bad) continue;
    if (!(diff <= worst_diff)) {
      worst_diff = diff;
      worst = i;
    }
    if (mismatches++ < 5) first += fmt::format("\n    [{}] actual {:.9g}, expected {:.9g}", i, a, e);
  }
  if (mismatches > 0) {
    c.ok = false;
    c.report = fmt::format("{} of {} values differ (atol {:g}, rtol {:g}); largest difference {:.3g} at [{}]; first:{}",
                           mismatches, size, atol, rtol, worst_diff, worst, first);
  }
  return c;
}

inline std::vector<std::size_t> shape_of(const Matrix& m) { return {m.shape(0), m.shape(1)}; }
inline std::vector<std::size_t> shape_of(const Vector& v) { return {v.shape(0)}; }
inline std::vector<std::size_t> shape_of(const oracle::Mat& m) { return {m.rows, m.cols}; }
inline std::vector<std::size_t> shape_of(const std::vector<double>& v) { return {v.size()}; }
inline const double* data_of(const oracle::Mat& m) { return m.v.data(); }
inline const double* data_of(const std::vector<double>& v) { return v.data(); }

template <class Actual, class Expected>
Comparison allclose(const Actual& actual, const Expected& expected, double atol, double rtol) {
  const Actual contiguous = actual;  // a plain row-major copy, whatever view was passed in
  return compare(shape_of(contiguous), contiguous.data(), shape_of(expected), data_of(expected), atol, rtol);
}

/// float32 tensor → the oracle's float64 matrix (rows, cols).
inline oracle::Mat to_oracle(const Matrix& m) {
  oracle::Mat out(m.shape(0), m.shape(1));
  for (std::size_t i = 0; i < m.size(); ++i) out.v[i] = m.data()[i];
  return out;
}
/// A mask → the oracle's allowed-pairs list, row-major (n_q · n_kv), true = may attend.
inline std::vector<bool> to_oracle(const Mask& m) { return std::vector<bool>(m.begin(), m.end()); }
/// float32 vector → float64 vector.
inline std::vector<double> to_oracle(const Vector& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace attn::test

/// CHECK that a float32 tensor matches the oracle within atol + rtol·|expected|, reporting the worst
/// difference and the first mismatches when it does not.
#define CHECK_ALLCLOSE(actual, expected, atol, rtol)                                                         \
  do {                                                                                                       \
    const ::attn::test::Comparison attn_cmp_ = ::attn::test::allclose((actual), (expected), (atol), (rtol)); \
    CHECK_MESSAGE(attn_cmp_.ok, attn_cmp_.report);                                                           \
  } while (false)
