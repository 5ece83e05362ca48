/// \file
/// The one float comparison of the test suite: CHECK_ALLCLOSE(actual, expected, atol, rtol) passes when
/// every |actual - expected| <= atol + rtol·|expected|, and otherwise reports the largest difference and
/// the first mismatches. actual is a float32 tensor from a track; expected comes from the float64 oracle.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
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

/// Where flat index \p i of a row-major tensor of \p shape lies: "[i]" for a vector, "(row r, column c)"
/// for a matrix, "[a, b, c]" beyond; the learner reads this to find the wrong row (a softmax over the
/// wrong axis, a mask off by one).
inline std::string position(const std::vector<std::size_t>& shape, std::size_t i) {
  std::vector<std::size_t> index(shape.size(), 0);
  for (std::size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 0) return fmt::format("[{}]", i);
    index[k] = i % shape[k];
    i /= shape[k];
  }
  if (index.size() == 2) return fmt::format("(row {}, column {})", index[0], index[1]);
  return fmt::format("[{}]", fmt::join(index, ", "));
}

/// Elementwise comparison of \p actual (float32, flattened row-major) with \p expected (float64).
/// Equal infinities match; NaN matches nothing. A failure names the worst element's position, both values,
/// the difference and what was allowed there, then the first few mismatches, also by position.
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
  // The worst mismatch: a NaN before any number, then the largest difference.
  const auto rank = [](double d) { return std::isnan(d) ? std::numeric_limits<double>::infinity() : d; };
  for (std::size_t i = 0; i < size; ++i) {
    const double a = actual[i], e = expected[i];
    const bool same_inf = std::isinf(a) && std::isinf(e) && (a > 0) == (e > 0);
    const double diff = same_inf ? 0.0 : std::fabs(a - e);
    const bool bad = !same_inf && !(diff <= atol + rtol * std::fabs(e));  // NaN lands here too
    if (!bad) continue;
    if (mismatches == 0 || rank(diff) > rank(worst_diff)) {
      worst_diff = diff;
      worst = i;
    }
    if (mismatches++ < 3)
      first += fmt::format("\n    at {}: actual {:.9g}, expected {:.9g}", position(actual_shape, i), a, e);
  }
  if (mismatches > 0) {
    const double a = actual[worst], e = expected[worst];
    c.ok = false;
    c.report = fmt::format(
        "{} of {} values differ. Worst at {}: actual {:.9g}, expected {:.9g}, difference {:.3g}, "
        "allowed {:.3g} (atol {:g} + rtol {:g} * |expected|). First mismatches:{}",
        mismatches, size, position(actual_shape, worst), a, e, worst_diff, atol + rtol * std::fabs(e), atol, rtol,
        first);
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
/// float32 heads (h, n, d) → the oracle's list of h float64 matrices (n, d).
inline std::vector<oracle::Mat> to_oracle(const Tensor3& T) {
  std::vector<oracle::Mat> out;
  for (std::size_t i = 0; i < T.shape(0); ++i) out.push_back(to_oracle(Matrix(xt::view(T, i, xt::all(), xt::all()))));
  return out;
}

}  // namespace attn::test

/// CHECK that a float32 tensor matches the oracle within atol + rtol·|expected|, reporting the worst
/// difference and the first mismatches when it does not.
#define CHECK_ALLCLOSE(actual, expected, atol, rtol)                                                         \
  do {                                                                                                       \
    const ::attn::test::Comparison attn_cmp_ = ::attn::test::allclose((actual), (expected), (atol), (rtol)); \
    CHECK_MESSAGE(attn_cmp_.ok, attn_cmp_.report);                                                           \
  } while (false)
