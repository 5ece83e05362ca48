// Chapter 14's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/14_state_space_oracle.hpp: a general matrix exponential, the plain recurrences, the masked form
// multiplied out) or from closed forms worked by hand. The chapter's own scans and convolutions are checked the
// same way, each beside a contract function that shares its setup.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "08_linear/linear.hpp"
#include "14_state_space/lti.hpp"
#include "14_state_space/memory.hpp"
#include "14_state_space/scan.hpp"
#include "14_state_space/state_space.hpp"
#include "attn/rng.hpp"
#include "oracle/08_linear_oracle.hpp"
#include "oracle/14_state_space_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Complex;
using attn::ComplexVector;
using attn::Matrix;
using attn::Vector;
using attn::test::to_oracle;
namespace oracle = attn::oracle;
using attn::ch14::scan_inputs;
using attn::ch14::ScanInputs;

constexpr double kEps = 1.0 / (1 << 24);  // float32's unit roundoff, 2^-24
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// S4D-Lin's initialisation (Gu et al., 2022): A_k = −1/2 + iπk, B_k = 1, and a C of our choosing.
attn::DiagonalSSM s4d_lin(std::size_t N, attn::Rng& rng) {
  attn::DiagonalSSM ssm;
  const Matrix c = rng.normal(N, 2);  // (N, 2) real and imaginary parts of C
  for (std::size_t k = 0; k < N; ++k) {
    ssm.A.emplace_back(-0.5f, static_cast<float>(M_PI * static_cast<double>(k)));
    ssm.B.emplace_back(1.0f, 0.0f);
    ssm.C.emplace_back(c(k, 0), c(k, 1));
  }
  return ssm;
}

std::vector<std::complex<double>> to_double(const ComplexVector& v) {
  return std::vector<std::complex<double>>(v.begin(), v.end());
}

/// Σ_k |C_k| |B̄_k| and the largest |Ā_k|: how large the kernel and the state can get, and how long they remember.
struct Magnitude {
  double gain = 0.0, rho = 0.0;
};
Magnitude magnitude(const attn::DiscreteSSM& s) {
  Magnitude m;
  for (std::size_t k = 0; k < s.A_bar.size(); ++k) {
    m.gain += std::abs(s.C[k]) * std::abs(s.B_bar[k]);
    m.rho = std::max(m.rho, static_cast<double>(std::abs(s.A_bar[k])));
  }
  return m;
}

/// Error bound of a float32 linear recurrence with N complex entries against float64: every step rounds each
/// entry by a few ulps (one complex multiply-add, ≤ 4ε relative); an error made j steps ago has decayed by ρ^j, so
/// the state's errors add up to at most 4ε/(1 − ρ) of its size; the read sums N products (N·ε). The size of the
/// state is bounded by gain · Σ_j ρ^j · max|u| = gain · max|u| / (1 − ρ). Twice that, for the bound's own slack.
double recurrence_atol(const Magnitude& m, std::size_t N, double max_u) {
  const double memory = 1.0 / (1.0 - m.rho);
  return 2.0 * (4.0 * memory + static_cast<double>(N)) * kEps * m.gain * memory * max_u;
}

double max_abs(const Vector& v) { return v.size() ? static_cast<double>(xt::amax(xt::abs(v))()) : 0.0; }
double max_abs(const Matrix& m) { return m.size() ? static_cast<double>(xt::amax(xt::abs(m))()) : 0.0; }

/// Error bound of the selective scan against float64: each token's update rounds a state entry by ≤ 3ε of its
/// size (the exponential ≤ 2 ulp, one multiply-add), at most n tokens of such errors survive, and the read sums N
/// products. The size is bounded by the same recurrence run on |x|, |B|, |C| in float64.
double scan_atol(const ScanInputs& in) {
  const oracle::Mat size =
      oracle::selective_scan(to_oracle(Matrix(xt::abs(in.x))), to_oracle(in.delta), to_oracle(in.A),
                             to_oracle(Matrix(xt::abs(in.B))), to_oracle(Matrix(xt::abs(in.C))));
  double largest = 0.0;
  for (double v : size.v) largest = std::max(largest, v);
  return 2.0 * (3.0 * static_cast<double>(in.x.shape(0)) + static_cast<double>(in.A.shape(1))) * kEps * largest;
}

Vector row(const Matrix& m, std::size_t i) { return xt::row(m, i); }

}  // namespace

TEST_SUITE("14_state_space") {
  // --- zero-order hold ---------------------------------------------------------------------------------------
  TEST_CASE("zoh_discretize of a real diagonal A gives exp(ΔA) and (exp(ΔA) − 1)/A · B, as worked by hand" *
            doctest::test_suite("14_state_space/zoh_discretize")) {
    const attn::DiagonalSSM ssm{{{-1.0f, 0.0f}, {-2.0f, 0.0f}, {-0.5f, 0.0f}},
                                {{1.0f, 0.0f}, {2.0f, 0.0f}, {-1.0f, 0.0f}},
                                {{1.0f, 0.0f}, {1.0f, 0.0f}, {1.0f, 0.0f}}};
    const float delta = 0.5f;
    const attn::DiscreteSSM s = attn::zoh_discretize(ssm, delta);
    REQUIRE(s.A_bar.size() == 3);
    REQUIRE(s.B_bar.size() == 3);
    // By hand: Ā = e^{−0.5}, e^{−1}, e^{−0.25}; B̄ = (1 − e^{−0.5})·1, (1 − e^{−1})/2·2, (1 − e^{−0.25})/0.5·(−1).
    const std::vector<double> A_hand{std::exp(-0.5), std::exp(-1.0), std::exp(-0.25)};
    const std::vector<double> B_hand{1.0 - std::exp(-0.5), 1.0 - std::exp(-1.0), -2.0 * (1.0 - std::exp(-0.25))};
    // The same from the oracle's general exponential of the block matrix, which knows nothing of diagonals.
    oracle::Mat A(3, 3), B(3, 1);
    for (std::size_t k = 0; k < 3; ++k) {
      A(k, k) = ssm.A[k].real();
      B(k, 0) = ssm.B[k].real();
    }
    const oracle::Zoh z = oracle::zoh(A, B, delta);
    for (std::size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      CHECK(z.A_bar(k, k) == doctest::Approx(A_hand[k]).epsilon(1e-13));
      CHECK(z.B_bar(k, 0) == doctest::Approx(B_hand[k]).epsilon(1e-13));
      // float32: std::exp is within 2 ulp; Ā − 1 then cancels, which multiplies the relative error by
      // |Ā|/|Ā − 1| ≤ 4 for |ΔA| ≥ 0.25: 16ε relative is the bound.
      CHECK(s.A_bar[k].real() == doctest::Approx(A_hand[k]).epsilon(16 * kEps));
      CHECK(s.A_bar[k].imag() == 0.0f);
      CHECK_MESSAGE(std::fabs(s.B_bar[k].real() - B_hand[k]) <= 16 * kEps * std::fabs(B_hand[k]),
                    "B̄ must be the input integrated over the step, (Ā − 1)/A · B; Euler's Δ·B would give ",
                    delta * ssm.B[k].real());
    }
  }

  TEST_CASE("zoh_discretize of a complex A equals the exponential of its real 2×2 block: e^a times a rotation by b" *
            doctest::test_suite("14_state_space/zoh_discretize")) {
    // λ = a + ib acting on a complex state is the real matrix [[a, −b], [b, a]] acting on (Re x, Im x).
    const float a = -0.5f, b = 3.0f, delta = 0.3f;
    const double Da = delta * static_cast<double>(a), Db = delta * static_cast<double>(b);
    oracle::Mat block(2, 2);
    block(0, 0) = Da, block(0, 1) = -Db, block(1, 0) = Db, block(1, 1) = Da;
    // The oracle's exponential against the hand-worked answer, e^{Δa} [[cos Δb, −sin Δb], [sin Δb, cos Δb]] ...
    const oracle::Mat E = oracle::expm(block);
    CHECK(E(0, 0) == doctest::Approx(std::exp(Da) * std::cos(Db)).epsilon(1e-13));
    CHECK(E(1, 0) == doctest::Approx(std::exp(Da) * std::sin(Db)).epsilon(1e-13));
    CHECK(E(0, 1) == doctest::Approx(-std::exp(Da) * std::sin(Db)).epsilon(1e-13));
    // ... and against a Jordan block, exp([[a, 1], [0, a]]) = e^a [[1, 1], [0, 1]], which no diagonal formula covers.
    oracle::Mat jordan(2, 2);
    jordan(0, 0) = jordan(1, 1) = -0.7, jordan(0, 1) = 1.0;
    const oracle::Mat J = oracle::expm(jordan);
    CHECK(J(0, 1) == doctest::Approx(std::exp(-0.7)).epsilon(1e-13));
    CHECK(J(1, 0) == 0.0);
    // The track: Ā = exp(Δλ) is (E(0, 0), E(1, 0)); B̄ for B = 1 − 2i is the oracle's zoh with B = (1, −2).
    const attn::DiagonalSSM ssm{{{a, b}}, {{1.0f, -2.0f}}, {{1.0f, 0.0f}}};
    const attn::DiscreteSSM s = attn::zoh_discretize(ssm, delta);
    REQUIRE(s.A_bar.size() == 1);
    oracle::Mat A(2, 2), B(2, 1);
    A(0, 0) = a, A(0, 1) = -b, A(1, 0) = b, A(1, 1) = a;
    B(0, 0) = 1.0, B(1, 0) = -2.0;
    const oracle::Zoh z = oracle::zoh(A, B, delta);
    // float32 complex exp and one complex division: a few ulps of |Ā| ≈ 0.86 and of |B̄| ≈ 0.6; 8ε·(1 + |λ|) absolute.
    const double tol = 8.0 * kEps * (1.0 + std::abs(std::complex<double>(a, b)));
    CHECK(std::fabs(s.A_bar[0].real() - E(0, 0)) <= tol);
    CHECK(std::fabs(s.A_bar[0].imag() - E(1, 0)) <= tol);
    CHECK_MESSAGE(std::fabs(s.B_bar[0].real() - z.B_bar(0, 0)) <= tol, "Re B̄ ", s.B_bar[0].real(), " vs ",
                  z.B_bar(0, 0));
    CHECK_MESSAGE(std::fabs(s.B_bar[0].imag() - z.B_bar(1, 0)) <= tol, "Im B̄ ", s.B_bar[0].imag(), " vs ",
                  z.B_bar(1, 0));
    CHECK(s.C[0] == Complex(1.0f, 0.0f));
  }

  TEST_CASE("zoh_discretize keeps its digits at small steps: B̄ from Δ = 1e-6 to 1 to float32 rounding" *
            doctest::test_suite("14_state_space/zoh_discretize")) {
    // Mamba's steps start at Δ = 0.001, where e^{ΔA} is within 5e-4 of 1: (Ā − 1)/A computed as written keeps only
    // the last few bits of Ā and is 6e-5 wrong relative (A = −0.5), 7e-4 at Δ = 1e-4.
    attn::Rng rng(143);
    attn::DiagonalSSM ssm = s4d_lin(6, rng);
    ssm.A.emplace_back(-0.5f, 0.0f);  // the real A of the issue found against PyTorch
    ssm.A.emplace_back(-3.0f, 40.0f);
    ssm.A.emplace_back(-1e-6f, 0.0f);  // ΔA down to −1e−12: e^{ΔA} rounds to 1 in float, and B̄ was 0
    const Matrix b = rng.normal(ssm.A.size(), 2);  // (N, 2) a complex B, real and imaginary parts
    ssm.B.clear();
    for (std::size_t k = 0; k < ssm.A.size(); ++k) ssm.B.emplace_back(b(k, 0), b(k, 1));
    ssm.C.resize(ssm.A.size(), Complex(1.0f, 0.0f));
    for (const float delta : {1e-6f, 1e-5f, 1e-4f, 1e-3f, 1e-2f, 0.1f, 1.0f}) {
      const attn::DiscreteSSM s = attn::zoh_discretize(ssm, delta);
      for (std::size_t k = 0; k < ssm.A.size(); ++k) {
        CAPTURE(delta);
        CAPTURE(k);
        // The oracle: Van Loan's block exponential of the entry's real 2×2 form, [[a, −b], [b, a]].
        const double a = ssm.A[k].real(), w = ssm.A[k].imag();
        oracle::Mat A(2, 2), B(2, 1);
        A(0, 0) = a, A(0, 1) = -w, A(1, 0) = w, A(1, 1) = a;
        B(0, 0) = ssm.B[k].real(), B(1, 0) = ssm.B[k].imag();
        const oracle::Zoh z = oracle::zoh(A, B, delta);
        const std::complex<double> A_bar(z.A_bar(0, 0), z.A_bar(1, 0)), B_bar(z.B_bar(0, 0), z.B_bar(1, 0));
        // float32 arithmetic: ΔA rounds each part by ε, which moves e^{ΔA} by ≤ ε|ΔA||Ā| and e^{ΔA} − 1 by
        // ≤ ε|ΔA| (|e^{ΔA}| < 1), hence B̄ by ≤ ε·Δ|B|; then about ten operations of ≤ 2 ulp each (expm1, cos, sin,
        // the complex division and product). 16ε relative, plus the rounding of ΔA.
        const double dB = static_cast<double>(delta) * std::abs(std::complex<double>(ssm.B[k]));
        const double dA = static_cast<double>(delta) * std::abs(std::complex<double>(ssm.A[k]));
        CHECK(std::abs(std::complex<double>(s.A_bar[k]) - A_bar) <= 16.0 * kEps * (1.0 + dA) * std::abs(A_bar));
        CHECK_MESSAGE(std::abs(std::complex<double>(s.B_bar[k]) - B_bar) <= 16.0 * kEps * (std::abs(B_bar) + dB),
                      "B̄ = ", std::complex<double>(s.B_bar[k]), " against ", B_bar, ", relative error ",
                      std::abs(std::complex<double>(s.B_bar[k]) - B_bar) / std::abs(B_bar),
                      ": e^{ΔA} − 1 must not be computed as Ā − 1 (it cancels when ΔA is small)");
      }
    }
  }

  TEST_CASE("zoh_discretize refuses Re(A) ≥ 0, a step that is not positive, sizes that differ and NaN, naming them" *
            doctest::test_suite("14_state_space/zoh_discretize")) {
    const ComplexVector one{{1.0f, 0.0f}, {1.0f, 0.0f}};
    const attn::DiagonalSSM growing{{{-1.0f, 0.0f}, {0.25f, 1.0f}}, one, one};
    CHECK_THROWS_NAMING(attn::zoh_discretize(growing, 0.1f), std::invalid_argument, "A", "1");
    const attn::DiagonalSSM undamped{{{-1.0f, 0.0f}, {0.0f, 2.0f}}, one, one};  // an oscillator that never forgets
    CHECK_THROWS_NAMING(attn::zoh_discretize(undamped, 0.1f), std::invalid_argument, "A", "1");
    const attn::DiagonalSSM stable{{{-1.0f, 0.0f}, {-2.0f, 1.0f}}, one, one};
    CHECK_THROWS_NAMING(attn::zoh_discretize(stable, 0.0f), std::invalid_argument, "delta");
    CHECK_THROWS_NAMING(attn::zoh_discretize(stable, -1.0f), std::invalid_argument, "delta");
    CHECK_THROWS_NAMING(attn::zoh_discretize(stable, kNaN), std::invalid_argument, "delta");
    const attn::DiagonalSSM ragged{stable.A, {{1.0f, 0.0f}}, one};
    CHECK_THROWS_NAMING(attn::zoh_discretize(ragged, 0.1f), std::invalid_argument, "2", "1");
    const attn::DiagonalSSM nan_entry{{{-1.0f, 0.0f}, {kNaN, 0.0f}}, one, one};
    CHECK_THROWS_NAMING(attn::zoh_discretize(nan_entry, 0.1f), std::invalid_argument, "1");
  }

  TEST_CASE("zoh_discretize refuses NaN and infinity in B and C too, naming the index" *
            doctest::test_suite("14_state_space/zoh_discretize")) {
    // B̄ = (Ā − 1)/A · B would carry a NaN or ∞ of B into every later state, and C into every output.
    const ComplexVector A{{-1.0f, 0.0f}, {-2.0f, 1.0f}, {-0.5f, 0.0f}}, ones{{1.0f, 0.0f}, {1.0f, 0.0f}, {1.0f, 0.0f}};
    for (const float bad : {kNaN, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
      ComplexVector with_bad = ones;
      with_bad[2] = {1.0f, bad};
      CAPTURE(bad);
      CHECK_THROWS_NAMING(attn::zoh_discretize(attn::DiagonalSSM{A, with_bad, ones}, 0.1f), std::invalid_argument, "2");
      CHECK_THROWS_NAMING(attn::zoh_discretize(attn::DiagonalSSM{A, ones, with_bad}, 0.1f), std::invalid_argument, "2");
    }
  }

  // --- one time-invariant SSM, two computations ---------------------------------------------------------------
  TEST_CASE(
      "with zoh_discretize's Ā and B̄, the S4D recurrence equals the convolution with its kernel and the float64 "
      "definitions" *
      doctest::test_suite("14_state_space/zoh_discretize")) {
    attn::Rng rng(141);
    for (const std::size_t n : {1, 2, 300}) {
      CAPTURE(n);
      const std::size_t N = 8;
      const attn::DiscreteSSM s = attn::zoh_discretize(s4d_lin(N, rng), 0.05f);
      const Matrix u_col = rng.normal(n, 1);  // (n, 1)
      const Vector u = xt::flatten(u_col);    // (n)
      const std::vector<double> K = oracle::ssm_kernel(to_double(s.A_bar), to_double(s.B_bar), to_double(s.C), n);
      const std::vector<double> y = oracle::causal_convolution(K, to_oracle(u));
      const Magnitude m = magnitude(s);
      CHECK_ALLCLOSE(attn::ch14::ssm_kernel(s, n), K, recurrence_atol(m, N, 1.0), 0.0);
      CHECK_ALLCLOSE(attn::ch14::ssm_recurrence(s, u), y, recurrence_atol(m, N, max_abs(u)), 0.0);
      // The kernel is what an impulse leaves behind: the recurrence's answer to u = (1, 0, 0, …).
      Vector impulse = xt::zeros<float>({n});
      impulse(0) = 1.0f;
      CHECK_ALLCLOSE(attn::ch14::ssm_recurrence(s, impulse), K, recurrence_atol(m, N, 1.0), 0.0);
    }
  }

  TEST_CASE(
      "the S4D kernel and the direct convolution of a long sequence (Δ = 0.001, n = 4,096) are right to float32 "
      "rounding" *
      doctest::test_suite("14_state_space/zoh_discretize")) {
    // At Δ = 0.001, |Ā| is within 5e-4 of 1: the kernel's 4,096 taps are 4,096 powers of Ā, and each output of the
    // convolution sums up to 4,096 products. In float, either accumulates n·ε of rounding (2.4e-4 relative).
    attn::Rng rng(144);
    const std::size_t N = 16, n = 4096;
    const attn::DiscreteSSM s = attn::zoh_discretize(s4d_lin(N, rng), 0.001f);
    const std::vector<double> K = oracle::ssm_kernel(to_double(s.A_bar), to_double(s.B_bar), to_double(s.C), n);
    // K_l rounds to float once (ε|K_l|); before that, l ≤ n complex products and N sums in double (and the oracle's
    // std::pow) err by at most 4·n·2^-53 of Σ_k |C_k B̄_k| (|Ā_k| ≤ 1).
    const double kDoubleEps = 1.0 / 9007199254740992.0;  // 2^-53
    const double gain = magnitude(s).gain;
    const Vector K_track = attn::ch14::ssm_kernel(s, n);  // (n)
    CHECK_ALLCLOSE(K_track, K, 4.0 * static_cast<double>(n) * kDoubleEps * gain, kEps);
    // The convolution of that kernel: y_t rounds to float once (ε|y_t|); the sums of n exact products in double
    // err by n·2^-53·Σ_j |K_j||u_{t−j}| on each side, the track's and the oracle's.
    const Vector u = xt::flatten(Matrix(rng.normal(n, 1)));  // (n)
    const std::vector<double> y = oracle::causal_convolution(to_oracle(K_track), to_oracle(u));
    const double l1 = static_cast<double>(xt::sum(xt::abs(K_track))());
    CHECK_ALLCLOSE(attn::ch14::causal_convolution_direct(K_track, u), y,
                   2.0 * static_cast<double>(n) * kDoubleEps * l1 * max_abs(u), kEps);
  }

  TEST_CASE(
      "FFT convolution equals direct convolution of a zoh_discretize kernel for any lengths, shorter or longer than "
      "the input" *
      doctest::test_suite("14_state_space/zoh_discretize")) {
    attn::Rng rng(142);
    const attn::DiscreteSSM s = attn::zoh_discretize(s4d_lin(4, rng), 0.1f);
    for (const auto [n_K, n] : {std::array<std::size_t, 2>{1, 1}, {5, 17}, {300, 300}, {1000, 257}, {257, 1000}}) {
      CAPTURE(n_K);
      CAPTURE(n);
      const Vector K = attn::ch14::ssm_kernel(s, n_K);         // (n_K)
      const Vector u = xt::flatten(Matrix(rng.normal(n, 1)));  // (n)
      const std::vector<double> expected = oracle::causal_convolution(to_oracle(K), to_oracle(u));
      // Direct: each output sums ≤ n products, so it errs by at most n·ε·Σ_j |K_j||u_{t−j}| ≤ n·ε·‖K‖₁·max|u|.
      const double l1 = static_cast<double>(xt::sum(xt::abs(K))());
      CHECK_ALLCLOSE(attn::ch14::causal_convolution_direct(K, u), expected,
                     static_cast<double>(n) * kEps * l1 * max_abs(u), 0.0);
      if (!attn::ch14::fft_available()) {
        MESSAGE("skipped the FFT half: built without FFTW3 (install libfftw3-dev)");
        continue;
      }
      // FFT: a transform of length L errs by about ε·log₂L relative to the norms (Cooley–Tukey's bound); three
      // transforms and a product: 8·ε·log₂L·‖K‖₂·‖u‖₂ absolute covers it.
      const double L = std::pow(2.0, std::ceil(std::log2(static_cast<double>(n + std::min(n, n_K)))));
      const double k2 = std::sqrt(static_cast<double>(xt::sum(K * K)())),
                   u2 = std::sqrt(static_cast<double>(xt::sum(u * u)()));
      CHECK_ALLCLOSE(attn::ch14::causal_convolution_fft(K, u), expected, 8.0 * kEps * std::log2(L) * k2 * u2, 0.0);
    }
  }

  // --- the selective SSM ---------------------------------------------------------------------------------------
  TEST_CASE("selective_step token by token equals the float64 selective recurrence" *
            doctest::test_suite("14_state_space/selective_step")) {
    attn::Rng rng(143);
    const std::size_t n = 60, d = 5, N = 4;
    const ScanInputs in = scan_inputs(rng, n, d, N);
    const oracle::Mat expected =
        oracle::selective_scan(to_oracle(in.x), to_oracle(in.delta), to_oracle(in.A), to_oracle(in.B), to_oracle(in.C));
    Matrix h = xt::zeros<float>({d, N});  // (d, N)
    Matrix y = xt::zeros<float>({n, d});  // (n, d)
    for (std::size_t t = 0; t < n; ++t)
      xt::row(y, t) = attn::selective_step(h, row(in.x, t), row(in.delta, t), in.A, row(in.B, t), row(in.C, t));
    CHECK_ALLCLOSE(y, expected, scan_atol(in), 0.0);
  }

  TEST_CASE("selective_step refuses bad shapes, a step ≤ 0, A ≥ 0 and NaN, and leaves the state unchanged" *
            doctest::test_suite("14_state_space/selective_step")) {
    const std::size_t d = 3, N = 2;
    Matrix h = {{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 6.0f}};  // (d, N)
    const Matrix before = h;
    const Vector x = {1.0f, 1.0f, 1.0f}, delta = {0.1f, 0.1f, 0.1f}, B = {1.0f, 1.0f}, C = {1.0f, 1.0f};
    const Matrix A = {{-1.0f, -2.0f}, {-1.0f, -2.0f}, {-1.0f, -2.0f}};  // (d, N)
    CHECK_THROWS_NAMING(attn::selective_step(h, Vector{1.0f, 1.0f}, delta, A, B, C), std::invalid_argument, "2");
    CHECK_THROWS_NAMING(attn::selective_step(h, x, Vector{0.1f, 0.0f, 0.1f}, A, B, C), std::invalid_argument, "delta",
                        "1");
    Matrix unstable = A;
    unstable(2, 1) = 0.5f;
    CHECK_THROWS_NAMING(attn::selective_step(h, x, delta, unstable, B, C), std::invalid_argument, "A < 0");
    CHECK_THROWS_AS(attn::selective_step(h, x, delta, A, Vector{1.0f, kNaN}, C), std::invalid_argument);
    CHECK_MESSAGE(xt::all(xt::equal(h, before)), "a call that throws must leave the state h as it was");
    (void)d;
    (void)N;
  }

  TEST_CASE(
      "selective_step refuses a NaN or infinite state and finite inputs that would overflow, leaving h as it was" *
      doctest::test_suite("14_state_space/selective_step")) {
    Matrix h = {{1.0f, 2.0f}, {3.0f, 4.0f}};  // (d, N)
    const Vector x = {1.0f, 1.0f}, delta = {0.1f, 0.1f}, B = {1.0f, 1.0f}, C = {1.0f, 1.0f};
    const Matrix A = {{-1.0f, -2.0f}, {-1.0f, -2.0f}};  // (d, N)
    Matrix nan_h = h;
    nan_h(1, 0) = kNaN;
    CHECK_THROWS_NAMING(attn::selective_step(nan_h, x, delta, A, B, C), std::invalid_argument, "h", "2");
    const Matrix before = h;
    // Δ·x·B = 0.1 · 1e20 · 1e20 = 1e39: past float's largest value (3.4e38) though every input is finite.
    CHECK_THROWS_NAMING(attn::selective_step(h, Vector{1e20f, 1.0f}, delta, A, Vector{1e20f, 1.0f}, C),
                        std::invalid_argument, "past float's largest value");
    CHECK_MESSAGE(xt::all(xt::equal(h, before)), "a call that throws must leave the state h as it was");
    // A state of 2e38 stays finite, but the output may sum N = 2 of them: the bound is 4e38.
    Matrix large = {{2e38f, 0.0f}, {0.0f, 0.0f}};
    CHECK_THROWS_NAMING(attn::selective_step(large, x, delta, A, B, C), std::invalid_argument, "4e+38");
    CHECK(large(0, 0) == 2e38f);
  }

  TEST_CASE(
      "the selective scan on any threads, split in time or channels, equals float64, and selective_step continues it" *
      doctest::test_suite("14_state_space/selective_step")) {
    attn::Rng rng(144);
    for (const std::size_t n : {1, 2, 7, 100, 1001}) {
      const std::size_t d = 6, N = 4;
      const ScanInputs in = scan_inputs(rng, n + 1, d, N);  // one token more, for the step after the scan
      const auto first_n = [n](const Matrix& m) { return Matrix(xt::view(m, xt::range(0, n), xt::all())); };
      const ScanInputs head{first_n(in.x), first_n(in.delta), in.A, first_n(in.B), first_n(in.C)};
      const oracle::Mat expected = oracle::selective_scan(to_oracle(in.x), to_oracle(in.delta), to_oracle(in.A),
                                                          to_oracle(in.B), to_oracle(in.C));
      oracle::Mat expected_head(n, d);
      std::copy(expected.v.begin(), expected.v.begin() + static_cast<long>(n * d), expected_head.v.begin());
      const double atol = scan_atol(in);
      for (const auto split : {attn::ch14::ScanSplit::time, attn::ch14::ScanSplit::channels})
        for (const int threads : {1, 2, 3, 5}) {
          CAPTURE(n);
          CAPTURE(threads);
          CAPTURE(split == attn::ch14::ScanSplit::time);
          attn::ch14::SelectiveScanOutput out =
              attn::ch14::selective_scan(head.x, head.delta, head.A, head.B, head.C, threads, split);
          CHECK_ALLCLOSE(out.y, expected_head, atol, 0.0);
          // Decoding continues from the scan's final state: one selective_step gives the next token's output.
          const Vector next =
              attn::selective_step(out.h, row(in.x, n), row(in.delta, n), in.A, row(in.B, n), row(in.C, n));
          CHECK_ALLCLOSE(next, expected.row(n), atol, 0.0);
        }
    }
  }

  TEST_CASE("the selective scan refuses what selective_step refuses, and zero threads" *
            doctest::test_suite("14_state_space/selective_step")) {
    attn::Rng rng(145);
    const ScanInputs in = scan_inputs(rng, 8, 3, 2);
    Matrix bad_delta = in.delta;
    bad_delta(5, 2) = -0.1f;
    CHECK_THROWS_NAMING(attn::ch14::selective_scan(in.x, bad_delta, in.A, in.B, in.C, 2), std::invalid_argument,
                        "delta", "5", "2");
    Matrix h = xt::zeros<float>({3, 2});
    CHECK_THROWS_NAMING(attn::selective_step(h, row(in.x, 5), row(bad_delta, 5), in.A, row(in.B, 5), row(in.C, 5)),
                        std::invalid_argument, "delta", "2");
    CHECK_THROWS_NAMING(attn::ch14::selective_scan(in.x, in.delta, in.A, Matrix(xt::zeros<float>({8, 3})), in.C),
                        std::invalid_argument, "B", "8", "3");
    CHECK_THROWS_NAMING(attn::ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, 0), std::invalid_argument,
                        "threads", "0");
    // A NaN in the second half of the tokens is found by the second thread: its exception reaches the caller.
    Matrix nan_x = in.x;
    nan_x(7, 1) = kNaN;
    CHECK_THROWS_NAMING(attn::ch14::selective_scan(nan_x, in.delta, in.A, in.B, in.C, 2), std::invalid_argument, "x",
                        "7", "1");
    Matrix positive_A = in.A;
    positive_A(1, 1) = 0.0f;
    CHECK_THROWS_NAMING(attn::ch14::selective_scan(in.x, in.delta, positive_A, in.B, in.C), std::invalid_argument, "A",
                        "1");
  }

  // --- the scan operator --------------------------------------------------------------------------------------
  TEST_CASE("scan_combine applies the earlier step first: the pair equals the two steps one after the other" *
            doctest::test_suite("14_state_space/scan_combine")) {
    // Binary fractions: every product below is exact in float32, so equality is exact.
    const attn::ScanPair first{0.5f, 2.0f}, second{3.0f, -1.0f};
    const attn::ScanPair both = attn::scan_combine(first, second);
    const float h = 7.0f;
    const float stepwise = second.a * (first.a * h + first.b) + second.b;  // 15.5
    CHECK_MESSAGE(
        both.a * h + both.b == stepwise,
        "combine(earlier, later) must be later ∘ earlier: h ↦ later.a·(earlier.a·h + earlier.b) + later.b; got "
        "the pair (",
        both.a, ", ", both.b, ")");
    CHECK(both.a == 1.5f);
    CHECK(both.b == 5.0f);
    const attn::ScanPair identity{1.0f, 0.0f};
    CHECK(attn::scan_combine(identity, second).a == second.a);
    CHECK(attn::scan_combine(identity, second).b == second.b);
    CHECK(attn::scan_combine(first, identity).b == first.b);
  }

  TEST_CASE("scan_combine is associative within rounding, so a scan may group the steps in any order" *
            doctest::test_suite("14_state_space/scan_combine")) {
    attn::Rng rng(146);
    const std::size_t n = 1000;
    const Matrix a = rng.uniform(n, 1, 0.9f, 1.0f), b = rng.normal(n, 1);  // (n, 1) each
    std::vector<attn::ScanPair> steps(n);
    for (std::size_t t = 0; t < n; ++t) steps[t] = {a(t, 0), b(t, 0)};
    // The oracle: the recurrence h_t = a_t h_{t−1} + b_t from 0, in float64; h_n is the composed map's b.
    double h = 0.0, size = 0.0;  // size: the same recurrence on |b|, the scale of the rounding
    for (std::size_t t = 0; t < n; ++t) {
      h = a(t, 0) * h + b(t, 0);
      size = a(t, 0) * size + std::fabs(b(t, 0));
    }
    // Three groupings: left to right (sequential), right to left, and a balanced tree (the parallel scan's).
    attn::ScanPair left{1.0f, 0.0f}, right{1.0f, 0.0f};
    for (std::size_t t = 0; t < n; ++t) left = attn::scan_combine(left, steps[t]);
    for (std::size_t t = n; t-- > 0;) right = attn::scan_combine(steps[t], right);
    std::vector<attn::ScanPair> level = steps;
    while (level.size() > 1) {
      std::vector<attn::ScanPair> up;
      for (std::size_t i = 0; i + 1 < level.size(); i += 2) up.push_back(attn::scan_combine(level[i], level[i + 1]));
      if (level.size() % 2) up.push_back(level.back());
      level = up;
    }
    // Each combine rounds b by ≤ 2ε of its size and a by ε: n combines, 2n·ε·size (the |b| recurrence) bounds it.
    const double atol = 2.0 * static_cast<double>(n) * kEps * size;
    for (const attn::ScanPair& p : {left, right, level[0]}) {
      CHECK(std::fabs(p.b - h) <= atol);
      CHECK(p.a > 0.0f);
    }
    CHECK(std::fabs(right.a - left.a) <= 2.0 * static_cast<double>(n) * kEps * left.a);
  }

  // --- the duality -------------------------------------------------------------------------------------------
  TEST_CASE("semiseparable_mask holds the decays after each token: ones on the diagonal, zeros above" *
            doctest::test_suite("14_state_space/semiseparable_mask")) {
    // a_0 never matters: nothing is in the state before token 0. Binary fractions: exact products.
    const Vector a = {0.75f, 0.5f, 0.25f, 1.0f};
    const Matrix L = attn::semiseparable_mask(a);
    REQUIRE(L.shape(0) == 4);
    REQUIRE(L.shape(1) == 4);
    CHECK_MESSAGE(L(1, 0) == 0.5f, "L(1, 0) must be a_1 alone: token 0's input meets only the decays after it; got ",
                  L(1, 0));
    CHECK(L(2, 0) == 0.125f);
    CHECK(L(3, 0) == 0.125f);
    CHECK(L(3, 1) == 0.25f);
    CHECK(L(3, 2) == 1.0f);
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(L(i, i) == 1.0f);
      for (std::size_t j = i + 1; j < 4; ++j) CHECK_MESSAGE(L(i, j) == 0.0f, "above the diagonal is the future: 0");
    }
    attn::Rng rng(147);
    const Vector r = xt::flatten(Matrix(rng.uniform(40, 1, 0.5f, 1.0f)));  // (40)
    // Up to 39 products, each rounded: relative error ≤ 39ε.
    CHECK_ALLCLOSE(attn::semiseparable_mask(r), oracle::semiseparable(to_oracle(r)), 0.0, 40 * kEps);
  }

  TEST_CASE("semiseparable_mask without decay is the causal mask of ones, and a constant λ gives λ^(i−j)" *
            doctest::test_suite("14_state_space/semiseparable_mask")) {
    const Matrix ones = attn::semiseparable_mask(xt::ones<float>({5}));
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t j = 0; j < 5; ++j) CHECK(ones(i, j) == (j <= i ? 1.0f : 0.0f));
    const Matrix decayed = attn::semiseparable_mask(Vector(xt::ones<float>({6}) * 0.5f));
    CHECK(decayed(5, 0) == 0.03125f);  // 0.5^5, exact
    CHECK(decayed(4, 2) == 0.25f);
    CHECK(attn::semiseparable_mask(Vector(xt::zeros<float>({0}))).size() == 0);
  }

  TEST_CASE("semiseparable_mask refuses, before allocating, an (n, n) mask that cannot fit in memory" *
            doctest::test_suite("14_state_space/semiseparable_mask")) {
    // n = 100,000: 40 GB of mask.
    CHECK_THROWS_NAMING(attn::semiseparable_mask(Vector(xt::ones<float>({100000}))), std::invalid_argument,
                        "available");
    CHECK(attn::semiseparable_mask(Vector(xt::zeros<float>({0}))).size() == 0);  // no token: an empty mask
  }

  TEST_CASE("masked_attention_form refuses NaN or infinity in L, C, B or X, naming it" *
            doctest::test_suite("14_state_space/masked_attention_form")) {
    const Matrix L = {{1.0f, 0.0f}, {0.5f, 1.0f}}, C = {{1.0f}, {2.0f}}, B = {{3.0f}, {4.0f}}, X = {{1.0f}, {1.0f}};
    Matrix bad = X;
    bad(1, 0) = kNaN;
    CHECK_THROWS_NAMING(attn::masked_attention_form(L, C, B, bad), std::invalid_argument, "X", "1");
    Matrix bad_L = L;
    bad_L(1, 0) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(attn::masked_attention_form(bad_L, C, B, X), std::invalid_argument, "L", "2");
  }

  TEST_CASE("semiseparable_mask refuses decays outside [0, 1] and NaN, naming the token" *
            doctest::test_suite("14_state_space/semiseparable_mask")) {
    CHECK_THROWS_NAMING(attn::semiseparable_mask(Vector{0.5f, 1.5f}), std::invalid_argument, "1");
    CHECK_THROWS_NAMING(attn::semiseparable_mask(Vector{-0.1f}), std::invalid_argument, "0");
    CHECK_THROWS_NAMING(attn::semiseparable_mask(Vector{0.5f, 0.5f, kNaN}), std::invalid_argument, "2");
  }

  TEST_CASE("masked_attention_form (L ∘ C Bᵀ) X equals the selective recurrence of a scalar-A SSM: the duality" *
            doctest::test_suite("14_state_space/masked_attention_form")) {
    attn::Rng rng(148);
    for (const std::size_t n : {1, 9, 64}) {
      CAPTURE(n);
      const std::size_t N = 8, p = 3;
      const float A = -1.5f;                                                              // one decay rate for the head
      const Vector delta = xt::exp(xt::flatten(Matrix(rng.uniform(n, 1, -4.0f, 0.0f))));  // (n) Δ_t in (e^-4, 1)
      const Matrix B = rng.normal(n, N), C = rng.normal(n, N), X = rng.normal(n, p);      // (n, N), (n, N), (n, p)
      Vector a = xt::exp(A * delta);                                                      // (n) a_t = exp(Δ_t A)
      Matrix B_bar = B;  // (n, N) Δ_t B_t, the input matrix with the step folded in
      for (std::size_t t = 0; t < n; ++t) xt::row(B_bar, t) *= delta(t);
      const Matrix Y = attn::masked_attention_form(attn::semiseparable_mask(a), C, B_bar, X);  // (n, p)
      // The recurrence: p channels with the same Δ and A(c, k) = A for every state entry.
      oracle::Mat D(n, p), As(p, N);
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t c = 0; c < p; ++c) D(t, c) = delta(t);
      for (double& v : As.v) v = A;
      const oracle::Mat recurrence = oracle::selective_scan(to_oracle(X), D, As, to_oracle(B), to_oracle(C));
      // Two sums, over N (C·B) and over ≤ n tokens, of products bounded by the same form on |C|, |B|, |X| and the
      // largest mask entry 1: (N + n + 2)·ε of that size (plus the exp rounding of a, ≤ n·2ε relative in L).
      const oracle::Mat size =
          oracle::masked_attention(to_oracle(Vector(xt::ones<float>({n}))), to_oracle(Matrix(xt::abs(C))),
                                   to_oracle(Matrix(xt::abs(B_bar))), to_oracle(Matrix(xt::abs(X))));
      double largest = 0.0;
      for (double v : size.v) largest = std::max(largest, v);
      const double atol = 2.0 * static_cast<double>(N + 3 * n + 2) * kEps * largest;
      CHECK_ALLCLOSE(Y, recurrence, atol, 0.0);
      CHECK_ALLCLOSE(Y, oracle::masked_attention(to_oracle(a), to_oracle(C), to_oracle(B_bar), to_oracle(X)), atol,
                     0.0);
    }
  }

  TEST_CASE(
      "chapter 08's causal linear attention is masked_attention_form with a constant decay, divided by its row sums" *
      doctest::test_suite("14_state_space/masked_attention_form")) {
    attn::Rng rng(149);
    const std::size_t n = 50, m = 6, d_v = 4;
    const Matrix phiQ = attn::elu_plus_one(rng.normal(n, m)), phiK = attn::elu_plus_one(rng.normal(n, m));
    const Matrix V = rng.normal(n, d_v);
    for (const float lambda : {1.0f, 0.9f}) {
      CAPTURE(lambda);
      const Matrix L = attn::semiseparable_mask(Vector(xt::ones<float>({n}) * lambda));  // (n, n) λ^{i−j}
      const Matrix numerator = attn::masked_attention_form(L, phiQ, phiK, V);            // (n, d_v)
      const Matrix denominator =
          attn::masked_attention_form(L, phiQ, phiK, Matrix(xt::ones<float>({n, std::size_t{1}})));
      Matrix O = numerator;  // (n, d_v)
      for (std::size_t i = 0; i < n; ++i) xt::row(O, i) /= denominator(i, 0);
      const oracle::Mat expected =
          oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V), true, lambda);
      // Numerator and denominator are sums of n·m non-negative weights (times values): each errs by
      // (n + m)·ε relative to its weight, and the ratio by twice that, times max|v|.
      CHECK_ALLCLOSE(O, expected, 4.0 * static_cast<double>(n + m) * kEps * max_abs(V), 0.0);
    }
  }

  TEST_CASE("masked_attention_form refuses shapes that do not fit, naming them" *
            doctest::test_suite("14_state_space/masked_attention_form")) {
    const Matrix L = xt::zeros<float>({4, 4}), C = xt::zeros<float>({4, 2}), X = xt::zeros<float>({4, 3});
    CHECK_THROWS_NAMING(attn::masked_attention_form(Matrix(xt::zeros<float>({3, 4})), C, C, X), std::invalid_argument,
                        "3", "4");
    CHECK_THROWS_NAMING(attn::masked_attention_form(L, C, Matrix(xt::zeros<float>({4, 5})), X), std::invalid_argument,
                        "4", "5");
    CHECK_THROWS_NAMING(attn::masked_attention_form(L, C, C, Matrix(xt::zeros<float>({5, 3}))), std::invalid_argument,
                        "5", "3");
  }

  // --- attention vs memory --------------------------------------------------------------------------------------
  TEST_CASE(
      "masked_attention_form without decay recalls m ≤ d_k pairs with orthogonal keys exactly, and 4·d_k pairs it "
      "cannot" *
      doctest::test_suite("14_state_space/masked_attention_form")) {
    attn::Rng rng(150);
    const std::size_t d_k = 16, d_v = 16;
    for (const std::size_t m : {1, 8, 16}) {
      CAPTURE(m);
      const Matrix K = attn::ch14::orthonormal_rows(rng, m, d_k), V = rng.normal(m, d_v);  // (m, d_k), (m, d_v)
      const attn::ch14::RecallTask task = attn::ch14::recall_task(K, V);
      const Matrix Y = attn::masked_attention_form(attn::semiseparable_mask(xt::ones<float>({2 * m})), task.C, task.B,
                                                   task.X);                 // (2m, d_v)
      const Matrix recalled = xt::view(Y, xt::range(m, 2 * m), xt::all());  // (m, d_v)
      // k_i · Σ_j k_jᵀ v_j = v_i: sums of d_k and 2m products of unit-size keys, (d_k + 2m + 2)·ε·max|v|.
      CHECK_ALLCLOSE(recalled, to_oracle(V), 2.0 * static_cast<double>(d_k + 2 * m + 2) * kEps * max_abs(V), 0.0);
    }
    // 64 random unit keys in 16 dimensions: K Kᵀ has rank ≤ 16, so at most 16 of the 64 directions of V come back.
    // By Eckart–Young the error is at least the energy of V outside its best rank-16 part; for a Gaussian 64 × 64
    // V that is about 70% (Marchenko–Pastur): 0.5 is a safe floor.
    const std::size_t m = 64;
    Matrix K = rng.normal(m, d_k);  // (m, d_k) rows scaled to unit length
    for (std::size_t i = 0; i < m; ++i)
      xt::row(K, i) /= std::sqrt(static_cast<float>(xt::sum(xt::row(K, i) * xt::row(K, i))()));
    const Matrix V = rng.normal(m, m);  // (m, d_v = m)
    const attn::ch14::RecallTask task = attn::ch14::recall_task(K, V);
    const Matrix Y =
        attn::masked_attention_form(attn::semiseparable_mask(xt::ones<float>({2 * m})), task.C, task.B, task.X);
    const Matrix recalled = xt::view(Y, xt::range(m, 2 * m), xt::all());
    CHECK(attn::ch14::relative_error(recalled, V) > 0.5);
  }
}

namespace {

namespace hostile = attn::test::hostile;

// A complex vector (N) given to the battery as an (N, 2) matrix: column 0 the real parts, column 1 the imaginary
// ones. Any shape is a complex vector: a missing column is zeros, a third is not read (the battery's shapes of the
// matrix are complex vectors of N ± 1, 0 and 1 entries).
ComplexVector complex_of(const Matrix& m) {
  ComplexVector v(m.shape(0));
  for (std::size_t k = 0; k < v.size(); ++k)
    v[k] = Complex(m.shape(1) > 0 ? m(k, 0) : 0.0f, m.shape(1) > 1 ? m(k, 1) : 0.0f);
  return v;
}

Matrix columns_of(const ComplexVector& v) {
  Matrix m = Matrix::from_shape({v.size(), 2});
  for (std::size_t k = 0; k < v.size(); ++k) {
    m(k, 0) = v[k].real();
    m(k, 1) = v[k].imag();
  }
  return m;
}

}  // namespace

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
// values, each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("14_state_space") {
  TEST_CASE("zoh_discretize under the hostile battery" * doctest::test_suite("14_state_space/zoh_discretize")) {
    // hostile battery: zoh_discretize
    const ComplexVector A{{-0.5f, 0.0f}, {-0.5f, 3.14f}, {-1.0f, -2.0f}}, B{{1.0f, 0.0f}, {1.0f, 0.5f}, {0.5f, 0.0f}},
        C{{0.3f, -0.2f}, {1.0f, 0.0f}, {-0.7f, 0.1f}};
    hostile::battery(
        "zoh_discretize", {"A", "B", "C", "delta|Δ"},
        [](const Matrix& a, const Matrix& b, const Matrix& c, float delta) {
          const attn::DiscreteSSM d = attn::zoh_discretize({complex_of(a), complex_of(b), complex_of(c)}, delta);
          return std::vector<Matrix>{columns_of(d.A_bar), columns_of(d.B_bar), columns_of(d.C)};
        },
        columns_of(A), columns_of(B), columns_of(C), 0.1f)
        .fits([](const Matrix& a, const Matrix& b, const Matrix& c, float delta) {
          bool stable = true;
          for (const Complex z : complex_of(a)) stable = stable && z.real() < 0;
          return a.shape(0) == b.shape(0) && a.shape(0) == c.shape(0) && stable && delta > 0 && std::isfinite(delta);
        })
        .answer([](const std::vector<Matrix>& d, const Matrix& a, const Matrix&, const Matrix&, float) {
          for (const Matrix& m : d)
            if (m.shape(0) != a.shape(0)) return false;
          for (std::size_t k = 0; k < a.shape(0); ++k)  // |Ā_k| ≤ 1: a stable state never grows
            if (std::hypot(d[0](k, 0), d[0](k, 1)) > 1.0f) return false;
          return true;
        })
        .run();
  }

  TEST_CASE("selective_step under the hostile battery" * doctest::test_suite("14_state_space/selective_step")) {
    // hostile battery: selective_step
    attn::Rng rng(1451);
    const Matrix A = -rng.uniform(3, 4, 0.5f, 2.0f);
    hostile::battery(
        "selective_step", {"h", "x", "delta|Δ", "A", "B", "C"},
        [](Matrix& h, const Vector& x, const Vector& delta, const Matrix& a, const Vector& b, const Vector& c) {
          return attn::selective_step(h, x, delta, a, b, c);
        },
        Matrix(rng.normal(3, 4)), Vector{0.5f, -1.0f, 2.0f}, Vector{0.1f, 0.01f, 0.05f}, A,
        Vector{1.0f, -0.5f, 0.25f, 2.0f}, Vector{0.5f, 0.5f, -1.0f, 1.0f})
        .fits([](const Matrix& h, const Vector& x, const Vector& delta, const Matrix& a, const Vector& b,
                 const Vector& c) {
          bool ok = h.shape() == a.shape() && x.size() == a.shape(0) && delta.size() == a.shape(0) &&
                    b.size() == a.shape(1) && c.size() == a.shape(1);
          for (const float v : delta) ok = ok && v > 0;
          for (const float v : a) ok = ok && v < 0;
          return ok;
        })
        .answer([](const Vector& y, const Matrix& h, const Vector&, const Vector&, const Matrix&, const Vector&,
                   const Vector&) { return y.size() == h.shape(0) && hostile::all_finite(y); })
        .run();
  }

  TEST_CASE("scan_combine under the hostile battery" * doctest::test_suite("14_state_space/scan_combine")) {
    // hostile battery: scan_combine
    hostile::battery(
        "scan_combine", {"earlier_a", "earlier_b", "later_a", "later_b"},
        [](float ea, float eb, float la, float lb) {
          const attn::ScanPair p = attn::scan_combine({ea, eb}, {la, lb});
          return Vector{p.a, p.b};
        },
        0.5f, 2.0f, 0.25f, -1.0f)
        .answer([](const Vector& p, float ea, float eb, float la, float lb) {
          // documented: NaN or ±inf propagate as float arithmetic does (the scans refuse them first); the rest is
          // the composition's own arithmetic
          return p(0) == la * ea && p(1) == la * eb + lb;
        })
        .exempt("= NaN", "documented: a NaN propagates as float arithmetic does (the scans refuse it first)")
        .exempt("inf",
                "documented: an infinity propagates as float arithmetic does, 0·inf a NaN (the scans refuse "
                "it first)")
        .exempt("3e38", "documented: float arithmetic, whose 3e38·3e38 is inf and inf − inf NaN (the scans bound it)")
        .run();
  }

  TEST_CASE("semiseparable_mask under the hostile battery" * doctest::test_suite("14_state_space/semiseparable_mask")) {
    // hostile battery: semiseparable_mask
    hostile::battery(
        "semiseparable_mask", {"a"}, [](const Vector& a) { return attn::semiseparable_mask(a); },
        Vector{0.9f, 0.5f, 1.0f, 0.0f})
        .fits([](const Vector& a) {
          bool ok = true;
          for (const float v : a) ok = ok && v >= 0 && v <= 1;
          return ok;
        })
        .answer([](const Matrix& L, const Vector& a) {
          return L.shape(0) == a.size() && L.shape(1) == a.size() && hostile::all_finite(L);
        })
        .run();
  }

  TEST_CASE("masked_attention_form under the hostile battery" *
            doctest::test_suite("14_state_space/masked_attention_form")) {
    // hostile battery: masked_attention_form
    attn::Rng rng(1452);
    hostile::battery(
        "masked_attention_form", {"L", "C", "B", "X"},
        [](const Matrix& L, const Matrix& C, const Matrix& B, const Matrix& X) {
          return attn::masked_attention_form(L, C, B, X);
        },
        attn::semiseparable_mask(Vector{0.9f, 0.5f, 1.0f, 0.8f}), Matrix(rng.normal(4, 3)), Matrix(rng.normal(4, 3)),
        Matrix(rng.normal(4, 2)))
        .fits([](const Matrix& L, const Matrix& C, const Matrix& B, const Matrix& X) {
          const std::size_t n = C.shape(0);
          return L.shape(0) == n && L.shape(1) == n && B.shape(0) == n && X.shape(0) == n && B.shape(1) == C.shape(1);
        })
        .answer([](const Matrix& Y, const Matrix&, const Matrix& C, const Matrix&, const Matrix& X) {
          return Y.shape(0) == C.shape(0) && Y.shape(1) == X.shape(1);
        })
        .run();
  }
}

// The chapter's own kernels (scan_kernels.inl), not the learner's: run on the solution track only.
TEST_SUITE("14_state_space: chapter code") {
  TEST_CASE(
      "every scan kernel this CPU runs equals float64, on whole and ragged vectors of channels, and finds bad "
      "input") {
    attn::Rng rng(146);
    int ran = 0;
    for (const char* isa : {"AVX-512", "AVX2+FMA", "portable"}) {
      if (!attn::ch14::use_scan_kernels(isa)) {
        MESSAGE(isa << " kernels: not run on this CPU or build");
        continue;
      }
      ++ran;
      CAPTURE(isa);
      // d = 64: whole vectors of every width; 19 and 1: ragged (padding lanes); N = 16 and 3 (not a multiple of 4).
      for (const auto& [n, d, N] : {std::array<std::size_t, 3>{300, 64, 16}, {37, 19, 3}, {5, 1, 16}}) {
        const ScanInputs in = scan_inputs(rng, n, d, N);
        const oracle::Mat expected = oracle::selective_scan(to_oracle(in.x), to_oracle(in.delta), to_oracle(in.A),
                                                            to_oracle(in.B), to_oracle(in.C));
        for (const auto split : {attn::ch14::ScanSplit::time, attn::ch14::ScanSplit::channels})
          for (const int threads : {1, 2, 3}) {
            CAPTURE(d);
            CAPTURE(threads);
            CHECK_ALLCLOSE(attn::ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, threads, split).y, expected,
                           scan_atol(in), 0.0);
          }
        // The kernels check what they read: a bad value in the last channel (a padded vector when d is ragged)
        // and in the last token's C, on either split.
        Matrix bad_delta = in.delta, bad_C = in.C;
        bad_delta(n - 1, d - 1) = 0.0f;
        bad_C(n - 1, N - 1) = std::numeric_limits<float>::infinity();
        const std::string delta_entry = fmt::format("delta({}, {})", n - 1, d - 1);
        const std::string C_entry = fmt::format("C({}, {})", n - 1, N - 1);
        for (const auto split : {attn::ch14::ScanSplit::time, attn::ch14::ScanSplit::channels}) {
          CHECK_THROWS_WITH_AS(attn::ch14::selective_scan(in.x, bad_delta, in.A, in.B, in.C, 2, split),
                               doctest::Contains(delta_entry.c_str()), std::invalid_argument);
          CHECK_THROWS_WITH_AS(attn::ch14::selective_scan(in.x, in.delta, in.A, in.B, bad_C, 2, split),
                               doctest::Contains(C_entry.c_str()), std::invalid_argument);
        }
      }
    }
    CHECK(attn::ch14::use_scan_kernels("auto"));
    CHECK_MESSAGE(ran >= 1, "the portable kernels run everywhere");
    CHECK_FALSE(attn::ch14::use_scan_kernels("SSE9"));
  }

  TEST_CASE(
      "the time-parallel scan's fix-up stops where the carry has decayed below float32, and still equals "
      "float64") {
    attn::Rng rng(147);
    const std::size_t n = 2000, d = 24, N = 8;
    ScanInputs in = scan_inputs(rng, n, d, N);  // A(c, k) = −(k + 1): the slowest decay is e^{−Δ}
    for (const auto& [low, high] : {std::array<float, 2>{1.0f, 2.0f}, {1e-5f, 2e-5f}}) {
      CAPTURE(low);
      in.delta = rng.uniform(n, d, low, high);
      const oracle::Mat expected = oracle::selective_scan(to_oracle(in.x), to_oracle(in.delta), to_oracle(in.A),
                                                          to_oracle(in.B), to_oracle(in.C));
      attn::ch14::ScanStats stats;
      const Matrix y =
          attn::ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, 2, attn::ch14::ScanSplit::time, &stats).y;
      CHECK_ALLCLOSE(y, expected, scan_atol(in), 0.0);
      if (low >= 1.0f) {
        // Δ ≥ 1: after at most 104 tokens of the second chunk every carry is below e^−104 < 2^−150.
        CHECK(stats.fixup_tokens > 0);
        CHECK_MESSAGE(stats.fixup_tokens <= 104, "the fix-up must stop once e^{A·ΣΔ} underflows float32");
      } else {
        // Δ ≈ 1e−5: the carry lasts the whole second chunk (e^{−0.02} is far from 0).
        CHECK(stats.fixup_tokens == n / 2);
      }
    }
  }
}
