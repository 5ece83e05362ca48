// Shape checks and BLAS settings shared by every chapter.
#include "attn/tensor.hpp"
#include "attn/cblas.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace attn {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

namespace {

/// True when one of \p v[0 … n) is NaN or ±∞, that is when its exponent bits are all ones: adding 1 to the
/// exponent field then carries into the sign bit. Integer and, add and or, with no exit inside the loop, so it
/// vectorises; std::isfinite with an early exit does not, and every chapter checks its inputs on every call.
bool has_nonfinite(const float* v, std::size_t n) {
  std::uint32_t carry = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    carry |= (bits & 0x7f800000u) + 0x00800000u;
  }
  return (carry & 0x80000000u) != 0;
}

}  // namespace

void require_finite(const char* where, const char* what, const float* values, std::size_t count, bool allow_minus_inf) {
  if (!allow_minus_inf) {  // the common case: scan in blocks, and look for the first culprit only in a bad block
    constexpr std::size_t kBlock = 4096;
    std::size_t begin = 0;
    while (begin < count && !has_nonfinite(values + begin, std::min(kBlock, count - begin))) begin += kBlock;
    if (begin >= count) return;
    for (std::size_t i = begin; i < count; ++i) {
      if (std::isfinite(values[i])) continue;
      throw std::invalid_argument(
          fmt::format("{}: {}[{}] is {} (only finite values are allowed)", where, what, i, values[i]));
    }
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const float v = values[i];
    if (std::isfinite(v) || (allow_minus_inf && std::isinf(v) && v < 0)) continue;
    throw std::invalid_argument(fmt::format("{}: {}[{}] is {}{}", where, what, i, v,
                                            allow_minus_inf ? " (only finite values and -inf, for masked, are allowed)"
                                                            : " (only finite values are allowed)"));
  }
}

namespace {

/// The message of a product whose factors do not fit: "dK = dSᵀ·Q: dSᵀ is (5, 3) and Q is (3, 4): the
/// columns of dSᵀ (3) are not the rows of Q (3)". The factors' names are the text after '=' in \p product,
/// split at '·'; without a product, A and B (with ᵀ where transposed). Shapes as multiplied: (rows, cols).
std::string product_mismatch(const char* function, const char* product, std::array<std::size_t, 2> left,
                             std::array<std::size_t, 2> right, bool left_t, bool right_t) {
  std::string left_name = left_t ? "Aᵀ" : "A", right_name = right_t ? "Bᵀ" : "B", what = function;
  if (product != nullptr) {
    what = product;
    const std::string text = product;
    const std::size_t eq = text.find('='), dot = text.find("·", eq == std::string::npos ? 0 : eq);
    if (dot != std::string::npos) {
      const std::size_t from = eq == std::string::npos ? 0 : eq + 1;
      const auto trim = [](std::string s) {
        s.erase(0, s.find_first_not_of(' '));
        s.erase(s.find_last_not_of(' ') + 1);
        return s;
      };
      left_name = trim(text.substr(from, dot - from));
      right_name = trim(text.substr(dot + std::string("·").size()));
    }
  }
  return fmt::format("{}: {} is ({}, {}) and {} is ({}, {}): the columns of {} ({}) are not the rows of {} ({})", what,
                     left_name, left[0], left[1], right_name, right[0], right[1], left_name, left[1], right_name,
                     right[0]);
}

}  // namespace

Matrix matmul(const Matrix& A, const Matrix& B, bool transpose_b, float alpha, const char* product) {
  const std::size_t m = A.shape(0), k = A.shape(1);
  const std::size_t k_b = transpose_b ? B.shape(1) : B.shape(0), n = transpose_b ? B.shape(0) : B.shape(1);
  require(k == k_b, product_mismatch("matmul", product, {m, k}, {k_b, n}, false, transpose_b));
  Matrix C = xt::zeros<float>({m, n});  // (m, n)
  if (m == 0 || n == 0 || k == 0) return C;
  const auto i = [](std::size_t v) { return static_cast<int>(v); };
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, i(m), i(n), i(k), alpha, A.data(),
              i(k), B.data(), i(B.shape(1)), 0.0f, C.data(), i(n));
  return C;
}

Matrix matmul_transpose_a(const Matrix& A, const Matrix& B, float alpha, const char* product) {
  const std::size_t n = A.shape(0), m = A.shape(1), k = B.shape(1);
  require(B.shape(0) == n, product_mismatch("matmul_transpose_a", product, {m, n}, {B.shape(0), k}, true, false));
  Matrix C = xt::zeros<float>({m, k});  // (m, k)
  if (n == 0 || m == 0 || k == 0) return C;
  const auto i = [](std::size_t v) { return static_cast<int>(v); };
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(m), i(k), i(n), alpha, A.data(), i(m), B.data(), i(k), 0.0f,
              C.data(), i(k));
  return C;
}

}  // namespace attn
