/// \file
/// Chapter 12, watch attention learn: the contract the learner implements in exercises/12_learning/learning.cpp.
/// Book page: book/12_learning.md.
///
/// Training needs a loss and its gradient (cross_entropy) and an optimiser step (adamw_step); reading what
/// the trained model learned needs a head's induction score and attention rollout. The model itself, its
/// forward and backward, is chapter code: chapters/12_learning/model.hpp.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch12 Chapter 12: watch attention learn
/// The loss, the optimiser, and two ways of reading attention maps.
/// @{

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
///         first NaN/Inf of grad or param (nothing is changed then).
void adamw_step(Matrix& param, const Matrix& grad, Matrix& m, Matrix& v, std::size_t t, const AdamW& settings);

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
