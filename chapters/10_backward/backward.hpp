/// \file
/// Chapter 10, the backward pass: the contract the learner implements in exercises/10_backward/backward.cpp.
/// Book page: book/10_backward.md.
///
/// Attention's forward is O = softmax(S) V with S = Q Kᵀ / √d_k. Given dO = ∂L/∂O (the gradient of some
/// loss L with respect to the output), the backward pass returns dQ, dK and dV, the gradients of the same
/// loss with respect to the inputs. Written with P = softmax(S) row by row:
///
///     dV = Pᵀ dO          dP = dO Vᵀ          dS = P ∘ (dP − rowsum(dP ∘ P))
///     dQ = dS K / √d_k    dK = dSᵀ Q / √d_k
///
/// attention_backward() stores P (n_q, n_kv); flash_backward() recomputes it tile by tile from Q, K and the
/// forward's log-sum-exp (chapter 05), and never holds anything (n_q, n_kv).
#pragma once

#include <cstddef>

#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch10 Chapter 10: the backward pass
/// The softmax's vector–Jacobian product, full attention's backward, and FlashAttention-2's backward.
/// @{

/// The gradients of a loss with respect to attention's three inputs.
struct AttentionGrads {
  Matrix dQ;  ///< (n_q, d_k) ∂L/∂Q
  Matrix dK;  ///< (n_kv, d_k) ∂L/∂K
  Matrix dV;  ///< (n_kv, d_v) ∂L/∂V
};

/// The softmax's backward, row by row, without forming its Jacobian: for each row p = softmax(s) and the
/// incoming gradient g = ∂L/∂p, returns ∂L/∂s = J g with J = diag(p) − p pᵀ, that is
/// `ds_j = p_j (g_j − Σ_k g_k p_k)`. O(cols) per row instead of the Jacobian's O(cols²).
/// Entries with p_j = 0 (masked keys, fully masked rows) get ds_j = 0 and take no part in the sum, whatever
/// their g_j (even ±inf).
/// \param P (rows, cols) softmax outputs, each row summing to 1 (or all zeros for a fully masked row).
/// \param dP (rows, cols) ∂L/∂P.
/// \return dS (rows, cols) ∂L/∂S.
/// \throws std::invalid_argument naming both shapes when they differ, naming the first NaN/Inf of P, or an entry
///         of dP that is NaN, or ±inf where p ≠ 0.
Matrix softmax_backward(const Matrix& P, const Matrix& dP);

/// Full attention's backward, the textbook way: recompute S and P = softmax(S) (n_q, n_kv) as chapter 02's
/// forward does, keep them, and apply the chain rule box by box (dV = Pᵀ dO, dP = dO Vᵀ,
/// dS = softmax_backward(P, dP), dQ = dS K / √d_k, dK = dSᵀ Q / √d_k).
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param V (n_kv, d_v) values.
/// \param dO (n_q, d_v) ∂L/∂O, the gradient arriving from above.
/// \param mask (n_q, n_kv), true = may attend; (0, 0) (the default) = every pair allowed; any other shape is
///        refused. A query with no allowed key (its output is zero whatever Q, K, V are) gets a zero gradient
///        and gives none.
/// \return dQ (n_q, d_k), dK (n_kv, d_k), dV (n_kv, d_v).
/// \throws std::invalid_argument naming the shapes when Q, K, V, dO or the mask do not fit together, naming the
///         first NaN/Inf of Q, K, V or dO, when a score could overflow (attn/checks.hpp), or when its four
///         (n_q, n_kv) matrices would not fit in memory (naming the estimate, before allocating).
AttentionGrads attention_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO,
                                  const Mask& mask = Mask());

/// One tile of FlashAttention-2's backward: query rows Q_i against keys K_j, V_j. Recomputes
/// P_ij = exp(Q_i K_jᵀ / √d_k − lse_i) (B_r, B_c), 0 where \p allowed is false, and adds the tile's share of
/// the three gradients: dV_j += P_ijᵀ dO_i, dP = dO_i V_jᵀ, dS = P_ij ∘ (dP − D_i), dQ_i += dS K_j / √d_k,
/// dK_j += dSᵀ Q_i / √d_k. Summed over all tiles this is attention_backward(), because
/// D_i = rowsum(dO_i ∘ O_i) equals rowsum(dP ∘ P) over the whole row (book: "The derivation of D").
/// \param Q_i (B_r, d_k) a block of query rows.
/// \param K_j (B_c, d_k) a block of keys.
/// \param V_j (B_c, d_v) their values.
/// \param dO_i (B_r, d_v) ∂L/∂O for the block's rows.
/// \param lse_i (B_r) the forward's log-sum-exp of those rows (chapter 05's FlashOutput::lse); -inf marks a
///        row that saw no key: its P is 0.
/// \param D_i (B_r) rowsum(dO ∘ O) of those rows.
/// \param dQ_i (B_r, d_k) accumulated in place.
/// \param dK_j (B_c, d_k) accumulated in place.
/// \param dV_j (B_c, d_v) accumulated in place.
/// \param allowed (B_r, B_c), true = may attend; (0, 0) (the default) = all pairs allowed; any other shape is refused.
/// P_ij is a probability: exp(s − lse_i) is taken no higher than 1 (an lse rounded below a huge score would make it
/// infinite).
/// \throws std::invalid_argument naming the shapes when they do not fit together, naming the first NaN/Inf of
///         Q_i, K_j, V_j, dO_i or D_i or NaN/+inf of lse_i, or when a score or a product dO_i V_jᵀ could overflow
///         (the course's overflow policy, attn/checks.hpp; nothing is changed then).
void flash_backward_tile(const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Matrix& dO_i,
                         const Vector& lse_i, const Vector& D_i, Matrix& dQ_i, Matrix& dK_j, Matrix& dV_j,
                         const Mask& allowed = Mask());

/// FlashAttention-2's backward: D = rowsum(dO ∘ O), then for every block of \p B_c keys (outer loop) and
/// every block of \p B_r query rows (inner loop) one flash_backward_tile(). With \p causal, tiles wholly
/// above the diagonal (query i sees key j only when j ≤ i + n_kv − n_q) are skipped and tiles it crosses
/// are masked. Extra memory O(n_q + B_r·B_c + (B_r + B_c)·d): nothing (n_q, n_kv) is ever allocated.
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param V (n_kv, d_v) values.
/// \param O (n_q, d_v) the forward's output.
/// \param lse (n_q) the forward's log-sum-exp (chapter 05's flash_attention() returns both).
/// \param dO (n_q, d_v) ∂L/∂O.
/// \param causal apply the causal mask (as the forward did).
/// \param B_r query rows per block (≥ 1): pass the forward's.
/// \param B_c keys per block (≥ 1): pass the forward's. With the forward's tiles, every tile has the shape the
///        forward computed it in (a tile the diagonal crosses is whole and masked in both), so its scores are the
///        same OpenBLAS products and round the same, and exp(s − lse) is the forward's P exactly: with one key far
///        above the others it is 1, and dV = dO. Other tiles give the same gradients up to float rounding.
/// \return dQ (n_q, d_k), dK (n_kv, d_k), dV (n_kv, d_v).
/// \throws std::invalid_argument naming the shapes when the inputs do not fit together, when B_r or B_c is 0,
///         when causal and n_q > n_kv, naming the first NaN/Inf in Q, K, V, O or dO or NaN/+inf in lse, or when a
///         score, a product dO Vᵀ or a sum dO ∘ O could overflow (attn/checks.hpp).
AttentionGrads flash_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& O, const Vector& lse,
                              const Matrix& dO, bool causal, std::size_t B_r, std::size_t B_c);

/// @}

}  // namespace attn
