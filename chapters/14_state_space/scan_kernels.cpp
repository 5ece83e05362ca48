// Chapter 14's scan kernels (scan_kernels.hpp) on the course's vector layer (attn/vector.hpp): scan_kernels.inl
// compiled by Highway once per instruction set, on the Isa below, with chapter 05's exponential for x ≤ 0.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "14_state_space/scan_kernels.cpp"
#include "attn/vector.hpp"  // first: it names the instruction sets

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include <cstddef>

#include "05_flash_cpu/exp_nonpositive.inl"

#include "14_state_space/scan_kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace attn::ch14::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// [isa_highway]
/// The operations scan_kernels.inl is written against, on Highway's vectors of this instruction set (16 floats
/// on AVX-512, 8 on AVX2, 4 on NEON, 1 or 4 on the portable path).
struct Isa {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  static constexpr std::size_t W = hn::MaxLanes(D());  // floats per vector
  static V load(const float* p) { return hn::LoadU(D(), p); }
  static void store(float* p, V v) { hn::StoreU(v, D(), p); }
  static V broadcast(float x) { return hn::Set(D(), x); }
  static V add(V a, V b) { return hn::Add(a, b); }
  static V mul(V a, V b) { return hn::Mul(a, b); }
  static V fma(V a, V b, V c) { return hn::MulAdd(a, b, c); }  // a·b + c, one rounding where the CPU has FMA
  static V min(V a, V b) { return hn::Min(a, b); }
  static V max(V a, V b) { return hn::Max(a, b); }
  static bool all_less(V a, V b) { return hn::AllTrue(D(), hn::Lt(a, b)); }
  static constexpr bool kExpOnBlocks = false;  // one vector at a time, straight from the product
  // The decays e^{Δ·A} have Δ > 0 and A < 0: chapter 05's exponential for x ≤ 0 serves (a decay below e^−87,
  // 1.6e-38, is 0: nothing beside the new input). Not Highway's hwy/contrib/math Exp, accurate for any x: the
  // scan ran measurably slower on it.
  static V exp(V x) { return ch05::HWY_NAMESPACE::ExpNonpositive(D(), x); }
  static void exp_block(float*, std::size_t) {}  // not used (kExpOnBlocks is false)
};
// [isa_highway]

#include "14_state_space/scan_kernels.inl"

/// This instruction set's kernels, named by the vector path they are.
ScanKernels Kernels(const char* isa) { return {isa, Isa::W, "chapter 05's ExpNonpositive", exp_to<>, scan, correct}; }

}  // namespace attn::ch14::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::ch14::detail {

ScanKernels scan_kernels_of(VectorPath path) {
  const char* isa = vector_path_name(path);
  switch (path) {
#if HWY_TARGETS & HWY_AVX3
    case VectorPath::avx512:
      return N_AVX3::Kernels(isa);
#endif
#if HWY_TARGETS & HWY_AVX2
    case VectorPath::avx2:
      return N_AVX2::Kernels(isa);
#endif
#if HWY_TARGETS & HWY_NEON
    case VectorPath::neon:
      return N_NEON::Kernels(isa);
#endif
    default:
      break;
  }
#if HWY_TARGETS & HWY_EMU128  // the portable path: Highway's EMU128, or SCALAR where the compiler cannot build it
  return N_EMU128::Kernels(vector_path_name(VectorPath::portable));
#else
  return N_SCALAR::Kernels(vector_path_name(VectorPath::portable));
#endif
}

}  // namespace attn::ch14::detail
#endif  // HWY_ONCE
