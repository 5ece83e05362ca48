/// \file
/// The softmax passes of a fast attention kernel, written once on the course's vector layer (attn/vector.hpp) and
/// run on the path in use (AVX-512, AVX2+FMA, SVE, NEON or portable): a row's maximum, exp-and-sum, and a rescale. Chapter 05's
/// flash_attention_fast() runs on them, and so does chapter 07's block-sparse kernel for its full tiles.
/// Chapter code, not an exercise.
#pragma once

#include <cstddef>

/// Put before a function: on x86-64 it is compiled three times (x86-64-v4: AVX-512; x86-64-v3: AVX2 with FMA;
/// baseline) and one is picked at load time for the CPU it runs on; elsewhere it is compiled once, for the
/// baseline. The levels name whole instruction sets, so the AVX2 copy gets FMA too (a bare "avx2" clone does not).
/// ATTN_VECTOR_CLONES_TEMPLATE is the same for function templates (chapter 11 compiles its score_mod loop so), with
/// GCC only: Clang 14 cannot clone a template, and compiles it once. Not under ThreadSanitizer: the load-time
/// resolvers (ifuncs) would run instrumented before TSan's runtime is ready and crash before main; a TSan build
/// tests the threads, not the speed.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define ATTN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ATTN_VECTOR_CLONES
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define ATTN_VECTOR_CLONES_TEMPLATE ATTN_VECTOR_CLONES
#else
#define ATTN_VECTOR_CLONES_TEMPLATE
#endif

namespace attn::ch05 {

/// The largest of s[0, n) (-inf when n = 0).
float row_max(const float* s, std::size_t n);

/// s[j] ← e^{s[j] - m} for j in [0, n), returning their sum (exp_nonpositive.inl's polynomial, within a few ulp
/// of e^x on every path). m is the row's running max, or a
/// backward's lse; a score above it counts as m itself (e^0 = 1: a probability is at most 1, where lse rounded below
/// a huge score). Where s[j] − m < −87, e^{s[j] − m} is below the smallest normal float and the result is 0 (-inf, a
/// masked score, included): never a subnormal number, which Intel cores compute many times slower, and nothing
/// beside a sum ≥ 1. Outside the contract (NaN) the result is meaningless (NaN stays NaN) but never undefined
/// behaviour.
float exp_shift_sum(float* s, std::size_t n, float m);

/// o[0, n) ← alpha · o[0, n) (nothing for n = 0; a NaN alpha makes the row NaN, as the product does).
void scale_row(float* o, std::size_t n, float alpha);

}  // namespace attn::ch05
