// Chapter 05's vectorised softmax passes (see row_ops.hpp). Book page: book/05_flash_cpu.md, "A fast kernel".
// Written once on the course's vector layer (attn/vector.hpp: Google Highway), which compiles this file again for
// each instruction set and calls the copy of the path in use.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "05_flash_cpu/row_ops.cpp"
#include "attn/vector.hpp"  // first: it names the instruction sets

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <cstddef>
#include <cstring>
#include <limits>

#include "05_flash_cpu/exp_nonpositive.inl"
#include "05_flash_cpu/row_ops.hpp"

HWY_BEFORE_NAMESPACE();
namespace attn::ch05::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The most floats one vector of this instruction set holds (a buffer for a row's last, partial vector).
constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// s[0, n) ← e^{s - m}, returning their sum: one vector of scores at a time, the sums kept lane by lane. The last
// partial vector is computed in a buffer (never a load or a store past the row).
float ExpShiftSum(float* s, std::size_t n, float m) {
  if (n == 0) return 0.0f;
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto shift = hn::Set(d, m);
  auto sum = hn::Zero(d);
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto e = ExpNonpositive(d, MinZero(d, hn::Sub(hn::LoadU(d, s + j), shift)));
    hn::StoreU(e, d, s + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {
    HWY_ALIGN float tail[kMaxLanes] = {};
    std::memcpy(tail, s + j, (n - j) * sizeof(float));
    const auto e = ExpNonpositive(d, MinZero(d, hn::Sub(hn::Load(d, tail), shift)));
    hn::Store(e, d, tail);
    std::memcpy(s + j, tail, (n - j) * sizeof(float));
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, n - j), e));  // the row's lanes only
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// The largest of s[0, n): "v > max ? v : max" lane by lane, so a NaN score is passed over (as std::max does) on
// every instruction set (a vector max instruction would keep it on some and drop it on others).
float RowMax(const float* s, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  auto best = hn::Set(d, kMinusInf);
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto v = hn::LoadU(d, s + j);
    best = hn::IfThenElse(hn::Gt(v, best), v, best);
  }
  // The lanes' maxima one by one, not hn::MaxOfLanes: Highway's portable one starts from the largest finite
  // negative float, and a row of masked scores would end at −3.4e38 instead of −inf.
  HWY_ALIGN float lane[kMaxLanes];
  hn::Store(best, d, lane);
  float m = kMinusInf;
  for (std::size_t k = 0; k < lanes; ++k) m = lane[k] > m ? lane[k] : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// o[0, n) ← alpha · o[0, n).
void ScaleRow(float* o, std::size_t n, float alpha) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto a = hn::Set(d, alpha);
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, o + j), a), d, o + j);
  for (; j < n; ++j) o[j] *= alpha;
}

}  // namespace attn::ch05::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::ch05 {

HWY_EXPORT(ExpShiftSum);
HWY_EXPORT(RowMax);
HWY_EXPORT(ScaleRow);

float exp_shift_sum(float* s, std::size_t n, float m) { return ATTN_DISPATCH(ExpShiftSum)(s, n, m); }
float row_max(const float* s, std::size_t n) { return ATTN_DISPATCH(RowMax)(s, n); }
void scale_row(float* o, std::size_t n, float alpha) { ATTN_DISPATCH(ScaleRow)(o, n, alpha); }

}  // namespace attn::ch05
#endif  // HWY_ONCE
