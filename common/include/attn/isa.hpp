/// \file
/// Compiling a region of code for one x86-64 instruction set, with GCC or Clang: the micro-kernels written with
/// intrinsics, where register blocking is the lesson (chapter 05's tile kernels, chapter 16's packed product), sit
/// between ATTN_BEGIN_AVX512 (or ATTN_BEGIN_AVX2_FMA) and ATTN_END_ISA, and the caller runs a region's functions
/// only on the vector path of their instruction set (attn::vector_path(), attn/vector.hpp). Every other kernel is
/// written once on the vector layer instead. ATTN_X86_KERNELS says whether such regions exist in this build:
/// x86-64 with GCC or Clang.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define ATTN_X86_KERNELS 1
#include <immintrin.h>
#else
#define ATTN_X86_KERNELS 0
#endif

// GCC's `#pragma GCC target` applies to every function after it; Clang ignores that pragma and has its own, which
// attaches the target attribute to each function declared in the region (templates and class members included).
#if ATTN_X86_KERNELS && defined(__clang__)
#define ATTN_BEGIN_AVX512 _Pragma("clang attribute push(__attribute__((target(\"avx512f\"))), apply_to = function)")
#define ATTN_BEGIN_AVX2_FMA _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
#define ATTN_END_ISA _Pragma("clang attribute pop")
#elif ATTN_X86_KERNELS
#define ATTN_BEGIN_AVX512 _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f\")")
#define ATTN_BEGIN_AVX2_FMA _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define ATTN_END_ISA _Pragma("GCC pop_options")
#endif
