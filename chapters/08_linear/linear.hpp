/// \file
/// Chapter 08, linear attention: the contract the learner implements in exercises/08_linear/linear.cpp.
/// Book page: book/08_linear.md. The reference answers are in solutions/08_linear/linear.cpp.
///
/// Softmax attention weighs key j for query i by exp(q_i·k_j/√d_k). Linear attention replaces that
/// weight by a product of features, φ(q_i)·φ(k_j), with φ mapping a d_k-vector to m non-negative numbers.
/// Then the sum over keys can be done once for all queries: φ(K)ᵀV is an (m, d_v) matrix, whatever n is.
#pragma once

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch08 Chapter 08: linear attention
/// Feature maps, linear attention by associativity, and its causal form as a recurrence.
/// @{

/// The feature map of the Linear Transformer (Katharopoulos et al., 2020): `φ(x) = elu(x) + 1`, entry by
/// entry, i.e. `x + 1` for x > 0 and `exp(x)` for x ≤ 0. Every entry is positive, so every weight
/// φ(q)·φ(k) is, and the map is smooth at 0.
/// \param X (n, d) rows of queries or keys.
/// \return (n, d) with m = d features per row.
/// \throws std::invalid_argument naming the index of a NaN or infinite entry.
Matrix elu_plus_one(const Matrix& X);

/// The Performer's positive random features (Choromanski et al., 2021) for the softmax kernel
/// `exp(q·k/√d_k)`. With x̂ = x / d_k^{1/4} and ω_r the rows of \p Omega,
/// `φ(x)_r = exp(ω_r·x̂ − ‖x̂‖²/2) / √m`, so that for ω ~ N(0, I) the expectation of φ(q)·φ(k) is exactly
/// exp(q·k/√d_k): the softmax weight before normalisation. More features, smaller variance.
/// \param X (n, d_k) rows of queries or keys.
/// \param Omega (m, d_k) the random projections, one feature per row (the same for queries and keys).
/// \return (n, m) positive features.
/// \throws std::invalid_argument naming both shapes when X and Omega differ in d_k, the index of a NaN or
///         infinite entry of X or Omega, or a row whose features all leave float's range (exp under- or overflows).
Matrix positive_random_features(const Matrix& X, const Matrix& Omega);

/// Linear attention by associativity: row i of the result is
/// `φ(q_i) (φ(K)ᵀ V) / (φ(q_i) · φ(K)ᵀ 1)`, which equals the quadratic form
/// `Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j)` but never forms the (n_q, n_kv) matrix: the keys and
/// values are summarised once in φ(K)ᵀV (m, d_v) and φ(K)ᵀ1 (m). Cost O(n·m·d_v) instead of O(n²·d).
///
/// Numerically safe: the result does not change when a row of \p phiQ, or the whole of \p phiK, is
/// multiplied by a positive constant, and the implementation uses that to keep tiny features (1e-30)
/// from underflowing. A query whose weights are all zero (its φ(q)·φ(K)ᵀ1 is 0) gets a row of zeros,
/// never NaN. The result, a weighted mean of V's rows, is finite for any finite V, even V near float's limit
/// (where a sum of weighted values would overflow: such a V enters the sums scaled by a power of two).
/// \param phiQ (n_q, m) features of the queries, non-negative.
/// \param phiK (n_kv, m) features of the keys, non-negative.
/// \param V (n_kv, d_v) values.
/// \return (n_q, d_v).
/// \throws std::invalid_argument naming the shapes when phiQ and phiK differ in m or phiK and V in n_kv,
///         or the inputs (attn::require_attention_inputs(): a NaN/Inf, or features so large a φ(q)·φ(k) overflows),
///         or naming a negative feature (features are weights).
Matrix linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V);

/// What causal linear attention remembers after reading t tokens: `S = Σ_{j≤t} λ^{t−j} φ(k_j)ᵀ v_j`
/// and `z = Σ_{j≤t} λ^{t−j} φ(k_j)`. Its size, m·d_v + m numbers, does not grow with t: this is the
/// hidden state of an RNN, where softmax attention keeps a KV cache of t keys and values.
struct RecurrentState {
  Matrix S;  ///< (m, d_v) Σ φ(k_j)ᵀ v_j, the memory of keys and values
  Vector z;  ///< (m) Σ φ(k_j), the normaliser's memory

  /// The state before the first token: all zeros.
  /// \param m number of features of φ.
  /// \param d_v width of the values.
  /// \return S (m, d_v) and z (m), zero.
  /// \throws std::invalid_argument when m·(d_v + 1) floats would not fit in memory (naming the estimate, before
  ///         allocating).
  static RecurrentState zeros(std::size_t m, std::size_t d_v) {
    checked_allocation("RecurrentState: S and z, m × (d_v + 1) floats",
                       {m, checked_sum("RecurrentState: d_v + 1", {d_v, 1}), sizeof(float)});
    return {xt::zeros<float>({m, d_v}), xt::zeros<float>({m})};
  }
};

/// One step of causal linear attention, the RNN view: first forget and remember,
/// `S ← λ S + φ(k_t)ᵀ v_t`, `z ← λ z + φ(k_t)`, then read: `o_t = φ(q_t) S / (φ(q_t)·z)`.
/// λ = 1 is the causal Linear Transformer; λ < 1 is a time decay as in RWKV and RetNet: a token j steps
/// back weighs λ^j less. A query whose φ(q_t)·z is 0 reads a row of zeros, never NaN.
/// \param state S (m, d_v) and z (m), updated in place.
/// \param phi_q (m) the features of the current query.
/// \param phi_k (m) the features of the current key.
/// \param v (d_v) the current value.
/// \param decay λ, in (0, 1].
/// \return (d_v) o_t, the output for the current token.
/// \throws std::invalid_argument naming the shapes when phi_q, phi_k, v and the state do not fit, or when
///         the decay is outside (0, 1], or the inputs (attn::require_attention_inputs()), or naming a NaN/Inf in
///         state.S or state.z, or when the new state or its read could overflow float: m·(max|state.S| + max
///         φ_k·max|v|) or m·(max state.z + max φ_k) beyond attn::kMaxScoreBound. Refused, the state is unchanged.
Vector recurrent_step(RecurrentState& state, const Vector& phi_q, const Vector& phi_k, const Vector& v,
                      float decay = 1.0f);

/// Causal linear attention over a whole sequence: the recurrence of recurrent_step() run from zeros, so
/// row i equals `Σ_{j≤i} λ^{i−j} (φ(q_i)·φ(k_j)) v_j / Σ_{j≤i} λ^{i−j} φ(q_i)·φ(k_j)`, the causally
/// masked quadratic form, in O(n·m·d_v) time and O(m·d_v) state. Numerically safe like
/// linear_attention(): rows of \p phiQ and the whole of \p phiK may be scaled freely.
/// \param phiQ (n, m) features of the queries, non-negative.
/// \param phiK (n, m) features of the keys, non-negative.
/// \param V (n, d_v) values.
/// \param decay λ, in (0, 1].
/// \return (n, d_v).
/// \throws std::invalid_argument naming the shapes when phiQ, phiK and V differ in n or the features in m,
///         or when the decay is outside (0, 1], or the inputs (attn::require_attention_inputs()).
Matrix causal_linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V, float decay = 1.0f);

/// @}

}  // namespace attn
