/// \file
/// Chapter 09's oracle: attention with h query heads sharing g key/value heads, written from the
/// definition in float64 loops. Heads are lists of matrices, one (n, d) matrix per head.
#pragma once

#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// Heads, one (n, d) matrix each: a head-major (heads, n, d) tensor.
using Heads = std::vector<Mat>;

/// Grouped-query attention by its definition: query head i (of h) reads key/value head ⌊i·g/h⌋ (of g),
/// the group whose h/g consecutive query heads contain i. Q: h × (n_q, d_k); K: g × (n_kv, d_k);
/// V: g × (n_kv, d_v) → h × (n_q, d_v). With \p causal, query i sees keys j ≤ i + n_kv - n_q.
Heads grouped_attention(const Heads& Q, const Heads& K, const Heads& V, bool causal);

/// The mean of each group of h/g consecutive heads: h × (n, d) → g × (n, d).
Heads mean_pool_heads(const Heads& heads, std::size_t g);

}  // namespace attn::oracle
