// Chapter 14's scan kernels for AVX2+FMA, with SLEEF's vectorised exponential (see scan_kernels.hpp).
// Compiled with -mavx2 -mfma (SLEEF declares its AVX2 functions only then) and without the precompiled header:
// this file includes nothing but the intrinsics, SLEEF and the plain kernel header, so no inline library code
// compiled for AVX2 can end up in the rest of the program. scan.cpp calls it only where the CPU has AVX2 and FMA.
#include <immintrin.h>
#include <sleef.h>

#include "14_state_space/scan_kernels.hpp"

namespace attn::ch14 {
namespace avx2 {

// [isa_avx2]
struct Isa {
  using V = __m256;
  static constexpr std::size_t W = 8;  // floats per register
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a·b + c, one rounding
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static bool all_less(V a, V b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ)) == 0xFF; }
  static constexpr bool kExpOnBlocks = false;           // one vector at a time, straight from the product
  static V exp(V x) { return Sleef_expf8_u10avx2(x); }  // SLEEF's exponential, within 1 ulp (u10)
};
// [isa_avx2]

#include "14_state_space/scan_kernels.inl"

}  // namespace avx2

ScanKernels scan_kernels_avx2() {
  return {"AVX2+FMA", avx2::Isa::W, "SLEEF Sleef_expf8_u10avx2", avx2::exp_to<>, avx2::scan, avx2::correct};
}

}  // namespace attn::ch14
