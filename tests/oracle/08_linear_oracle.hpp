/// \file
/// Chapter 08's oracle: linear attention written as its quadratic definition, in float64 loops. No
/// associativity, no recurrence, no rescaling: the independent reference the tests compare against.
#pragma once

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// elu(x) + 1 entry by entry: x + 1 for x > 0, exp(x) otherwise. (n, d) → (n, d).
Mat elu_plus_one(const Mat& X);

/// φ(x)_r = exp(ω_r·x/d^{1/4} − ‖x‖²/(2√d)) / √m for every row x of X (n, d) and row ω_r of Omega (m, d)
/// → (n, m).
Mat positive_random_features(const Mat& X, const Mat& Omega);

/// Linear attention by its definition: w_ij = φ(q_i)·φ(k_j), and when \p causal only j ≤ i, weighted by
/// decay^(i−j); o_i = Σ_j w_ij v_j / Σ_j w_ij (a row with Σ_j w_ij = 0 gives zeros).
/// phiQ (n_q, m), phiK (n_kv, m), V (n_kv, d_v) → (n_q, d_v). Causal needs n_q = n_kv.
Mat linear_attention(const Mat& phiQ, const Mat& phiK, const Mat& V, bool causal = false, double decay = 1.0);

}  // namespace attn::oracle
