/// \file
/// Chapter 14's time-invariant SSM (S4D) computed two ways, and the convolution both ways: chapter code the
/// book presents, not an exercise. The discretised system comes from the contract's attn::zoh_discretize().
#pragma once

#include <cstddef>

#include "14_state_space/state_space.hpp"
#include "attn/rng.hpp"

namespace attn::ch14 {

/// The SSM's convolution kernel: `K_l = Re(Σ_k C_k Ā_k^l B̄_k)` for l = 0 … n−1, what an impulse at token 0
/// leaves in the output l tokens later. With Δ, B, C fixed the whole layer is `y = K * u`.
/// The powers Ā^l are carried in double: each K_l is right to float's rounding for the Ā, B̄ and C it is given,
/// however long the kernel.
/// \param ssm Ā, B̄, C, each (N).
/// \param n kernel length.
/// \return (n) K.
/// \throws std::invalid_argument naming the sizes when Ā, B̄ and C differ in N, an entry is not finite or some
///         |Ā_k| > 1, or when n floats would not fit in memory (naming the estimate, before allocating).
Vector ssm_kernel(const DiscreteSSM& ssm, std::size_t n);

/// The SSM as a recurrence: `x_t = Ā ∘ x_{t−1} + B̄ u_t`, `y_t = Re(C · x_t)`, from x_{−1} = 0; O(n·N) time and
/// an (N) complex state.
/// \param ssm Ā, B̄, C, each (N).
/// \param u (n) the input.
/// \return (n) y.
/// \throws std::invalid_argument naming the sizes when Ā, B̄ and C differ in N, an entry is not finite or some
///         |Ā_k| > 1, naming the first NaN/Inf of u, or when finite inputs could overflow the state or y
///         (n·N·max|B̄|·max|C|·max|u| past attn::kMaxScoreBound, naming them).
Vector ssm_recurrence(const DiscreteSSM& ssm, const Vector& u);

/// Causal convolution by its definition, `y_t = Σ_{j ≤ t} K_j u_{t−j}`: O(n²) multiply-adds, summed in double
/// so that each y_t is right to float's rounding however many taps it sums.
/// \param K (n_K) the kernel; taps past n_K are zero.
/// \param u (n) the input.
/// \return (n) y.
/// \throws std::invalid_argument naming the first NaN/Inf of K or u.
Vector causal_convolution_direct(const Vector& K, const Vector& u);

/// The same convolution through FFTW3's real FFTs: zero-pad K and u to L ≥ 2n (so the cyclic convolution
/// of the FFT does not wrap around), multiply the spectra, transform back: O(L log L).
/// \param K (n_K) the kernel.
/// \param u (n) the input.
/// \return (n) y.
/// \throws std::runtime_error when the course was built without FFTW3 (see fft_available());
///         std::invalid_argument naming the first NaN/Inf of K or u, or when finite inputs could overflow the
///         transforms (L·n·n_K·max|K|·max|u| past attn::kMaxScoreBound, naming K and u).
Vector causal_convolution_fft(const Vector& K, const Vector& u);

/// Whether causal_convolution_fft() works: false when CMake found no FFTW3 (Debian's libfftw3-dev).
bool fft_available();

/// S4D-Lin's initialisation of an N-state diagonal SSM (A_k = −1/2 + iπk, B_k = 1, C drawn from \p rng): the
/// system the story discretises and the convolution benchmarks use.
DiagonalSSM s4d_lin(std::size_t N, Rng& rng);

/// (n) N(0, 1) values drawn from \p rng: an input sequence u.
Vector random_vector(Rng& rng, std::size_t n);

/// The decode comparison's sizes, for the story's table and the benchmarks: the SSM's d channels of N state
/// entries, and attention of the same width, h = g heads of d_k.
constexpr std::size_t kDecodeD = 256, kDecodeN = 16;
constexpr std::size_t kDecodeH = 4, kDecodeDk = 64;

}  // namespace attn::ch14
