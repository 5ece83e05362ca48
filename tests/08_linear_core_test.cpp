// Chapter 08's own code on bad input: the random features and the quadratic form (features.hpp) and the
// recurrent state (linear.hpp), on the solution track only (the exercise suites stay as they are). A size that
// cannot fit is refused before allocating; a feature that is not a weight (NaN, infinite, negative) is named.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>

#include "08_linear/contenders.hpp"
#include "08_linear/features.hpp"
#include "08_linear/linear.hpp"
#include "attn/rng.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
namespace ch08 = attn::ch08;

constexpr std::size_t kBig = std::size_t{1} << 40;

}  // namespace

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("08_linear: bad input") {
  TEST_CASE("gaussian_features and RecurrentState::zeros refuse sizes that wrap or cannot fit, before allocating") {
    attn::Rng rng(801);
    CHECK_THROWS_NAMING(ch08::gaussian_features(kBig, kBig, rng), std::invalid_argument, "rows × cols");
    CHECK_THROWS_NAMING(ch08::gaussian_features(kBig, 64, rng), std::invalid_argument, "available");
    CHECK_THROWS_NAMING(attn::RecurrentState::zeros(kBig, kBig), std::invalid_argument, "RecurrentState");
    CHECK_THROWS_NAMING(attn::RecurrentState::zeros(kBig, 64), std::invalid_argument, "RecurrentState", "available");
    CHECK_THROWS_NAMING(attn::RecurrentState::zeros(2, std::numeric_limits<std::size_t>::max()), std::invalid_argument,
                        "d_v + 1");
    CHECK(ch08::gaussian_features(0, 4, rng).size() == 0);  // no features: an empty (0, 4)
  }

  TEST_CASE("the quadratic form refuses features that are NaN, infinite or negative, and shapes that do not fit") {
    const Matrix phi{{1.0f, 0.5f}, {0.25f, 2.0f}, {0.5f, 0.5f}}, V{{1.0f}, {2.0f}, {3.0f}};  // (3, 2), (3, 1)
    Matrix negative = phi, nan = phi, inf = phi;
    negative(2, 0) = -1.0f;  // a row of weights summing to ≤ 0 was left unnormalised: garbage, silently
    nan(2, 1) = std::numeric_limits<float>::quiet_NaN();
    inf(0, 0) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(ch08::quadratic_linear_attention(phi, negative, V), std::invalid_argument, "phiK[4] = -1",
                        "≥ 0");
    CHECK_THROWS_NAMING(ch08::quadratic_linear_attention(nan, phi, V), std::invalid_argument, "phiQ");
    CHECK_THROWS_NAMING(ch08::linear_attention_weights(inf, phi), std::invalid_argument, "phiQ");
    Matrix bad_V = V;
    bad_V(1, 0) = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(ch08::quadratic_linear_attention(phi, phi, bad_V), std::invalid_argument, "V");
    CHECK_THROWS_NAMING(ch08::quadratic_linear_attention(phi, phi, Matrix{{1.0f}, {2.0f}}), std::invalid_argument,
                        "(3, 2)", "(2, 1)");
    CHECK_THROWS_NAMING(ch08::linear_attention_weights(phi, Matrix{{1.0f, 2.0f, 3.0f}}), std::invalid_argument,
                        "(3, 2)", "(1, 3)");
  }
}

TEST_SUITE("08_linear: the race's contenders") {
  TEST_CASE("the FLOP counts are 4n²d + n² and 4nm·d_v + 6nm, and 0 for no tokens") {
    // bad input answered: softmax_flops, linear_flops
    CHECK(ch08::softmax_flops(0, 64) == 0.0);
    CHECK(ch08::linear_flops(0, 64, 64) == 0.0);
    CHECK(ch08::softmax_flops(2, 3) == 4.0 * 4 * 3 + 4);
    CHECK(ch08::linear_flops(2, 3, 5) == 4.0 * 2 * 3 * 5 + 6.0 * 2 * 3);
  }

  TEST_CASE("the contenders, their timers and the crossover search refuse what they cannot race") {
    CHECK_THROWS_NAMING(ch08::Contenders(0, 64), std::invalid_argument, "n = 0");
    CHECK_THROWS_NAMING(ch08::Contenders(16, 0), std::invalid_argument, "d = 0");
    CHECK_THROWS_NAMING(ch08::cpu_timer(nullptr), std::invalid_argument, "cpu_timer");
    CHECK_THROWS_NAMING(ch08::measured_crossover(0, 16, 8), std::invalid_argument, "lo = 0");
    CHECK_THROWS_NAMING(ch08::measured_crossover(32, 16, 8), std::invalid_argument, "lo = 32", "hi = 16");
    CHECK_THROWS_NAMING(ch08::measured_crossover(16, 32, 0), std::invalid_argument, "d = 0");
    const ch08::Timer none;
    CHECK_THROWS_NAMING(ch08::measured_crossover(16, 32, 8, none), std::invalid_argument, "measured_crossover");
    // A race the linear contender wins everywhere ends at lo; one it never wins gives 0.
    const ch08::Timer slow = [](std::size_t, std::size_t) { return 2.0; },
                      fast = [](std::size_t, std::size_t) { return 1.0; };
    CHECK(ch08::measured_crossover(16, 32, 8, slow, fast) == 16);
    CHECK(ch08::measured_crossover(16, 32, 8, fast, slow) == 0);
  }
}
