/// \file
/// The backward's one row pass of its own (the others are chapter 05's row_ops.hpp): the softmax's
/// vector–Jacobian product for one row of a tile, written once on the course's vector layer (attn/vector.hpp).
/// Chapter code, not an exercise.
#pragma once

#include <cstddef>

namespace attn::ch10::detail {  // the fast backward's own pass (backward_fast.cpp), not a function of the chapter

/// dp[0, n) ← scale · p ∘ (dp − D): the softmax's backward with D standing in for rowsum(dP ∘ P), times the
/// 1/√d_k that both dQ and dK carry (so their products need no alpha). p and dp must not overlap.
void softmax_grad_row(const float* p, float* dp, std::size_t n, float D, float scale);

}  // namespace attn::ch10::detail
