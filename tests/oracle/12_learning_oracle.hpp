/// \file
/// Chapter 12's oracle: the same 2-layer attention-only transformer as chapters/12_learning/model.hpp, and
/// its cross-entropy, written as the definitions read in float64 loops. The tests differentiate it by
/// central differences to check the hand-written backward.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// A transformer's weights in float64: per layer {W_Q, W_K, W_V, W_O}, each (d, d); head h owns columns
/// h·d/heads … (h + 1)·d/heads − 1.
struct Transformer {
  std::size_t heads = 1;
  double rope_base = 10000.0;
  Mat embed;                               ///< (vocab, d)
  std::vector<std::array<Mat, 4>> layers;  ///< W_Q, W_K, W_V, W_O
  Mat unembed;                             ///< (d, vocab)
};

/// The logits (n, vocab) of \p tokens: embed, then per layer causal multi-head attention with RoPE on q and
/// k (pair (2i, 2i + 1) of a head turned by position·base^(−2i/d_k)) added to the stream, then unembed.
Mat transformer_logits(const Transformer& model, const std::vector<std::size_t>& tokens);

/// Mean over rows with target < vocab of −log softmax(logits_r)[target_r]; 0 when no row counts.
double cross_entropy(const Mat& logits, const std::vector<std::size_t>& targets);

/// Its gradient with respect to the logits: (softmax − onehot) / C on counted rows, 0 elsewhere.
Mat cross_entropy_grad(const Mat& logits, const std::vector<std::size_t>& targets);

/// AdamW's weights and moments, in float64.
struct AdamWState {
  std::vector<double> theta, m, v;
};

/// Step \p t (from 1) of AdamW (Loshchilov & Hutter 2019) on every entry, as its formulas read:
/// m = β1 m + (1 − β1) g, v = β2 v + (1 − β2) g², θ −= lr (m/(1 − β1ᵗ) / (√(v/(1 − β2ᵗ)) + ε) + weight_decay θ).
void adamw_step(AdamWState& s, const std::vector<double>& grad, std::size_t t, double lr, double beta1, double beta2,
                double eps, double weight_decay);

}  // namespace attn::oracle
