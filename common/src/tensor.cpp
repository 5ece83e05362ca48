// Shape checks and BLAS settings shared by every chapter.
#include "attn/tensor.hpp"

#include <cmath>

#include <fmt/format.h>

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

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace attn
