// Chapter 16's GELU for AVX-512, with SLEEF's vectorised erf (see layers.cpp, which calls it only where the CPU
// has AVX-512): the lesson's gelu(). The fast forward's GELU is vector_kernels.cpp's. Compiled with -mavx512f (SLEEF
// declares its AVX-512 functions only then) and without the precompiled header, like chapter 14's scan kernels: nothing
// else in this file, so no code compiled for AVX-512 can end up in the rest of the program.
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

}  // namespace attn::ch16
