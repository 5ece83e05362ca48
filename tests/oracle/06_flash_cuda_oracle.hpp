/// \file
/// The oracle of chapter 06: attention with its log-sum-exp, in float64 loops, for batched heads, and
/// the bf16 reference computation FlashAttention's accuracy rule measures a bf16 kernel against.
#pragma once

#include <cstddef>
#include <vector>

namespace attn::oracle {

/// Attention of one batch of heads with its log-sum-exp. Q (bh, n_q, d), K and V (bh, n_kv, d) flattened
/// row-major. Causal: query i sees key j when j ≤ i + (n_kv - n_q). O (bh, n_q, d); lse (bh, n_q) is
/// log Σ_j exp(s_ij) over the allowed keys, -inf (and an O row of zeros) when there is none.
struct AttentionLse {
  std::vector<double> O;
  std::vector<double> lse;
};
AttentionLse attention_lse(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V,
                           std::size_t bh, std::size_t n_q, std::size_t n_kv, std::size_t d, bool causal);

/// x rounded to the nearest bf16 (8 bits of mantissa, ties to even), computed from the definition.
double to_bf16(double x);

/// The bf16 reference of one head: inputs rounded to bf16, S rounded to bf16, softmax in float64, P and
/// the output rounded to bf16 (what a bf16 framework stores). Q (n_q, d), K, V (n_kv, d) → O (n_q, d).
std::vector<double> attention_bf16(const std::vector<float>& Q, const std::vector<float>& K,
                                   const std::vector<float>& V, std::size_t n_q, std::size_t n_kv, std::size_t d,
                                   bool causal);

}  // namespace attn::oracle
