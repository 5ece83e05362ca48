/// \file
/// Chapter 10's oracle: attention's gradients in float64, twice and independently: from the chain rule
/// written out entry by entry, and from central differences of the loss (no calculus at all).
#pragma once

#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// ∂L/∂Q (n_q, d_k), ∂L/∂K (n_kv, d_k), ∂L/∂V (n_kv, d_v).
struct Grads {
  Mat dQ, dK, dV;
};

/// The loss whose gradients the chapter computes: L = Σ_ic dO_ic · O_ic with O = attention(Q, K, V), so that
/// ∂L/∂O = dO. Q (n_q, d_k), K (n_kv, d_k), V (n_kv, d_v), dO (n_q, d_v); \p allowed as in attention().
double attention_loss(const Mat& Q, const Mat& K, const Mat& V, const Mat& dO,
                      const std::vector<bool>* allowed = nullptr);

/// The chain rule, entry by entry: P = attention_matrix(Q, K), dV_jc = Σ_i P_ij dO_ic,
/// dP_ij = Σ_c dO_ic V_jc, dS_ij = P_ij (dP_ij − Σ_k P_ik dP_ik), dQ_i = Σ_j dS_ij k_j / √d_k,
/// dK_j = Σ_i dS_ij q_i / √d_k. Same shapes as attention_loss().
Grads attention_gradients(const Mat& Q, const Mat& K, const Mat& V, const Mat& dO,
                          const std::vector<bool>* allowed = nullptr);

/// Central differences: every entry x of Q, K and V in turn, ∂L/∂x ≈ (L(x + h) − L(x − h)) / 2h. The
/// error is O(h²) from the Taylor series plus about 1e-16·|L|/h from rounding: ~1e-9 for h = 1e-5 and the
/// sizes the tests use. O((n_q + n_kv)·d) evaluations of the loss: for small shapes only.
Grads finite_difference_gradients(const Mat& Q, const Mat& K, const Mat& V, const Mat& dO,
                                  const std::vector<bool>* allowed = nullptr, double h = 1e-5);

}  // namespace attn::oracle
