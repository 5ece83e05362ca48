// Chapter 05's vectorised softmax passes (see row_ops.hpp). Book page: book/05_flash_cpu.md, "A fast kernel".
#include "05_flash_cpu/row_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attn/isa.hpp"

#define ATTN_ROW_OPS_AVX512 ATTN_X86_KERNELS

namespace attn::ch05 {
namespace {

// Each loop below is compiled three times (AVX-512, AVX2, baseline): ATTN_VECTOR_CLONES, row_ops.hpp.

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr std::size_t kLanes = 16;  // independent partial results, so the loops vectorise without fast-math

// [vector_exp]
// e^x for x ≤ 0 (scores minus their running max), Cephes' expf: x = k·ln2 + r with |r| ≤ ln2/2,
// e^r by a degree-6 polynomial, 2^k by writing the exponent bits. Branch-free, so it vectorises.
// Below −87, e^x is under float's smallest normal number (1.2e-38) and the result is 0: nothing beside ℓ ≥ 1,
// and exactly 0 for a masked −inf. Not the clamped e^-87 ≈ 1.6e-38: a row of such weights times V sums
// subnormal numbers, which Intel's cores compute through a microcode assist, tens of times slower (chapter 11's
// ALiBi, whose distant keys all land there, ran at a quarter of the speed).
inline float exp_nonpositive(float x) {
  const bool negligible = x < -87.0f;
  x = negligible ? -87.0f : x;  // keeps 2^k a normal float
  // k = round(x / ln2) by the 1.5·2^23 trick: adding it leaves round(x / ln2) in the low mantissa bits, read as
  // an integer for 2^k's exponent below. Unsigned arithmetic on those bits is defined for any x (NaN and x > 0,
  // outside the contract, give a meaningless 2^k, and a NaN still reaches the result via r), so x needs no
  // clamp to [-87, 0] nor a float-to-int conversion. That clamp was a select the compiler split the loop on:
  // it evaluated the polynomial twice, 52 instructions per 16 lanes against 28 now, for the same bits.
  const float shifted = x * 1.44269504f + 12582912.0f;
  std::uint32_t k_bits;
  std::memcpy(&k_bits, &shifted, sizeof k_bits);
  const float k = shifted - 12582912.0f;
  float r = x - k * 0.693359375f;  // ln2 split in two for exactness
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::uint32_t bits = (k_bits - 0x4B400000u + 127u) << 23;  // 2^k: 0x4B400000 is 1.5·2^23's bits
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  return negligible ? 0.0f : p * two_k;
}

// s[0, n) ← e^{s - m}, returning their sum: the plain loop, vectorised by the compiler for each instruction set.
ATTN_VECTOR_CLONES float exp_shift_sum_loops(float* s, std::size_t n, float m) {
  float lane[kLanes] = {};
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) lane[k] += (s[j + k] = exp_nonpositive(std::min(s[j + k] - m, 0.0f)));
  float sum = 0.0f;
  for (; j < n; ++j) sum += (s[j] = exp_nonpositive(std::min(s[j] - m, 0.0f)));
  for (float v : lane) sum += v;
  return sum;
}
// [vector_exp]

#if ATTN_ROW_OPS_AVX512
ATTN_BEGIN_AVX512
namespace avx512 {

#include "05_flash_cpu/exp_avx512.inl"

// The same sums as exp_shift_sum_loops(): sixteen lanes, the tail added in order, then the lanes in order.
float exp_shift_sum(float* s, std::size_t n, float m) {
  const __m512 shift = _mm512_set1_ps(m), zero = _mm512_setzero_ps();
  __m512 lanes = _mm512_setzero_ps();
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    // min(0, x) with 0 first: where x is NaN, vminps gives its second operand, so NaN stays NaN.
    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(s + j), shift);
    const __m512 e = exp_nonpositive(_mm512_maskz_min_ps(0xFFFF, zero, x));
    _mm512_storeu_ps(s + j, e);
    lanes = _mm512_add_ps(lanes, e);
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1u);  // n - j < 16
  float e[kLanes], lane[kLanes];
  const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), shift);
  _mm512_storeu_ps(e, exp_nonpositive(_mm512_maskz_min_ps(0xFFFF, zero, x)));
  _mm512_mask_storeu_ps(s + j, tail, _mm512_loadu_ps(e));
  _mm512_storeu_ps(lane, lanes);
  float sum = 0.0f;
  for (std::size_t t = 0; t < n - j; ++t) sum += e[t];
  for (float v : lane) sum += v;
  return sum;
}

}  // namespace avx512
ATTN_END_ISA
#endif

}  // namespace

float exp_shift_sum(float* s, std::size_t n, float m) {
#if ATTN_ROW_OPS_AVX512
  static const bool wide = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  if (wide) return avx512::exp_shift_sum(s, n, m);
#endif
  return exp_shift_sum_loops(s, n, m);
}

ATTN_VECTOR_CLONES float row_max(const float* s, std::size_t n) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kMinusInf);
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) lane[k] = s[j + k] > lane[k] ? s[j + k] : lane[k];
  float m = kMinusInf;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  for (float v : lane) m = v > m ? v : m;
  return m;
}

ATTN_VECTOR_CLONES void scale_row(float* o, std::size_t n, float alpha) {
  for (std::size_t j = 0; j < n; ++j) o[j] *= alpha;
}

}  // namespace attn::ch05
