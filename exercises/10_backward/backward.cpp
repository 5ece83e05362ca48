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
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "10_backward";
}

Matrix softmax_backward(const Matrix& P, const Matrix& dP) {
  // TODO(learner): per row, the one number Σ_k dP(r, k)·P(r, k); then dS(r, c) = P(r, c)·(dP(r, c) − that sum).
  //   Check that P and dP have the same shape, P finite and dP finite where p ≠ 0, first. A key with p = 0 (masked)
  //   takes no part: skip it in the sum and leave its dS at 0, even when its dP is ±inf.
  throw not_implemented("softmax_backward", kChapter,
                        "J·g with J = diag(p) − p·pᵀ is p ∘ g − p·(pᵀg): one dot product per row, no Jacobian.");
}

AttentionGrads attention_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO,
                                  const Mask& mask) {
  // TODO(learner): the forward first (chapter 02: scaled_scores, -inf where the mask says no, softmax_rows),
  //   keeping P (n_q, n_kv). Then walk the graph backwards: dV = Pᵀ dO (attn::matmul_transpose_a),
  //   dP = dO Vᵀ, dS = softmax_backward(P, dP), dQ = dS K / √d_k, dK = dSᵀ Q / √d_k. Reject bad shapes, NaN/Inf
  //   (attn::require_attention_inputs, attn::require_finite) and, before allocating, four (n_q, n_kv) matrices
  //   that cannot fit (attn::checked_allocation).
  throw not_implemented("attention_backward", kChapter,
                        "O = P·V and S = Q·Kᵀ/√d_k: each product's gradient is the other factor, transposed.");
}

void flash_backward_tile(const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Matrix& dO_i,
                         const Vector& lse_i, const Vector& D_i, Matrix& dQ_i, Matrix& dK_j, Matrix& dV_j,
                         const Mask& allowed) {
  // TODO(learner): check every shape and NaN/Inf (lse_i may be -inf) before touching dQ_i, dK_j, dV_j.
  //   P = exp(Q_i K_jᵀ/√d_k − lse_i) per row (0 where allowed is false or lse_i is -inf), with the scores computed
  //   exactly as chapter 05's tile_step computed them (the same product, 1/√d_k as its alpha), so they round the
  //   same; dV_j += Pᵀ dO_i; dP = dO_i V_jᵀ; dS = P ∘ (dP − D_i); dQ_i += dS K_j / √d_k; dK_j += dSᵀ Q_i / √d_k.
  throw not_implemented("flash_backward_tile", kChapter,
                        "recompute P from the log-sum-exp (exp(s − lse)), and use D_i where the row sum of dP∘P was.");
}

AttentionGrads flash_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& O, const Vector& lse,
                              const Matrix& dO, bool causal, std::size_t B_r, std::size_t B_c) {
  // TODO(learner): reject bad shapes, B_r or B_c = 0, causal with n_q > n_kv, NaN/Inf in Q, K, V, O, dO and lse
  //   (attn::require_attention_inputs, attn::require_finite; lse may be -inf).
  //   D = rowsum(dO ∘ O) (n_q). Outer loop over key blocks (dK_j, dV_j live there), inner loop over query blocks:
  //   skip the tiles a causal mask hides entirely, mask the tiles the diagonal crosses, flash_backward_tile.
  //   Never build anything (n_q, n_kv): a test measures the heap.
  throw not_implemented("flash_backward", kChapter,
                        "chapter 05's two loops, turned inside out: key blocks outside, query blocks inside.");
}

}  // namespace attn
