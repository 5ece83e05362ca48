// Chapter 01's tests, run against both tracks (exercise: your code; solution: the reference).
// Every expected value comes from the float64 oracle (tests/oracle) or a closed form.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "01_intuition/intuition.hpp"
#include "01_intuition/lexicon.hpp"
#include "attn/rng.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
using attn::test::to_oracle;
namespace hostile = attn::test::hostile;

// float32 softmax of logits in [-8, 8]: x - max is exact to 1 ulp of 16 (≈ 1e-6 absolute), which
// exp turns into a ≈ 1e-6 relative error; the sum of n ≤ 64 terms adds n·2^-24 ≈ 4e-6 at worst.
constexpr double kSoftmaxRtol = 6e-6;
constexpr double kSoftmaxAtol = 1e-9;
constexpr float kInf = std::numeric_limits<float>::infinity();

Vector random_vector(attn::Rng& rng, std::size_t n, float low, float high) {
  const Matrix m = rng.uniform(1, n, low, high);  // (1, n)
  return xt::row(m, 0);
}

}  // namespace

TEST_SUITE("01_intuition") {
  TEST_CASE("stable_softmax of logits near ±1e4 gives finite weights that sum to one" *
            doctest::test_suite("01_intuition/stable_softmax")) {
    // exp(1e4) is inf in float32: a naive softmax returns inf/inf = NaN here.
    const Vector logits = {1.0e4f, -1.0e4f, 1.0e4f - 1.0f, 0.0f};  // (4)
    const Vector p = attn::stable_softmax(logits);
    CHECK_ALLCLOSE(p, attn::oracle::softmax(to_oracle(logits)), kSoftmaxAtol, kSoftmaxRtol);
    CHECK(p(1) == 0.0f);  // exp(-2e4) underflows to exactly 0
  }

  TEST_CASE("stable_softmax matches the oracle on random logits" * doctest::test_suite("01_intuition/stable_softmax")) {
    attn::Rng rng(1);
    for (std::size_t n : {1u, 2u, 7u, 64u}) {
      const Vector logits = random_vector(rng, n, -8.0f, 8.0f);  // (n)
      CHECK_ALLCLOSE(attn::stable_softmax(logits), attn::oracle::softmax(to_oracle(logits)), kSoftmaxAtol,
                     kSoftmaxRtol);
    }
  }

  TEST_CASE("stable_softmax gives a single logit all the weight, whatever its value" *
            doctest::test_suite("01_intuition/stable_softmax")) {
    for (float x : {-1.0e4f, 0.0f, 3.5f, 1.0e4f}) {
      const Vector p = attn::stable_softmax(Vector{x});
      REQUIRE(p.size() == 1);
      CHECK(p(0) == 1.0f);
    }
  }

  TEST_CASE("stable_softmax shares weight equally among equal logits" *
            doctest::test_suite("01_intuition/stable_softmax")) {
    for (float x : {-50.0f, 0.0f, 50.0f}) {
      const Vector p = attn::stable_softmax(xt::full_like(Vector(xt::zeros<float>({5})), x));
      CHECK_ALLCLOSE(p, std::vector<double>(5, 0.2), 0.0, 2e-7);  // exp(0) = 1 exactly; 1/5 rounds once
    }
  }

  TEST_CASE("stable_softmax gives masked (-inf) logits zero weight, and an all-masked row all zeros" *
            doctest::test_suite("01_intuition/stable_softmax")) {
    const Vector p = attn::stable_softmax(Vector{-kInf, 2.0f, -kInf, 2.0f});
    const std::vector<double> halves{0.0, 0.5, 0.0, 0.5};
    CHECK_ALLCLOSE(p, halves, 0.0, 0.0);
    const Vector none = attn::stable_softmax(Vector{-kInf, -kInf, -kInf});
    CHECK_ALLCLOSE(none, std::vector<double>(3, 0.0), 0.0, 0.0);
  }

  TEST_CASE("stable_softmax of an empty vector is empty" * doctest::test_suite("01_intuition/stable_softmax")) {
    CHECK(attn::stable_softmax(Vector(xt::zeros<float>({0}))).size() == 0);
  }

  TEST_CASE("stable_softmax rejects NaN and +inf, naming the index" *
            doctest::test_suite("01_intuition/stable_softmax")) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::stable_softmax(Vector{0.0f, 1.0f, nan}), std::invalid_argument, "2");
    CHECK_THROWS_NAMING(attn::stable_softmax(Vector{kInf, 1.0f}), std::invalid_argument, "0");
  }

  TEST_CASE("attention_weights divides the scores by sqrt(d_k)" *
            doctest::test_suite("01_intuition/attention_weights")) {
    // Two keys: e1 and 0. With q = (2·ln 3)·e1 and d_k = 4 the scaled scores are 2·ln 3 / √4 = ln 3 and 0,
    // so the weights are 3/4 and 1/4 (without the scale they would be 9/10 and 1/10).
    const Matrix K = {{1, 0, 0, 0}, {0, 0, 0, 0}};  // (2, 4)
    const Vector q = {2.0f * std::log(3.0f), 0.0f, 0.0f, 0.0f};
    const std::vector<double> expected{0.75, 0.25};
    CHECK_ALLCLOSE(attn::attention_weights(q, K), expected, 0.0, 1e-6);
  }

  TEST_CASE("attention_weights matches the oracle for random queries and keys" *
            doctest::test_suite("01_intuition/attention_weights")) {
    attn::Rng rng(2);
    for (std::size_t d_k : {1u, 4u, 16u}) {
      const Matrix K = rng.normal(9, d_k);              // (n, d_k)
      const Vector q = xt::row(rng.normal(1, d_k), 0);  // (d_k)
      // K·q sums d_k products of N(0,1) values: float32 error ≈ d_k·2^-24·|q||K_j|, far below 1e-5.
      CHECK_ALLCLOSE(attn::attention_weights(q, K), attn::oracle::attention_weights(to_oracle(q), to_oracle(K)), 1e-7,
                     1e-5);
    }
  }

  TEST_CASE("attention_weights stays finite when the scaled scores reach ±1e4" *
            doctest::test_suite("01_intuition/attention_weights")) {
    // d_k = 4, so the scores are q·k / 2: 1e4, 1e4 - 1, 0 and -1e4, every one exact in float32. exp(1e4) is inf:
    // only a softmax that subtracts the largest score first (stable_softmax) gives e^0 and e^-1 here.
    const Matrix K = {{1, 0, 0, 0}, {1, -1, 0, 0}, {0, 0, 0, 0}, {-1, 0, 0, 0}};  // (4, 4)
    const Vector q = {2.0e4f, 2.0f, 0.0f, 0.0f};                                  // (d_k)
    INFO("scores of 1e4 overflow exp(): does attention_weights use the max-shifted stable_softmax?");
    // Exact scores and shifts leave exp's own rounding (1 ulp) and one division: stable_softmax's tolerance.
    CHECK_ALLCLOSE(attn::attention_weights(q, K), attn::oracle::attention_weights(to_oracle(q), to_oracle(K)),
                   kSoftmaxAtol, kSoftmaxRtol);
  }

  TEST_CASE("attention_weights gives identical keys identical weights" *
            doctest::test_suite("01_intuition/attention_weights")) {
    const Matrix K = {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}};  // (4, 3)
    const Vector q = {0.5f, -1.0f, 2.0f};
    CHECK_ALLCLOSE(attn::attention_weights(q, K), std::vector<double>(4, 0.25), 0.0, 2e-7);
  }

  TEST_CASE("attention_weights rejects a query whose length is not K's d_k, naming both shapes" *
            doctest::test_suite("01_intuition/attention_weights")) {
    const Matrix K = xt::zeros<float>({5, 6});  // (5, 6)
    CHECK_THROWS_NAMING(attn::attention_weights(Vector{1.0f, 2.0f, 3.0f, 4.0f}, K), std::invalid_argument, "5", "6",
                        "4");
  }

  TEST_CASE("blend_values is the weighted average of V's rows" * doctest::test_suite("01_intuition/blend_values")) {
    attn::Rng rng(3);
    const Matrix V = rng.normal(6, 5);                   // (n, d_v)
    const Vector w = random_vector(rng, 6, 0.0f, 1.0f);  // (n), any weights
    const auto expected = attn::oracle::weighted_sum(to_oracle(w), to_oracle(V));
    CHECK_ALLCLOSE(attn::blend_values(w, V), expected, 1e-6, 1e-5);
    // One-hot weights pick one row exactly.
    const Vector one_hot = {0, 0, 1, 0, 0, 0};
    CHECK_ALLCLOSE(attn::blend_values(one_hot, V), to_oracle(V).row(2), 0.0, 0.0);
  }

  TEST_CASE("blend_values rejects weights that do not match V's rows, naming both shapes" *
            doctest::test_suite("01_intuition/blend_values")) {
    const Matrix V = xt::zeros<float>({3, 2});  // (3, 2)
    CHECK_THROWS_NAMING(attn::blend_values(Vector{0.5f, 0.5f}, V), std::invalid_argument, "3", "2");
  }

  TEST_CASE("design_pronoun_query has one entry per key dimension" *
            doctest::test_suite("01_intuition/design_pronoun_query")) {
    CHECK(attn::design_pronoun_query().size() == attn::ch01::key_names().size());
  }

  TEST_CASE("design_pronoun_query makes 它/it attend most to its antecedent in every sentence" *
            doctest::test_suite("01_intuition/design_pronoun_query")) {
    const Vector q = attn::design_pronoun_query();  // (d_k)
    REQUIRE(q.size() == attn::ch01::key_names().size());
    const Matrix W_Q = attn::ch01::query_weights(q);
    for (const auto& s : attn::ch01::sentences()) {
      CAPTURE(s.name);
      const Matrix X = attn::ch01::embed(s.tokens);                                             // (n, d_model)
      const auto Q = attn::oracle::matmul(to_oracle(X), to_oracle(W_Q));                        // (n, d_k)
      const auto K = attn::oracle::matmul(to_oracle(X), to_oracle(attn::ch01::key_weights()));  // (n, d_k)
      const std::vector<double> w = attn::oracle::attention_weights(Q.row(s.pronoun), K);
      std::size_t best = 0;
      for (std::size_t j = 1; j < w.size(); ++j)
        if (w[j] > w[best]) best = j;
      CHECK_MESSAGE(best == s.antecedent, s.tokens[s.pronoun], " attends most to ", s.tokens[best], " (weight ",
                    w[best], "), not to ", s.tokens[s.antecedent], " (weight ", w[s.antecedent], ")");
    }
  }

  TEST_CASE("attention_weights refuses d_k = 0, naming the shapes, instead of an empty product" *
            doctest::test_suite("01_intuition/attention_weights")) {
    const Vector q = xt::zeros<float>({0});
    const Matrix K = xt::zeros<float>({3, 0});
    CHECK_THROWS_NAMING(attn::attention_weights(q, K), std::invalid_argument, "3", "0");
  }

  TEST_CASE("attention_weights refuses scores that would overflow and NaN, and blend_values refuses NaN or infinity" *
            doctest::test_suite("01_intuition/blend_values")) {
    // q·k = −1e40 for both keys: −inf in float, and the weights would be [0, 0] instead of summing to 1.
    CHECK_THROWS_NAMING(attn::attention_weights(Vector{1e20f}, Matrix{{-1e20f}, {-1e20f}}), std::invalid_argument,
                        "d_k");
    CHECK_THROWS_NAMING(attn::attention_weights(Vector{std::nanf(""), 1.0f}, Matrix{{1.0f, 2.0f}}),
                        std::invalid_argument, "nan");
    CHECK_THROWS_NAMING(attn::blend_values(Vector{0.5f, std::nanf("")}, Matrix{{1.0f}, {2.0f}}), std::invalid_argument,
                        "weights", "1");
    CHECK_THROWS_NAMING(attn::blend_values(Vector{0.5f, 0.5f}, Matrix{{1.0f}, {kInf}}), std::invalid_argument, "V",
                        "1");
  }

  // The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
  // values, each call refused naming what was wrong or answered as the contract says.
  TEST_CASE("stable_softmax under the hostile battery" * doctest::test_suite("01_intuition/stable_softmax")) {
    // hostile battery: stable_softmax
    attn::Rng rng(4701);
    hostile::battery(
        "stable_softmax", {"logits"}, [](const Vector& x) { return attn::stable_softmax(x); },
        random_vector(rng, 5, -3.0f, 3.0f))
        .answer([](const Vector& p, const Vector& x) {
          const double sum = xt::sum<double>(p)();
          return p.size() == x.size() && (x.size() == 0 || std::abs(sum - 1.0) < 1e-5);
        })
        .exempt("with -inf", "-inf is a masked logit: weight 0, answered")
        .run();
  }

  TEST_CASE("attention_weights under the hostile battery" * doctest::test_suite("01_intuition/attention_weights")) {
    // hostile battery: attention_weights
    attn::Rng rng(4702);
    hostile::battery(
        "attention_weights", {"q", "K"}, [](const Vector& q, const Matrix& K) { return attn::attention_weights(q, K); },
        random_vector(rng, 3, -1.0f, 1.0f), Matrix(rng.normal(4, 3)))
        .fits([](const Vector& q, const Matrix& K) { return q.size() == K.shape(1) && q.size() > 0; })
        .answer([](const Vector& w, const Vector&, const Matrix& K) {
          return w.size() == K.shape(0) && (w.size() == 0 || std::abs(xt::sum<double>(w)() - 1.0) < 1e-5);
        })
        .run();
  }

  TEST_CASE("blend_values under the hostile battery" * doctest::test_suite("01_intuition/blend_values")) {
    // hostile battery: blend_values
    attn::Rng rng(4703);
    hostile::battery(
        "blend_values", {"weights", "V"}, [](const Vector& w, const Matrix& V) { return attn::blend_values(w, V); },
        Vector{0.25f, 0.25f, 0.5f}, Matrix(rng.normal(3, 2)))
        .fits([](const Vector& w, const Matrix& V) { return w.size() == V.shape(0); })
        .answer([](const Vector& out, const Vector& w, const Matrix& V) {
          bool close = out.size() == V.shape(1);
          for (std::size_t c = 0; close && c < V.shape(1); ++c) {
            double sum = 0;  // the blend in float64: Σ_j w_j V(j, c)
            for (std::size_t j = 0; j < V.shape(0); ++j) sum += double(w(j)) * double(V(j, c));
            close = std::abs(out(c) - sum) <= 1e-5 * (1 + std::abs(sum));
          }
          return close;
        })
        .run();
  }
}
