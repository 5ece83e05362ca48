/// \file
/// The softmax passes of a fast attention kernel, written once on the course's vector layer (attn/vector.hpp) and
/// run on the path in use (AVX-512, AVX2+FMA, NEON or portable): a row's maximum, exp-and-sum, and a rescale.
/// Chapter 05's flash_attention_fast() runs on them, and so does chapter 07's block-sparse kernel for its full
/// tiles.
/// Chapter code, not an exercise.
#pragma once

#include <cstddef>

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
