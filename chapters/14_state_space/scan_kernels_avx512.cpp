// Chapter 14's scan kernels for AVX-512, with SLEEF's vectorised exponential (see scan_kernels.hpp).
// Compiled with -mavx512f (SLEEF declares its AVX-512 functions only then) and without the precompiled header:
// this file includes nothing but the intrinsics, SLEEF and the plain kernel header, so no inline library code
// compiled for AVX-512 can end up in the rest of the program. scan.cpp calls it only where the CPU has AVX-512.
#include <immintrin.h>
#include <sleef.h>

#include "14_state_space/scan_kernels.hpp"

namespace attn::ch14 {
namespace avx512 {

// [isa_avx512]
struct Isa {
  using V = __m512;
  static constexpr std::size_t W = 16;  // floats per register
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a·b + c, one rounding
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static bool all_less(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) == 0xFFFF; }
  static constexpr bool kExpOnBlocks = false;               // one vector at a time, straight from the product
  static V exp(V x) { return Sleef_expf16_u10avx512f(x); }  // SLEEF's exponential, within 1 ulp (u10)
};
// [isa_avx512]

#include "14_state_space/scan_kernels.inl"

}  // namespace avx512

ScanKernels scan_kernels_avx512() {
  return {"AVX-512", avx512::Isa::W, "SLEEF Sleef_expf16_u10avx512f", avx512::exp_to<>, avx512::scan, avx512::correct};
}

}  // namespace attn::ch14
