// Chapter 08's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/08_linear_oracle.hpp: linear attention as its quadratic definition) or closed forms.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "04_complexity/heap_counter.hpp"
#include "08_linear/features.hpp"
#include "08_linear/linear.hpp"
#include "attn/rng.hpp"
#include "oracle/08_linear_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
using attn::test::to_oracle;
namespace hostile = attn::test::hostile;

constexpr double kEps = 1.0 / (1 << 24);  // float32's unit roundoff, 2^-24

// elu + 1 is one correctly rounded operation per entry (x + 1, or glibc's expf, < 1 ulp): 2 ulp relative.
constexpr double kEluRtol = 4 * kEps;

// Positive random features: the exponent ω·x̂ − ‖x̂‖²/2 is a sum of about 2·d_k float products, each rounded
// (relative 2^-24), so its absolute error is below 2·d_k·2^-24·(Σ|ω_c x̂_c| + ‖x̂‖²); for d_k ≤ 16 and entries
// of N(0,1) that sum stays below ~40, so ≤ 2·16·6e-8·40 ≈ 8e-5 absolute in the exponent = relative in exp.
constexpr double kFeatureRtol = 1e-4;

/// Linear attention in float32 against the float64 definition. Every sum over keys (n_kv terms) and over
/// features (m terms) of non-negative weights times values errs by at most (n_kv + m)·2^-24·max|v| times the
/// total weight, the same for numerator and denominator: the output errs by at most 2(n_kv + m)·2^-24·max|v|.
double linear_atol(std::size_t n_kv, std::size_t m, double max_abs_v) {
  return 2.0 * static_cast<double>(n_kv + m) * kEps * max_abs_v;
}

double max_abs(const Matrix& m) { return m.size() ? static_cast<double>(xt::amax(xt::abs(m))()) : 0.0; }

Vector row_of(const Matrix& m, std::size_t i) { return xt::row(m, i); }

/// All entries of \p m, row by row, as one vector: to compare a matrix with a list of expected values.
Vector flat(const Matrix& m) {
  Vector v = xt::zeros<float>({m.size()});  // (rows · cols)
  std::copy(m.begin(), m.end(), v.begin());
  return v;
}

/// Runs \p attend (linear or causal linear attention at n = 2048, m = 16, d_v = 8) under chapter 04's counting
/// allocator: its heap peak must stay far below one (n, n) float matrix (16 MiB), and its output match the oracle.
/// The bound, 1 MiB, leaves room for copies of φ(Q) or φ(K) (128 KiB each), O (64 KiB) and the m·d_v summary; the
/// reference solutions peak at 164,416 bytes (linear) and 66,112 bytes (causal).
template <class Attend>
void check_heap_without_n_by_n(const std::string& name, bool causal, float decay, Attend attend) {
  attn::Rng rng(91);
  const std::size_t n = 2048, m = 16, d_v = 8;
  const Matrix phiQ = rng.uniform(n, m), phiK = rng.uniform(n, m), V = rng.normal(n, d_v);
  const std::size_t bound = std::size_t{1} << 20;
  Matrix O;
  const std::size_t peak = attn::ch04::measure_heap_peak([&] { O = attend(phiQ, phiK, V); });
  CHECK_MESSAGE(peak <= bound, name, " held ", peak, " bytes of heap at its peak; an (n, n) = (", n, ", ", n,
                ") float matrix is ", n * n * sizeof(float), " bytes and the bound is ", bound,
                ": sum over the keys once (φ(K)ᵀV and φ(K)ᵀ1), never form φ(Q)φ(K)ᵀ");
  CHECK_ALLCLOSE(O, attn::oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V), causal, decay),
                 linear_atol(n, m, max_abs(V)), 0.0);
}

/// Mean |actual − expected| over all entries.
double mean_abs_error(const Matrix& actual, const attn::oracle::Mat& expected) {
  double sum = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) sum += std::fabs(actual.data()[i] - expected.v[i]);
  return sum / static_cast<double>(actual.size());
}

/// Every entry ≥ 0: features are weights.
bool non_negative(const Matrix& phi) {
  return std::all_of(phi.begin(), phi.end(), [](float x) { return x >= 0.0f; });
}

/// Every output entry a convex combination of V's column (or 0): |o| ≤ max|V| up to rounding.
bool within_values(const Matrix& O, const Matrix& V) {
  const double bound = max_abs(V) * (1.0 + 1e-4);
  return std::all_of(O.begin(), O.end(), [&](float o) { return std::isfinite(o) && std::fabs(o) <= bound; });
}

}  // namespace

namespace attn::test::hostile {
/// The state's two memories, each made hostile in turn (a shape wrong in each dimension, a NaN).
template <>
struct Weights<attn::RecurrentState> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::RecurrentState& state, F&& f) {
    f("S", state.S);
    f("z", state.z);
  }
};
}  // namespace attn::test::hostile

TEST_SUITE("08_linear") {
  // --- feature maps -------------------------------------------------------------------------------------
  TEST_CASE("elu_plus_one is x + 1 above zero, exp(x) below, and 1 at zero" *
            doctest::test_suite("08_linear/elu_plus_one")) {
    const Matrix X = {{-2.0f, -0.5f, 0.0f}, {0.5f, 3.0f, -1.0e4f}};  // (2, 3)
    const std::vector<double> expected{std::exp(-2.0), std::exp(-0.5), 1.0, 1.5, 4.0, 0.0};
    const Matrix phi = attn::elu_plus_one(X);
    REQUIRE(phi.shape(0) == 2);
    CHECK_ALLCLOSE(flat(phi), expected, 0.0, kEluRtol);
  }

  TEST_CASE("elu_plus_one matches the oracle on random shapes, n = 1 included" *
            doctest::test_suite("08_linear/elu_plus_one")) {
    attn::Rng rng(81);
    for (auto [n, d] : {std::array<std::size_t, 2>{1, 1}, {1, 7}, {13, 5}, {100, 64}}) {
      const Matrix X = rng.normal(n, d, 0.0f, 3.0f);  // (n, d)
      const Matrix phi = attn::elu_plus_one(X);
      CHECK_ALLCLOSE(phi, attn::oracle::elu_plus_one(to_oracle(X)), 0.0, kEluRtol);
      CHECK(xt::amin(phi)() > 0.0f);  // positive: every weight φ(q)·φ(k) is
    }
  }

  TEST_CASE("elu_plus_one rejects NaN and infinity, naming the index" * doctest::test_suite("08_linear/elu_plus_one")) {
    const Matrix X = {{0.0f, 1.0f}, {std::numeric_limits<float>::quiet_NaN(), 2.0f}};  // (2, 2)
    CHECK_THROWS_NAMING(attn::elu_plus_one(X), std::invalid_argument, "2");
    const Matrix Y = {{std::numeric_limits<float>::infinity()}};
    CHECK_THROWS_AS(attn::elu_plus_one(Y), std::invalid_argument);
  }

  TEST_CASE("positive_random_features with Omega = 0 is exp(-‖x‖²/(2√d_k)) / √m for every feature" *
            doctest::test_suite("08_linear/positive_random_features")) {
    const Matrix X = {{1.0f, 2.0f, 0.0f, -2.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};  // (2, 4), ‖x‖² = 9 and 0
    const Matrix Omega = xt::zeros<float>({3, 4});                           // (3, 4)
    const double first = std::exp(-9.0 / (2.0 * 2.0)) / std::sqrt(3.0), second = 1.0 / std::sqrt(3.0);
    const std::vector<double> expected{first, first, first, second, second, second};
    CHECK_ALLCLOSE(flat(attn::positive_random_features(X, Omega)), expected, 0.0, kFeatureRtol);
  }

  TEST_CASE("positive_random_features matches the oracle on random shapes, n = 1 and odd m included" *
            doctest::test_suite("08_linear/positive_random_features")) {
    attn::Rng rng(82);
    for (auto [n, d_k, m] : {std::array<std::size_t, 3>{1, 1, 1}, {1, 16, 33}, {9, 5, 7}, {40, 16, 256}}) {
      const Matrix X = rng.normal(n, d_k), Omega = rng.normal(m, d_k);
      const Matrix phi = attn::positive_random_features(X, Omega);  // (n, m)
      CHECK_ALLCLOSE(phi, attn::oracle::positive_random_features(to_oracle(X), to_oracle(Omega)), 0.0, kFeatureRtol);
    }
  }

  TEST_CASE("positive_random_features rejects X and Omega with different d_k, naming both shapes" *
            doctest::test_suite("08_linear/positive_random_features")) {
    const Matrix X = xt::zeros<float>({4, 3}), Omega = xt::zeros<float>({8, 5});
    CHECK_THROWS_NAMING(attn::positive_random_features(X, Omega), std::invalid_argument, "4", "3", "8", "5");
  }

  TEST_CASE("positive_random_features rejects NaN and infinity in X, naming the index" *
            doctest::test_suite("08_linear/positive_random_features")) {
    const Matrix X = {{0.5f, std::numeric_limits<float>::quiet_NaN()}};  // (1, 2)
    const Matrix Omega = xt::ones<float>({3, 2});                        // (3, 2)
    CHECK_THROWS_NAMING(attn::positive_random_features(X, Omega), std::invalid_argument, "1");
    const Matrix Y = {{-std::numeric_limits<float>::infinity(), 0.0f}};
    CHECK_THROWS_AS(attn::positive_random_features(Y, Omega), std::invalid_argument);
  }

  TEST_CASE("positive_random_features make linear attention approach softmax attention as m grows" *
            doctest::test_suite("08_linear/linear_attention")) {
    // The estimator φ(q)·φ(k) of exp(q·k/√d_k) has variance ∝ 1/m, so the output error falls like 1/√m
    // once m is large against exp(‖q̂ + k̂‖²) (small here: entries of q and k ~ N(0, 0.5²)): from m = 8 to
    // m = 512 about 8 times. Averaged over 8 fixed seeds the check asks for 3 times (and for each step of 8×
    // in m, 1.5 times), far inside what the fixed draws give: it cannot flake.
    const std::size_t n = 48, d_k = 8;
    attn::Rng data(83);
    const Matrix Q = data.normal(n, d_k, 0.0f, 0.5f), K = data.normal(n, d_k, 0.0f, 0.5f);  // (n, d_k) each
    const Matrix V = data.normal(n, 4);                                                     // (n, d_v)
    const attn::oracle::Mat exact = attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V));
    std::vector<double> error;
    for (std::size_t m : {8u, 64u, 512u}) {
      double sum = 0.0;
      for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        attn::Rng rng(seed);
        const Matrix Omega = rng.normal(m, d_k);  // (m, d_k), ω ~ N(0, I)
        const Matrix O = attn::linear_attention(attn::positive_random_features(Q, Omega),
                                                attn::positive_random_features(K, Omega), V);  // (n, 4)
        sum += mean_abs_error(O, exact);
      }
      error.push_back(sum / 8.0);
    }
    CHECK(error[1] < error[0] / 1.5);
    CHECK(error[2] < error[1] / 1.5);
    CHECK(error[2] < error[0] / 3.0);
  }

  // --- linear attention by associativity ----------------------------------------------------------------
  TEST_CASE("linear_attention with a single key returns that key's value for every query" *
            doctest::test_suite("08_linear/linear_attention")) {
    const Matrix phiQ = {{0.2f, 3.0f}, {1.0f, 0.0f}, {5.0f, 5.0f}};  // (3, 2)
    const Matrix phiK = {{0.5f, 0.25f}};                             // (1, 2)
    const Matrix V = {{-1.5f, 2.0f, 7.0f}};                          // (1, 3)
    const std::vector<double> expected{-1.5, 2.0, 7.0, -1.5, 2.0, 7.0, -1.5, 2.0, 7.0};
    CHECK_ALLCLOSE(flat(attn::linear_attention(phiQ, phiK, V)), expected, 0.0, 2 * kEps);  // w·v / w
  }

  TEST_CASE("linear_attention with equal features for every key averages the values" *
            doctest::test_suite("08_linear/linear_attention")) {
    attn::Rng rng(86);
    const Matrix phiQ = rng.uniform(5, 4, 0.1f, 1.0f);  // (5, 4)
    const Matrix phiK = xt::ones<float>({6, 4});        // (6, 4): every key weighs the same
    const Matrix V = rng.normal(6, 3);                  // (6, 3)
    const Vector mean = xt::mean(V, {0});               // (3)
    std::vector<double> expected;
    for (std::size_t i = 0; i < 5; ++i)
      for (float v : mean) expected.push_back(v);
    CHECK_ALLCLOSE(flat(attn::linear_attention(phiQ, phiK, V)), expected, linear_atol(6, 4, max_abs(V)), 0.0);
  }

  TEST_CASE("linear_attention equals the quadratic form of the oracle, for n_q != n_kv, n = 1 and large n" *
            doctest::test_suite("08_linear/linear_attention")) {
    attn::Rng rng(84);
    for (auto [n_q, n_kv, m, d_v] :
         {std::array<std::size_t, 4>{1, 1, 1, 1}, {1, 9, 4, 3}, {7, 1, 5, 2}, {13, 21, 16, 11}, {2048, 2048, 32, 16}}) {
      const Matrix phiQ = rng.uniform(n_q, m), phiK = rng.uniform(n_kv, m);  // non-negative features
      const Matrix V = rng.normal(n_kv, d_v);                                // (n_kv, d_v)
      const Matrix O = attn::linear_attention(phiQ, phiK, V);                // (n_q, d_v)
      CHECK_ALLCLOSE(O, attn::oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V)),
                     linear_atol(n_kv, m, max_abs(V)), 0.0);
    }
  }

  TEST_CASE("linear_attention never forms the (n_q, n_kv) matrix: its heap peak stays far below one" *
            doctest::test_suite("08_linear/linear_attention")) {
    check_heap_without_n_by_n("linear_attention", false, 1.0f, [](const Matrix& q, const Matrix& k, const Matrix& v) {
      return attn::linear_attention(q, k, v);
    });
  }

  TEST_CASE("linear_attention with elu+1 features matches the oracle on random queries and keys" *
            doctest::test_suite("08_linear/linear_attention")) {
    attn::Rng rng(85);
    const Matrix Q = rng.normal(33, 12), K = rng.normal(50, 12), V = rng.normal(50, 6);
    const Matrix O = attn::linear_attention(attn::elu_plus_one(Q), attn::elu_plus_one(K), V);  // (33, 6)
    const auto phiQ = attn::oracle::elu_plus_one(to_oracle(Q)), phiK = attn::oracle::elu_plus_one(to_oracle(K));
    CHECK_ALLCLOSE(O, attn::oracle::linear_attention(phiQ, phiK, to_oracle(V)), linear_atol(50, 12, max_abs(V)), 0.0);
  }

  TEST_CASE("linear_attention stays exact when the features are tiny (1e-30), where products underflow" *
            doctest::test_suite("08_linear/linear_attention")) {
    // 1e-30 · 1e-30 = 1e-60 is 0 in float32: a direct implementation returns 0/0 = NaN here.
    attn::Rng rng(87);
    const Matrix phiQ = rng.uniform(8, 6, 0.5f, 1.0f), phiK = rng.uniform(10, 6, 0.5f, 1.0f);
    const Matrix V = rng.normal(10, 3);
    const Matrix tinyQ = phiQ * 1e-30f, tinyK = phiK * 1e-30f;
    CHECK_ALLCLOSE(attn::linear_attention(tinyQ, tinyK, V),
                   attn::oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V)),
                   linear_atol(10, 6, max_abs(V)) + 4 * kEps * max_abs(V), 0.0);  // + the rescaling's roundings
  }

  TEST_CASE("linear_attention gives a query whose features are all zero a row of zeros, not NaN" *
            doctest::test_suite("08_linear/linear_attention")) {
    const Matrix phiQ = {{0.0f, 0.0f}, {1.0f, 1.0f}};  // (2, 2): the first query weighs every key 0
    const Matrix phiK = {{1.0f, 2.0f}, {3.0f, 0.0f}};  // (2, 2)
    const Matrix V = {{1.0f}, {4.0f}};                 // (2, 1)
    // Second query: weights 3 and 3, so the mean of 1 and 4.
    CHECK_ALLCLOSE(flat(attn::linear_attention(phiQ, phiK, V)), std::vector<double>({0.0, 2.5}), 0.0, 2 * kEps);
    const Matrix none = xt::zeros<float>({2, 2});
    CHECK_ALLCLOSE(flat(attn::linear_attention(phiQ, none, V)), std::vector<double>({0.0, 0.0}), 0.0, 0.0);
  }

  TEST_CASE("linear_attention rejects features and values that do not fit, naming the shapes" *
            doctest::test_suite("08_linear/linear_attention")) {
    const Matrix phiQ = xt::ones<float>({3, 4}), phiK = xt::ones<float>({5, 6}), V = xt::ones<float>({5, 2});
    CHECK_THROWS_NAMING(attn::linear_attention(phiQ, phiK, V), std::invalid_argument, "5", "6");
    const Matrix phiK4 = xt::ones<float>({5, 4}), V7 = xt::ones<float>({7, 2});
    CHECK_THROWS_NAMING(attn::linear_attention(phiQ, phiK4, V7), std::invalid_argument, "7", "2");
  }

  // --- the causal recurrence ----------------------------------------------------------------------------
  TEST_CASE("recurrent_step after the first token returns its value and holds S = φ(k)ᵀv, z = φ(k)" *
            doctest::test_suite("08_linear/recurrent_step")) {
    attn::RecurrentState state = attn::RecurrentState::zeros(3, 2);
    const Vector phi_q = {0.5f, 1.0f, 2.0f}, phi_k = {1.0f, 0.25f, 3.0f}, v = {-2.0f, 4.0f};
    const Vector o = attn::recurrent_step(state, phi_q, phi_k, v);
    CHECK_ALLCLOSE(o, std::vector<double>({-2.0, 4.0}), 0.0, 4 * kEps);
    CHECK_ALLCLOSE(flat(state.S), std::vector<double>({-2.0, 4.0, -0.5, 1.0, -6.0, 12.0}), 0.0, 0.0);  // exact products
    CHECK_ALLCLOSE(state.z, std::vector<double>({1.0, 0.25, 3.0}), 0.0, 0.0);
  }

  TEST_CASE("recurrent_step with decay 1/2 halves the old state, then adds the token: S = λS + φ(k)ᵀv, z = λz + φ(k)" *
            doctest::test_suite("08_linear/recurrent_step")) {
    // The output is a ratio in which a common factor of S and z cancels: only the state shows a decay
    // applied to the wrong terms. Every number here is a small dyadic fraction, exact in float32.
    attn::RecurrentState state = attn::RecurrentState::zeros(3, 2);
    attn::recurrent_step(state, {1.0f, 1.0f, 1.0f}, {1.0f, 0.25f, 3.0f}, {-2.0f, 4.0f}, 0.5f);  // from zeros
    REQUIRE(state.S.size() == 6);
    CHECK_ALLCLOSE(flat(state.S), std::vector<double>({-2.0, 4.0, -0.5, 1.0, -6.0, 12.0}), 0.0, 0.0);
    CHECK_ALLCLOSE(state.z, std::vector<double>({1.0, 0.25, 3.0}), 0.0, 0.0);
    const Vector o = attn::recurrent_step(state, {1.0f, 4.0f, 1.0f}, {2.0f, 0.0f, 1.0f}, {1.0f, -1.0f}, 0.5f);
    // S = ½·S + (2, 0, 1)ᵀ(1, -1); z = ½·z + (2, 0, 1).
    CHECK_ALLCLOSE(flat(state.S), std::vector<double>({1.0, 0.0, -0.25, 0.5, -2.0, 5.0}), 0.0, 0.0);
    CHECK_ALLCLOSE(state.z, std::vector<double>({2.5, 0.125, 2.5}), 0.0, 0.0);
    // φ(q)S = (1 - 1 - 2, 0 + 2 + 5) = (-2, 7) and φ(q)·z = 2.5 + 0.5 + 2.5 = 5.5: one rounding each.
    CHECK_ALLCLOSE(o, std::vector<double>({-2.0 / 5.5, 7.0 / 5.5}), 0.0, 4 * kEps);
  }

  TEST_CASE("recurrent_step, token after token, equals the causally masked quadratic form and its state never grows" *
            doctest::test_suite("08_linear/recurrent_step")) {
    attn::Rng rng(88);
    const std::size_t n = 40, m = 6, d_v = 5;
    const Matrix phiQ = rng.uniform(n, m), phiK = rng.uniform(n, m), V = rng.normal(n, d_v);
    for (float decay : {1.0f, 0.8f}) {
      attn::RecurrentState state = attn::RecurrentState::zeros(m, d_v);
      Matrix O = xt::zeros<float>({n, d_v});  // (n, d_v)
      for (std::size_t t = 0; t < n; ++t) {
        xt::row(O, t) = attn::recurrent_step(state, row_of(phiQ, t), row_of(phiK, t), row_of(V, t), decay);
        REQUIRE(state.S.size() == m * d_v);
        REQUIRE(state.z.size() == m);
      }
      CHECK_ALLCLOSE(O, attn::oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V), true, decay),
                     linear_atol(n, m, max_abs(V)), 0.0);
    }
  }

  TEST_CASE("recurrent_step rejects a state and vectors that do not fit, and a decay outside 0 < decay <= 1" *
            doctest::test_suite("08_linear/recurrent_step")) {
    attn::RecurrentState state = attn::RecurrentState::zeros(3, 2);
    const Vector three = {1.0f, 1.0f, 1.0f}, four = {1.0f, 1.0f, 1.0f, 1.0f}, two = {1.0f, 1.0f};
    CHECK_THROWS_NAMING(attn::recurrent_step(state, four, three, two), std::invalid_argument, "4");
    CHECK_THROWS_NAMING(attn::recurrent_step(state, three, three, three), std::invalid_argument, "3", "2");
    CHECK_THROWS_AS(attn::recurrent_step(state, three, three, two, 0.0f), std::invalid_argument);
    CHECK_THROWS_AS(attn::recurrent_step(state, three, three, two, 1.5f), std::invalid_argument);
  }

  TEST_CASE("causal_linear_attention equals the masked quadratic form, with and without decay, n = 1 included" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    attn::Rng rng(89);
    for (auto [n, m, d_v] : {std::array<std::size_t, 3>{1, 1, 1}, {1, 5, 3}, {17, 7, 9}, {1500, 16, 8}}) {
      const Matrix phiQ = rng.uniform(n, m), phiK = rng.uniform(n, m), V = rng.normal(n, d_v);
      for (float decay : {1.0f, 0.9f, 0.5f}) {
        CAPTURE(n);
        CAPTURE(decay);
        CHECK_ALLCLOSE(attn::causal_linear_attention(phiQ, phiK, V, decay),
                       attn::oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V), true, decay),
                       linear_atol(n, m, max_abs(V)), 0.0);
      }
    }
  }

  TEST_CASE("causal_linear_attention keeps an (m, d_v) state, never the masked (n, n) matrix, with or without decay" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    for (const float decay : {1.0f, 0.9f}) {
      CAPTURE(decay);
      check_heap_without_n_by_n("causal_linear_attention", true, decay,
                                [&](const Matrix& q, const Matrix& k, const Matrix& v) {
                                  return attn::causal_linear_attention(q, k, v, decay);
                                });
    }
  }

  TEST_CASE("causal_linear_attention's first row is the first value and its last row is full linear attention" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    attn::Rng rng(90);
    const Matrix Q = rng.normal(12, 4), K = rng.normal(12, 4), V = rng.normal(12, 3);
    const Matrix phiQ = attn::elu_plus_one(Q), phiK = attn::elu_plus_one(K);
    const Matrix O = attn::causal_linear_attention(phiQ, phiK, V);  // (12, 3)
    CHECK_ALLCLOSE(row_of(O, 0), to_oracle(row_of(V, 0)), 0.0, 4 * kEps);
    const auto full = attn::oracle::linear_attention(attn::oracle::elu_plus_one(to_oracle(Q)),
                                                     attn::oracle::elu_plus_one(to_oracle(K)), to_oracle(V));
    CHECK_ALLCLOSE(row_of(O, 11), full.row(11), linear_atol(12, 4, max_abs(V)), 0.0);
  }

  TEST_CASE("causal_linear_attention stays exact when the features are tiny (1e-30)" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    attn::Rng rng(91);
    const Matrix phiQ = rng.uniform(20, 4, 0.5f, 1.0f), phiK = rng.uniform(20, 4, 0.5f, 1.0f);
    const Matrix V = rng.normal(20, 3);
    const Matrix tinyQ = phiQ * 1e-30f, tinyK = phiK * 1e-30f;
    CHECK_ALLCLOSE(attn::causal_linear_attention(tinyQ, tinyK, V, 0.9f),
                   attn::oracle::linear_attention(to_oracle(phiQ), to_oracle(phiK), to_oracle(V), true, 0.9),
                   linear_atol(20, 4, max_abs(V)) + 4 * kEps * max_abs(V), 0.0);
  }

  TEST_CASE("causal_linear_attention rejects sequences of different lengths and a bad decay, naming the shapes" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    const Matrix phiQ = xt::ones<float>({4, 3}), phiK = xt::ones<float>({5, 3}), V = xt::ones<float>({5, 2});
    CHECK_THROWS_NAMING(attn::causal_linear_attention(phiQ, phiK, V), std::invalid_argument, "4", "3");
    const Matrix phiK4 = xt::ones<float>({4, 3}), V4 = xt::ones<float>({4, 2});
    CHECK_THROWS_AS(attn::causal_linear_attention(phiQ, phiK4, V4, -0.1f), std::invalid_argument);
    CHECK_NOTHROW(attn::causal_linear_attention(phiQ, phiK4, V4, 1.0f));
  }

  TEST_CASE("linear_attention refuses NaN or Inf in the features or values, naming it, instead of a row of zeros" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    attn::Rng rng(88);
    const Matrix phiQ = attn::elu_plus_one(rng.normal(4, 3)), phiK = attn::elu_plus_one(rng.normal(5, 3));
    const Matrix V = rng.normal(5, 2);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      Matrix k = phiK;
      k(4, 2) = bad;
      CHECK_THROWS_NAMING(attn::linear_attention(phiQ, k, V), std::invalid_argument, "K", "14");
      CHECK_THROWS_NAMING(attn::causal_linear_attention(phiQ, Matrix(xt::view(k, xt::range(1, 5), xt::all())),
                                                        Matrix(xt::view(V, xt::range(1, 5), xt::all())), 1.0f),
                          std::invalid_argument, "K");
      Matrix v = V;
      v(0, 1) = bad;
      CHECK_THROWS_NAMING(attn::linear_attention(phiQ, phiK, v), std::invalid_argument, "V", "1");
    }
  }
}

// What the chapter presents but does not ask for: run on the solution track only (the exercise track
// excludes suites named "...: chapter code", which would pass without any learner code).
TEST_SUITE("08_linear: chapter code") {
  TEST_CASE("orthogonal_features refuses d = 0 (no endless loop), the quadratic form a mask of one empty side") {
    attn::Rng rng(89);
    CHECK_THROWS_NAMING(attn::ch08::orthogonal_features(4, 0, rng), std::invalid_argument, "d = 0");
    CHECK(attn::ch08::orthogonal_features(0, 0, rng).size() == 0);
    const Matrix phi = xt::ones<float>({3, 2});
    const attn::Mask empty_but_shaped = xt::zeros<bool>({0, 3});
    CHECK_THROWS_NAMING(attn::ch08::linear_attention_weights(phi, phi, empty_but_shaped), std::invalid_argument,
                        "(0, 3)");
  }

  TEST_CASE(
      "linear_attention refuses negative features, and positive_random_features refuses NaN in Omega and rows whose "
      "features leave float's range") {
    const Matrix V = {{1.0f}, {2.0f}};
    CHECK_THROWS_NAMING(attn::linear_attention(Matrix{{1.0f, 1.0f}}, Matrix{{1.0f, 2.0f}, {-3.0f, 1.0f}}, V),
                        std::invalid_argument, "phiK[2] = -3");
    CHECK_THROWS_NAMING(attn::linear_attention(Matrix{{-1.0f, 1.0f}}, Matrix{{1.0f, 2.0f}, {3.0f, 1.0f}}, V),
                        std::invalid_argument, "phiQ[0]");
    attn::Rng rng(81);
    const Matrix Omega = rng.normal(16, 4), X = rng.normal(3, 4);
    Matrix bad_omega = Omega;
    bad_omega(5, 1) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::positive_random_features(X, bad_omega), std::invalid_argument, "Omega[21]");
    // X·1e4: ‖x̂‖²/2 is about 1e8, so every exp underflows and the features would all be 0 without a word.
    CHECK_THROWS_NAMING(attn::positive_random_features(Matrix(X * 1e4f), Omega), std::invalid_argument, "row 0");
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
// values, each call refused naming what was wrong or answered as the contract says. The features given are
// elu_plus_one's of normal draws, so every good one is a weight (≥ 0).
TEST_SUITE("08_linear: hostile battery") {
  TEST_CASE("elu_plus_one under the hostile battery" * doctest::test_suite("08_linear/elu_plus_one")) {
    // hostile battery: elu_plus_one
    attn::Rng rng(4801);
    hostile::battery(
        "elu_plus_one", {"X"}, [](const Matrix& X) { return attn::elu_plus_one(X); }, Matrix(rng.normal(3, 4)))
        .answer([](const Matrix& phi, const Matrix& X) {
          return phi.shape() == X.shape() && non_negative(phi) && hostile::all_finite(phi);
        })
        .run();
  }

  TEST_CASE("positive_random_features under the hostile battery" *
            doctest::test_suite("08_linear/positive_random_features")) {
    // hostile battery: positive_random_features
    attn::Rng rng(4802);
    hostile::battery(
        "positive_random_features", {"X", "Omega"},
        [](const Matrix& X, const Matrix& Omega) { return attn::positive_random_features(X, Omega); },
        Matrix(rng.normal(3, 4)), Matrix(rng.normal(5, 4)))
        .fits([](const Matrix& X, const Matrix& Omega) { return X.shape(1) == Omega.shape(1); })
        .answer([](const Matrix& phi, const Matrix& X, const Matrix& Omega) {
          return phi.shape(0) == X.shape(0) && phi.shape(1) == Omega.shape(0) && non_negative(phi) &&
                 hostile::all_finite(phi);
        })
        .run();
  }

  TEST_CASE("linear_attention under the hostile battery" * doctest::test_suite("08_linear/linear_attention")) {
    // hostile battery: linear_attention
    attn::Rng rng(4803);
    hostile::battery(
        "linear_attention", {"phiQ", "phiK", "V"},
        [](const Matrix& phiQ, const Matrix& phiK, const Matrix& V) { return attn::linear_attention(phiQ, phiK, V); },
        attn::elu_plus_one(rng.normal(4, 3)), attn::elu_plus_one(rng.normal(5, 3)), Matrix(rng.normal(5, 2)))
        .fits([](const Matrix& phiQ, const Matrix& phiK, const Matrix& V) {
          return phiQ.shape(1) == phiK.shape(1) && phiK.shape(0) == V.shape(0) && non_negative(phiQ) &&
                 non_negative(phiK);
        })
        .answer([](const Matrix& O, const Matrix& phiQ, const Matrix&, const Matrix& V) {
          return O.shape(0) == phiQ.shape(0) && O.shape(1) == V.shape(1) && within_values(O, V);
        })
        .run();
  }

  TEST_CASE("recurrent_step under the hostile battery" * doctest::test_suite("08_linear/recurrent_step")) {
    // hostile battery: recurrent_step
    attn::Rng rng(4804);
    attn::RecurrentState state{attn::elu_plus_one(rng.normal(3, 2)), xt::row(attn::elu_plus_one(rng.normal(1, 3)), 0)};
    hostile::battery(
        "recurrent_step", {"state", "phi_q", "phi_k", "v", "decay"},
        [](attn::RecurrentState& st, const Vector& phi_q, const Vector& phi_k, const Vector& v, float decay) {
          return attn::recurrent_step(st, phi_q, phi_k, v, decay);
        },
        state, Vector(xt::row(attn::elu_plus_one(rng.normal(1, 3)), 0)),
        Vector(xt::row(attn::elu_plus_one(rng.normal(1, 3)), 0)), Vector(xt::row(rng.normal(1, 2), 0)), 0.9f)
        .fits(
            [](const attn::RecurrentState& st, const Vector& phi_q, const Vector& phi_k, const Vector& v, float decay) {
              const std::size_t m = st.S.shape(0);
              return st.z.size() == m && phi_q.size() == m && phi_k.size() == m && v.size() == st.S.shape(1) &&
                     decay > 0.0f && decay <= 1.0f;
            })
        .answer([](const Vector& o, const attn::RecurrentState& st, const Vector&, const Vector&, const Vector& v,
                   float) { return o.size() == v.size() && hostile::all_finite(o) && hostile::all_finite(st.S); })
        .run();
  }

  TEST_CASE("causal_linear_attention under the hostile battery" *
            doctest::test_suite("08_linear/causal_linear_attention")) {
    // hostile battery: causal_linear_attention
    attn::Rng rng(4805);
    hostile::battery(
        "causal_linear_attention", {"phiQ", "phiK", "V", "decay"},
        [](const Matrix& phiQ, const Matrix& phiK, const Matrix& V, float decay) {
          return attn::causal_linear_attention(phiQ, phiK, V, decay);
        },
        attn::elu_plus_one(rng.normal(5, 3)), attn::elu_plus_one(rng.normal(5, 3)), Matrix(rng.normal(5, 2)), 0.9f)
        .fits([](const Matrix& phiQ, const Matrix& phiK, const Matrix& V, float decay) {
          return phiQ.shape(0) == phiK.shape(0) && phiK.shape(0) == V.shape(0) && phiQ.shape(1) == phiK.shape(1) &&
                 decay > 0.0f && decay <= 1.0f;
        })
        .answer([](const Matrix& O, const Matrix& phiQ, const Matrix&, const Matrix& V, float) {
          return O.shape(0) == phiQ.shape(0) && O.shape(1) == V.shape(1) && within_values(O, V);
        })
        .run();
  }
}
