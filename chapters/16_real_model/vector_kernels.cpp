// Chapter 16's fast forward: GELU and one head's attention, written once on the course's vector layer
// (attn/vector.hpp: Google Highway), which compiles this file again for each instruction set and calls the copy of
// the path in use. The exponential is chapter 05's (exp_nonpositive.inl): both kernels take e^x of x ≤ 0 only.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "16_real_model/vector_kernels.cpp"
#include "attn/vector.hpp"  // first: it names the instruction sets

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "05_flash_cpu/exp_nonpositive.inl"
#include "16_real_model/fast_kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace attn::ch16::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using attn::ch05::HWY_NAMESPACE::ExpNonpositive;

// The most floats one vector of this instruction set holds (a buffer for the last, partial vector).
constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// [gelu_vector]
// GELU in place, x·½·(1 + erf(x/√2)), with erf by Abramowitz and Stegun's formula 7.1.26: erf(u) ≈ 1 − (a₁t + a₂t²
// + … + a₅t⁵)·e^(−u²) with t = 1/(1 + p·|u|), |error| ≤ 1.5·10⁻⁷, the sign of u put back. It is the formula of
// PyTorch's own vectorised CPU erf (Vectorized<float>::erf in ATen), so the GELU the reference embeddings were
// computed with: one division and one exponential per element. y (n): a whole vector at a time, the last partial
// one in a buffer (never a load or a store past y's end).
void GeluInPlace(float* HWY_RESTRICT y, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f), inv_sqrt2 = hn::Set(d, 0.70710678118654752f),
             p = hn::Set(d, 0.3275911f), a1 = hn::Set(d, 0.254829592f), a2 = hn::Set(d, -0.284496736f),
             a3 = hn::Set(d, 1.421413741f), a4 = hn::Set(d, -1.453152027f), a5 = hn::Set(d, 1.061405429f);
  const auto gelu = [&](decltype(one) x) {
    const auto u = hn::Mul(x, inv_sqrt2);  // erf's argument x/√2
    const auto t = hn::Div(one, hn::MulAdd(p, hn::Abs(u), one));
    auto r = hn::MulAdd(a5, t, a4);
    r = hn::MulAdd(r, t, a3);
    r = hn::MulAdd(r, t, a2);
    r = hn::MulAdd(r, t, a1);
    const auto e = ExpNonpositive(d, hn::Neg(hn::Mul(u, u)));                // e^(−u²)
    const auto erf = hn::CopySign(hn::NegMulAdd(hn::Mul(e, t), r, one), u);  // ±(1 − e·t·r)
    return hn::Mul(hn::Mul(half, x), hn::Add(one, erf));
  };
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(gelu(hn::LoadU(d, y + i)), d, y + i);
  if (i < n) {
    HWY_ALIGN float tail[kMaxLanes] = {};
    std::memcpy(tail, y + i, (n - i) * sizeof(float));
    hn::Store(gelu(hn::Load(d, tail)), d, tail);
    std::memcpy(y + i, tail, (n - i) * sizeof(float));
  }
}
// [gelu_vector]

// [attention_vector]
// softmax(q_t·Kᵀ/√d_k)·V for every row t of one head of one sentence, read from the fused rows qkv (n, 3d) (Q, K, V
// side by side, the head's d_k columns at head·d_k in each) and written into the head's columns of out (n, d).
// keys_t: scratch of d_k · n16 floats, scores: n16, with n16 = n rounded up to 16 (a whole number of vectors for
// every path whose vectors hold at most 16 floats). Kᵀ (d_k, n16) first, so that a vector of scores comes from d_k
// multiply-adds of a vector of keys; the exponentials a vector at a time; the output row a vector of its d_k columns at
// a time over the keys. d_k must be a multiple of the vector's lanes.
void AttendHead(const float* HWY_RESTRICT qkv, std::size_t n, std::size_t d, std::size_t d_k, std::size_t head,
                float* HWY_RESTRICT out, float* HWY_RESTRICT keys_t, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df), row = 3 * d, q0 = head * d_k, k0 = d + head * d_k, v0 = 2 * d + head * d_k;
  const std::size_t n16 = (n + 15) / 16 * 16, nv = (n + lanes - 1) / lanes * lanes;  // keys in whole vectors
  for (std::size_t c = 0; c < d_k; ++c) {
    for (std::size_t j = 0; j < n; ++j) keys_t[c * n16 + j] = qkv[j * row + k0 + c];
    for (std::size_t j = n; j < nv; ++j) keys_t[c * n16 + j] = 0.0f;  // padding keys: their scores are masked
  }
  const auto scale = hn::Set(df, 1.0f / std::sqrt(static_cast<float>(d_k))), minus_inf = hn::Set(df, -INFINITY);
  for (std::size_t t = 0; t < n; ++t) {
    const float* q = qkv + t * row + q0;
    auto top = minus_inf;
    for (std::size_t j = 0; j < nv; j += lanes) {
      auto s = hn::Zero(df);
      for (std::size_t c = 0; c < d_k; ++c) s = hn::MulAdd(hn::Set(df, q[c]), hn::LoadU(df, keys_t + c * n16 + j), s);
      s = hn::IfThenElse(hn::FirstN(df, n - j), hn::Mul(s, scale), minus_inf);  // padding: exp(−∞) = 0
      top = hn::Max(top, s);
      hn::StoreU(s, df, scores + j);
    }
    const auto top_all = hn::MaxOfLanes(df, top);  // every lane the row's largest score
    auto sum = hn::Zero(df);
    for (std::size_t j = 0; j < nv; j += lanes) {
      const auto e = ExpNonpositive(df, hn::Sub(hn::LoadU(df, scores + j), top_all));  // −∞ (padding) gives 0
      sum = hn::Add(sum, e);
      hn::StoreU(e, df, scores + j);
    }
    const auto inv = hn::Div(hn::Set(df, 1.0f), hn::SumOfLanes(df, sum));
    float* o = out + t * d + q0;
    for (std::size_t c = 0; c < d_k; c += lanes) {  // a vector of output columns, summed over the keys
      auto acc = hn::Zero(df);
      for (std::size_t j = 0; j < n; ++j)
        acc = hn::MulAdd(hn::Set(df, scores[j]), hn::LoadU(df, qkv + j * row + v0 + c), acc);
      hn::StoreU(hn::Mul(acc, inv), df, o + c);
    }
  }
}
// [attention_vector]

}  // namespace attn::ch16::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::ch16::detail {

HWY_EXPORT(GeluInPlace);
HWY_EXPORT(AttendHead);

void gelu_vector(float* y, std::size_t n) { ATTN_DISPATCH(GeluInPlace)(y, n); }

bool attention_vector_fits(std::size_t d_k) {
  const std::size_t lanes = vector_lanes();
  return lanes > 0 && 16 % lanes == 0 && d_k % lanes == 0;
}

void attend_head_vector(const float* qkv, std::size_t n, std::size_t d, std::size_t d_k, std::size_t head, float* out,
                        float* keys_t, float* scores) {
  ATTN_DISPATCH(AttendHead)(qkv, n, d, d_k, head, out, keys_t, scores);
}

}  // namespace attn::ch16::detail
#endif  // HWY_ONCE
