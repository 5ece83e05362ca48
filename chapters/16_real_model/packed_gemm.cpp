// Chapter 16's product on weights laid out in panels (fast_minilm.cpp's pack_linear()), in a copy per path of the
// course's vector layer (fast_kernels.hpp).
//
// The micro-kernel is written once, in packed_gemm.inl, against an instruction set `Isa`. This file compiles it
// for AVX-512 and for AVX2+FMA, each copy inside its own namespace between ATTN_BEGIN_AVX512 (or
// ATTN_BEGIN_AVX2_FMA) and ATTN_END_ISA (attn/isa.hpp: GCC's and Clang's pragmas for it), and for NEON on arm64
// (every arm64 CPU has it: no region needed). The copy is the path's of attn::vector_path().
// The register tile is the lesson: the most accumulators the register file holds beside the weights of one step and a
// broadcast.
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

#include "16_real_model/fast_kernels.hpp"
#include "attn/isa.hpp"
#include "attn/vector.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace attn::ch16::detail {
namespace {

#if ATTN_X86_KERNELS
// [packed_isa]
ATTN_BEGIN_AVX512
namespace avx512 {
struct Isa {
  using V = __m512;
  static constexpr int W = 16;   // floats per register
  static constexpr int MR = 12;  // 12 rows × 2 vectors (two panels): 24 accumulators + 2 weights + a broadcast, of 32
  static constexpr int NV = 2;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }      // a·b + c with one rounding
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }  // prefetcht0: into L1
};
#include "16_real_model/packed_gemm.inl"
}  // namespace avx512
ATTN_END_ISA

ATTN_BEGIN_AVX2_FMA
namespace avx2 {
struct Isa {
  using V = __m256;
  static constexpr int W = 8;
  // 6 rows × 2 vectors (one panel of 16 columns): 12 accumulators + 2 weights + a broadcast, of 16 registers. Per
  // input, 2 loads and 6 broadcasts feed 12 multiply-adds, within the two load ports' reach (4 rows × 3 vectors
  // would use all 16 registers and straddle the panels of 16). A sentence of a dozen tokens is two blocks of 6.
  static constexpr int MR = 6;
  static constexpr int NV = 2;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }
};
#include "16_real_model/packed_gemm.inl"
}  // namespace avx2
ATTN_END_ISA
// [packed_isa]
#endif

#if defined(__aarch64__)
namespace neon {
struct Isa {
  using V = float32x4_t;
  static constexpr int W = 4;
  // 6 rows × 4 vectors (one panel of 16 columns): 24 accumulators + 4 weights + a broadcast, of 32 registers.
  static constexpr int MR = 6;
  static constexpr int NV = 4;
  static V load(const float* p) { return vld1q_f32(p); }
  static V broadcast(float x) { return vdupq_n_f32(x); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }  // c + a·b with one rounding
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }
};
#include "16_real_model/packed_gemm.inl"
}  // namespace neon
#endif

}  // namespace

bool has_packed_gemm() {
  switch (vector_path()) {
#if ATTN_X86_KERNELS
    case VectorPath::avx512:
    case VectorPath::avx2:
      return true;
#endif
#if defined(__aarch64__)
    case VectorPath::neon:
      return true;
#endif
    default:
      return false;
  }
}

void packed_gemm(const float* X, std::size_t n, std::size_t in, const float* panels, std::size_t out, const float* bias,
                 float* Y) {
  switch (vector_path()) {
#if ATTN_X86_KERNELS
    case VectorPath::avx512:
      return avx512::packed_gemm(X, n, in, panels, out, bias, Y);
    case VectorPath::avx2:
      return avx2::packed_gemm(X, n, in, panels, out, bias, Y);
#endif
#if defined(__aarch64__)
    case VectorPath::neon:
      return neon::packed_gemm(X, n, in, panels, out, bias, Y);
#endif
    default:
      throw std::logic_error(
          fmt::format("packed_gemm: the {} path has no copy of the packed product", vector_path_name(vector_path())));
  }
}

}  // namespace attn::ch16::detail
