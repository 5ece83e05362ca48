// Differences between results, and the spread of a row of weights.
#include "attn/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace attn {

double median(std::vector<double> values) {
  require(!values.empty(), "median: no values (a median needs at least one)");
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

namespace {

template <class T>
void require_same_shape(const char* where, const T& a, const T& b) {
  require(std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()),
          fmt::format("{}: the two operands must have the same shape, got ({}) and ({})", where,
                      fmt::join(a.shape(), ", "), fmt::join(b.shape(), ", ")));
}

void require_row(const char* where, const Matrix& A, std::size_t row) {
  require(row < A.shape(0),
          fmt::format("{}: row {} of a ({}, {}) matrix does not exist", where, row, A.shape(0), A.shape(1)));
}

}  // namespace

double max_abs_diff(const Matrix& a, const Matrix& b) {
  require_same_shape("max_abs_diff", a, b);
  const Matrix diff = xt::abs(a - b);  // (rows, cols)
  return diff.size() ? static_cast<double>(xt::amax(diff)()) : 0.0;
}

double max_abs_diff(const Vector& a, const Vector& b) {
  require_same_shape("max_abs_diff", a, b);
  const Vector diff = xt::abs(a - b);  // (n)
  return diff.size() ? static_cast<double>(xt::amax(diff)()) : 0.0;
}

double mean_abs_diff(const Matrix& a, const Matrix& b) {
  require_same_shape("mean_abs_diff", a, b);
  const Matrix diff = xt::abs(a - b);  // (rows, cols)
  return diff.size() ? static_cast<double>(xt::mean(diff)()) : 0.0;
}

double relative_error(const Tensor3& approx, const Tensor3& exact) {
  require_same_shape("relative_error", approx, exact);
  const Tensor3 diff = approx - exact;  // (h, n, d)
  const double num = xt::sum(diff * diff)(), den = xt::sum(exact * exact)();
  require(den > 0, "relative_error: the exact tensor is all zeros, so no error is relative to it");
  return std::sqrt(num / den);
}

double entropy_bits(const Matrix& A, std::size_t row) {
  require_row("entropy_bits", A, row);
  double h = 0.0;
  for (std::size_t j = 0; j < A.shape(1); ++j)
    if (A(row, j) > 0.0f) h -= static_cast<double>(A(row, j)) * std::log2(static_cast<double>(A(row, j)));
  return h;
}

std::vector<std::size_t> ranked(const Matrix& A, std::size_t i) {
  require_row("ranked", A, i);
  std::vector<std::size_t> order(A.shape(1));
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return A(i, a) > A(i, b); });
  return order;
}

}  // namespace attn
