/// \file
/// Chapter 14's oracle: state-space models as their definitions read, in float64. The matrix exponential is a
/// general one (any square matrix, scaling and squaring), so the tests check the diagonal discretisation of
/// the tracks against a method that knows nothing about diagonals; the scan is the plain recurrence; the
/// duality's masked form multiplies its decays out one by one. No code shared with common/ or the tracks.
#pragma once

#include <complex>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// exp(M) for a square M (m, m): the Taylor series of exp(M / 2^s), with 2^s ≥ ‖M‖₁ so the series converges
/// fast, then squared s times. Accurate to a few float64 ulps for the moderate norms of the tests.
Mat expm(const Mat& M);

/// Zero-order hold of x' = A x + B u for any square A (m, m) and B (m, 1), by one exponential of the block
/// matrix `[[ΔA, ΔB], [0, 0]]`, whose exponential is `[[Ā, B̄], [0, 1]]` (Van Loan's trick): no inverse of A
/// needed. Returns Ā (m, m) and B̄ (m, 1).
struct Zoh {
  Mat A_bar, B_bar;
};
Zoh zoh(const Mat& A, const Mat& B, double delta);

/// The kernel of a diagonal complex SSM by its definition, `K_l = Re Σ_k C_k Ā_k^l B̄_k` (std::pow), (n).
std::vector<double> ssm_kernel(const std::vector<std::complex<double>>& A_bar,
                               const std::vector<std::complex<double>>& B_bar,
                               const std::vector<std::complex<double>>& C, std::size_t n);

/// `y_t = Σ_{j ≤ t} K_j u_{t−j}`: K (n_K), u (n) → (n).
std::vector<double> causal_convolution(const std::vector<double>& K, const std::vector<double>& u);

/// Mamba's selective recurrence, token by token: `h(c, k) ← exp(Δ(t, c) A(c, k)) h(c, k) + Δ(t, c) B(t, k) x(t, c)`,
/// `y(t, c) = Σ_k C(t, k) h(c, k)`, from h = 0. x, delta (n, d), A (d, N), B, C (n, N) → y (n, d).
Mat selective_scan(const Mat& x, const Mat& delta, const Mat& A, const Mat& B, const Mat& C);

/// `L(i, j) = Π_{t = j+1}^{i} a_t` for j ≤ i, 0 above the diagonal: a (n) → (n, n).
Mat semiseparable(const std::vector<double>& a);

/// The masked attention form by its definition: `Y(i, :) = Σ_{j ≤ i} L(i, j) (C_i · B_j) X(j, :)` with L as in
/// semiseparable(a). a (n), C, B (n, N), X (n, p) → (n, p).
Mat masked_attention(const std::vector<double>& a, const Mat& C, const Mat& B, const Mat& X);

}  // namespace attn::oracle
