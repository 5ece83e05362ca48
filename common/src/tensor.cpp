// Shape checks and BLAS settings shared by every chapter.
#include "attn/tensor.hpp"

#include <cmath>

#include <fmt/format.h>

// cblas_sgemm is declared by the cblas header xtensor-blas includes (through attn/tensor.hpp); OpenBLAS's
// own extension is declared here, as including OpenBLAS's cblas.h as well would clash with it.
extern "C" void openblas_set_num_threads(int num_threads);

namespace attn {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

void require_finite(const char* where, const char* what, const float* values, std::size_t count, bool allow_minus_inf) {
  for (std::size_t i = 0; i < count; ++i) {
    const float v = values[i];
    if (std::isfinite(v) || (allow_minus_inf && std::isinf(v) && v < 0)) continue;
    throw std::invalid_argument(fmt::format("{}: {}[{}] is {}{}", where, what, i, v,
                                            allow_minus_inf ? " (only finite values and -inf, for masked, are allowed)"
                                                            : " (only finite values are allowed)"));
  }
}

Matrix matmul(const Matrix& A, const Matrix& B, bool transpose_b, float alpha) {
  const std::size_t m = A.shape(0), k = A.shape(1);
  const std::size_t k_b = transpose_b ? B.shape(1) : B.shape(0), n = transpose_b ? B.shape(0) : B.shape(1);
  require(k == k_b, fmt::format("matmul: A is {} and B{} is {}: the inner sizes differ", shape_str(A),
                                transpose_b ? "ᵀ" : "", shape_str(B)));
  Matrix C = xt::zeros<float>({m, n});  // (m, n)
  if (m == 0 || n == 0 || k == 0) return C;
  const auto i = [](std::size_t v) { return static_cast<int>(v); };
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, i(m), i(n), i(k), alpha, A.data(),
              i(k), B.data(), i(B.shape(1)), 0.0f, C.data(), i(n));
  return C;
}

Matrix matmul_transpose_a(const Matrix& A, const Matrix& B, float alpha) {
  const std::size_t n = A.shape(0), m = A.shape(1), k = B.shape(1);
  require(B.shape(0) == n, fmt::format("matmul_transpose_a: A is {} and B is {}: Aᵀ·B needs the same number of "
                                       "rows",
                                       shape_str(A), shape_str(B)));
  Matrix C = xt::zeros<float>({m, k});  // (m, k)
  if (n == 0 || m == 0 || k == 0) return C;
  const auto i = [](std::size_t v) { return static_cast<int>(v); };
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(m), i(k), i(n), alpha, A.data(), i(m), B.data(), i(k), 0.0f,
              C.data(), i(k));
  return C;
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace attn
