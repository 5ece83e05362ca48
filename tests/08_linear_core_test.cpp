// Chapter 08's own code on bad input: the random features and the quadratic form (features.hpp) and the
// recurrent state (linear.hpp), on the solution track only (the exercise suites stay as they are). A size that
// cannot fit is refused before allocating; a feature that is not a weight (NaN, infinite, negative) is named.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "08_linear/contenders.hpp"
#include "08_linear/features.hpp"
#include "08_linear/linear.hpp"
#include "attn/rng.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
namespace ch08 = attn::ch08;

constexpr std::size_t kBig = std::size_t{1} << 40;

namespace hostile = attn::test::hostile;
using attn::Mask;

/// Every entry ≥ 0: features are weights.
bool non_negative(const Matrix& phi) {
  return std::all_of(phi.begin(), phi.end(), [](float x) { return x >= 0.0f; });
}

/// The mask rule of the quadratic form: (0, 0) for none, else (n_q, n_kv).
bool mask_fits(const Mask& mask, std::size_t n_q, std::size_t n_kv) {
  return mask.size() == 0 ? mask.shape(0) == 0 && mask.shape(1) == 0 : mask.shape(0) == n_q && mask.shape(1) == n_kv;
}

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

// The defects the battery below found in chapter 08's own code.
TEST_SUITE("08_linear: hostile input") {
  TEST_CASE("the FLOP counts refuse NaN, infinite and negative counts, the weights features whose products overflow") {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    CHECK_THROWS_NAMING(ch08::softmax_flops(nan, 64), std::invalid_argument, "softmax_flops", "n = nan");
    CHECK_THROWS_NAMING(ch08::softmax_flops(1024, -1), std::invalid_argument, "d = -1");
    CHECK_THROWS_NAMING(ch08::linear_flops(1024, inf, 64), std::invalid_argument, "m = inf");
    CHECK_THROWS_NAMING(ch08::linear_flops(-1, 64, 64), std::invalid_argument, "n = -1");
    // φ(q)·φ(k) = 3e38 · 1.5 overflowed to inf, and the row's inf / inf gave NaN weights.
    Matrix phi{{1.0f, 0.5f}, {0.25f, 1.5f}};
    phi(0, 0) = 3e38f;
    CHECK_THROWS_NAMING(ch08::linear_attention_weights(phi, phi), std::invalid_argument, "phiQ", "phiK");
    // n = SIZE_MAX reached the input cache's allocation unchecked (std::bad_alloc): refused first, naming n.
    CHECK_THROWS_NAMING(ch08::Contenders(std::numeric_limits<std::size_t>::max(), 4), std::invalid_argument,
                        "n = 18446744073709551615");
  }
}

// The hostile-input battery (tests/support/hostile.hpp) on chapter 08's own code: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("08_linear: hostile battery") {
  TEST_CASE("the random features and the recurrent state's zeros under the hostile battery") {
    // hostile battery: gaussian_features, orthogonal_features, zeros
    const auto shape_is = [](const Matrix& Omega, std::size_t m, std::size_t d, const attn::Rng&) {
      return Omega.shape(0) == m && Omega.shape(1) == d && hostile::all_finite(Omega);
    };
    const char* fits_memory =
        "48 GiB or more: answered where the memory available holds it (the contract's limit, "
        "past the battery's 4 GiB), refused naming the estimate elsewhere";
    hostile::battery(
        "gaussian_features", {"m", "d", "rng"},
        [](std::size_t m, std::size_t d, attn::Rng& rng) { return ch08::gaussian_features(m, d, rng); }, std::size_t{5},
        std::size_t{3}, attn::Rng(4811))
        .answer(shape_is)
        .exempt("= 2^32", fits_memory)
        .run();
    hostile::battery(
        "orthogonal_features", {"m", "d", "rng"},
        [](std::size_t m, std::size_t d, attn::Rng& rng) { return ch08::orthogonal_features(m, d, rng); },
        std::size_t{5}, std::size_t{3}, attn::Rng(4812))
        .answer(shape_is)
        .exempt("= 2^32", fits_memory)
        .run();
    hostile::battery(
        "RecurrentState::zeros", {"m", "d_v"},
        [](std::size_t m, std::size_t d_v) {
          const attn::RecurrentState st = attn::RecurrentState::zeros(m, d_v);
          return std::vector<std::size_t>{st.S.shape(0), st.S.shape(1), st.z.size(),
                                          std::size_t(std::count(st.S.begin(), st.S.end(), 0.0f))};
        },
        std::size_t{4}, std::size_t{3})
        .answer([](const std::vector<std::size_t>& r, std::size_t m, std::size_t d_v) {
          return r[0] == m && r[1] == d_v && r[2] == m && r[3] == m * d_v;
        })
        .exempt("= 2^32", fits_memory)
        .run();
  }

  TEST_CASE("the quadratic form under the hostile battery") {
    // hostile battery: quadratic_linear_attention, linear_attention_weights
    attn::Rng rng(4813);
    const Matrix phiQ = attn::elu_plus_one(rng.normal(4, 3)), phiK = attn::elu_plus_one(rng.normal(5, 3)),
                 V = rng.normal(5, 2);
    Mask mask = xt::ones<bool>({4, 5});
    mask(0, 3) = mask(0, 4) = false;
    hostile::battery(
        "linear_attention_weights", {"phiQ", "phiK", "mask"},
        [](const Matrix& q, const Matrix& k, const Mask& m) { return ch08::linear_attention_weights(q, k, m); }, phiQ,
        phiK, mask)
        .fits([](const Matrix& q, const Matrix& k, const Mask& m) {
          return q.shape(1) == k.shape(1) && mask_fits(m, q.shape(0), k.shape(0)) && non_negative(q) && non_negative(k);
        })
        .answer([](const Matrix& W, const Matrix& q, const Matrix& k, const Mask&) {
          bool ok = W.shape(0) == q.shape(0) && W.shape(1) == k.shape(0) && non_negative(W) && hostile::all_finite(W);
          for (std::size_t i = 0; ok && i < W.shape(0); ++i) {
            const double sum = xt::sum<double>(xt::row(W, i))();
            ok = sum == 0.0 || std::abs(sum - 1.0) < 1e-5;
          }
          return ok;
        })
        .run();
    hostile::battery(
        "quadratic_linear_attention", {"phiQ", "phiK", "V", "mask"},
        [](const Matrix& q, const Matrix& k, const Matrix& v, const Mask& m) {
          return ch08::quadratic_linear_attention(q, k, v, m);
        },
        phiQ, phiK, V, mask)
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v, const Mask& m) {
          return q.shape(1) == k.shape(1) && k.shape(0) == v.shape(0) && mask_fits(m, q.shape(0), k.shape(0)) &&
                 non_negative(q) && non_negative(k);
        })
        .answer([](const Matrix& O, const Matrix& q, const Matrix&, const Matrix& v, const Mask&) {
          const double bound = v.size() ? static_cast<double>(xt::amax(xt::abs(v))()) * (1.0 + 1e-4) : 0.0;
          return O.shape(0) == q.shape(0) && O.shape(1) == v.shape(1) &&
                 std::all_of(O.begin(), O.end(), [&](float o) { return std::isfinite(o) && std::fabs(o) <= bound; });
        })
        .run();
  }

  TEST_CASE("the race's FLOP counts, contenders, timers and crossover search under the hostile battery") {
    // hostile battery: softmax_flops, linear_flops, Contenders, cpu_timer, measured_crossover
    const auto counts = [](double x) { return std::isfinite(x) && x >= 0.0; };
    hostile::battery(
        "softmax_flops", {"n", "d"}, [](double n, double d) { return ch08::softmax_flops(n, d); }, 1024.0, 64.0)
        .fits([&](double n, double d) { return counts(n) && counts(d); })
        .answer([](double flops, double, double) { return flops >= 0.0; })
        .run();
    hostile::battery(
        "linear_flops", {"n", "m", "d_v"}, [](double n, double m, double d_v) { return ch08::linear_flops(n, m, d_v); },
        1024.0, 64.0, 64.0)
        .fits([&](double n, double m, double d_v) { return counts(n) && counts(m) && counts(d_v); })
        .answer([](double flops, double, double, double) { return flops >= 0.0; })
        .run();
    hostile::battery(
        "Contenders", {"n", "d"},
        [](std::size_t n, std::size_t d) {
          const ch08::Contenders c(n, d);
          return std::vector<std::size_t>{c.Q.shape(0), c.Q.shape(1), c.phiK.shape(0), c.V.shape(1)};
        },
        std::size_t{8}, std::size_t{4})
        .fits([](std::size_t n, std::size_t d) { return n >= 1 && d >= 1 && n <= 4096 && d <= 4096 && n * d <= 4096; })
        .answer([](const std::vector<std::size_t>& r, std::size_t n, std::size_t d) {
          return r[0] == n && r[1] == d && r[2] == n && r[3] == d;
        })
        .run();
    // cpu_timer's one argument, the contender, can only be null (refused above); what a caller chooses is the timer's
    // n and d: the battery runs those through the timer it returns.
    hostile::battery(
        "cpu_timer", {"n", "d"},
        [](std::size_t n, std::size_t d) { return ch08::cpu_timer(&ch08::Contenders::linear)(n, d); }, std::size_t{8},
        std::size_t{4})
        .fits([](std::size_t n, std::size_t d) { return n >= 1 && d >= 1 && n <= 4096 && d <= 4096 && n * d <= 4096; })
        .answer([](double seconds, std::size_t, std::size_t) { return std::isfinite(seconds) && seconds >= 0.0; })
        .run();
    // The search with timers of a model race (n² d against 64 n d): no timing, so every size is answered at once.
    const ch08::Timer quadratic = [](std::size_t n, std::size_t d) {
      return static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(d);
    };
    const ch08::Timer linear = [](std::size_t n, std::size_t d) {
      return 64.0 * static_cast<double>(n) * static_cast<double>(d);
    };
    hostile::battery(
        "measured_crossover", {"lo", "hi", "d", "quadratic", "linear"},
        [](std::size_t lo, std::size_t hi, std::size_t d, const ch08::Timer& q, const ch08::Timer& l) {
          return ch08::measured_crossover(lo, hi, d, q, l);
        },
        std::size_t{16}, std::size_t{1024}, std::size_t{8}, quadratic, linear)
        .fits([](std::size_t lo, std::size_t hi, std::size_t d, const ch08::Timer&, const ch08::Timer&) {
          return lo >= 1 && lo <= hi && d >= 1;
        })
        .answer([](std::size_t n, std::size_t lo, std::size_t hi, std::size_t, const ch08::Timer&, const ch08::Timer&) {
          return n == 0 || (n >= lo && n <= hi);
        })
        .run();
  }
}
