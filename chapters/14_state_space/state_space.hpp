/// \file
/// Chapter 14, state-space models and their duality with attention: the contract the learner implements in
/// exercises/14_state_space/state_space.cpp. Book page: book/14_state_space.md. The reference answers are in
/// solutions/14_state_space/state_space.cpp.
///
/// A state-space model reads a sequence u_0, u_1, … through a hidden state x of fixed size N:
/// `x'(t) = A x(t) + B u(t)`, `y(t) = C x(t)` in continuous time; discretised with a step Δ it becomes the
/// recurrence `x_t = Ā x_{t−1} + B̄ u_t`, `y_t = C x_t`: chapter 08's decayed recurrence, with Ā in place of
/// the decay λ. S4D keeps A diagonal and complex and Δ, B, C fixed (a time-invariant system: a convolution);
/// Mamba makes Δ, B and C depend on the token (a selective system: only a scan computes it). Mamba-2 writes
/// the same selective system as masked linear attention, `Y = (L ∘ C Bᵀ) X`, with L a 1-semiseparable decay mask.
#pragma once

#include <complex>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch14 Chapter 14: state-space models and their duality with attention
/// Discretisation, the selective recurrence, the scan operator and the semiseparable mask of the duality.
/// @{

using Complex = std::complex<float>;         ///< one entry of a diagonal complex A, B or C
using ComplexVector = std::vector<Complex>;  ///< (N) the diagonal of A, or B, or C

/// A continuous-time diagonal SSM of one input channel (S4D): `x' = diag(A) x + B u`, `y = Re(C · x)`.
/// Stable only when every Re(A_k) < 0: then each state entry forgets at rate −Re(A_k) and turns at Im(A_k).
struct DiagonalSSM {
  ComplexVector A;  ///< (N) the diagonal of the state matrix
  ComplexVector B;  ///< (N) how the input enters each state entry
  ComplexVector C;  ///< (N) how each state entry reaches the output
};

/// The same SSM discretised with step Δ: `x_t = Ā ∘ x_{t−1} + B̄ u_t`, `y_t = Re(C · x_t)`.
struct DiscreteSSM {
  ComplexVector A_bar;  ///< (N) exp(Δ A), entry by entry: |Ā_k| < 1 when Re(A_k) < 0
  ComplexVector B_bar;  ///< (N) (Ā − 1) / A · B, the input integrated over one step
  ComplexVector C;      ///< (N) unchanged by the discretisation
};

/// Zero-order-hold discretisation of a diagonal SSM: with u held constant over a step of length Δ, the exact
/// solution of x' = A x + B u is `x(t + Δ) = exp(ΔA) x(t) + A⁻¹(exp(ΔA) − I) B u`. For a diagonal A both are
/// scalar formulas per entry: `Ā_k = exp(Δ A_k)`, `B̄_k = (Ā_k − 1) / A_k · B_k`. (For small Δ, B̄ ≈ Δ B:
/// Mamba uses that first-order form for B, see selective_step().)
/// \param ssm A, B, C, each (N).
/// \param delta the step Δ > 0.
/// \return Ā (N), B̄ (N) and C (N), copied. Finite inputs give no NaN, whatever Δ: a step so long that
///         Re(ΔA_k) underflows e^x gives Ā_k = 0 (the state forgotten), not e^{−∞ + i∞} = NaN (compute ΔA in double).
/// \throws std::invalid_argument naming the shapes, (N) each, when A, B and C differ in N; naming the
///         entry, as A[k], and its value when some Re(A_k) ≥ 0 (an unstable or undamped state); naming the
///         index k when an entry of A, B or C is not finite; when Δ ≤ 0 or is not finite.
DiscreteSSM zoh_discretize(const DiagonalSSM& ssm, float delta);

/// One token of Mamba's selective SSM, for d channels sharing one input-dependent B_t and C_t:
/// for every channel c and state entry k,
/// `h(c, k) ← exp(Δ_c A(c, k)) · h(c, k) + Δ_c B_t(k) x_c`, then `y_c = Σ_k C_t(k) h(c, k)`.
/// The step touches only the (d, N) state, never the past tokens: its cost is the same at token 10 and 10⁶.
/// \param h (d, N) the state, updated in place (unchanged when the call throws).
/// \param x (d) the token's input, one number per channel.
/// \param delta (d) the token's step per channel, each > 0 (Mamba: softplus of a projection of the token).
/// \param A (d, N) the real diagonal state matrix of every channel, each entry < 0.
/// \param B (N) the token's input matrix, shared by the channels.
/// \param C (N) the token's output matrix, shared by the channels.
/// \return (d) y, the token's output per channel.
/// \throws std::invalid_argument naming the shapes when they do not fit; naming the entry when some
///         Δ_c ≤ 0 or A(c, k) ≥ 0, or a value (h included) is not finite; when finite inputs could overflow the
///         state or the output (max|h| + max(Δ|x|)·max|B|, times N·max|C|, past float's largest value).
Vector selective_step(Matrix& h, const Vector& x, const Vector& delta, const Matrix& A, const Vector& B,
                      const Vector& C);

/// One step of a scalar linear recurrence as a map of the state: `h ↦ a·h + b`.
struct ScanPair {
  float a = 1.0f;  ///< the decay (Ā of one state entry at one token)
  float b = 0.0f;  ///< the input (B̄ u of that token)
};

/// The scan operator: the map that applies \p earlier, then \p later, as one pair:
/// `h ↦ later.a · (earlier.a · h + earlier.b) + later.b`. It is associative (that is what lets a parallel
/// scan combine blocks of tokens in any grouping) but not commutative (the order of tokens matters), and
/// `{1, 0}` is its identity.
/// \param earlier the step (or block of steps) applied first.
/// \param later the step (or block of steps) applied after it.
/// \return the composed step. A NaN or infinite a or b is not refused here (this runs once per token and state
///         entry): it propagates as float arithmetic does, so the result holds a NaN or an infinity; the scans
///         that call it refuse such inputs first.
ScanPair scan_combine(ScanPair earlier, ScanPair later);

/// The 1-semiseparable decay mask of a scalar selective SSM: `L(i, j) = a_{j+1} · a_{j+2} · … · a_i` for
/// j ≤ i (an empty product, 1, on the diagonal) and 0 for j > i. Entry (i, j) is how much of token j's
/// input is left in the state at token i. All a = 1 gives the plain causal mask of ones; a constant a = λ
/// gives chapter 08's λ^{i−j}.
/// \param a (n) the decay of every token, in [0, 1] (a_t = exp(Δ_t A) for a scalar A < 0).
/// \return (n, n) lower triangular.
/// \throws std::invalid_argument naming the index and the value of an entry outside [0, 1] or not finite, or when
///         the (n, n) mask would not fit in memory (naming the estimate, before allocating).
Matrix semiseparable_mask(const Vector& a);

/// The attention form of the selective SSM (Mamba-2's state-space duality): `Y = (L ∘ C Bᵀ) X`, where
/// ∘ multiplies entry by entry. Row i of C plays the query, row j of B the key, row j of X the value, and
/// L(i, j) replaces softmax's normalised weight by a decay. For L = semiseparable_mask(a) it equals the
/// recurrence `h_t = a_t h_t−1 + B_tᵀ x_t` (h (N, p)), `y_t = C_t h_t`, computed here with the (n, n) matrix.
/// \param L (n, n) the mask.
/// \param C (n, N) the queries (the SSM's output matrices, one row per token).
/// \param B (n, N) the keys (the SSM's input matrices, one row per token, Δ already folded in).
/// \param X (n, p) the values (the inputs of p channels).
/// \return (n, p) Y.
/// \throws std::invalid_argument naming the shapes when L is not (n, n) for the n of C, B and X, or C and
///         B differ in N; naming the first NaN/Inf of L, C, B or X; and naming max|L|, max|C|, max|B| and max|X|
///         when finite inputs could overflow Y: n·N·max|L|·max|C|·max|B|·max|X| past attn::kMaxScoreBound (the
///         course's overflow policy, attn/checks.hpp).
Matrix masked_attention_form(const Matrix& L, const Matrix& C, const Matrix& B, const Matrix& X);

/// @}

}  // namespace attn
