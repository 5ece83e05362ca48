// Chapter 02's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle) or closed forms, never from the other track.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/rng.hpp"
#include "support/allclose.hpp"

namespace {

using attn::Mask;
using attn::Matrix;
using attn::test::to_oracle;

// Float32 against float64 for products of N(0,1) entries: a dot product of length d has rounding error
// below d·2^-24·Σ|q_c k_c| ≈ d·6e-8·d (loose bound); for d ≤ 64 and entries of size ~1 this stays under
// 1e-4 relative to the row's scale, so atol 1e-4 with rtol 1e-4 covers products and softmax (which adds
// ~n·6e-8 relative).
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-4;

std::vector<bool> to_allowed(const Mask& m) { return std::vector<bool>(m.begin(), m.end()); }

}  // namespace

TEST_SUITE("02_qkv_trace") {
  TEST_CASE("project matches the oracle on odd shapes") {
    attn::Rng rng(21);
    for (auto [n, d_in, d_out] : {std::array<std::size_t, 3>{1, 1, 1}, {5, 7, 3}, {13, 16, 9}}) {
      const Matrix X = rng.normal(n, d_in), W = rng.normal(d_in, d_out);
      CHECK_ALLCLOSE(attn::project(X, W), attn::oracle::matmul(to_oracle(X), to_oracle(W)), kAtol, kRtol);
    }
  }

  TEST_CASE("project rejects X and W whose inner sizes differ, naming both shapes") {
    const Matrix X = xt::zeros<float>({4, 3}), W = xt::zeros<float>({5, 2});
    CHECK_THROWS_WITH_AS(attn::project(X, W), doctest::Contains("(4, 3)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::project(X, W), doctest::Contains("(5, 2)"), std::invalid_argument);
  }

  TEST_CASE("scaled_scores is Q Kᵀ / sqrt(d_k), also when n_q != n_kv") {
    attn::Rng rng(22);
    for (auto [n_q, n_kv, d_k] : {std::array<std::size_t, 3>{1, 1, 1}, {3, 8, 5}, {9, 2, 64}}) {
      const Matrix Q = rng.normal(n_q, d_k), K = rng.normal(n_kv, d_k);
      auto expected = attn::oracle::matmul(to_oracle(Q), attn::oracle::transpose(to_oracle(K)));
      for (double& s : expected.v) s /= std::sqrt(static_cast<double>(d_k));
      CHECK_ALLCLOSE(attn::scaled_scores(Q, K), expected, kAtol, kRtol);
    }
  }

  TEST_CASE("scaled_scores rejects Q and K with different d_k, naming both shapes") {
    const Matrix Q = xt::zeros<float>({2, 3}), K = xt::zeros<float>({2, 4});
    CHECK_THROWS_WITH_AS(attn::scaled_scores(Q, K), doctest::Contains("(2, 4)"), std::invalid_argument);
  }

  TEST_CASE("softmax_rows: every row sums to one and matches the oracle, even at ±1e4") {
    attn::Rng rng(23);
    Matrix S = rng.normal(6, 11, 0.0f, 3.0f);  // (6, 11)
    S(2, 3) = 1.0e4f;
    S(4, 0) = -1.0e4f;
    const Matrix A = attn::softmax_rows(S);
    attn::oracle::Mat expected(6, 11);
    for (std::size_t i = 0; i < 6; ++i) {
      const auto p = attn::oracle::softmax(to_oracle(S).row(i));
      std::copy(p.begin(), p.end(), expected.v.begin() + static_cast<std::ptrdiff_t>(i * 11));
    }
    CHECK_ALLCLOSE(A, expected, 1e-7, 1e-5);
  }

  TEST_CASE("softmax_rows gives a fully masked row zeros and masked entries zero weight") {
    constexpr float inf = std::numeric_limits<float>::infinity();
    const Matrix S = {{-inf, -inf, -inf}, {0.0f, -inf, 0.0f}};
    const std::vector<double> expected{0, 0, 0, 0.5, 0, 0.5};
    attn::oracle::Mat e(2, 3);
    e.v = expected;
    CHECK_ALLCLOSE(attn::softmax_rows(S), e, 0.0, 0.0);
  }

  TEST_CASE("softmax_rows rejects NaN, naming its position") {
    Matrix S = xt::zeros<float>({2, 2});
    S(1, 0) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(attn::softmax_rows(S), doctest::Contains("[2]"), std::invalid_argument);
  }

  TEST_CASE("causal_mask lets query i see keys j <= i, aligned to the end when n_q < n_kv") {
    const Mask square = attn::causal_mask(3, 3);
    const Mask expected_square = {{true, false, false}, {true, true, false}, {true, true, true}};
    CHECK(square == expected_square);
    const Mask tail = attn::causal_mask(2, 4);
    const Mask expected_tail = {{true, true, true, false}, {true, true, true, true}};
    CHECK(tail == expected_tail);
    CHECK(attn::causal_mask(0, 0).size() == 0);
    CHECK_THROWS_AS(attn::causal_mask(5, 4), std::invalid_argument);
  }

  TEST_CASE("scaled_dot_product_attention matches the oracle, with and without a causal mask") {
    attn::Rng rng(24);
    for (auto [n_q, n_kv, d_k, d_v] :
         {std::array<std::size_t, 4>{1, 1, 1, 1}, {7, 7, 16, 5}, {3, 10, 8, 12}, {17, 17, 64, 33}}) {
      const Matrix Q = rng.normal(n_q, d_k), K = rng.normal(n_kv, d_k), V = rng.normal(n_kv, d_v);
      CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V),
                     attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)), kAtol, kRtol);
      const Mask causal = attn::causal_mask(n_q, n_kv);
      const std::vector<bool> allowed = to_allowed(causal);
      CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V, causal),
                     attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed), kAtol, kRtol);
    }
  }

  TEST_CASE("scaled_dot_product_attention gives a query with no allowed key a zero output row") {
    attn::Rng rng(25);
    const Matrix Q = rng.normal(3, 4), K = rng.normal(5, 4), V = rng.normal(5, 2);
    Mask mask = xt::ones<bool>({3, 5});
    xt::row(mask, 1) = false;
    const Matrix O = attn::scaled_dot_product_attention(Q, K, V, mask);
    CHECK(O(1, 0) == 0.0f);
    CHECK(O(1, 1) == 0.0f);
    CHECK(std::isfinite(O(0, 0)));
  }

  TEST_CASE("scaled_dot_product_attention rejects shapes that do not fit, naming them") {
    const Matrix Q = xt::zeros<float>({2, 4}), K = xt::zeros<float>({3, 4}), V = xt::zeros<float>({4, 2});
    CHECK_THROWS_WITH_AS(attn::scaled_dot_product_attention(Q, K, V), doctest::Contains("(4, 2)"),
                         std::invalid_argument);
    const Matrix V3 = xt::zeros<float>({3, 2});
    const Mask wrong = xt::ones<bool>({3, 3});
    CHECK_THROWS_WITH_AS(attn::scaled_dot_product_attention(Q, K, V3, wrong), doctest::Contains("(3, 3)"),
                         std::invalid_argument);
  }
}
