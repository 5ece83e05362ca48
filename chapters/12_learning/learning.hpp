/// \file
/// Chapter 12, watch attention learn: the contract the learner implements in exercises/12_learning/learning.cpp.
/// Book page: book/12_learning.md.
///
/// Training needs the model's backward — RoPE's (rope_backward) and one attention layer's (layer_backward) — a loss
/// and its gradient (cross_entropy), an optimiser step (adamw_step) and the step that joins them (train_step);
/// reading what the trained model learned needs a head's induction score and attention rollout. The model itself,
/// its forward and the plumbing of its backward (embedding, layers stacked, head masks), is chapter code:
/// chapters/12_learning/model.hpp and model_backward.hpp.
#pragma once

#include <cstddef>
#include <vector>

#include "12_learning/model.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch12 Chapter 12: watch attention learn
/// The model's backward, the loss, the optimiser, the training step, and two ways of reading attention maps.
/// @{

/// RoPE's backward, in place: the vector–Jacobian product of apply_rope() (chapter 11). apply_rope() turns pair
/// (2i, 2i + 1) of row p by the angle (first_position + p)·θ_i, θ_i = base^(−2i/d): a rotation R of each pair,
/// so for G = ∂L/∂(rotated rows), ∂L/∂(rows before RoPE) = Rᵀ·G, each pair of G turned by minus that angle.
/// \param G (n, d) the gradient after RoPE, d even; replaced by the gradient before it.
/// \param first_position the position of row 0, as given to apply_rope().
/// \param base RoPE's base, as given to apply_rope().
/// \throws std::invalid_argument naming G's shape when d is odd; when base is not a finite number above 1, naming
///         first_position when the last row's position first_position + n − 1 passes 2^64 − 1 (as apply_rope()), or
///         naming the first NaN/Inf of G (G is then unchanged).
void rope_backward(Matrix& G, std::size_t first_position = 0, float base = 10000.0f);

/// The gradients of one attention layer: of its four weights and of its input.
struct LayerGrads {
  ch12::Layer dW;  ///< ∂L/∂W_Q, ∂L/∂W_K, ∂L/∂W_V, ∂L/∂W_O: (d_model, d_model) each
  Matrix dX;       ///< (n, d_model) ∂L/∂X, X the layer's input (the residual stream before it)
};

/// The backward of attention layer \p layer of \p model, whose forward (ch12::forward_embedded()) computed
/// Y = X + heads·W_O from its input X (n, d_model): head h owns columns h·d_k … (h + 1)·d_k − 1 (d_k =
/// d_model / heads) of Q = X·W_Q, K = X·W_K and V = X·W_V, turns its q and k by RoPE (positions from 0, base
/// config.rope_base), and writes chapter 02's causal attention of q, k, v into its columns of heads.
/// Given dY = ∂L/∂Y: each head's attention backward is chapter 10's attention_backward() on the q, k, v the
/// trace kept, with the causal mask; its dQ and dK go back through RoPE (rope_backward()); the matrix products
/// give the weights' gradients; and the residual stream passes dY to X unchanged, besides what flows through
/// the heads. A head that \p keep switches off added nothing to Y and passes no gradient.
/// \param model the weights (model.layers[layer]) and the sizes (config.heads, config.rope_base).
/// \param trace the forward's record of n tokens: residual[layer] is X (n, d_model); q[layer][h] and k[layer][h]
///        (n, d_k) after RoPE, v[layer][h] (n, d_k); heads_out[layer] (n, d_model), heads before W_O.
/// \param layer which layer, 0 for the first.
/// \param dY (n, d_model) ∂L/∂Y, the gradient at the layer's output.
/// \param keep (heads) which heads ran (false: ablated); empty = all.
/// \return dW, (d_model, d_model) each, and dX (n, d_model).
/// \throws std::invalid_argument when the trace is not one of this model (ch12::require_trace()), when layer ≥
///         config.layers (naming the layer), when dY is not (n, d_model) (naming its shape), naming the first NaN/Inf
///         of dY, or when keep is neither empty nor (heads).
LayerGrads layer_backward(const ch12::Model& model, const ch12::Trace& trace, std::size_t layer, const Matrix& dY,
                          const std::vector<bool>& keep = std::vector<bool>());

/// A loss and its gradient with respect to the logits.
struct LossAndGrad {
  double loss = 0.0;  ///< mean over the counted rows
  Matrix dlogits;     ///< (rows, vocab) ∂loss/∂logits; zero in rows that are not counted
};

/// Mean cross-entropy of next-token predictions, and its gradient. Row r is counted when targets[r] is a
/// token (< vocab); a target ≥ vocab (ch12::kIgnore) skips the row, as PyTorch's ignore_index does.
/// loss = −(1/C) Σ_counted log softmax(logits_r)[targets_r], C the number of counted rows, and
/// ∂loss/∂logits_r = (softmax(logits_r) − onehot(targets_r)) / C.
/// \param logits (rows, vocab).
/// \param targets (rows) a token per row, or ≥ vocab to skip it.
/// \return the loss (0 and a zero gradient when no row is counted) and dlogits (rows, vocab).
/// \throws std::invalid_argument when targets.size() ≠ rows, when vocab is 0, or naming the first
///         non-finite logit.
LossAndGrad cross_entropy(const Matrix& logits, const std::vector<std::size_t>& targets);

/// AdamW's settings (Loshchilov & Hutter 2019): Adam plus weight decay applied to the weights directly.
struct AdamW {
  float lr = 1e-3f;  ///< step size
  /// Decay of the first moment (the mean gradient). The β are doubles, as PyTorch's (Python floats) are: as a
  /// float, 0.999 is 0.99900001 and 1 − β2 comes out 0.000999987, which puts every v off by 1.3e-5.
  double beta1 = 0.9;
  double beta2 = 0.999;       ///< decay of the second moment (the mean squared gradient)
  float eps = 1e-8f;          ///< added to √v̂ so that a zero gradient does not divide by zero
  float weight_decay = 0.0f;  ///< decoupled: θ −= lr·weight_decay·θ, not added to the gradient
};

/// One AdamW step on \p param, in place, with its moments \p m and \p v (same shape, zero before step 1):
/// m = β1·m + (1 − β1)·g,  v = β2·v + (1 − β2)·g²,  m̂ = m / (1 − β1ᵗ),  v̂ = v / (1 − β2ᵗ),
/// θ = θ − lr·(m̂ / (√v̂ + ε) + weight_decay·θ).
/// \param param (rows, cols) the weights, updated.
/// \param grad (rows, cols) ∂L/∂param.
/// \param m (rows, cols) first moment, updated.
/// \param v (rows, cols) second moment, updated.
/// \param t the step number, 1 for the first step (it sets the bias corrections).
/// \param settings learning rate, β1, β2, ε and weight decay.
/// \throws std::invalid_argument naming the shapes when they differ, when t is 0, when a setting is out of range
///         (lr < 0, β1 or β2 outside [0, 1), ε ≤ 0, weight_decay < 0, or any of them not finite), or naming the
///         first NaN/Inf of grad, param, m or v, or naming the first negative entry of v (a mean of squares)
///         (nothing is changed then).
void adamw_step(Matrix& param, const Matrix& grad, Matrix& m, Matrix& v, std::size_t t, const AdamW& settings);

/// One optimiser step on a batch of sequences (lengths may differ): every sequence's forward (ch12::forward()),
/// one cross_entropy() over all their rows stacked (the loss is the mean over every predictable position of the
/// batch), every sequence's backward (ch12::backward(), which calls layer_backward()) summed into gradients that
/// start from zero at every step, then adamw_step() with step number \p t on every parameter (ch12::parameters())
/// and its moments in \p m and \p v.
/// \param model the weights, updated.
/// \param m AdamW's first moments, the model's shapes (ch12::zeros_like() before step 1), updated.
/// \param v AdamW's second moments, the model's shapes, updated.
/// \param t the step number, 1 for the first, one more at every call (it sets the bias corrections).
/// \param batch the sequences, each with one target per token (ch12::kIgnore where nothing is predicted).
/// \param settings AdamW's learning rate, β1, β2, ε and weight decay.
/// \return the batch's loss, before the step.
/// \throws std::invalid_argument, with nothing changed, when the batch is empty, a sequence's targets are not one
///         per token, t is 0, m or v do not have the model's shapes (ch12::same_shapes()), the batch's logits would
///         not fit in memory, and as forward(), cross_entropy() and adamw_step() do.
double train_step(ch12::Model& model, ch12::Model& m, ch12::Model& v, std::size_t t,
                  const std::vector<ch12::Sequence>& batch, const AdamW& settings);

/// The induction score of one head (Olsson et al. 2022): for every query i whose token occurred before,
/// at j (the latest such j < i), the attention A(i, j + 1) on the token that followed that occurrence,
/// averaged over those queries. 1 for a perfect induction head; about 1/(i + 1) per query for a uniform one;
/// 0 when no token repeats.
/// \param A (n, n) the head's attention on \p tokens (rows are queries).
/// \param tokens (n) the sequence.
/// \throws std::invalid_argument when A is not (n, n) for n = tokens.size(), or naming its first NaN/Inf.
double induction_score(const Matrix& A, const std::vector<std::size_t>& tokens);

/// Attention rollout (Abnar & Zuidema 2020): how much of each input token reaches each position through
/// all layers, counting the residual connection as half of each layer. With Ã_l = ½·A_l + ½·I
/// (A_l averaged over heads), rollout = Ã_L · … · Ã_2 · Ã_1; row i is position i's mix of inputs.
/// \param layers (L) per layer its head-averaged attention, (n, n) each, first layer first.
/// \return (n, n), each row summing to 1 when each A_l's rows do.
/// \throws std::invalid_argument when \p layers is empty, a matrix is not (n, n) with the first's n, or one holds a
///         NaN/Inf.
Matrix attention_rollout(const std::vector<Matrix>& layers);

/// @}

}  // namespace attn
