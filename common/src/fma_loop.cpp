// The FMA peak's loop (attn/ceilings.hpp, fma_peak_gflops), on the vector layer: compiled again per instruction
// set (attn/vector.hpp), so the peak is measured on the path the kernels run.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "../src/fma_loop.cpp"  // this file, found from common/include
#include "attn/vector.hpp"

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace attn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// [fma_peak]
// kFmaChains independent accumulators: an FMA's result is ready after ~4 cycles and a core starts up to two per
// cycle, so at least 8 chains must be in flight to keep both units busy; 12 leave margin and still fit in the 16
// vector registers of AVX2 (NEON and AVX-512 have 32). acc ← acc·a + b with a + b = 1 stays near 1: no overflow,
// no denormals (which would slow the loop down). Returns the sum, which the caller uses, so the loop stays.
float FmaLoop(long iterations) {
  using D = hn::ScalableTag<float>;
  const D d;
  hn::Vec<D> acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = hn::Set(d, 1.0f + 0.01f * static_cast<float>(c));
  const auto a = hn::Set(d, 0.999f), b = hn::Set(d, 0.001f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = hn::MulAdd(acc[c], a, b);  // one instruction where there is FMA
  }
  float sum = 0.0f;
  for (int c = 0; c < kFmaChains; ++c) sum += hn::GetLane(hn::SumOfLanes(d, acc[c]));
  return sum;
}
// [fma_peak]

}  // namespace attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn {

HWY_EXPORT(FmaLoop);
float fma_loop(long iterations) { return ATTN_DISPATCH(FmaLoop)(iterations); }

}  // namespace attn
#endif  // HWY_ONCE
