// Chapter 12's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/12_learning_oracle.hpp: the transformer and cross-entropy as loops), from central differences
// of that oracle, or from hand-worked closed forms, never from the other track.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "12_learning/train.hpp"
#include "attn/rng.hpp"
#include "oracle/12_learning_oracle.hpp"
#include "support/allclose.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::test::to_oracle;
namespace ch12 = attn::ch12;
namespace oracle = attn::oracle;

constexpr double kEps = 1.0 / (1 << 24);  // float32's unit roundoff, 2^-24

constexpr std::size_t kSkip = ch12::kIgnore;

/// The float32 model's weights as the oracle's float64 transformer.
oracle::Transformer to_oracle_model(const ch12::Model& m) {
  oracle::Transformer t;
  t.heads = m.config.heads;
  t.rope_base = static_cast<double>(m.config.rope_base);
  t.embed = to_oracle(m.embed);
  for (const ch12::Layer& L : m.layers)
    t.layers.push_back({to_oracle(L.W_Q), to_oracle(L.W_K), to_oracle(L.W_V), to_oracle(L.W_O)});
  t.unembed = to_oracle(m.unembed);
  return t;
}

/// The oracle's matrices in the order of ch12::parameters().
std::vector<oracle::Mat*> oracle_parameters(oracle::Transformer& t) {
  std::vector<oracle::Mat*> out{&t.embed};
  for (auto& W : t.layers)
    for (auto& M : W) out.push_back(&M);
  out.push_back(&t.unembed);
  return out;
}

/// A tiny configuration for gradient checks: 2 layers, 2 heads of width 2, 5 tokens.
ch12::Config tiny_config() {
  ch12::Config c;
  c.vocab = 5;
  c.d_model = 4;
  c.heads = 2;
  c.layers = 2;
  c.context = 8;
  return c;
}

}  // namespace

TEST_SUITE("12_learning") {
  TEST_CASE("cross_entropy matches the float64 oracle and averages over the counted rows only" *
            doctest::test_suite("12_learning/cross_entropy")) {
    attn::Rng rng(1201);
    const Matrix logits = rng.normal(6, 7, 0.0f, 2.0f);                // (6, 7)
    const std::vector<std::size_t> targets{3, kSkip, 0, 6, kSkip, 2};  // 4 counted rows
    const attn::LossAndGrad lg = attn::cross_entropy(logits, targets);
    const oracle::Mat L = to_oracle(logits);
    // A sum of 4 logs of numbers ~1 from float32 inputs: a few 2^-24 relative, far inside 1e-6.
    INFO("divide by the number of counted rows (4), not by all rows (6); skipped rows give no loss");
    CHECK(lg.loss == doctest::Approx(oracle::cross_entropy(L, targets)).epsilon(1e-6));
    // Each entry is (p − onehot) / 4 with p from a float32 softmax: |error| ≲ 2^-24·vocab.
    INFO("dlogits = (softmax − onehot) / C on counted rows and exactly 0 on skipped rows");
    CHECK_ALLCLOSE(lg.dlogits, oracle::cross_entropy_grad(L, targets), 1e-7, 1e-5);
  }

  TEST_CASE("cross_entropy of uniform logits is log(vocab), and large logits stay finite" *
            doctest::test_suite("12_learning/cross_entropy")) {
    const Matrix flat = xt::zeros<float>({3, 8});
    const attn::LossAndGrad u = attn::cross_entropy(flat, {1, 2, 7});
    INFO("every token equally likely: −log(1/8) = log 8");
    CHECK(u.loss == doctest::Approx(std::log(8.0)).epsilon(1e-6));
    Matrix big = xt::zeros<float>({1, 3});
    big(0, 0) = 1000.0f;  // exp(1000) overflows: only the max-subtracted log-sum-exp survives
    big(0, 1) = 999.0f;
    const attn::LossAndGrad b = attn::cross_entropy(big, {1});
    INFO("subtract the row's maximum before exp: the loss is 1 + log(1 + e^-1) ≈ 1.3133, not inf or nan");
    CHECK(b.loss == doctest::Approx(1.0 + std::log(1.0 + std::exp(-1.0))).epsilon(1e-6));
    CHECK(std::isfinite(static_cast<double>(b.dlogits(0, 0))));
  }

  TEST_CASE("cross_entropy shifts each row by its own maximum: rows a thousand apart both stay exact" *
            doctest::test_suite("12_learning/cross_entropy")) {
    // One shift for the whole matrix (its largest logit, 1000) sends every exp of row 1 to exp(−998) = 0 in
    // float32: log 0 = −inf. Row by row, each log-sum-exp is a sum of three numbers ≤ 1: float32 rounding.
    const Matrix logits = {{1000.0f, 999.0f, 998.0f}, {0.0f, 1.0f, 2.0f}};  // (2, 3)
    const std::vector<std::size_t> targets{1, 0};
    const attn::LossAndGrad lg = attn::cross_entropy(logits, targets);
    INFO("log-sum-exp per row: subtract that row's maximum, not one maximum over all rows");
    CHECK(lg.loss == doctest::Approx(oracle::cross_entropy(to_oracle(logits), targets)).epsilon(1e-6));
    CHECK_ALLCLOSE(lg.dlogits, oracle::cross_entropy_grad(to_oracle(logits), targets), 1e-7, 1e-5);
  }

  TEST_CASE("cross_entropy refuses targets of the wrong length, an empty vocabulary and NaN logits" *
            doctest::test_suite("12_learning/cross_entropy")) {
    const Matrix logits = xt::zeros<float>({3, 4});
    CHECK_THROWS_AS(attn::cross_entropy(logits, {1, 2}), std::invalid_argument);
    CHECK_THROWS_AS(attn::cross_entropy(Matrix(xt::zeros<float>({2, 0})), {0, 0}), std::invalid_argument);
    Matrix bad = logits;
    bad(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(attn::cross_entropy(bad, {0, 1, 2}), std::invalid_argument);
  }

  TEST_CASE("adamw_step takes two hand-worked steps with bias correction and decoupled weight decay" *
            doctest::test_suite("12_learning/adamw_step")) {
    // θ = 1, lr 0.1, β = (0.9, 0.999), ε = 1e-8, weight decay 0.01. Step 1, g = 0.5: m = 0.05, v = 0.00025,
    // m̂ = 0.5, v̂ = 0.25, m̂/√v̂ = 1, θ = 1 − 0.1·(1 + 0.01·1) = 0.899. Step 2, g = −0.5: m = −0.005,
    // v = 0.00049975, m̂ = −0.005/0.19 = −1/38, v̂ = 0.00049975/0.001999 = 0.25, m̂/√v̂ = −1/19,
    // θ = 0.899 − 0.1·(−1/19 + 0.01·0.899) = 0.90336416.
    attn::AdamW s{0.1f, 0.9, 0.999, 1e-8f, 0.01f};
    Matrix theta = xt::ones<float>({1, 1}), m = xt::zeros<float>({1, 1}), v = m;
    attn::adamw_step(theta, Matrix(xt::ones<float>({1, 1}) * 0.5f), m, v, 1, s);
    // Values ~1 through a handful of float32 operations: a few ulps (1e-7 each); 1e-6 leaves room, and is far
    // below the 1e-3 that L2-style decay (0.9) or a missing bias correction (θ ≈ 0.68) would miss by.
    INFO("step 1: m̂ = g and v̂ = g² after bias correction, so θ moves by lr·(1 + weight_decay·θ)");
    CHECK(static_cast<double>(m(0, 0)) == doctest::Approx(0.05).epsilon(1e-6));
    CHECK(static_cast<double>(v(0, 0)) == doctest::Approx(0.00025).epsilon(1e-6));
    CHECK(static_cast<double>(theta(0, 0)) == doctest::Approx(0.899).epsilon(1e-6));
    attn::adamw_step(theta, Matrix(xt::ones<float>({1, 1}) * -0.5f), m, v, 2, s);
    INFO("step 2: bias corrections 1 − 0.9² and 1 − 0.999²; decay uses θ before the step");
    CHECK(static_cast<double>(theta(0, 0)) == doctest::Approx(0.90336416).epsilon(1e-6));
  }

  TEST_CASE("adamw_step follows the float64 AdamW with β1 = 0.9, β2 = 0.999 for ten steps, to float32 rounding" *
            doctest::test_suite("12_learning/adamw_step")) {
    attn::Rng rng(121);
    attn::AdamW s;  // the defaults: β1 = 0.9, β2 = 0.999, exactly as PyTorch's
    s.lr = 1e-2f;
    s.weight_decay = 0.01f;
    const std::size_t T = 10;
    Matrix theta = rng.normal(4, 5), m = xt::zeros<float>({4, 5}), v = m;  // (4, 5)
    oracle::AdamWState exact{to_oracle(theta).v, std::vector<double>(20, 0.0), std::vector<double>(20, 0.0)};
    // Every step rounds m, v and θ to float once (ε = 2^-24 relative each); an error in m or v decays by β after
    // it, so after t steps m and v are within t·ε of their largest size so far. θ adds its own rounding and the
    // step's error from those of m and v: lr·(|Δm̂|/√v̂ + |m̂|·|Δv̂|/(2 v̂^{3/2})), to first order.
    double m_size = 0.0, v_size = 0.0, theta_tol = 0.0;
    for (std::size_t t = 1; t <= T; ++t) {
      CAPTURE(t);
      const Matrix g = rng.normal(4, 5, 0.0f, 0.1f);  // (4, 5)
      attn::adamw_step(theta, g, m, v, t, s);
      oracle::adamw_step(exact, to_oracle(g).v, t, static_cast<double>(s.lr), 0.9, 0.999, static_cast<double>(s.eps),
                         static_cast<double>(s.weight_decay));
      const double c1 = 1.0 - std::pow(0.9, static_cast<double>(t)), c2 = 1.0 - std::pow(0.999, static_cast<double>(t));
      for (std::size_t i = 0; i < 20; ++i) {
        m_size = std::max(m_size, std::fabs(exact.m[i]));
        v_size = std::max(v_size, exact.v[i]);
      }
      const double m_tol = static_cast<double>(t) * kEps * m_size, v_tol = static_cast<double>(t) * kEps * v_size;
      double step_tol = 0.0;
      for (std::size_t i = 0; i < 20; ++i) {
        const double m_hat = exact.m[i] / c1, v_hat = exact.v[i] / c2;
        step_tol = std::max(
            step_tol, static_cast<double>(s.lr) * (m_tol / c1 / std::sqrt(v_hat) +
                                                   std::fabs(m_hat) * v_tol / c2 / (2.0 * v_hat * std::sqrt(v_hat))) +
                          kEps * std::fabs(exact.theta[i]));
      }
      theta_tol += step_tol;
      INFO(
          "m = β1·m + (1 − β1)·g and v = β2·v + (1 − β2)·g² with β and 1 − β exactly as given (a float 1 − 0.999f "
          "is 0.000999987: v 1.3e-5 off)");
      const auto as_matrix = [](const std::vector<double>& x) {
        oracle::Mat out(4, 5);
        out.v = x;
        return out;
      };
      CHECK_ALLCLOSE(m, as_matrix(exact.m), m_tol, 0.0);
      CHECK_ALLCLOSE(v, as_matrix(exact.v), v_tol, 0.0);
      CHECK_ALLCLOSE(theta, as_matrix(exact.theta), 2.0 * theta_tol, 0.0);
    }
  }

  TEST_CASE("adamw_step adds ε to √v̂, after the bias correction and outside the square root" *
            doctest::test_suite("12_learning/adamw_step")) {
    // At step 1 the bias corrections give m̂ = g and v̂ = g² exactly, so θ = −lr·g / (|g| + ε) from θ = 0.
    // With g = 0.01 and a large ε = 0.1 the places ε could go differ by a factor 3 or more:
    // g/(√v̂ + ε) = 0.0909 (right), g/√(v̂ + ε) = 0.0316, and ε added to √v before the correction 0.0032.
    const attn::AdamW s{1.0f, 0.9f, 0.999f, 0.1f, 0.0f};
    Matrix theta = xt::zeros<float>({1, 1}), m = theta, v = theta;
    attn::adamw_step(theta, Matrix(xt::ones<float>({1, 1}) * 0.01f), m, v, 1, s);
    const double g = static_cast<double>(0.01f), eps = static_cast<double>(0.1f);
    INFO("θ −= lr·(m̂ / (√v̂ + ε) + weight_decay·θ): ε joins the corrected root, it does not go under it");
    // A handful of float32 operations on values ~0.01 to 1: a few ulps, 1e-5 relative leaves room.
    CHECK(static_cast<double>(theta(0, 0)) == doctest::Approx(-g / (g + eps)).epsilon(1e-5));
  }

  TEST_CASE("adamw_step refuses mismatched shapes and step 0, leaving the weights unchanged" *
            doctest::test_suite("12_learning/adamw_step")) {
    Matrix theta = xt::ones<float>({2, 2}), m = xt::zeros<float>({2, 2}), v = m;
    const Matrix before = theta;
    CHECK_THROWS_AS(attn::adamw_step(theta, Matrix(xt::ones<float>({2, 3})), m, v, 1, attn::AdamW{}),
                    std::invalid_argument);
    CHECK_THROWS_AS(attn::adamw_step(theta, Matrix(xt::ones<float>({2, 2})), m, v, 0, attn::AdamW{}),
                    std::invalid_argument);
    CHECK(theta == before);
  }

  TEST_CASE(
      "adamw_step refuses settings that give NaN weights, and a NaN or infinite gradient or weight, leaving "
      "everything unchanged" *
      doctest::test_suite("12_learning/adamw_step")) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    Matrix theta = xt::ones<float>({2, 2}), m = xt::zeros<float>({2, 2}), v = m;
    const Matrix zero_grad = xt::zeros<float>({2, 2}), before = theta;
    const auto with = [](float lr, float beta1, float beta2, float eps, float decay) {
      return attn::AdamW{lr, beta1, beta2, eps, decay};
    };
    // β1 = 1 or β2 = 1: the bias correction 1 − βᵗ is 0; β2 > 1 or < 0: v can turn negative; ε = 0 with a zero
    // gradient: 0 / 0; a NaN or negative learning rate or decay.
    for (const attn::AdamW& bad : {with(1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f), with(1e-3f, 0.9f, 1.0f, 1e-8f, 0.0f),
                                   with(1e-3f, 0.9f, 1.5f, 1e-8f, 0.0f), with(1e-3f, -0.1f, 0.999f, 1e-8f, 0.0f),
                                   with(1e-3f, 0.9f, 0.999f, 0.0f, 0.0f), with(1e-3f, 0.9f, 0.999f, inf, 0.0f),
                                   with(nan, 0.9f, 0.999f, 1e-8f, 0.0f), with(-1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f),
                                   with(inf, 0.9f, 0.999f, 1e-8f, 0.0f), with(1e-3f, nan, 0.999f, 1e-8f, 0.0f),
                                   with(1e-3f, 0.9f, 0.999f, 1e-8f, nan), with(1e-3f, 0.9f, 0.999f, 1e-8f, -0.5f)}) {
      CAPTURE(bad.lr);
      CAPTURE(bad.beta1);
      CAPTURE(bad.beta2);
      CAPTURE(bad.eps);
      CAPTURE(bad.weight_decay);
      CHECK_THROWS_NAMING(attn::adamw_step(theta, zero_grad, m, v, 1, bad), std::invalid_argument, "adamw_step");
    }
    Matrix bad_grad = zero_grad;
    bad_grad(1, 0) = nan;
    CHECK_THROWS_NAMING(attn::adamw_step(theta, bad_grad, m, v, 1, attn::AdamW{}), std::invalid_argument, "grad[2]");
    Matrix bad_theta = theta;
    bad_theta(0, 1) = -inf;
    CHECK_THROWS_NAMING(attn::adamw_step(bad_theta, zero_grad, m, v, 1, attn::AdamW{}), std::invalid_argument,
                        "param[1]");
    CHECK(theta == before);
    CHECK(xt::all(xt::equal(m, 0.0f)));
    CHECK(xt::all(xt::equal(v, 0.0f)));
  }

  TEST_CASE("induction_score and attention_rollout refuse an attention map holding NaN or infinity" *
            doctest::test_suite("12_learning/attention_rollout")) {
    Matrix A = xt::eye<float>(3);
    A(2, 0) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::induction_score(A, {1, 2, 1}), std::invalid_argument, "A[6]");
    CHECK_THROWS_NAMING(attn::attention_rollout({Matrix(xt::eye<float>(3)), A}), std::invalid_argument, "[6]");
    A(2, 0) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(attn::attention_rollout({A}), std::invalid_argument);
  }

  TEST_CASE("induction_score is 1 for a perfect induction head and 0 for a head on the twin or the previous token" *
            doctest::test_suite("12_learning/induction_score")) {
    // Token 1 occurs at 1, 4 and 7: query 7 must be scored on key 5 (after the latest occurrence, at 4).
    const std::vector<std::size_t> tokens{4, 1, 2, 3, 1, 2, 3, 1};
    const std::size_t n = tokens.size();
    const std::size_t after_latest[] = {0, 0, 0, 0, 2, 3, 4, 5};  // for queries 4 … 7; 0 … 3 have no earlier twin
    Matrix induction = xt::eye<float>(n), twin = induction, previous = xt::zeros<float>({n, n}), earliest = induction;
    for (std::size_t i = 0; i < n; ++i) previous(i, i == 0 ? 0 : i - 1) = 1.0f;
    for (std::size_t i = 4; i < n; ++i) {
      induction(i, i) = twin(i, i) = earliest(i, i) = 0.0f;
      induction(i, after_latest[i]) = 1.0f;
      twin(i, after_latest[i] - 1) = 1.0f;               // the earlier copy of the current token itself: one too early
      earliest(i, i == 7 ? 2 : after_latest[i]) = 1.0f;  // query 7 on the token after the *first* 1
    }
    INFO("query i is scored on key j + 1, j the latest earlier position holding token i");
    CHECK(attn::induction_score(induction, tokens) == doctest::Approx(1.0));
    CHECK(attn::induction_score(twin, tokens) == doctest::Approx(0.0));
    CHECK(attn::induction_score(previous, tokens) == doctest::Approx(0.0));
    INFO("with several earlier occurrences, the latest one counts: 3 of 4 queries right gives 0.75");
    CHECK(attn::induction_score(earliest, tokens) == doctest::Approx(0.75));
    Matrix uniform = xt::zeros<float>({n, n});  // causal uniform: query i spreads 1/(i + 1) over keys 0 … i
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j <= i; ++j) uniform(i, j) = 1.0f / static_cast<float>(i + 1);
    INFO("average over the 4 queries whose token occurred before, not over all 8");
    CHECK(attn::induction_score(uniform, tokens) == doctest::Approx((1.0 / 5 + 1.0 / 6 + 1.0 / 7 + 1.0 / 8) / 4));
    CHECK(attn::induction_score(uniform, {0, 1, 2, 3, 4, 5, 6, 7}) == doctest::Approx(0.0));  // nothing repeats
    CHECK_THROWS_AS(attn::induction_score(Matrix(xt::zeros<float>({n, n - 1})), tokens), std::invalid_argument);
    CHECK_THROWS_AS(attn::induction_score(uniform, {1, 2, 1}), std::invalid_argument);
  }

  TEST_CASE("attention_rollout multiplies half-residual layers, the last layer on the left" *
            doctest::test_suite("12_learning/attention_rollout")) {
    Matrix A1 = xt::zeros<float>({3, 3}), A2 = A1;  // (3, 3) each, causal, rows summing to 1
    A1(0, 0) = 1.0f;
    A1(1, 0) = 1.0f;
    A1(2, 1) = 1.0f;  // layer 1: previous-token-ish
    A2(0, 0) = 1.0f;
    A2(1, 1) = 1.0f;
    A2(2, 0) = 0.5f;
    A2(2, 2) = 0.5f;
    // Float64 by hand: R = (½A2 + ½I)(½A1 + ½I).
    oracle::Mat M1(3, 3), M2(3, 3);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        M1(i, j) = 0.5 * static_cast<double>(A1(i, j)) + (i == j ? 0.5 : 0.0);
        M2(i, j) = 0.5 * static_cast<double>(A2(i, j)) + (i == j ? 0.5 : 0.0);
      }
    const Matrix R = attn::attention_rollout({A1, A2});
    // Products of halves and quarters: exact in float32.
    INFO("Ã = ½A + ½I per layer; R = Ã2·Ã1 (Ã1·Ã2 differs for these matrices)");
    CHECK_ALLCLOSE(R, oracle::matmul(M2, M1), 0.0, 0.0);
    const Matrix eye = xt::eye<float>(3);
    INFO("identity attention passes every token through unchanged");
    CHECK_ALLCLOSE(attn::attention_rollout({eye, eye}), to_oracle(eye), 0.0, 0.0);
    CHECK_THROWS_AS(attn::attention_rollout({}), std::invalid_argument);
    CHECK_THROWS_AS(attn::attention_rollout({A1, Matrix(xt::zeros<float>({2, 2}))}), std::invalid_argument);
  }

  TEST_CASE("cross_entropy through the model: logits and every layer's gradient match float64 central differences" *
            doctest::test_suite("12_learning/cross_entropy")) {
    const ch12::Config c = tiny_config();
    const ch12::Model model = ch12::init_model(c, 77);
    const std::vector<std::size_t> tokens{1, 4, 0, 2, 1, 3}, targets{kSkip, 0, 2, kSkip, 3, 1};
    oracle::Transformer t = to_oracle_model(model);
    const ch12::Trace tr = ch12::forward(model, tokens);
    // float32 through 2 layers of width 4 with values ~1: a few dozen roundings of 2^-24 each.
    CHECK_ALLCLOSE(tr.logits, oracle::transformer_logits(t, tokens), 1e-5, 1e-5);
    const attn::LossAndGrad lg = attn::cross_entropy(tr.logits, targets);
    ch12::Model grads = ch12::zeros_like(model);
    ch12::backward(model, tr, lg.dlogits, tokens, grads);
    // Central differences of the float64 oracle, h = 1e-5: truncation h²·|f'''| ~ 1e-10, rounding 1e-16/h ~ 1e-11.
    const double h = 1e-5;
    std::vector<oracle::Mat*> P = oracle_parameters(t);
    const std::vector<const Matrix*> G = ch12::parameters(static_cast<const ch12::Model&>(grads));
    const char* names[] = {"embed",       "layer 1 W_Q", "layer 1 W_K", "layer 1 W_V", "layer 1 W_O",
                           "layer 2 W_Q", "layer 2 W_K", "layer 2 W_V", "layer 2 W_O", "unembed"};
    for (std::size_t p = 0; p < P.size(); ++p) {
      oracle::Mat numeric(P[p]->rows, P[p]->cols);
      for (std::size_t i = 0; i < P[p]->v.size(); ++i) {
        const double keep = P[p]->v[i];
        P[p]->v[i] = keep + h;
        const double up = oracle::cross_entropy(oracle::transformer_logits(t, tokens), targets);
        P[p]->v[i] = keep - h;
        const double down = oracle::cross_entropy(oracle::transformer_logits(t, tokens), targets);
        P[p]->v[i] = keep;
        numeric.v[i] = (up - down) / (2.0 * h);
      }
      INFO("gradient of ", std::string(names[p]));
      // The float32 backward of gradients ~0.1: its rounding, a few dozen times 2^-24, stays below 1e-6.
      CHECK_ALLCLOSE(*G[p], numeric, 1e-6, 1e-4);
    }
  }

  TEST_CASE("induction_score's task: make_induction repeats distinct tokens with a varying period" *
            doctest::test_suite("12_learning/induction_score")) {
    attn::Rng rng(5);
    const std::size_t n = 12;
    std::set<std::size_t> periods;
    for (int trial = 0; trial < 50; ++trial) {
      const ch12::InductionSequence s = ch12::make_induction(n, 10, rng);
      REQUIRE(s.tokens.size() == n);
      REQUIRE(s.targets.size() == n);
      REQUIRE(s.period >= 3);  // max(2, n/4) … n/2
      REQUIRE(s.period <= 6);
      periods.insert(s.period);
      const std::size_t fresh = n - s.period;
      CHECK(std::set<std::size_t>(s.tokens.begin(), s.tokens.begin() + static_cast<std::ptrdiff_t>(fresh)).size() ==
            fresh);
      for (std::size_t i = 0; i < n; ++i) {
        CHECK(s.tokens[i] < 10);
        if (i >= fresh) CHECK(s.tokens[i] == s.tokens[i - s.period]);
        CHECK(s.targets[i] == (i >= fresh && i + 1 < n ? s.tokens[i + 1] : kSkip));
      }
    }
    // The generator and the score agree: a head that attends from each repeated token to the token after its
    // earlier copy (and elsewhere to itself) scores exactly 1 on a generated sequence.
    const ch12::InductionSequence s = ch12::make_induction(n, 10, rng);
    Matrix perfect = xt::eye<float>(n);  // (n, n)
    for (std::size_t i = n - s.period; i < n; ++i) {
      perfect(i, i) = 0.0f;
      perfect(i, i - s.period + 1) = 1.0f;
    }
    CHECK(attn::induction_score(perfect, s.tokens) == doctest::Approx(1.0));
    INFO("the period must vary, or a fixed RoPE offset would solve the task without reading tokens");
    CHECK(periods.size() == 4);
    CHECK_THROWS_AS(ch12::make_induction(20, 10, rng), std::invalid_argument);  // needs 15 distinct tokens
    CHECK_THROWS_AS(ch12::make_induction(3, 10, rng), std::invalid_argument);
  }

  TEST_CASE("cross_entropy needs a model: an empty vocabulary and a sequence past the context are refused" *
            doctest::test_suite("12_learning/cross_entropy")) {
    ch12::Config c = tiny_config();
    c.vocab = 0;
    CHECK_THROWS_AS(ch12::init_model(c, 1), std::invalid_argument);
    c = tiny_config();
    c.d_model = 6;  // 3 columns per head: RoPE cannot rotate an odd width
    CHECK_THROWS_AS(ch12::init_model(c, 1), std::invalid_argument);
    const ch12::Model model = ch12::init_model(tiny_config(), 1);
    CHECK_THROWS_AS(ch12::forward(model, std::vector<std::size_t>(9, 0)), std::invalid_argument);  // context 8
    CHECK_THROWS_AS(ch12::forward(model, {0, 5}), std::invalid_argument);                          // vocab 5
    CHECK_THROWS_AS(ch12::forward(model, {}), std::invalid_argument);
    // A sequence that fits is accepted, and its loss is a positive finite number.
    const double loss = attn::cross_entropy(ch12::forward(model, {0, 4, 1}).logits, {4, 1, kSkip}).loss;
    CHECK(std::isfinite(loss));
    CHECK(loss > 0.0);
  }

  TEST_CASE("cross_entropy and adamw_step train the model: 300 steps take the loss from above 3 to below 1" *
            doctest::test_suite("12_learning/adamw_step")) {
    // A smaller task than the chapter's (n = 12) so that the run takes about a second. The loss starts above
    // log(24) ≈ 3.2 (worse than a uniform guess) and, with this seed, is near 0.13 by step 300: below 1 only once
    // the induction circuit has formed (`ch12_learning --length 12 --steps 300 --lr 0.01` prints the curve).
    ch12::Config c;
    c.context = 12;
    ch12::TrainSettings s;
    s.length = 12;
    s.steps = 300;
    s.adamw.lr = 0.01f;
    const ch12::TrainResult r = ch12::train_induction(c, s);
    REQUIRE(r.loss.size() == 300);
    double last = 0.0;
    for (std::size_t t = 280; t < 300; ++t) last += r.loss[t] / 20.0;
    INFO("mean loss over the first 5 steps: ", (r.loss[0] + r.loss[1] + r.loss[2] + r.loss[3] + r.loss[4]) / 5.0);
    CHECK(r.loss[0] > 3.0);
    INFO("mean loss over steps 281 … 300: ", last);
    CHECK(last < 1.0);
  }

  TEST_CASE("adamw_step training is deterministic: one seed gives the same loss curve bit for bit" *
            doctest::test_suite("12_learning/adamw_step")) {
    ch12::Config c;
    c.context = 12;
    ch12::TrainSettings s;
    s.length = 12;
    s.steps = 30;
    const ch12::TrainResult a = ch12::train_induction(c, s), b = ch12::train_induction(c, s);
    CHECK(a.loss == b.loss);  // exact equality on purpose: one thread, fixed seeds, the same operations
    s.seed += 1;
    CHECK(ch12::train_induction(c, s).loss != a.loss);  // and the seed does matter
  }

  TEST_CASE(
      "cross_entropy of a model with every head ablated is that of embed·unembed, and ablated heads learn nothing" *
      doctest::test_suite("12_learning/cross_entropy")) {
    const ch12::Config c = tiny_config();
    const ch12::Model model = ch12::init_model(c, 9);
    const std::vector<std::size_t> tokens{2, 0, 4, 1}, targets{0, 4, 1, kSkip};
    // With no head running, the residual stream carries the embeddings unchanged to the unembedding.
    const ch12::HeadMask none(c.layers, std::vector<bool>(c.heads, false));
    oracle::Mat X(tokens.size(), c.d_model);
    for (std::size_t t = 0; t < tokens.size(); ++t)
      for (std::size_t j = 0; j < c.d_model; ++j) X(t, j) = static_cast<double>(model.embed(tokens[t], j));
    const oracle::Mat bigram = oracle::matmul(X, to_oracle(model.unembed));
    const ch12::Trace tr = ch12::forward(model, tokens, none);
    CHECK_ALLCLOSE(tr.logits, bigram, 1e-5, 1e-5);  // one float32 product of width 4: a few ulps
    CHECK(attn::cross_entropy(tr.logits, targets).loss ==
          doctest::Approx(oracle::cross_entropy(bigram, targets)).epsilon(1e-5));
    // Head 1 of layer 1 switched off: its columns of W_Q, W_K, W_V get exactly zero gradient, head 0's do not.
    ch12::HeadMask keep(c.layers, std::vector<bool>(c.heads, true));
    keep[0][1] = false;
    const ch12::Trace tk = ch12::forward(model, tokens, keep);
    ch12::Model grads = ch12::zeros_like(model);
    ch12::backward(model, tk, attn::cross_entropy(tk.logits, targets).dlogits, tokens, grads, keep);
    const std::size_t d_k = c.d_model / c.heads;
    const Matrix off = xt::view(grads.layers[0].W_Q, xt::all(), xt::range(d_k, 2 * d_k));  // (d, d_k)
    const Matrix on = xt::view(grads.layers[0].W_Q, xt::all(), xt::range(0, d_k));         // (d, d_k)
    CHECK(static_cast<double>(xt::amax(xt::abs(off))()) == 0.0);
    CHECK(static_cast<double>(xt::amax(xt::abs(on))()) > 0.0);
  }

  TEST_CASE(
      "cross_entropy's logits explained: with every head ablated, gradient × input and integrated gradients "
      "credit only the current token" *
      doctest::test_suite("12_learning/cross_entropy")) {
    // Without heads, logit(i, y) = X0_i · unembed[:, y]: a linear function of row i alone. Gradient × input is
    // that logit at j = i and 0 elsewhere; integrated gradients equals it exactly (the path integral of a
    // constant gradient), whatever the number of steps.
    const ch12::Config c = tiny_config();
    const ch12::Model model = ch12::init_model(c, 21);
    const std::vector<std::size_t> tokens{3, 1, 4, 0, 2};
    const ch12::HeadMask none(c.layers, std::vector<bool>(c.heads, false));
    const std::size_t row = 3, target = 2;
    double logit = 0.0;
    for (std::size_t d = 0; d < c.d_model; ++d)
      logit += static_cast<double>(model.embed(tokens[row], d)) * static_cast<double>(model.unembed(d, target));
    std::vector<double> expected(tokens.size(), 0.0);
    expected[row] = logit;
    // Sums of 4 products of numbers ~1 in float32 (and 3 midpoints averaged): a few ulps of 1.
    CHECK_ALLCLOSE(ch12::gradient_times_input(model, tokens, row, target, none), expected, 1e-6, 1e-5);
    CHECK_ALLCLOSE(ch12::integrated_gradients(model, tokens, row, target, 3, none), expected, 1e-6, 1e-5);
    // With the heads on, integrated gradients still sums to logit(x) − logit(0) (completeness); logit(0) = 0
    // for this bias-free model. 256 midpoints leave a quadrature error well under the 1e-2 allowed here.
    const ch12::Trace tr = ch12::forward(model, tokens);
    const attn::Vector ig = ch12::integrated_gradients(model, tokens, row, target, 256);
    CHECK(static_cast<double>(xt::sum(ig)()) ==
          doctest::Approx(static_cast<double>(tr.logits(row, target))).epsilon(1e-2));
    CHECK_THROWS_AS(ch12::integrated_gradients(model, tokens, row, target, 0), std::invalid_argument);
    CHECK_THROWS_AS(ch12::gradient_times_input(model, tokens, 5, target), std::invalid_argument);
    // The loss itself, for the case name's sake and as a sanity check of the ablated model's logits.
    CHECK(std::isfinite(attn::cross_entropy(tr.logits, {1, 4, 0, 2, kSkip}).loss));
  }
}
