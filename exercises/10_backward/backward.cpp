// Chapter 10, your exercises. Book page: book/10_backward.md.
// Check your progress with `./course check 10`; stuck? `./course hint 10`.
// Watch your code run the chapter: `./course run 10 --track exercise`.
// Suggested order: softmax_backward, attention_backward, flash_backward_tile, flash_backward.
#include "10_backward/backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "10_backward";
}

Matrix softmax_backward(const Matrix& P, const Matrix& dP) {
  // TODO(learner): dS, the gradient of the loss with respect to the scores, from P and dP row by row,
  //   without building a Jacobian (backward.hpp states the formula and what it refuses).
  throw not_implemented("softmax_backward", kChapter,
                        "J·g with J = diag(p) − p·pᵀ is p ∘ g − p·(pᵀg): one dot product per row, no Jacobian.");
}

AttentionGrads attention_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO,
                                  const Mask& mask) {
  // TODO(learner): dQ, dK and dV of attention (with the mask, when given), from the forward's pieces and
  //   dO; bad input (shapes, NaN/Inf, sizes that cannot be allocated) is refused as backward.hpp says. The
  //   page derives each product's gradient.
  throw not_implemented("attention_backward", kChapter,
                        "O = P·V and S = Q·Kᵀ/√d_k: each product's gradient is the other factor, transposed.");
}

void flash_backward_tile(const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Matrix& dO_i,
                         const Vector& lse_i, const Vector& D_i, Matrix& dQ_i, Matrix& dK_j, Matrix& dV_j,
                         const Mask& allowed) {
  // TODO(learner): add this tile's share of dQ_i, dK_j and dV_j, knowing only the tile, the forward's
  //   log-sum-exp and D_i (never the rest of the row), its scores rounded as chapter 05's tile_step rounds
  //   them. Nothing may change when the input is refused. Check the mask with attn::require_mask_shape and dO_i
  //   against V_j with attn::require_bounded_products (dP = dO_i V_jᵀ must not overflow); P is a probability:
  //   take exp(s − lse) no higher than 1.
  throw not_implemented("flash_backward_tile", kChapter,
                        "recompute P from the log-sum-exp (exp(s − lse)), and use D_i where the row sum of dP∘P was.");
}

AttentionGrads flash_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& O, const Vector& lse,
                              const Matrix& dO, bool causal, std::size_t B_r, std::size_t B_c) {
  // TODO(learner): the whole backward in tiles, FlashAttention-2's order, with flash_backward_tile(); causal
  //   skips what the mask hides entirely. Never anything (n_q, n_kv): a test measures the heap. Bad input
  //   is refused as backward.hpp says (dO against V and against O with attn::require_bounded_products).
  throw not_implemented("flash_backward", kChapter,
                        "chapter 05's two loops, turned inside out: key blocks outside, query blocks inside.");
}

}  // namespace attn
