// Chapter 16's fast forward: one head's exact attention for AVX-512 (fast_minilm.cpp calls it where the CPU has
// AVX-512 and d_k is 16, 32, 48 or 64). Compiled with -mavx512f and without the precompiled header, like
// gelu_avx512.cpp.
#include <immintrin.h>
#include <sleef.h>

#include <cmath>
#include <cstddef>

namespace attn::ch16 {

// softmax(q_t·Kᵀ/√d_k)·V for every row t of one head of one sentence, read from the fused rows qkv (n, 3d) (Q, K,
// V side by side, the head's d_k columns at head·d_k in each) and written into the head's columns of out (n, d).
// keys_t: scratch of d_k · n16 floats, scores: n16, with n16 = n rounded up to 16. Kᵀ (d_k, n16) first, so that
// sixteen scores come from d_k fused multiply-adds; the exponentials sixteen at a time (SLEEF's expf, within
// 1 ulp as std::exp); the output row as d_k/16 accumulators over the keys.
void attend_head_avx512(const float* qkv, std::size_t n, std::size_t d, std::size_t d_k, std::size_t head, float* out,
                        float* keys_t, float* scores) {
  const std::size_t row = 3 * d, q0 = head * d_k, k0 = d + head * d_k, v0 = 2 * d + head * d_k;
  const std::size_t n16 = (n + 15) / 16 * 16, chunks = d_k / 16;
  for (std::size_t c = 0; c < d_k; ++c) {
    for (std::size_t j = 0; j < n; ++j) keys_t[c * n16 + j] = qkv[j * row + k0 + c];
    for (std::size_t j = n; j < n16; ++j) keys_t[c * n16 + j] = 0.0f;  // padding keys: their scores are masked
  }
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(static_cast<float>(d_k)));
  for (std::size_t t = 0; t < n; ++t) {
    const float* q = qkv + t * row + q0;
    __m512 top = _mm512_set1_ps(-INFINITY);
    for (std::size_t j = 0; j < n16; j += 16) {
      __m512 s = _mm512_setzero_ps();
      for (std::size_t c = 0; c < d_k; ++c)
        s = _mm512_fmadd_ps(_mm512_set1_ps(q[c]), _mm512_loadu_ps(keys_t + c * n16 + j), s);
      s = _mm512_mul_ps(s, scale);
      const __mmask16 real = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1u);
      s = _mm512_mask_blend_ps(real, _mm512_set1_ps(-INFINITY), s);  // padding: exp(−∞) = 0
      top = _mm512_max_ps(top, s);
      _mm512_storeu_ps(scores + j, s);
    }
    const __m512 top_all = _mm512_set1_ps(_mm512_reduce_max_ps(top));
    __m512 sum = _mm512_setzero_ps();
    for (std::size_t j = 0; j < n16; j += 16) {
      const __m512 p = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(scores + j), top_all));
      sum = _mm512_add_ps(sum, p);
      _mm512_storeu_ps(scores + j, p);
    }
    __m512 o[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (std::size_t j = 0; j < n; ++j) {
      const __m512 p = _mm512_set1_ps(scores[j]);
      const float* v = qkv + j * row + v0;
      for (std::size_t c = 0; c < chunks; ++c) o[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16 * c), o[c]);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (std::size_t c = 0; c < chunks; ++c) _mm512_storeu_ps(out + t * d + q0 + 16 * c, _mm512_mul_ps(o[c], inv));
  }
}

}  // namespace attn::ch16
