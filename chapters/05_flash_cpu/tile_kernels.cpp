// Chapter 05's tile micro-kernels (see tile_kernels.hpp). Book page: book/05_flash_cpu.md, "A fast kernel".
//
// The kernels are written once, in tile_kernels.inl, against an instruction set `Isa` (a vector type and
// a few operations). This file compiles them twice: for AVX-512 and for AVX2+FMA, each copy inside its own
// namespace between ATTN_BEGIN_AVX512 (or ATTN_BEGIN_AVX2_FMA) and ATTN_END_ISA (attn/isa.hpp: GCC's and
// Clang's pragmas for it): register blocking is the lesson here, so the registers are named, not left to a
// library. The copy that runs is the vector layer's path (attn/vector.hpp: the widest the CPU has, or the one
// ATTN_VECTOR_ISA forces). On arm64 a NEON copy is compiled too; on the portable path there is none, and
// flash_attention_fast() calls OpenBLAS.
#include "05_flash_cpu/tile_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/isa.hpp"
#include "attn/vector.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#define ATTN_TILE_KERNELS ATTN_X86_KERNELS

namespace attn::ch05 {
namespace {

#if ATTN_TILE_KERNELS
// [tile_isa]
ATTN_BEGIN_AVX512
namespace avx512 {
struct Isa {
  using V = __m512;
  static constexpr int W = 16;   // floats per register
  static constexpr int MR = 12;  // rows of an S block: 12 × 2 accumulators of the 32 registers (8 × 2: 3% slower)
  static constexpr int MRO = 6;  // rows of an O block: 6 × 4 accumulators (64 columns of O)
  static constexpr int NVO = 4;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V broadcast(float x) { return _mm512_set1_ps(x); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a·b + c with one rounding
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float reduce_max(V a) { return _mm512_reduce_max_ps(a); }      // the largest of the 16 lanes
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }  // prefetcht0: into L1
};
#include "05_flash_cpu/tile_kernels.inl"
}  // namespace avx512
ATTN_END_ISA

ATTN_BEGIN_AVX2_FMA
namespace avx2 {
struct Isa {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int MR = 6;  // 6 × 2 accumulators of the 16 registers
  static constexpr int MRO = 6;
  static constexpr int NVO = 2;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V broadcast(float x) { return _mm256_set1_ps(x); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float reduce_max(V a) {  // the largest of the 8 lanes: halves, then pairs, then neighbours
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_shuffle_ps(x, x, 1)));
  }
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }  // prefetcht0: into L1
};
#include "05_flash_cpu/tile_kernels.inl"
}  // namespace avx2
ATTN_END_ISA
// [tile_isa]
#endif

#if defined(__aarch64__)
#define ATTN_TILE_KERNELS_NEON 1
// NEON, which every arm64 CPU has (no region needed): 4 floats per register and 32 registers, so the blocks of
// AVX-512 fit (12 × 2 accumulators for S, 6 × 4 for O), each a quarter as wide.
namespace neon {
struct Isa {
  using V = float32x4_t;
  static constexpr int W = 4;
  static constexpr int MR = 12;
  static constexpr int MRO = 6;
  static constexpr int NVO = 4;
  static V zero() { return vdupq_n_f32(0.0f); }
  static V load(const float* p) { return vld1q_f32(p); }
  static V broadcast(float x) { return vdupq_n_f32(x); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }  // c + a·b with one rounding
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V max(V a, V b) { return vmaxq_f32(a, b); }
  static float reduce_max(V a) { return vmaxvq_f32(a); }  // the largest of the 4 lanes
  static void prefetch(const char* p) { __builtin_prefetch(p, 0, 3); }
};
#include "05_flash_cpu/tile_kernels.inl"
}  // namespace neon
#else
#define ATTN_TILE_KERNELS_NEON 0
#endif

/// The copy of the kernels this CPU runs, chosen once.
struct Kernels {
  const char* isa = "";
  std::size_t panel_width = 0;  // keys per packed panel: two registers
  void (*scores)(const float*, std::size_t, std::size_t, std::size_t, const float*, std::size_t, float, float*,
                 std::size_t, const std::size_t*, float*) = nullptr;
  void (*pv)(const float*, std::size_t, std::size_t, std::size_t, const float*, std::size_t, std::size_t, float*,
             std::size_t) = nullptr;
};

/// \p wanted if the CPU runs it ("auto": the copy of the vector path in use; "none": none), else an empty Kernels.
Kernels choose_kernels(const std::string& wanted) {
#if ATTN_TILE_KERNELS
  const Kernels wide{"AVX-512", 32, avx512::scores_tile, avx512::accumulate_pv};
  const Kernels narrow{"AVX2+FMA", 16, avx2::scores_tile, avx2::accumulate_pv};
  const std::vector<VectorPath> paths = vector_paths_available();
  const auto runs = [&](VectorPath p) { return std::find(paths.begin(), paths.end(), p) != paths.end(); };
  if (wanted == "auto")
    return vector_path() == VectorPath::avx512 ? wide : vector_path() == VectorPath::avx2 ? narrow : Kernels{};
  if (wanted == wide.isa && runs(VectorPath::avx512)) return wide;
  if (wanted == narrow.isa && runs(VectorPath::avx2)) return narrow;
#elif ATTN_TILE_KERNELS_NEON
  const Kernels neon_kernels{"NEON", 8, neon::scores_tile, neon::accumulate_pv};
  if (wanted == "auto") return vector_path() == VectorPath::neon ? neon_kernels : Kernels{};
  if (wanted == neon_kernels.isa) return neon_kernels;  // every arm64 CPU runs NEON
#else
  (void)wanted;
#endif
  return {};
}

Kernels& kernels() {
  static Kernels chosen = choose_kernels("auto");  // thread-safe initialisation (C++11 statics)
  return chosen;
}

}  // namespace

const char* tile_kernel_isa() { return kernels().isa; }

bool use_tile_kernels(const std::string& isa) {
  const Kernels wanted = choose_kernels(isa);
  if (isa != "none" && isa != "auto" && wanted.panel_width == 0) return false;  // "auto" may be none (NEON, portable)
  kernels() = wanted;
  return true;
}

std::size_t key_panel_width() { return kernels().panel_width; }

std::size_t key_panels(std::size_t n_kv) {
  const std::size_t w = key_panel_width();
  return w == 0 ? 0 : n_kv / w + (n_kv % w != 0 ? 1 : 0);  // ⌈n_kv / w⌉ without the sum that wraps near SIZE_MAX
}

// [pack_keys]
void pack_keys(const float* K, std::size_t n_kv, std::size_t d_k, float* packed) {
  const std::size_t w = key_panel_width();
  for (std::size_t p = 0; p < key_panels(n_kv); ++p) {
    float* panel = packed + p * d_k * w;  // (d_k, w): row k holds feature k of w consecutive keys
    const std::size_t keys = std::min(w, n_kv - p * w);
    std::fill(panel, panel + d_k * w, 0.0f);
    for (std::size_t j = 0; j < keys; ++j)
      for (std::size_t k = 0; k < d_k; ++k) panel[k * w + j] = K[(p * w + j) * d_k + k];
  }
}
// [pack_keys]

namespace {

/// \p h, once the flags (one per head) and, when \p use, the panels of h heads are known to fit in memory: checked
/// before the members allocate anything.
std::size_t heads_that_fit(std::size_t h, std::size_t n_kv, std::size_t d_k, bool use) {
  checked_allocation("PackedKeys: a flag per head", {h, sizeof(std::once_flag)});
  if (use && key_panel_width() > 0)
    checked_allocation("PackedKeys: h × panels × d_k × w floats",
                       {h, key_panels(n_kv), d_k, key_panel_width(), sizeof(float)});
  return h;
}

}  // namespace

PackedKeys::PackedKeys(const float* K, std::size_t h, std::size_t n_kv, std::size_t d_k, bool use)
    // A flag per head only where heads are packed: without micro-kernels (the NEON and portable paths) nothing
    // is, and 2^32 heads would have been 16 GiB of flags for nothing.
    : K_(K), n_kv_(n_kv), d_k_(d_k), packed_(use && key_panel_width() > 0 ? heads_that_fit(h, n_kv, d_k, use) : 0) {
  if (!use || key_panel_width() == 0) return;
  per_head_ = key_panels(n_kv) * d_k * key_panel_width();
  if (h * per_head_ > 0) panels_.reset(new float[h * per_head_]);  // none for no keys or d_k = 0: OpenBLAS then
}

const float* PackedKeys::head(std::size_t h) {
  // One comparison per call (a call per work item): never a read past packed_ or a pack into no buffer.
  if (panels_ == nullptr)
    throw std::out_of_range(fmt::format("PackedKeys::head: head {}: none of the heads is packed (used() is false)", h));
  if (h >= packed_.size())
    throw std::out_of_range(fmt::format("PackedKeys::head: head {} of {} heads", h, packed_.size()));
  std::call_once(packed_[h], [&] { pack_keys(K_ + h * n_kv_ * d_k_, n_kv_, d_k_, panels_.get() + h * per_head_); });
  return panels_.get() + h * per_head_;
}

void scores_tile(const float* Q, std::size_t rows, std::size_t ld_q, std::size_t d_k, const float* K_panels,
                 std::size_t panels, float scale, float* S, std::size_t ld_s, const std::size_t* visible, float* m) {
  // Checked once per tile call, and the message formatted only on failure: the kernels stay the cost.
  if (kernels().scores == nullptr || ld_q < d_k || ld_s / key_panel_width() < panels || (m != nullptr && !visible))
    throw std::invalid_argument(
        fmt::format("scores_tile: kernels '{}', ld_q = {} for d_k = {}, ld_s = {} for {} panels "
                    "of {} keys, row maxima {} with visible columns {}; need micro-kernels, ld_q ≥ d_k, "
                    "ld_s ≥ panels·width and the visible columns wherever the maxima are asked",
                    tile_kernel_isa(), ld_q, d_k, ld_s, panels, key_panel_width(), m ? "asked" : "not asked",
                    visible ? "given" : "not given"));
  kernels().scores(Q, rows, ld_q, d_k, K_panels, panels, scale, S, ld_s, m == nullptr ? nullptr : visible, m);
}

void accumulate_pv(const float* P, std::size_t rows, std::size_t cols, std::size_t ld_p, const float* V,
                   std::size_t ld_v, std::size_t d_v, float* O, std::size_t ld_o) {
  if (kernels().pv == nullptr || ld_p < cols || ld_v < d_v || ld_o < d_v)
    throw std::invalid_argument(
        fmt::format("accumulate_pv: kernels '{}', ld_p = {} for {} columns, ld_v = {} and "
                    "ld_o = {} for d_v = {}; need micro-kernels and leading dimensions ≥ the "
                    "widths",
                    tile_kernel_isa(), ld_p, cols, ld_v, ld_o, d_v));
  kernels().pv(P, rows, cols, ld_p, V, ld_v, d_v, O, ld_o);
}

}  // namespace attn::ch05
