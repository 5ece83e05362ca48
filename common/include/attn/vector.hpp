/// \file
/// The course's one vector layer: which instruction sets its fast kernels are compiled for, which one runs, and
/// how a reader forces another. The kernels are written once with Google Highway's portable vector operations
/// (Debian's libhwy-dev) and compiled by Highway once per instruction set; at run time each call goes to the
/// widest one the CPU has, or to the one the environment variable ATTN_VECTOR_ISA names:
///
/// | ATTN_VECTOR_ISA | path (vector_path_name) | what runs                                                  |
/// |-----------------|-------------------------|------------------------------------------------------------|
/// | avx512          | "AVX-512"               | x86-64 with AVX-512 F, BW, DQ and VL (16 floats a vector)  |
/// | avx2            | "AVX2+FMA"              | x86-64 with AVX2, FMA, BMI2 and F16C (8 floats)            |
/// | neon            | "NEON"                  | arm64's Advanced SIMD, with AES (Highway's NEON target)    |
/// | portable        | "portable"              | plain C++, one or a few lanes: any CPU                     |
///
/// A kernel's source file follows Highway's pattern (chapter 05's row_ops.cpp is the one to read first):
///
///     #undef HWY_TARGET_INCLUDE
///     #define HWY_TARGET_INCLUDE "05_flash_cpu/row_ops.cpp"  // this file, compiled again per instruction set
///     #include "attn/vector.hpp"                              // first: it names the instruction sets
///     #include <hwy/foreach_target.h>
///     #include <hwy/highway.h>
///     HWY_BEFORE_NAMESPACE();
///     namespace attn::ch05::HWY_NAMESPACE { ... the kernel, on hwy::HWY_NAMESPACE's operations ... }
///     HWY_AFTER_NAMESPACE();
///     #if HWY_ONCE
///     namespace attn::ch05 { HWY_EXPORT(Kernel); float kernel(...) { return ATTN_DISPATCH(Kernel)(...); } }
///     #endif
///
/// ATTN_DISPATCH is Highway's HWY_DYNAMIC_DISPATCH after vector_path() has applied the override, so the first
/// kernel a program calls already runs on the forced path.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

// The instruction sets Highway compiles every kernel for: AVX-512, AVX2 (with FMA), NEON and the portable
// fallback, nothing else (Highway would also build SSSE3, SSE4 and further AVX-512 variants: more compile time
// and more paths to test, for no kernel of the course). Not SVE: its vectors have no size the compiler knows, so
// they cannot be held in arrays, and the register-blocked kernels (chapters 09 and 15) hold their accumulators
// so; an SVE CPU runs the NEON path, which every arm64 CPU has. Highway reads this before its own headers,
// so this header comes first in a kernel's file; one definition for every file, because a kernel compiled for a
// set another file lacks would make the "path in use" differ between kernels.
#if defined(HIGHWAY_HWY_DETECT_TARGETS_H_)
#error "attn/vector.hpp must come before Highway's headers: it names the instruction sets Highway compiles"
#endif
#if defined(HWY_DISABLED_TARGETS)
#error "HWY_DISABLED_TARGETS is set by attn/vector.hpp alone (the course's one list of instruction sets)"
#endif
#define HWY_DISABLED_TARGETS (~(HWY_AVX3 | HWY_AVX2 | HWY_NEON | HWY_EMU128 | HWY_SCALAR))
// Every one of them, the portable one included: by default Highway compiles only the baseline and better ones, and
// on arm64 (NEON is arm64's baseline) there would be no portable copy for ATTN_VECTOR_ISA=portable to run.
#if defined(HWY_COMPILE_ALL_ATTAINABLE)
#error "HWY_COMPILE_ALL_ATTAINABLE is set by attn/vector.hpp alone"
#endif
#define HWY_COMPILE_ALL_ATTAINABLE

/// HWY_DYNAMIC_DISPATCH(fn), once the path is chosen (ATTN_VECTOR_ISA applied): use it, never Highway's own.
#define ATTN_DISPATCH(fn) ((void)::attn::vector_path(), HWY_DYNAMIC_DISPATCH(fn))

// For the one kind of kernel Highway cannot compile per instruction set: a template a header must keep, because
// its caller's type is part of it (chapter 11's loop over any score_mod). Such a template is instantiated with each
// of these attributes (Highway's own instruction sets for its AVX3 and AVX2 targets) and picks the copy by
// vector_path(); an always_inline body is compiled with its caller's instructions. ATTN_VECTOR_X86: they exist.
#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_VECTOR_X86 1
#define ATTN_TARGET_AVX2 __attribute__((target("sse4.2,popcnt,avx,avx2,bmi,bmi2,fma,f16c")))
#define ATTN_TARGET_AVX512 \
  __attribute__((target("sse4.2,popcnt,avx,avx2,bmi,bmi2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw")))
#else
#define ATTN_VECTOR_X86 0
#endif

namespace attn {

/// One of the instruction sets a kernel runs on, widest x86 first.
enum class VectorPath { avx512, avx2, neon, portable };

/// The name a program prints: "AVX-512", "AVX2+FMA", "NEON" or "portable".
const char* vector_path_name(VectorPath path);

/// The value of ATTN_VECTOR_ISA that forces \p path: "avx512", "avx2", "neon" or "portable".
const char* vector_path_key(VectorPath path);

/// The paths this CPU can run, widest first (portable always last), as the course compiled them.
std::vector<VectorPath> vector_paths_available();

/// The rule vector_path() applies, on its own: \p forced is ATTN_VECTOR_ISA's value (nullptr or "" when unset:
/// the first of \p available). Throws std::invalid_argument, naming the value and the paths \p available, when
/// \p forced is no path's key or a path this CPU cannot run.
VectorPath vector_path_for(const char* forced, const std::vector<VectorPath>& available);

namespace detail {
/// Chooses the path (vector_path_for with the environment's ATTN_VECTOR_ISA) and makes Highway dispatch to it.
VectorPath choose_vector_path();
}  // namespace detail

/// The path the fast kernels run on in this process: the widest the CPU has, or ATTN_VECTOR_ISA's. Chosen at
/// the first call (then fixed: a kernel never changes path mid-run); throws std::invalid_argument there on an
/// ATTN_VECTOR_ISA this CPU cannot honour.
inline VectorPath vector_path() {
  static const VectorPath path = detail::choose_vector_path();
  return path;
}

/// The floats in one vector of the path in use, as a kernel dispatched by ATTN_DISPATCH sees them: 16 on
/// AVX-512, 8 on AVX2+FMA, 4 on NEON, 1 or 4 on the portable path (Highway's SCALAR or EMU128).
std::size_t vector_lanes();

/// The FMA peak's loop on the path in use (fma_loop.cpp): kFmaChains chains of \p iterations multiply-adds each,
/// on vector_lanes() floats. What attn::fma_peak_gflops() times.
constexpr int kFmaChains = 12;
float fma_loop(long iterations);

/// vector_path_name(vector_path()), and when ATTN_VECTOR_ISA forced a path narrower than the CPU's widest, that
/// too: "AVX2+FMA (ATTN_VECTOR_ISA)". What the course's machine lines print (attn::machine_line()).
std::string vector_path_description();

}  // namespace attn
