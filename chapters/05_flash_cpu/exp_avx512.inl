// Chapter 05's exponential for scores minus their max, on 16 lanes of AVX-512: exp_nonpositive() of
// row_ops.cpp with the processor's own instructions. Included, inside a namespace of the includer's and a
// `#pragma GCC target("avx512f")` region, by row_ops.cpp (exp_shift_sum) and by chapter 15's csr.cpp (its node
// kernel), so that both run the same exponential. No include guard on purpose (as tile_kernels.inl).
//
// exp_nonpositive() on 16 lanes with AVX-512's own instructions: the same operations in the same order, so the
// same bits (every float ≤ 0 compared, see the commit that brought it), in 16 vector instructions instead of the
// compiler's 21 (and its copies). vscalefps multiplies by 2^k without building 2^k's exponent bits (three integer
// instructions), and its zero-masking gives the negligible lanes their 0 in the same instruction (no clamp, no blend).
inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 kept = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);  // not x < -87 (NaN kept)
  const __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), _mm512_set1_ps(12582912.0f)),
                                 _mm512_set1_ps(12582912.0f));  // round(x / ln2), by the 1.5·2^23 trick
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));  // p·r·r + r + 1
  return _mm512_maskz_scalef_ps(kept, p, k);                                            // p · 2^k, or 0
}
