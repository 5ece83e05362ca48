// Chapter 14's own code on bad input: the fast selective scan and its helpers (scan.hpp), the LTI kernel (lti.hpp)
// and the recall task (memory.hpp). Chapter code, not an exercise, so these run on the solution track only.
// Expected values are closed forms; a bad size is refused with the estimate, never a crash or a write past an end.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "14_state_space/lti.hpp"
#include "14_state_space/memory.hpp"
#include "14_state_space/scan.hpp"
#include "attn/rng.hpp"

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
