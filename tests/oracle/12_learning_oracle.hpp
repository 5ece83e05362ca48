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

/// One attention layer of transformer_logits(), on its own: Y = X + heads·W_O, head h's columns of heads the
/// causal attention of its columns of X·W_Q and X·W_K (both turned by RoPE from position 0) and of X·W_V. A head
/// whose \p keep flag is false (when keep is not empty) adds nothing. X (n, d), W = {W_Q, W_K, W_V, W_O} (d, d)
/// each → Y (n, d).
Mat attention_layer(const Mat& X, const std::array<Mat, 4>& W, std::size_t heads, double rope_base,
                    const std::vector<bool>& keep = {});

/// ∂L/∂X and ∂L/∂W_Q … ∂L/∂W_O of L = Σ dY ∘ attention_layer(X, W, …), by central differences (no calculus):
/// every entry in turn nudged by ±h. Error O(h²) plus ~1e-16·|L|/h from rounding: ~1e-9 for h = 1e-5 and the
/// tests' sizes.
struct LayerGrads {
  Mat dX;                 ///< (n, d)
  std::array<Mat, 4> dW;  ///< dW_Q, dW_K, dW_V, dW_O: (d, d) each
};
LayerGrads attention_layer_gradients(const Mat& X, const std::array<Mat, 4>& W, std::size_t heads, double rope_base,
                                     const Mat& dY, const std::vector<bool>& keep = {}, double h = 1e-5);

/// The transpose of RoPE as a linear map of the rows, read off the oracle's own rope(): (Rᵀ G)(p, c) =
/// Σ_c' rope(E_pc)(p, c')·G(p, c'), E_pc the matrix with a single 1 at (p, c). G (n, d) → (n, d).
Mat rope_transpose(const Mat& G, std::size_t first, double base);

/// Mean over rows with target < vocab of −log softmax(logits_r)[target_r]; 0 when no row counts.
double cross_entropy(const Mat& logits, const std::vector<std::size_t>& targets);

/// Its gradient with respect to the logits: (softmax − onehot) / C on counted rows, 0 elsewhere.
Mat cross_entropy_grad(const Mat& logits, const std::vector<std::size_t>& targets);

/// The model's matrices in the course's order (ch12::parameters()): embed, each layer's W_Q W_K W_V W_O, unembed.
std::vector<Mat*> parameters(Transformer& model);

/// A batch's loss as a training step computes it: every sequence's logits stacked row after row, then
/// cross_entropy() over all of them (the mean over every counted row of the batch).
double batch_loss(const Transformer& model, const std::vector<std::vector<std::size_t>>& tokens,
                  const std::vector<std::vector<std::size_t>>& targets);

/// ∂batch_loss/∂θ for every parameter (parameters()' order), by central differences with step \p h.
std::vector<Mat> batch_loss_gradients(const Transformer& model, const std::vector<std::vector<std::size_t>>& tokens,
                                      const std::vector<std::vector<std::size_t>>& targets, double h = 1e-5);

/// AdamW's weights and moments, in float64.
struct AdamWState {
  std::vector<double> theta, m, v;
};

/// Step \p t (from 1) of AdamW (Loshchilov & Hutter 2019) on every entry, as its formulas read:
/// m = β1 m + (1 − β1) g, v = β2 v + (1 − β2) g², θ −= lr (m/(1 − β1ᵗ) / (√(v/(1 − β2ᵗ)) + ε) + weight_decay θ).
void adamw_step(AdamWState& s, const std::vector<double>& grad, std::size_t t, double lr, double beta1, double beta2,
                double eps, double weight_decay);

}  // namespace attn::oracle
