/// \file
/// Chapter 17's oracle: one new token's attention over a sequence's cached keys and values with grouped heads, and
/// its log-sum-exp, written from the definitions in float64 loops over a contiguous layout (no blocks, no tables).
#pragma once

#include <vector>

#include "oracle/09_mqa_gqa_oracle.hpp"
#include "oracle/oracle.hpp"

namespace attn::oracle {

/// The decode attention of query heads q (h, d_k) over keys K, g × (n, d_k), and values V, g × (n, d_v): query head
/// i reads KV head ⌊i·g/h⌋; O(i) = Σ_t softmax_t(q_i·k_t/√d_k) v_t → (h, d_v).
Mat decode_attention(const Mat& q, const Heads& K, const Heads& V);

/// The log-sum-exp of each query head's scaled scores, log Σ_t e^{q_i·k_t/√d_k} → (h); −inf when n = 0.
std::vector<double> decode_lse(const Mat& q, const Heads& K);

/// Causal attention of a chunk of c tokens at positions first … first + c − 1: query heads Q, h × (c, d_k), over keys
/// K and values V, g × (n, d_k) and g × (n, d_v), n ≥ first + c; row t of query head i attends to keys 0 … first + t
/// of KV head ⌊i·g/h⌋ → h × (c, d_v).
Heads prefill_attention(const Heads& Q, const Heads& K, const Heads& V, std::size_t first);

}  // namespace attn::oracle
