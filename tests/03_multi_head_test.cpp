// Chapter 03's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/03_multi_head_oracle.hpp) or from exact identities, never from the other track.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "02_qkv_trace/qkv_trace.hpp"
#include "03_multi_head/multi_head.hpp"
#include "attn/rng.hpp"
#include "oracle/03_multi_head_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::MultiHeadWeights;
using attn::Tensor3;
using attn::test::to_oracle;
namespace hostile = attn::test::hostile;

// Four chained float32 products (X·W, Q·Kᵀ, A·V, ·W_O) of length d ≤ 48 with entries of size ~1: each
// adds at most d·2^-24 ≈ 3e-6 relative error, the softmax ~n·6e-8; 1e-4 absolute + 1e-4 relative leaves
// a factor of ten of room and still catches a wrong scale (÷√d_model instead of ÷√d_k is off by ≥ 40%).
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-4;

// Weights with entries ~ N(0, 1/d_model): X·W keeps entries of size ~1, so the scores stay moderate.
MultiHeadWeights random_weights(attn::Rng& rng, std::size_t d_model) {
  const float s = 1.0f / std::sqrt(static_cast<float>(d_model));
  return {rng.normal(d_model, d_model, 0.0f, s), rng.normal(d_model, d_model, 0.0f, s),
          rng.normal(d_model, d_model, 0.0f, s), rng.normal(d_model, d_model, 0.0f, s)};
}

attn::oracle::Mat oracle_layer(const Matrix& X, const MultiHeadWeights& W, const std::vector<bool>& keep,
                               const std::vector<bool>* allowed = nullptr) {
  return attn::oracle::multi_head(to_oracle(X), to_oracle(W.W_Q), to_oracle(W.W_K), to_oracle(W.W_V), to_oracle(W.W_O),
                                  keep, allowed);
}

// (n, d_model, h): n = 1, h = 1, h = d_model (d_k = 1), and shapes that are not powers of two.
constexpr std::array<std::array<std::size_t, 3>, 6> kShapes{
    {{1, 4, 2}, {5, 6, 1}, {7, 6, 3}, {9, 12, 4}, {4, 5, 5}, {11, 48, 6}}};

}  // namespace

// The battery's view of the layer's weights: each of the four projections wrong in turn.
template <>
struct attn::test::hostile::Weights<attn::MultiHeadWeights> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::MultiHeadWeights& w, F&& f) {
    f("W_Q", w.W_Q);
    f("W_K", w.W_K);
    f("W_V", w.W_V);
    f("W_O", w.W_O);
  }
};

TEST_SUITE("03_multi_head") {
  TEST_CASE("split_heads gives head i the i-th block of d_k columns of every row" *
            doctest::test_suite("03_multi_head/split_heads")) {
    attn::Rng rng(31);
    const Matrix X = rng.normal(3, 12);  // (n, d_model) = (3, 12)
    const Tensor3 heads = attn::split_heads(X, 4);
    REQUIRE(heads.shape(0) == 4);
    REQUIRE(heads.shape(1) == 3);
    REQUIRE(heads.shape(2) == 3);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t t = 0; t < 3; ++t)
        for (std::size_t c = 0; c < 3; ++c) CHECK(heads(i, t, c) == X(t, i * 3 + c));
  }

  TEST_CASE("merge_heads puts head i's row t in columns i·d_k to (i+1)·d_k - 1 of row t" *
            doctest::test_suite("03_multi_head/merge_heads")) {
    // Checked on its own, not through split_heads: a merge that only undoes a wrong split (both interleaved,
    // or both a plain reshape) passes the round trip below. Entry 100·i + 10·t + c names its head, row, column.
    constexpr std::size_t h = 3, n = 2, d_k = 4;
    Tensor3 heads = xt::zeros<float>({h, n, d_k});  // (h, n, d_k)
    for (std::size_t i = 0; i < h; ++i)
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t c = 0; c < d_k; ++c) heads(i, t, c) = static_cast<float>(100 * i + 10 * t + c);
    const Matrix X = attn::merge_heads(heads);
    REQUIRE(X.shape(0) == n);
    REQUIRE(X.shape(1) == h * d_k);
    std::size_t wrong = 0;  // entries of X that are not where they belong; the first one is reported
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t col = 0; col < h * d_k; ++col) {
        const std::size_t i = col / d_k, c = col % d_k;
        if (X(t, col) == heads(i, t, c)) continue;
        if (wrong++ == 0)
          FAIL_CHECK("X(", t, ", ", col, ") is ", X(t, col), " but should be head ", i, "'s row ", t, ", column ", c,
                     " (", heads(i, t, c), "): head i fills columns [i·d_k, (i+1)·d_k) of every row");
      }
    CHECK(wrong == 0);
  }

  TEST_CASE("merge_heads undoes split_heads exactly, and split_heads undoes merge_heads" *
            doctest::test_suite("03_multi_head/merge_heads")) {
    attn::Rng rng(32);
    for (const auto& [n, d_model, h] : kShapes) {
      CAPTURE(n);
      CAPTURE(h);
      const Matrix X = rng.normal(n, d_model);
      const Matrix round_trip = attn::merge_heads(attn::split_heads(X, h));
      CHECK(round_trip == X);  // only copies: bit-exact
      const Tensor3 heads = attn::split_heads(X, h);
      CHECK(attn::split_heads(attn::merge_heads(heads), h) == heads);
    }
  }

  TEST_CASE("split_heads refuses a d_model that the number of heads does not divide, naming the shape" *
            doctest::test_suite("03_multi_head/split_heads")) {
    const Matrix X = xt::zeros<float>({4, 10});
    CHECK_THROWS_NAMING(attn::split_heads(X, 3), std::invalid_argument, "4", "10");
    CHECK_THROWS_AS(attn::split_heads(X, 0), std::invalid_argument);
  }

  TEST_CASE("with one head and W_O = I, multi_head_attention is chapter 02's attention" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    attn::Rng rng(35);
    const std::size_t n = 7, d_model = 10;
    const Matrix X = rng.normal(n, d_model);
    MultiHeadWeights W = random_weights(rng, d_model);
    W.W_O = xt::eye<float>(d_model);
    const auto Xo = to_oracle(X);
    const auto expected =
        attn::oracle::attention(attn::oracle::matmul(Xo, to_oracle(W.W_Q)), attn::oracle::matmul(Xo, to_oracle(W.W_K)),
                                attn::oracle::matmul(Xo, to_oracle(W.W_V)));
    CHECK_ALLCLOSE(attn::multi_head_attention(X, W, 1), expected, kAtol, kRtol);
  }

  TEST_CASE("multi_head_attention applies one causal mask to every head" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    attn::Rng rng(34);
    const std::size_t n = 6, d_model = 12, h = 3;
    const Matrix X = rng.normal(n, d_model);
    const MultiHeadWeights W = random_weights(rng, d_model);
    const attn::Mask causal = attn::causal_mask(n, n);
    const std::vector<bool> allowed(causal.begin(), causal.end());
    CHECK_ALLCLOSE(attn::multi_head_attention(X, W, h, causal), oracle_layer(X, W, {true, true, true}, &allowed), kAtol,
                   kRtol);
  }

  TEST_CASE("multi_head_attention gives a masked key no weight even when its score dominates the row" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    // Identity weights and h = 2 (d_k = 1): head i's queries and keys are column i of X, and the scores are exact
    // products. In head 0, query 1 sees keys 0 and 1 (scores 10 and 1) but not the future key 2 (score 1000);
    // query 0 sees key 0 (score 100) and not key 2 (score 1e4). A softmax over every score with the masked
    // weights zeroed afterwards leaves nothing for the visible keys.
    const Matrix X = {{10, 1}, {1, 2}, {1000, 3}};  // (n, d_model)
    const Matrix I = xt::eye<float>(2);
    const MultiHeadWeights W{I, I, I, I};
    const attn::Mask causal = attn::causal_mask(3, 3);
    const std::vector<bool> allowed(causal.begin(), causal.end());
    INFO("a masked key must score -inf before the softmax, not lose its weight after it");
    CHECK_ALLCLOSE(attn::multi_head_attention(X, W, 2, causal), oracle_layer(X, W, {true, true}, &allowed), kAtol,
                   kRtol);
  }

  TEST_CASE("multi_head_attention matches the oracle for random shapes and head counts" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    attn::Rng rng(33);
    for (const auto& [n, d_model, h] : kShapes) {
      CAPTURE(n);
      CAPTURE(d_model);
      CAPTURE(h);
      const Matrix X = rng.normal(n, d_model);
      const MultiHeadWeights W = random_weights(rng, d_model);
      CHECK_ALLCLOSE(attn::multi_head_attention(X, W, h), oracle_layer(X, W, std::vector<bool>(h, true)), kAtol, kRtol);
    }
  }

  TEST_CASE("multi_head_attention stays finite and matches the oracle when scores reach 1e4" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    attn::Rng rng(36);
    const std::size_t n = 5, d_model = 8, h = 2;
    const Matrix X = rng.normal(n, d_model);
    MultiHeadWeights W = random_weights(rng, d_model);
    W.W_Q *= 100.0f;  // scores of order 1e2·1e0·... up to ~1e4: softmax must subtract the row max
    W.W_K *= 100.0f;
    const Matrix O = attn::multi_head_attention(X, W, h);
    CHECK(xt::all(xt::isfinite(O)));
    // Near one-hot rows: float32 scores of size 1e4 carry ~1e-3 absolute error, which can move a weight
    // that is not saturated by that much; outputs are then off by ≤ 1e-3·max|V|·|W_O| ≈ 1e-2.
    CHECK_ALLCLOSE(O, oracle_layer(X, W, {true, true}), 1e-2, 1e-3);
  }

  TEST_CASE("multi_head_attention refuses a NaN input instead of spreading it" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    attn::Rng rng(37);
    Matrix X = rng.normal(3, 4);
    X(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(attn::multi_head_attention(X, random_weights(rng, 4), 2), std::invalid_argument);
  }

  TEST_CASE("multi_head_attention refuses d_model % h != 0 and weights of the wrong shape, naming them" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    attn::Rng rng(38);
    const Matrix X = rng.normal(3, 6);
    const MultiHeadWeights W = random_weights(rng, 6);
    CHECK_THROWS_NAMING(attn::multi_head_attention(X, W, 4), std::invalid_argument, "3", "6");
    MultiHeadWeights wrong = W;
    wrong.W_O = xt::zeros<float>({6, 5});
    CHECK_THROWS_NAMING(attn::multi_head_attention(X, wrong, 2), std::invalid_argument, "6", "5");
  }

  TEST_CASE("multi_head_attention_ablated keeping every head is the full layer, removing every head leaves zeros" *
            doctest::test_suite("03_multi_head/multi_head_attention_ablated")) {
    attn::Rng rng(39);
    const Matrix X = rng.normal(6, 12);
    const MultiHeadWeights W = random_weights(rng, 12);
    CHECK_ALLCLOSE(attn::multi_head_attention_ablated(X, W, std::vector<bool>(4, true)),
                   oracle_layer(X, W, std::vector<bool>(4, true)), kAtol, kRtol);
    const Matrix none = attn::multi_head_attention_ablated(X, W, std::vector<bool>(4, false));
    CHECK_ALLCLOSE(none, attn::oracle::Mat(6, 12), 0.0, 0.0);
  }

  TEST_CASE("multi_head_attention_ablated with all heads but one leaves that head alone through its rows of W_O" *
            doctest::test_suite("03_multi_head/multi_head_attention_ablated")) {
    attn::Rng rng(40);
    const std::size_t n = 7, d_model = 15, h = 3, d_k = 5;
    const Matrix X = rng.normal(n, d_model);
    const MultiHeadWeights W = random_weights(rng, d_model);
    const auto Xo = to_oracle(X);
    for (std::size_t i = 0; i < h; ++i) {
      CAPTURE(i);
      std::vector<bool> keep(h, false);
      keep[i] = true;
      const auto head = attn::oracle::head_output(Xo, to_oracle(W.W_Q), to_oracle(W.W_K), to_oracle(W.W_V), h, i);
      const Matrix W_O_i = xt::view(W.W_O, xt::range(i * d_k, (i + 1) * d_k), xt::all());  // (d_k, d_model)
      CHECK_ALLCLOSE(attn::multi_head_attention_ablated(X, W, keep), attn::oracle::matmul(head, to_oracle(W_O_i)),
                     kAtol, kRtol);
    }
  }

  TEST_CASE("multi_head_attention_ablated without some heads matches the oracle layer without them" *
            doctest::test_suite("03_multi_head/multi_head_attention_ablated")) {
    attn::Rng rng(41);
    const Matrix X = rng.normal(3, 8);  // (n, d_model): three tokens, so the rows differ
    const MultiHeadWeights W = random_weights(rng, 8);
    const std::vector<bool> keep{true, false, false, true};
    CHECK_ALLCLOSE(attn::multi_head_attention_ablated(X, W, keep), oracle_layer(X, W, keep), kAtol, kRtol);
  }

  TEST_CASE("multi_head_attention_ablated refuses an empty head mask or one that does not divide d_model" *
            doctest::test_suite("03_multi_head/multi_head_attention_ablated")) {
    attn::Rng rng(42);
    const Matrix X = rng.normal(3, 6);
    const MultiHeadWeights W = random_weights(rng, 6);
    CHECK_THROWS_AS(attn::multi_head_attention_ablated(X, W, {}), std::invalid_argument);
    CHECK_THROWS_NAMING(attn::multi_head_attention_ablated(X, W, std::vector<bool>(4, true)), std::invalid_argument,
                        "3", "6");
  }

  // The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
  // values, each call refused naming what was wrong or answered as the contract says.
  TEST_CASE("split_heads under the hostile battery" * doctest::test_suite("03_multi_head/split_heads")) {
    // hostile battery: split_heads
    attn::Rng rng(4731);
    hostile::battery(
        "split_heads", {"X", "h"}, [](const Matrix& X, std::size_t h) { return attn::split_heads(X, h); },
        Matrix(rng.normal(3, 4)), std::size_t{2})
        .fits([](const Matrix& X, std::size_t h) { return h > 0 && X.shape(1) % h == 0; })
        .answer([](const Tensor3& heads, const Matrix& X, std::size_t h) {
          return heads.shape(0) == h && heads.shape(1) == X.shape(0) && heads.shape(2) == X.shape(1) / h;
        })
        .non_finite_passes("a copy of X's columns: a NaN in X is a NaN in its head")
        .run();
  }

  TEST_CASE("merge_heads under the hostile battery" * doctest::test_suite("03_multi_head/merge_heads")) {
    // hostile battery: merge_heads
    attn::Rng rng(4732);
    hostile::battery(
        "merge_heads", {"heads"}, [](const Tensor3& t) { return attn::merge_heads(t); },
        hostile::filled<Tensor3>({2, 3, 2}))
        .answer([](const Matrix& M, const Tensor3& t) {
          return M.shape(0) == t.shape(1) && M.shape(1) == t.shape(0) * t.shape(2);
        })
        .non_finite_passes("a copy of the heads' columns: a NaN in a head is a NaN in the result")
        .run();
  }

  TEST_CASE("multi_head_attention under the hostile battery" *
            doctest::test_suite("03_multi_head/multi_head_attention")) {
    // hostile battery: multi_head_attention
    attn::Rng rng(4733);
    const MultiHeadWeights W{rng.normal(4, 4), rng.normal(4, 4), rng.normal(4, 4), rng.normal(4, 4)};
    hostile::battery(
        "multi_head_attention", {"X", "W", "h", "mask"},
        [](const Matrix& X, const MultiHeadWeights& w, std::size_t h, const attn::Mask& m) {
          return attn::multi_head_attention(X, w, h, m);
        },
        Matrix(rng.normal(3, 4)), W, std::size_t{2}, attn::Mask(xt::ones<bool>({3, 3})))
        .fits([](const Matrix& X, const MultiHeadWeights& w, std::size_t h, const attn::Mask& m) {
          const auto square = [&](const Matrix& M) { return M.shape(0) == X.shape(1) && M.shape(1) == X.shape(1); };
          return square(w.W_Q) && square(w.W_K) && square(w.W_V) && square(w.W_O) && h > 0 && X.shape(1) % h == 0 &&
                 m.shape(0) == X.shape(0) && m.shape(1) == X.shape(0);
        })
        .answer([](const Matrix& O, const Matrix& X, const MultiHeadWeights&, std::size_t, const attn::Mask&) {
          return O.shape() == X.shape();
        })
        .run();
  }

  TEST_CASE("multi_head_attention_ablated under the hostile battery" *
            doctest::test_suite("03_multi_head/multi_head_attention_ablated")) {
    // hostile battery: multi_head_attention_ablated
    attn::Rng rng(4734);
    const MultiHeadWeights W{rng.normal(4, 4), rng.normal(4, 4), rng.normal(4, 4), rng.normal(4, 4)};
    hostile::battery(
        "multi_head_attention_ablated", {"X", "W", "keep_head"},
        [](const Matrix& X, const MultiHeadWeights& w, const std::vector<bool>& keep) {
          return attn::multi_head_attention_ablated(X, w, keep);
        },
        Matrix(rng.normal(3, 4)), W, std::vector<bool>{true, false})
        .fits([](const Matrix& X, const MultiHeadWeights& w, const std::vector<bool>& keep) {
          const auto square = [&](const Matrix& M) { return M.shape(0) == X.shape(1) && M.shape(1) == X.shape(1); };
          return square(w.W_Q) && square(w.W_K) && square(w.W_V) && square(w.W_O) && !keep.empty() &&
                 X.shape(1) % keep.size() == 0;
        })
        .answer([](const Matrix& O, const Matrix& X, const MultiHeadWeights&, const std::vector<bool>&) {
          return O.shape() == X.shape();
        })
        .run();
  }
}
