// Chapter 14's own code on bad input: the fast selective scan and its helpers (scan.hpp), the LTI kernel (lti.hpp)
// and the recall task (memory.hpp). Chapter code, not an exercise, so these run on the solution track only.
// Expected values are closed forms; a bad size is refused with the estimate, never a crash or a write past an end.
#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <vector>

#include "14_state_space/lti.hpp"
#include "14_state_space/memory.hpp"
#include "14_state_space/scan.hpp"
#include "14_state_space/state_space.hpp"
#include "attn/rng.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
namespace ch14 = attn::ch14;

}  // namespace

TEST_SUITE("14_state_space") {
  TEST_CASE("selective_scan with no state (N = 0) gives zeros on every split and thread count, and still checks x") {
    attn::Rng rng(1401);
    const std::size_t n = 9, d = 3;
    const Matrix x = rng.normal(n, d), delta(Matrix::shape_type{n, d}, 0.01f), A(Matrix::shape_type{d, 0});
    const Matrix B(Matrix::shape_type{n, 0}), C(Matrix::shape_type{n, 0});
    for (const auto split : {ch14::ScanSplit::time, ch14::ScanSplit::channels})
      for (const int threads : {1, 2, 3}) {
        CAPTURE(threads);
        const ch14::SelectiveScanOutput out = ch14::selective_scan(x, delta, A, B, C, threads, split);
        CHECK(out.y.shape(0) == n);
        CHECK(xt::all(xt::equal(out.y, 0.0f)));  // y_t = Σ over no state entries = 0
        CHECK(out.h.shape(0) == d);
        CHECK(out.h.size() == 0);
      }
    Matrix nan_x = x;
    nan_x(4, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(ch14::selective_scan(nan_x, delta, A, B, C, 2), doctest::Contains("x[14]"),
                         std::invalid_argument);
  }

  TEST_CASE("selective_scan refuses finite inputs whose state or output overflows float32, on every split") {
    // x = 1e36, Δ = 1, B = C = 1, A = −1e−3: h grows by Δ·B·x = 1e36 per token (its decay e^−0.001 keeps
    // almost all of it) and y = Σ_k C·h ≈ 4·1e36·t passes float32's 3.4e38 near t = 85, every input finite.
    const std::size_t n = 600, d = 2, N = 4;
    const Matrix x(Matrix::shape_type{n, d}, 1e36f), delta(Matrix::shape_type{n, d}, 1.0f);
    const Matrix A(Matrix::shape_type{d, N}, -1e-3f), B(Matrix::shape_type{n, N}, 1.0f), C = B;
    for (const auto split : {ch14::ScanSplit::time, ch14::ScanSplit::channels})
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        CHECK_THROWS_WITH_AS(ch14::selective_scan(x, delta, A, B, C, threads, split), doctest::Contains("overflow"),
                             std::invalid_argument);
      }
  }

  TEST_CASE("vector_exp refuses a count that is not a multiple of 16 instead of writing past the end") {
    std::vector<float> from(32, -1.0f), to(32, 0.0f);
    CHECK_THROWS_WITH_AS(ch14::vector_exp(from.data(), to.data(), 5), doctest::Contains("n = 5"),
                         std::invalid_argument);
    CHECK(to[0] == 0.0f);
    ch14::vector_exp(from.data(), to.data(), 32);
    CHECK(to[31] == doctest::Approx(0.36787944).epsilon(1e-6));  // e^-1
  }

  TEST_CASE("ssm_kernel and orthonormal_rows refuse, before allocating, sizes that cannot fit in memory") {
    const attn::DiscreteSSM ssm{{attn::Complex(0.5f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}};
    CHECK_THROWS_WITH_AS(ch14::ssm_kernel(ssm, std::size_t{1} << 40), doctest::Contains("available"),
                         std::invalid_argument);
    CHECK(ch14::ssm_kernel(ssm, 0).size() == 0);
    attn::Rng rng(1402);
    CHECK_THROWS_WITH_AS(ch14::orthonormal_rows(rng, 1, std::size_t{1} << 40), doctest::Contains("available"),
                         std::invalid_argument);
    CHECK(ch14::orthonormal_rows(rng, 0, 4).size() == 0);
  }

  TEST_CASE("relative_error refuses matrices of different shapes and NaN, instead of reading past the first") {
    const Matrix V = {{1.0f, 2.0f}}, recalled = {{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 6.0f}};
    CHECK_THROWS_WITH_AS(ch14::relative_error(V, Matrix(xt::zeros<float>({3, 4}))), doctest::Contains("(3, 4)"),
                         std::invalid_argument);
    CHECK_THROWS_AS(ch14::relative_error(recalled, V), std::invalid_argument);
    CHECK_THROWS_AS(ch14::relative_error(Matrix{{std::numeric_limits<float>::quiet_NaN(), 2.0f}}, V),
                    std::invalid_argument);
    CHECK(ch14::relative_error(Matrix{{1.0f, 0.0f}}, V) == doctest::Approx(0.894427191));  // ‖(0, −2)‖/‖(1, 2)‖ = 2/√5
  }

  TEST_CASE("the LTI kernel, recurrence and convolutions refuse NaN or infinity, and a state that would grow") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const attn::Vector u = {1.0f, 2.0f, nan}, K = {0.5f, 0.25f};
    CHECK_THROWS_WITH_AS(ch14::causal_convolution_direct(K, u), doctest::Contains("u[2]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        ch14::causal_convolution_direct(attn::Vector{std::numeric_limits<float>::infinity()}, attn::Vector{1.0f}),
        doctest::Contains("K[0]"), std::invalid_argument);
    if (ch14::fft_available())
      CHECK_THROWS_WITH_AS(ch14::causal_convolution_fft(K, u), doctest::Contains("u[2]"), std::invalid_argument);
    const attn::DiscreteSSM stable{
        {attn::Complex(0.5f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}};
    CHECK_THROWS_WITH_AS(ch14::ssm_recurrence(stable, u), doctest::Contains("u[2]"), std::invalid_argument);
    attn::DiscreteSSM growing = stable;
    growing.A_bar[0] = attn::Complex(0.0f, 2.0f);  // |Ā| = 2: the kernel doubles every tap, inf past 128 taps
    CHECK_THROWS_WITH_AS(ch14::ssm_kernel(growing, 200), doctest::Contains("|A_bar[0]| = 2"), std::invalid_argument);
    attn::DiscreteSSM broken = stable;
    broken.C[0] = attn::Complex(nan, 0.0f);
    CHECK_THROWS_WITH_AS(ch14::ssm_recurrence(broken, attn::Vector{1.0f}), doctest::Contains("entry 0"),
                         std::invalid_argument);
  }
}

// Bad input, one case per function of memory.hpp, scan.hpp and state_space.hpp that had none
// (cmake/check_bad_input.py).
TEST_SUITE("14_state_space: bad input") {
  TEST_CASE("recall_task refuses keys and values that differ in rows, and a NaN or infinity in either, by name") {
    const attn::Matrix K{{1.0f, 0.0f}, {0.0f, 1.0f}}, V{{2.0f}, {3.0f}};  // (2, 2), (2, 1)
    CHECK_THROWS_NAMING(attn::ch14::recall_task(K, attn::Matrix{{2.0f}}), std::invalid_argument, "(2, 2)", "(1, 1)");
    attn::Matrix bad_K = K, bad_V = V;
    bad_K(1, 0) = std::numeric_limits<float>::quiet_NaN();
    bad_V(0, 0) = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(attn::ch14::recall_task(bad_K, V), std::invalid_argument, "recall_task", "K");
    CHECK_THROWS_NAMING(attn::ch14::recall_task(K, bad_V), std::invalid_argument, "recall_task", "V");
  }

  TEST_CASE("scan_inputs refuses sizes that wrap or cannot fit, before allocating") {
    attn::Rng rng(1401);
    constexpr std::size_t kBig = std::size_t{1} << 40;
    CHECK_THROWS_NAMING(attn::ch14::scan_inputs(rng, kBig, 2, 1), std::invalid_argument, "rows × cols");
    CHECK_THROWS_NAMING(attn::ch14::scan_inputs(rng, 4, 2, kBig), std::invalid_argument, "scan_inputs", "d × N");
    CHECK(attn::ch14::scan_inputs(rng, 0, 2, 3).x.size() == 0);  // no tokens: empty inputs, A still (2, 3)
  }

  TEST_CASE("selective_scan_bytes answers for any sizes without wrapping, and use_scan_kernels refuses a bad name") {
    // bad input answered: selective_scan_bytes, use_scan_kernels, scan_combine
    // d = 2^63: 3d + 2N in size_t wrapped to 2^63 and gave a third of the bytes.
    const double d = std::ldexp(1.0, 63);
    CHECK(attn::ch14::selective_scan_bytes(1, std::size_t{1} << 63, 0) == 4.0 * 3.0 * d);
    CHECK(attn::ch14::selective_scan_bytes(0, 5, 7) == 0.0);
    const std::string before = attn::ch14::scan_kernel_isa();
    CHECK_FALSE(attn::ch14::use_scan_kernels("no such kernels"));
    CHECK_FALSE(attn::ch14::use_scan_kernels(""));
    CHECK(before == attn::ch14::scan_kernel_isa());  // unchanged
    // scan_combine propagates a NaN or an infinity (its contract): the result says so, it is never a finite lie.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    CHECK(std::isnan(attn::scan_combine({nan, 0.0f}, {0.5f, 1.0f}).a));
    CHECK(std::isnan(attn::scan_combine({0.5f, 1.0f}, {0.5f, nan}).b));
    CHECK(std::isinf(attn::scan_combine({0.5f, inf}, {0.5f, 0.0f}).b));
  }
}

TEST_SUITE("14_state_space: the benchmarks' systems") {
  TEST_CASE("s4d_lin and random_vector give empty results for no states or no tokens, and refuse what cannot fit") {
    // bad input answered: s4d_lin, random_vector
    attn::Rng rng(14);
    const attn::DiagonalSSM none = ch14::s4d_lin(0, rng);
    CHECK((none.A.empty() && none.B.empty() && none.C.empty()));
    const attn::DiagonalSSM four = ch14::s4d_lin(4, rng);
    REQUIRE(four.A.size() == 4);
    CHECK(four.A[3] == std::complex<float>(-0.5f, static_cast<float>(3 * M_PI)));
    CHECK(ch14::random_vector(rng, 0).size() == 0);
    CHECK(ch14::random_vector(rng, 5).size() == 5);
    CHECK_THROWS_AS(ch14::random_vector(rng, std::size_t{1} << 62), std::invalid_argument);
  }
}

// The defect a hostile call found in chapter 14's own code.
TEST_SUITE("14_state_space: hostile input") {
  TEST_CASE("relative_error against V = 0 is infinite for a recall that is not 0, and 0 for one that is") {
    // bad input answered: relative_error
    const Matrix zeros = xt::zeros<float>({2, 3}), ones = xt::ones<float>({2, 3});
    CHECK(std::isinf(ch14::relative_error(ones, zeros)));  // 0 before: any recall of nothing looked perfect
    CHECK(ch14::relative_error(zeros, zeros) == 0.0);
    CHECK(ch14::relative_error(Matrix(xt::zeros<float>({0, 3})), Matrix(xt::zeros<float>({0, 3}))) == 0.0);
  }
}
