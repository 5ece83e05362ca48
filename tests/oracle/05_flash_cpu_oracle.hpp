/// \file
/// Chapter 05's oracle: the online-softmax quantities written from their definitions, in float64 loops.
#pragma once

#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// The causal rule as a flat (n_q, n_kv) row-major mask: query i sees key j when j ≤ i + n_kv - n_q.
std::vector<bool> causal_allowed(std::size_t n_q, std::size_t n_kv);

/// lse_i = log Σ_j exp(q_i·k_j / √d_k) over the allowed keys, -inf for a row with none.
/// Q (n_q, d_k), K (n_kv, d_k), allowed (n_q·n_kv) or null → (n_q).
std::vector<double> log_sum_exp_rows(const Mat& Q, const Mat& K, const std::vector<bool>* allowed = nullptr);

/// The online-softmax state of every query over the keys [begin, end), from the definition:
/// m_i = max_j s_ij, ℓ_i = Σ_j exp(s_ij - m_i), acc_i = Σ_j exp(s_ij - m_i) v_j (m = -inf, ℓ = 0, acc = 0
/// for an empty range).
struct State {
  std::vector<double> m;  ///< (n_q)
  std::vector<double> l;  ///< (n_q)
  Mat acc;                ///< (n_q, d_v)
};
State partial_state(const Mat& Q, const Mat& K, const Mat& V, std::size_t begin, std::size_t end);

}  // namespace attn::oracle
