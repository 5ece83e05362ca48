// Chapter 04's tests, run against both tracks. The counts are checked against hand-worked cases and
// closed forms, the fit against synthetic data with known exponents, the guarded attention against the
// float64 oracle. Nothing here is timed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "04_complexity/complexity.hpp"
#include "04_complexity/heap_counter.hpp"
#include "attn/rng.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::test::to_oracle;
namespace hostile = attn::test::hostile;

// Float32 attention against float64 for N(0,1) inputs with d_k <= 8: each score's rounding error is below
// d_k·2^-24·Σ|q_c k_c| ≈ 1e-6, the softmax and the weighted sum add ~n·6e-8; 1e-5 covers it with margin.
constexpr double kAtol = 1e-5;
constexpr double kRtol = 1e-5;

// Points x = 2^0 ... 2^9 (ten doublings, like a sweep of n) and y = c·x^p·e^(σ·ε), ε ~ N(0, 1).
std::vector<double> doublings() {
  std::vector<double> x;
  for (int k = 0; k < 10; ++k) x.push_back(std::ldexp(1.0, k));
  return x;
}

std::vector<double> noisy_power_law(const std::vector<double>& x, double c, double p, double sigma,
                                    std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> noise(0.0, sigma);
  std::vector<double> y;
  for (double xi : x) y.push_back(c * std::pow(xi, p) * std::exp(noise(engine)));
  return y;
}

}  // namespace

TEST_SUITE("04_complexity") {
  TEST_CASE("attention_flops counts 48 + 30 + 60 FLOPs for n_q = 2, n_kv = 3, d_k = 4, d_v = 5" *
            doctest::test_suite("04_complexity/attention_flops")) {
    // By hand: S has 2·3 = 6 scores of 4 multiply-adds (8 FLOPs each) = 48; softmax 5 per score = 30;
    // O has 2·5 = 10 entries of 3 multiply-adds (6 FLOPs each) = 60.
    const attn::AttentionFlops f = attn::attention_flops(2, 3, 4, 5);
    CHECK(f.scores == 48.0);
    CHECK(f.softmax == 30.0);
    CHECK(f.weighted_sum == 60.0);
    CHECK(f.total() == 138.0);
  }

  TEST_CASE("attention_flops of self-attention is 4·n²·d + 5·n², exactly, up to n = 100,000" *
            doctest::test_suite("04_complexity/attention_flops")) {
    CHECK(attn::attention_flops(1, 1, 1, 1).total() == 9.0);
    CHECK(attn::attention_flops(7, 7, 3, 3).total() == 4.0 * 49 * 3 + 5.0 * 49);
    // The seed's n = 100,000 with d = 64: 2.56·10^12 in the products, 5·10^10 in the softmax (exact in a double).
    const attn::AttentionFlops f = attn::attention_flops(100000, 100000, 64, 64);
    CHECK(f.scores + f.weighted_sum == 2560000000000.0);
    CHECK(f.softmax == 50000000000.0);
  }

  TEST_CASE("attention_flops grows fourfold when n doubles and twofold in the products when d doubles" *
            doctest::test_suite("04_complexity/attention_flops")) {
    const attn::AttentionFlops base = attn::attention_flops(300, 300, 48, 48);
    CHECK(attn::attention_flops(600, 600, 48, 48).total() == 4.0 * base.total());
    const attn::AttentionFlops wide = attn::attention_flops(300, 300, 96, 96);
    CHECK(wide.scores + wide.weighted_sum == 2.0 * (base.scores + base.weighted_sum));
    CHECK(wide.softmax == base.softmax);  // the softmax does not see d at all
  }

  TEST_CASE("attention_flops is zero without queries or without keys" *
            doctest::test_suite("04_complexity/attention_flops")) {
    CHECK(attn::attention_flops(0, 5, 4, 4).total() == 0.0);
    CHECK(attn::attention_flops(5, 0, 4, 4).total() == 0.0);
  }

  TEST_CASE("attention_bytes for n_q = 2, n_kv = 3, d_k = 4, d_v = 5 matches the hand count" *
            doctest::test_suite("04_complexity/attention_bytes")) {
    // Q 8 + K 12 + V 15 = 35 floats = 140 B; O 10 floats = 40 B; S 6 floats = 24 B;
    // peak: S + A + O = 24 + 24 + 40 = 88 B; moved: 140 + 40 + 4·24 = 276 B.
    const attn::AttentionBytes b = attn::attention_bytes(2, 3, 4, 5);
    CHECK(b.inputs == 140.0);
    CHECK(b.output == 40.0);
    CHECK(b.score_matrix == 24.0);
    CHECK(b.peak_extra == 88.0);
    CHECK(b.moved == 276.0);
  }

  TEST_CASE("attention_bytes puts one 100,000 × 100,000 float32 score matrix at 40 GB" *
            doctest::test_suite("04_complexity/attention_bytes")) {
    const attn::AttentionBytes b = attn::attention_bytes(100000, 100000, 64, 64);
    CHECK(b.score_matrix == 4.0e10);
    CHECK(b.peak_extra == 8.0e10 + 4.0 * 100000 * 64);
    CHECK(b.inputs == 3.0 * 4 * 100000 * 64);  // the inputs stay small: 76.8 MB
  }

  TEST_CASE("attention_bytes is zero without tokens and four bytes per (query, key) pair in each score matrix" *
            doctest::test_suite("04_complexity/attention_bytes")) {
    CHECK(attn::attention_bytes(0, 0, 8, 8).peak_extra == 0.0);
    CHECK(attn::attention_bytes(1, 1, 1, 1).score_matrix == 4.0);
    CHECK(attn::attention_bytes(1, 1, 1, 1).moved == 4.0 * 3 + 4.0 + 16.0);
  }

  TEST_CASE(
      "fit_power_law's R² is the fraction of variance explained: 1/4 for a hand-worked fit, never outside [0, 1]" *
      doctest::test_suite("04_complexity/fit_power_law")) {
    // ln x = (0, 1, 2), ln y = (0, 2, 1): means 1 and 1, Σ(u - ū)(v - v̄) = 1, Σ(u - ū)² = 2, so the slope is
    // 1/2 and ln c = 1 - 1/2 = 1/2. Σ(v - v̄)² = 2, the residual 2 - (1/2)·1 = 3/2, R² = 1 - (3/2)/2 = 1/4
    // (the correlation r is 1/2, and -1/2 for the mirrored data: neither is R²).
    // Logs of exp(k) are k to an ulp or two: every sum is exact to ~1e-15.
    const std::vector<double> x = {1.0, std::exp(1.0), std::exp(2.0)};
    const attn::PowerLawFit up = attn::fit_power_law(x, {1.0, std::exp(2.0), std::exp(1.0)});
    CHECK(up.exponent == doctest::Approx(0.5).epsilon(1e-12));
    CHECK(up.coefficient == doctest::Approx(std::exp(0.5)).epsilon(1e-12));
    CHECK(up.r_squared == doctest::Approx(0.25).epsilon(1e-12));
    const attn::PowerLawFit down = attn::fit_power_law(x, {std::exp(2.0), 1.0, std::exp(1.0)});
    CHECK(down.exponent == doctest::Approx(-0.5).epsilon(1e-12));
    CHECK(down.r_squared == doctest::Approx(0.25).epsilon(1e-12));
    std::uint64_t seed = 70;
    for (double sigma : {0.01, 0.3, 1.0, 3.0}) {  // from an almost perfect line to pure scatter
      const attn::PowerLawFit fit =
          attn::fit_power_law(doublings(), noisy_power_law(doublings(), 1.0, -1.0, sigma, seed++));
      CAPTURE(sigma);
      CHECK(fit.r_squared >= 0.0);
      CHECK(fit.r_squared <= 1.0);
    }
  }

  TEST_CASE("fit_power_law recovers the exponent and coefficient of exact power laws" *
            doctest::test_suite("04_complexity/fit_power_law")) {
    const std::vector<double> x = {256, 512, 1024, 3000, 5000};  // not all powers of two
    for (double p : {0.5, 1.0, 2.0, 3.0}) {
      std::vector<double> y;
      for (double xi : x) y.push_back(3e-9 * std::pow(xi, p));
      const attn::PowerLawFit fit = attn::fit_power_law(x, y);
      // Logs of exact values: the only error is rounding in ~10 sums of terms of size ~10, ≈ 1e-14.
      CHECK(fit.exponent == doctest::Approx(p).epsilon(1e-12));
      CHECK(fit.coefficient == doctest::Approx(3e-9).epsilon(1e-10));
      CHECK(fit.r_squared == doctest::Approx(1.0).epsilon(1e-12));
    }
  }

  TEST_CASE("fit_power_law recovers known exponents from noisy data, within five standard errors" *
            doctest::test_suite("04_complexity/fit_power_law")) {
    // Multiplicative noise e^(σ·ε) adds N(0, σ²) to ln y. The slope's standard error is
    // σ / sqrt(Σ(ln x − mean)²) = 0.05 / sqrt(ln²2 · 82.5) = 0.0079 for ten doublings; five of them: 0.04.
    const std::vector<double> x = doublings();
    std::uint64_t seed = 40;
    for (double p : {1.0, 2.0, 3.0}) {
      const attn::PowerLawFit fit = attn::fit_power_law(x, noisy_power_law(x, 2e-6, p, 0.05, seed++));
      CHECK(fit.exponent == doctest::Approx(p).epsilon(0.04 / p));
      CHECK(fit.r_squared > 0.99);  // the noise explains ~10·0.0025 of a variance of ~40·p²
    }
  }

  TEST_CASE("fit_power_law reports a poor fit for data without a trend" *
            doctest::test_suite("04_complexity/fit_power_law")) {
    // Pure noise (p = 0, σ = 0.5): the fitted line explains little; R² is a ratio of two chi-squares with
    // mean ≈ 0.1, and with this seed it is far below 0.5.
    const attn::PowerLawFit fit = attn::fit_power_law(doublings(), noisy_power_law(doublings(), 1.0, 0.0, 0.5, 7));
    CHECK(fit.r_squared < 0.5);
    CHECK(std::fabs(fit.exponent) < 0.25);
  }

  TEST_CASE("fit_power_law rejects mismatched sizes, one point, non-positive values and equal x" *
            doctest::test_suite("04_complexity/fit_power_law")) {
    CHECK_THROWS_NAMING(attn::fit_power_law({1, 2, 3}, {1, 2}), std::invalid_argument, "3");
    CHECK_THROWS_AS(attn::fit_power_law({1}, {1}), std::invalid_argument);
    CHECK_THROWS_NAMING(attn::fit_power_law({1, 2, 4}, {1, 0, 4}), std::invalid_argument, "1");
    CHECK_THROWS_NAMING(attn::fit_power_law({1, -2, 4}, {1, 2, 4}), std::invalid_argument, "1");
    CHECK_THROWS_NAMING(attn::fit_power_law({1, 2, NAN}, {1, 2, 4}), std::invalid_argument, "2");
    CHECK_THROWS_AS(attn::fit_power_law({5, 5, 5}, {1, 2, 3}), std::invalid_argument);
  }

  TEST_CASE("guarded_attention equals full attention (the oracle) when the matrices fit" *
            doctest::test_suite("04_complexity/guarded_attention")) {
    attn::Rng rng(404);
    for (auto [n_q, n_kv, d_k, d_v] : {std::array<std::size_t, 4>{1, 1, 1, 1}, {5, 5, 4, 4}, {7, 13, 3, 6}}) {
      const Matrix Q = rng.normal(n_q, d_k), K = rng.normal(n_kv, d_k), V = rng.normal(n_kv, d_v);
      CHECK_ALLCLOSE(attn::guarded_attention(Q, K, V, 1e9),
                     attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)), kAtol, kRtol);
    }
  }

  TEST_CASE("guarded_attention runs at exactly its estimate and refuses one byte less" *
            doctest::test_suite("04_complexity/guarded_attention")) {
    // n = 13, d = 3: S and A are 4·169 = 676 B each, O is 4·39 = 156 B: 1508 B beyond the inputs.
    attn::Rng rng(13);
    const Matrix Q = rng.normal(13, 3), K = rng.normal(13, 3), V = rng.normal(13, 3);
    CHECK_ALLCLOSE(attn::guarded_attention(Q, K, V, 1508.0),
                   attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)), kAtol, kRtol);
    CHECK_THROWS_AS(attn::guarded_attention(Q, K, V, 1507.0), attn::memory_refusal);
  }

  TEST_CASE(
      "guarded_attention runs cross-attention (n_q != n_kv, d_k != d_v) at exactly its estimate, not a byte less" *
      doctest::test_suite("04_complexity/guarded_attention")) {
    // n_q = 3 queries, n_kv = 11 keys, d_k = 2, d_v = 5: S and A are 4·33 = 132 B each, O is 4·15 = 60 B: 324 B.
    // An estimate from n_q alone (n_q² pairs: 132 B) or from d_k alone (O of 4·6 = 24 B: 288 B) runs at 323 B.
    attn::Rng rng(311);
    const Matrix Q = rng.normal(3, 2), K = rng.normal(11, 2), V = rng.normal(11, 5);
    CHECK_ALLCLOSE(attn::guarded_attention(Q, K, V, 324.0),
                   attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)), kAtol, kRtol);
    INFO("S and A are (n_q, n_kv), O is (n_q, d_v): 2·4·n_q·n_kv + 4·n_q·d_v = 324 bytes here");
    CHECK_THROWS_AS(attn::guarded_attention(Q, K, V, 323.0), attn::memory_refusal);
  }

  TEST_CASE(
      "guarded_attention checks the shapes before the estimate: wrong shapes under a zero limit are a shape error" *
      doctest::test_suite("04_complexity/guarded_attention")) {
    // K (5, 2) does not fit Q (4, 3): there is no meaningful estimate, so no memory_refusal either.
    const Matrix Q = xt::zeros<float>({4, 3}), K = xt::zeros<float>({5, 2}), V = xt::zeros<float>({5, 2});
    bool refused_for_memory = false;
    try {
      (void)attn::guarded_attention(Q, K, V, 0.0);
    } catch (const attn::memory_refusal&) {
      refused_for_memory = true;
    } catch (const std::exception&) {
    }
    CHECK_MESSAGE(!refused_for_memory, "Q (4, 3) and K (5, 2) were refused for memory: check the shapes first");
    CHECK_THROWS_NAMING(attn::guarded_attention(Q, K, V, 0.0), std::invalid_argument, "5", "2", "4", "3");
  }

  TEST_CASE("guarded_attention refuses before allocating, stating the estimate and pointing to chapter 05" *
            doctest::test_suite("04_complexity/guarded_attention")) {
    // n = 300, d = 8 under a fake limit of 100 kB: S alone would be 360 kB, S + A + O = 729,600 B = 730 kB.
    const Matrix Q = xt::zeros<float>({300, 8}), K = Q, V = Q;  // (n, d)
    bool refused = false;
    std::string message;
    double required = 0, limit = 0;
    message.reserve(1024);  // so that copying the message below allocates nothing inside the measurement
    const std::size_t heap = attn::ch04::measure_heap_peak([&] {
      try {
        (void)attn::guarded_attention(Q, K, V, 100e3);
      } catch (const attn::memory_refusal& e) {
        refused = true;
        message = e.what();
        required = e.required_bytes();
        limit = e.limit_bytes();
      }
    });
    REQUIRE(refused);
    CHECK(required == 729600.0);
    CHECK(limit == 100e3);
    CHECK(heap < 4096);  // the message text and nothing else: one score matrix would be 360,000 B
    CHECK(message.find("730 kB") != std::string::npos);
    CHECK(message.find("hapter 05") != std::string::npos);
  }

  TEST_CASE("guarded_attention's estimate bounds the heap full attention really holds" *
            doctest::test_suite("04_complexity/guarded_attention")) {
    // Measured with the counting allocator: at least one (n, n) matrix is materialised, and never more than
    // the estimate the guard relies on.
    attn::Rng rng(5);
    const Matrix Q = rng.normal(200, 16), K = rng.normal(200, 16), V = rng.normal(200, 16);
    const attn::AttentionBytes b = attn::attention_bytes(200, 200, 16, 16);
    Matrix O;
    const std::size_t heap = attn::ch04::measure_heap_peak([&] { O = attn::guarded_attention(Q, K, V, 1e9); });
    CHECK(static_cast<double>(heap) >= b.score_matrix);
    CHECK(static_cast<double>(heap) <= b.peak_extra);
    CHECK_ALLCLOSE(O, attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)), kAtol, kRtol);  // and right
  }

  TEST_CASE("guarded_attention rejects Q, K and V that do not fit together, naming their shapes" *
            doctest::test_suite("04_complexity/guarded_attention")) {
    const Matrix Q = xt::zeros<float>({4, 3}), K = xt::zeros<float>({5, 2}), V = xt::zeros<float>({5, 2});
    CHECK_THROWS_NAMING(attn::guarded_attention(Q, K, V, 1e9), std::invalid_argument, "5", "2", "4", "3");
    const Matrix V_short = xt::zeros<float>({4, 2});  // one value too few
    CHECK_THROWS_NAMING(attn::guarded_attention(K, K, V_short, 1e9), std::invalid_argument, "4", "2");
  }

  // The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
  // values, each call refused naming what was wrong or answered as the contract says.
  TEST_CASE("attention_flops under the hostile battery" * doctest::test_suite("04_complexity/attention_flops")) {
    // hostile battery: attention_flops
    hostile::battery(
        "attention_flops", {"n_q", "n_kv", "d_k", "d_v"},
        [](std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
          return attn::attention_flops(n_q, n_kv, d_k, d_v).total();
        },
        std::size_t{8}, std::size_t{16}, std::size_t{4}, std::size_t{2})
        .fits([](std::size_t, std::size_t, std::size_t, std::size_t) { return true; })  // any sizes: a count
        .answer([](double flops, std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
          // 2·n_q·n_kv·d_k + 5·n_q·n_kv + 2·n_q·n_kv·d_v, in double: never negative, never wrapped to a small number.
          const double nn = double(n_q) * double(n_kv);
          const double expected = 2 * nn * double(d_k) + 5 * nn + 2 * nn * double(d_v);
          return flops >= 0 && std::abs(flops - expected) <= 1e-12 * expected;
        })
        .run();
  }

  TEST_CASE("attention_bytes under the hostile battery" * doctest::test_suite("04_complexity/attention_bytes")) {
    // hostile battery: attention_bytes
    hostile::battery(
        "attention_bytes", {"n_q", "n_kv", "d_k", "d_v"},
        [](std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
          const attn::AttentionBytes b = attn::attention_bytes(n_q, n_kv, d_k, d_v);
          return std::vector<double>{b.peak_extra, b.moved};
        },
        std::size_t{8}, std::size_t{16}, std::size_t{4}, std::size_t{2})
        .fits([](std::size_t, std::size_t, std::size_t, std::size_t) { return true; })
        .answer([](const std::vector<double>& b, std::size_t n_q, std::size_t n_kv, std::size_t, std::size_t d_v) {
          // S and A (n_q, n_kv) and O (n_q, d_v), 4 bytes each: never below that, never wrapped.
          const double held = 4.0 * (2.0 * double(n_q) * double(n_kv) + double(n_q) * double(d_v));
          return std::abs(b[0] - held) <= 1e-12 * held && b[1] >= b[0] && std::isfinite(b[1]);
        })
        .run();
  }

  TEST_CASE("fit_power_law under the hostile battery" * doctest::test_suite("04_complexity/fit_power_law")) {
    // hostile battery: fit_power_law
    hostile::battery(
        "fit_power_law", {"x", "y"},
        [](const std::vector<double>& x, const std::vector<double>& y) {
          const attn::PowerLawFit fit = attn::fit_power_law(x, y);
          return std::vector<double>{fit.exponent, fit.coefficient};
        },
        std::vector<double>{64, 128, 256, 512}, std::vector<double>{1.0, 4.1, 15.9, 64.2})
        .fits([](const std::vector<double>& x, const std::vector<double>& y) {
          bool positive = x.size() == y.size() && x.size() >= 2;
          for (std::size_t i = 0; positive && i < x.size(); ++i) positive = x[i] > 0 && y[i] > 0;
          return positive && std::any_of(x.begin(), x.end(), [&](double v) { return v != x[0]; });
        })
        .answer([](const std::vector<double>& fit, const std::vector<double>&, const std::vector<double>&) {
          return std::isfinite(fit[0]) && std::isfinite(fit[1]);
        })
        .run();
  }

  TEST_CASE("guarded_attention under the hostile battery" * doctest::test_suite("04_complexity/guarded_attention")) {
    // hostile battery: guarded_attention
    attn::Rng rng(4741);
    hostile::battery(
        "guarded_attention", {"Q", "K", "V", "limit_bytes|limit"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, double limit) {
          return attn::guarded_attention(Q, K, V, limit);
        },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(5, 3)), Matrix(rng.normal(5, 2)), 1e9)
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, double limit) {
          // The matrices here hold a few hundred bytes: any limit from 1 MB up lets them through.
          return Q.shape(1) == K.shape(1) && K.shape(0) == V.shape(0) && limit >= 1e6;
        })
        .answer([](const Matrix& O, const Matrix& Q, const Matrix&, const Matrix& V, double) {
          return O.shape(0) == Q.shape(0) && O.shape(1) == V.shape(1);
        })
        .run();
  }
}
