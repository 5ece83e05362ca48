// Chapter 10's softmax backward row pass (grad_row.hpp), on the vector layer: compiled again per instruction set.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "10_backward/grad_row.cpp"
#include "attn/vector.hpp"  // first: it names the instruction sets

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <cstddef>

#include "10_backward/grad_row.hpp"

HWY_BEFORE_NAMESPACE();
namespace attn::ch10::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SoftmaxGradRow(const float* p, float* dp, std::size_t n, float D, float scale) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto vD = hn::Set(d, D), vscale = hn::Set(d, scale);
  std::size_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto g = hn::Mul(hn::LoadU(d, p + j), hn::Sub(hn::LoadU(d, dp + j), vD));  // p ∘ (dp − D)
    hn::StoreU(hn::Mul(vscale, g), d, dp + j);
  }
  for (; j < n; ++j) dp[j] = scale * (p[j] * (dp[j] - D));  // the same operations, one float at a time
}

}  // namespace attn::ch10::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::ch10 {

HWY_EXPORT(SoftmaxGradRow);

namespace detail {

void softmax_grad_row(const float* p, float* dp, std::size_t n, float D, float scale) {
  ATTN_DISPATCH(SoftmaxGradRow)(p, dp, n, D, scale);
}

}  // namespace detail
}  // namespace attn::ch10
#endif  // HWY_ONCE
