// Chapter 16's GELU for AVX-512, with SLEEF's vectorised erf (see layers.cpp, which calls it only where the CPU
// has AVX-512). Compiled with -mavx512f (SLEEF declares its AVX-512 functions only then) and without the
// precompiled header, like chapter 14's scan kernels: nothing else in this file, so no code compiled for AVX-512
// can end up in the rest of the program.
#include <immintrin.h>
#include <sleef.h>

#include <cmath>
#include <cstddef>

namespace attn::ch16 {

void gelu_in_place_avx512(float* y, std::size_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f),
               inv_sqrt2 = _mm512_set1_ps(0.70710678118654752f);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(y + i);
    const __m512 e = Sleef_erff16_u10avx512f(_mm512_mul_ps(x, inv_sqrt2));  // within 1 ulp, as libm's erff
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = 0.5f * y[i] * (1.0f + std::erf(y[i] * 0.70710678118654752f));
}

// GELU with erf by Abramowitz and Stegun's formula 7.1.26, erf(x) ≈ 1 − (a₁t + a₂t² + … + a₅t⁵)·e^(−x²) with
// t = 1/(1 + p·|x|), |error| ≤ 1.5·10⁻⁷: the formula of PyTorch's own vectorised CPU erf (Vectorized<float>::erf in
// ATen's vec512_float.h), so the GELU the reference embeddings were computed with. One division and one exp
// instead of SLEEF's erf: the fast forward's GELU (fast_minilm.cpp).
namespace {
// Bitwise and / xor of floats with AVX-512F alone (the _ps forms need AVX-512DQ, which this file is not built for).
__m512 and_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
__m512 xor_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
}  // namespace

void gelu_in_place_avx512_fast(float* y, std::size_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f),
               inv_sqrt2 = _mm512_set1_ps(0.70710678118654752f), neg_zero = _mm512_set1_ps(-0.0f),
               p = _mm512_set1_ps(0.3275911f), a1 = _mm512_set1_ps(0.254829592f), a2 = _mm512_set1_ps(-0.284496736f),
               a3 = _mm512_set1_ps(1.421413741f), a4 = _mm512_set1_ps(-1.453152027f), a5 = _mm512_set1_ps(1.061405429f);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(y + i), u = _mm512_mul_ps(x, inv_sqrt2);  // erf's argument x/√2
    const __m512 sign = and_bits(neg_zero, u), t = _mm512_div_ps(one, _mm512_fmadd_ps(p, _mm512_abs_ps(u), one));
    __m512 r = _mm512_fmadd_ps(a5, t, a4);
    r = _mm512_fmadd_ps(r, t, a3);
    r = _mm512_fmadd_ps(r, t, a2);
    r = _mm512_fmadd_ps(r, t, a1);
    const __m512 e = Sleef_expf16_u10avx512f(xor_bits(neg_zero, _mm512_mul_ps(u, u)));  // e^(−u²)
    const __m512 erf = xor_bits(sign, _mm512_fmadd_ps(xor_bits(neg_zero, _mm512_mul_ps(e, t)), r, one));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf)));
  }
  for (; i < n; ++i) y[i] = 0.5f * y[i] * (1.0f + std::erf(y[i] * 0.70710678118654752f));
}

}  // namespace attn::ch16
