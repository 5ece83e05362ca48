// Chapter 02's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle) or closed forms, never from the other track.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/rng.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Mask;
using attn::Matrix;
using attn::oracle::Mat;
using attn::test::to_oracle;
namespace hostile = attn::test::hostile;

constexpr float kInf = std::numeric_limits<float>::infinity();

// --- tolerances, from the arithmetic ---------------------------------------------------------------------
// The inputs are float32 numbers, which the float64 oracle holds exactly, so a track's whole error is its
// own rounding, and float64's (~1e-16) is negligible beside it. With u = 2⁻²⁴ (float32's unit roundoff) and
// γ_k = k·u / (1 − k·u), the classical bounds (Higham, Accuracy and Stability of Numerical Algorithms,
// §3.1) hold for ANY summation order, blocked BLAS and FMA included:
//   dot product of length k:        |fl(a·b) − a·b| ≤ γ_k · Σ_c |a_c b_c|
//   scaled score q·k/√d_k:          one rounding for √d_k, one for 1/√d_k, one for the product: γ_{d_k+3}
//   softmax of a row of n:          exp, the sum of n terms and the division: each weight relatively within
//                                   γ_{n+4}, plus u·a_j·|s_j − m| ≤ u/e absolute from rounding s_j − m;
//                                   scores already wrong by ε shift each weight by a factor in [e^−2ε, e^2ε]
//   output A·V, row i, column c:    Σ_j |Â_ij − A_ij| |V_jc| + γ_{n_kv} Σ_j Â_ij |V_jc|
// Each test below takes its tolerance from these, computed for its own data: as tight as the arithmetic
// allows, so no correct implementation fails and a wrong scale or a lost row does not pass.
constexpr double kU = 0x1p-24;
double gamma(std::size_t k) { return static_cast<double>(k) * kU / (1.0 - static_cast<double>(k) * kU); }

/// max over (i, j) of Σ_c |A(i, c)| |B(j, c)|: what the dot products of A's rows with B's rows can lose.
double max_abs_dot(const Mat& A, const Mat& B) {
  double worst = 0;
  for (std::size_t i = 0; i < A.rows; ++i)
    for (std::size_t j = 0; j < B.rows; ++j) {
      double s = 0;
      for (std::size_t c = 0; c < A.cols; ++c) s += std::fabs(A(i, c) * B(j, c));
      worst = std::max(worst, s);
    }
  return worst;
}

double max_abs(const Mat& M) {
  double worst = 0;
  for (double v : M.v) worst = std::max(worst, std::fabs(v));
  return worst;
}

/// Bound on the absolute error of every entry of project(X, W).
double projection_atol(const Matrix& X, const Matrix& W) {
  return gamma(X.shape(1)) * max_abs_dot(to_oracle(X), attn::oracle::transpose(to_oracle(W)));
}

/// Bound on the absolute error of every entry of scaled_scores(Q, K).
double score_atol(const Matrix& Q, const Matrix& K) {
  const std::size_t d_k = Q.shape(1);
  return gamma(d_k + 3) * max_abs_dot(to_oracle(Q), to_oracle(K)) / std::sqrt(static_cast<double>(d_k));
}

/// Relative error of a softmax weight over \p n entries whose scores are off by at most \p score_error.
double weight_rtol(std::size_t n, double score_error) { return std::expm1(2.0 * score_error) + gamma(n + 4); }
constexpr double kWeightAtol = kU;  // u·x·e^−x ≤ u/e < u: the rounding of s_j − m, however far below m s_j is

/// Bound on the absolute error of every entry of scaled_dot_product_attention(Q, K, V[, mask]).
double attention_atol(const Matrix& Q, const Matrix& K, const Matrix& V) {
  const std::size_t n_kv = K.shape(0);
  const double weights = weight_rtol(n_kv, score_atol(Q, K)) + static_cast<double>(n_kv) * kWeightAtol;
  return max_abs(to_oracle(V)) * (weights + gamma(n_kv));
}

// --- data ------------------------------------------------------------------------------------------------

/// A random mask, each pair allowed with probability \p p, as the track (Mask) and the oracle (vector) see it.
Mask random_mask(attn::Rng& rng, std::size_t n_q, std::size_t n_kv, double p) {
  std::bernoulli_distribution allowed(p);
  Mask m = xt::zeros<bool>({n_q, n_kv});  // (n_q, n_kv)
  for (auto& x : m) x = allowed(rng.engine());
  return m;
}

/// Shapes every product test runs on: 1s, n_q ≠ n_kv both ways, d_k = 1, sizes that are not powers of two.
struct Shape {
  std::size_t n_q, n_kv, d_k, d_v;
};
constexpr std::array<Shape, 9> kShapes{{{1, 1, 1, 1},
                                        {1, 9, 1, 3},
                                        {9, 1, 5, 2},
                                        {3, 10, 8, 12},
                                        {7, 7, 16, 5},
                                        {13, 29, 1, 7},
                                        {17, 17, 64, 33},
                                        {31, 45, 100, 23},
                                        {70, 3, 3, 1}}};

std::string describe(const Shape& s) {
  return fmt::format("n_q = {}, n_kv = {}, d_k = {}, d_v = {}", s.n_q, s.n_kv, s.d_k, s.d_v);
}

/// Σ_j A(i, j) for every row, in float64.
std::vector<double> row_sums(const Matrix& A) {
  std::vector<double> sums(A.shape(0), 0.0);
  for (std::size_t i = 0; i < A.shape(0); ++i)
    for (std::size_t j = 0; j < A.shape(1); ++j) sums[i] += A(i, j);
  return sums;
}

/// CHECKs that every row of \p A sums to one within \p tol, naming the row and its sum when not (a softmax
/// over the wrong axis makes the columns sum to one instead).
void check_rows_sum_to_one(const Matrix& A, double tol) {
  const std::vector<double> sums = row_sums(A);
  for (std::size_t i = 0; i < sums.size(); ++i)
    CHECK_MESSAGE(std::fabs(sums[i] - 1.0) <= tol, "row ", i, " of A sums to ", sums[i], ", not 1 (allowed ", tol, ")");
}

}  // namespace

TEST_SUITE("02_qkv_trace") {
  // --- project -----------------------------------------------------------------------------------------------
  TEST_CASE("project matches the oracle on shapes with 1s and sizes that are not powers of two" *
            doctest::test_suite("02_qkv_trace/project")) {
    attn::Rng rng(21);
    for (auto [n, d_in, d_out] :
         {std::array<std::size_t, 3>{1, 1, 1}, {1, 7, 3}, {5, 7, 3}, {13, 16, 9}, {33, 1, 17}, {31, 100, 63}}) {
      INFO("X is (", n, ", ", d_in, "), W is (", d_in, ", ", d_out, ")");
      const Matrix X = rng.normal(n, d_in), W = rng.normal(d_in, d_out);
      CHECK_ALLCLOSE(attn::project(X, W), attn::oracle::matmul(to_oracle(X), to_oracle(W)), projection_atol(X, W), 0.0);
    }
  }

  TEST_CASE("project of a sequence of zero tokens is a (0, d_out) matrix" *
            doctest::test_suite("02_qkv_trace/project")) {
    const Matrix X = xt::zeros<float>({0, 3}), W = xt::ones<float>({3, 2});
    const Matrix P = attn::project(X, W);
    CHECK(P.shape(0) == 0);
    CHECK(P.shape(1) == 2);
  }

  TEST_CASE("project rejects X and W whose inner sizes differ, naming both shapes" *
            doctest::test_suite("02_qkv_trace/project")) {
    const Matrix X = xt::zeros<float>({4, 3}), W = xt::zeros<float>({5, 2});
    CHECK_THROWS_NAMING(attn::project(X, W), std::invalid_argument, "4", "3", "5", "2");
  }

  // --- scaled_scores -----------------------------------------------------------------------------------------
  TEST_CASE("scaled_scores of rows of 1s and 3s against keys of 1s and 2s is sqrt(d_k) times 1, 2, 3 and 6" *
            doctest::test_suite("02_qkv_trace/scaled_scores")) {
    // The scale is 1/sqrt(d_k), not 1/d_k; scores that differ, so equal ones (per row or column) do not pass.
    for (std::size_t d_k : {1u, 2u, 3u, 64u, 1000u}) {
      INFO("d_k = ", d_k);
      Matrix Q = xt::ones<float>({std::size_t{2}, d_k});  // (2, d_k)
      Matrix K = xt::ones<float>({std::size_t{2}, d_k});  // (2, d_k)
      xt::row(Q, 1) *= 3.0f;
      xt::row(K, 1) *= 2.0f;
      Mat expected(2, 2, std::sqrt(static_cast<double>(d_k)));
      for (std::size_t e = 0; e < 4; ++e) expected.v[e] *= std::array<double, 4>{1, 2, 3, 6}[e];
      // The sums of d_k small integers are exact; only the scale and the product with it round: 3u relative.
      CHECK_ALLCLOSE(attn::scaled_scores(Q, K), expected, 0.0, 3 * kU);
    }
  }

  TEST_CASE("scaled_scores is Q Kᵀ / sqrt(d_k) on every shape, n_q != n_kv and d_k = 1 included" *
            doctest::test_suite("02_qkv_trace/scaled_scores")) {
    attn::Rng rng(22);
    for (const Shape& s : kShapes) {
      INFO(describe(s));
      const Matrix Q = rng.normal(s.n_q, s.d_k), K = rng.normal(s.n_kv, s.d_k);
      Mat expected = attn::oracle::matmul(to_oracle(Q), attn::oracle::transpose(to_oracle(K)));
      for (double& v : expected.v) v /= std::sqrt(static_cast<double>(s.d_k));
      CHECK_ALLCLOSE(attn::scaled_scores(Q, K), expected, score_atol(Q, K), 0.0);
    }
  }

  TEST_CASE("scaled_scores rejects Q and K with different d_k, naming both shapes" *
            doctest::test_suite("02_qkv_trace/scaled_scores")) {
    const Matrix Q = xt::zeros<float>({2, 3}), K = xt::zeros<float>({5, 4});
    CHECK_THROWS_NAMING(attn::scaled_scores(Q, K), std::invalid_argument, "2", "3", "5", "4");
  }

  // --- softmax_rows --------------------------------------------------------------------------------------------
  TEST_CASE("softmax_rows matches the oracle row by row, even with logits at ±1e4" *
            doctest::test_suite("02_qkv_trace/softmax_rows")) {
    attn::Rng rng(23);
    Matrix S = rng.normal(6, 11, 0.0f, 3.0f);  // (6, 11)
    S(2, 3) = 1.0e4f;                          // exp(1e4) overflows: only the max-subtracted form survives
    S(4, 0) = -1.0e4f;
    S(5, 1) = 1.0e4f;
    S(5, 7) = -1.0e4f;
    const Matrix A = attn::softmax_rows(S);
    Mat expected(6, 11);
    for (std::size_t i = 0; i < 6; ++i) {
      const auto p = attn::oracle::softmax(to_oracle(S).row(i));
      std::copy(p.begin(), p.end(), expected.v.begin() + static_cast<std::ptrdiff_t>(i * 11));
    }
    // The scores are exact inputs here (ε = 0): only the softmax's own rounding.
    CHECK_ALLCLOSE(A, expected, kWeightAtol, weight_rtol(11, 0.0));
  }

  TEST_CASE("softmax_rows keeps float32's precision on a row of 2^20 scores: the row's length costs nothing" *
            doctest::test_suite("02_qkv_trace/softmax_rows")) {
    attn::Rng rng(29);
    const std::size_t n = 1 << 20;
    const Matrix S = rng.normal(1, n);  // (1, n)
    const Matrix A = attn::softmax_rows(S);
    Mat expected(1, n);
    expected.v = attn::oracle::softmax(to_oracle(S).row(0));
    // Summed in double, the n terms lose n·2^-53 = 2^-33 relative: nothing at float's scale. What is left is
    // relative to each weight: rounding s_j − m (u·|s_j − m|), the exp (≤ 1 ulp, 2u), the rounding of the sum or
    // of its inverse (u) and the division (u): γ_6 + u·max|s_j − m|, about 16u here. A float running sum of
    // 2^20 terms may be n·u off, and every weight with it: 63u for these scores.
    const double spread = static_cast<double>(xt::amax(S)() - xt::amin(S)());
    INFO("sum the row in double (or pairwise): a float running sum of 2^20 terms loses digits");
    CHECK_ALLCLOSE(A, expected, 0.0, gamma(std::size_t{6}) + kU * spread);
  }

  TEST_CASE("softmax_rows gives non-negative rows that sum to one, for scores of any spread" *
            doctest::test_suite("02_qkv_trace/softmax_rows")) {
    attn::Rng rng(26);
    for (auto [rows, cols] : {std::array<std::size_t, 2>{1, 1}, {3, 17}, {5, 1000}})
      for (float spread : {0.01f, 1.0f, 100.0f, 1.0e4f}) {
        INFO("S is (", rows, ", ", cols, "), entries ~ N(0, ", spread, "²)");
        const Matrix S = rng.normal(rows, cols, 0.0f, spread);  // (rows, cols)
        const Matrix A = attn::softmax_rows(S);
        CHECK(xt::amin(A)() >= 0.0f);
        for (std::size_t i = 0; i < rows && cols > 1; ++i) {  // order kept: uniform weights do not pass
          const xt::xtensor<std::size_t, 0> hi = xt::argmax(xt::row(S, i)), lo = xt::argmin(xt::row(S, i));
          CHECK_MESSAGE(A(i, hi()) > A(i, lo()), "row ", i, ": the largest score's weight ", A(i, hi()),
                        " is not above the smallest's ", A(i, lo()));
        }
        // Each weight is within (γ_{n+4}) a_j + u of the truth, which sums to 1: the sum is within γ_{n+4} + n·u.
        check_rows_sum_to_one(A, weight_rtol(cols, 0.0) + double(cols) * kU);
      }
  }

  TEST_CASE("softmax_rows gives masked entries weight zero and a fully masked row zeros, never NaN" *
            doctest::test_suite("02_qkv_trace/softmax_rows")) {
    const Matrix S = {{-kInf, -kInf, -kInf}, {0.0f, -kInf, 0.0f}, {-kInf, -5.0e3f, -kInf}};
    Mat expected(3, 3);
    expected.v = {0, 0, 0, 0.5, 0, 0.5, 0, 1, 0};  // exact: equal logits halve, a lone logit takes all
    CHECK_ALLCLOSE(attn::softmax_rows(S), expected, 0.0, 0.0);
  }

  TEST_CASE("softmax_rows keeps empty shapes: no rows, or rows of no entries" *
            doctest::test_suite("02_qkv_trace/softmax_rows")) {
    const Matrix none = attn::softmax_rows(xt::zeros<float>({0, 4}));
    CHECK(none.shape(0) == 0);
    CHECK(none.shape(1) == 4);
    const Matrix empty_rows = attn::softmax_rows(xt::zeros<float>({3, 0}));
    CHECK(empty_rows.shape(0) == 3);
    CHECK(empty_rows.shape(1) == 0);
  }

  TEST_CASE("softmax_rows rejects NaN and +inf, naming the position" *
            doctest::test_suite("02_qkv_trace/softmax_rows")) {
    Matrix S = xt::zeros<float>({2, 2});
    S(1, 0) = std::numeric_limits<float>::quiet_NaN();
    // The contract asks for the position, in no particular form: a flat index ([2]), a row and column, or
    // the index within the row (chapter 01's stable_softmax says [0]) all name it. Only the type is checked
    // here; in row 0, where every form gives 1, the number too.
    CHECK_THROWS_AS(attn::softmax_rows(S), std::invalid_argument);
    S(1, 0) = 0.0f;
    S(0, 1) = kInf;
    CHECK_THROWS_NAMING(attn::softmax_rows(S), std::invalid_argument, "1");
  }

  // --- causal_mask ------------------------------------------------------------------------------------------
  TEST_CASE("causal_mask lets query i see keys j <= i, aligned to the end when n_q < n_kv" *
            doctest::test_suite("02_qkv_trace/causal_mask")) {
    const Mask square = attn::causal_mask(3, 3);
    const Mask expected_square = {{true, false, false}, {true, true, false}, {true, true, true}};
    CHECK(square == expected_square);
    const Mask tail = attn::causal_mask(2, 4);
    const Mask expected_tail = {{true, true, true, false}, {true, true, true, true}};
    CHECK(tail == expected_tail);
    const Mask one_step = attn::causal_mask(1, 5);  // a decoding step sees the whole cache and itself
    CHECK(one_step == Mask(xt::ones<bool>({1, 5})));
  }

  TEST_CASE("causal_mask is j <= i + (n_kv - n_q) for every shape up to 7 by 7, empty ones included" *
            doctest::test_suite("02_qkv_trace/causal_mask")) {
    for (std::size_t n_kv = 0; n_kv <= 7; ++n_kv)
      for (std::size_t n_q = 0; n_q <= n_kv; ++n_q) {
        INFO("n_q = ", n_q, ", n_kv = ", n_kv);
        const Mask m = attn::causal_mask(n_q, n_kv);
        REQUIRE(m.shape(0) == n_q);
        REQUIRE(m.shape(1) == n_kv);
        for (std::size_t i = 0; i < n_q; ++i)
          for (std::size_t j = 0; j < n_kv; ++j) CHECK(m(i, j) == (j <= i + (n_kv - n_q)));
      }
  }

  TEST_CASE("causal_mask refuses more queries than keys, naming both counts" *
            doctest::test_suite("02_qkv_trace/causal_mask")) {
    CHECK_THROWS_NAMING(attn::causal_mask(5, 4), std::invalid_argument, "5", "4");
  }

  // --- scaled_dot_product_attention -----------------------------------------------------------------------
  TEST_CASE("with V = I, scaled_dot_product_attention returns its weights: each row sums to one" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(29);
    for (const Shape& s : kShapes) {
      INFO(describe(s));
      const Matrix Q = rng.normal(s.n_q, s.d_k), K = rng.normal(s.n_kv, s.d_k);
      const Matrix I = xt::eye<float>(s.n_kv);                       // (n_kv, n_kv)
      const Matrix A = attn::scaled_dot_product_attention(Q, K, I);  // (n_q, n_kv): A·I = A, exactly
      const double rtol = weight_rtol(s.n_kv, score_atol(Q, K));
      CHECK_ALLCLOSE(A, attn::oracle::attention_matrix(to_oracle(Q), to_oracle(K)), kWeightAtol, rtol);
      check_rows_sum_to_one(A, rtol + double(s.n_kv) * kWeightAtol);
    }
  }

  TEST_CASE("scaled_dot_product_attention with scores near ±1e4 stays finite and matches the oracle" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    // d_k = 1: the scores are q·k exactly, 1e4 apart; exp(1e4) overflows float32 unless the max is subtracted.
    const Matrix Q = {{100.0f}, {-100.0f}};                        // (2, 1)
    const Matrix K = {{100.0f}, {-100.0f}, {99.99f}};              // (3, 1) scores ±1e4, 9999
    const Matrix V = {{1.0f, 0.0f}, {0.0f, 1.0f}, {0.5f, 0.5f}};   // (3, 2)
    const Matrix O = attn::scaled_dot_product_attention(Q, K, V);  // (2, 2)
    CHECK(std::isfinite(O(0, 0)));
    CHECK_ALLCLOSE(O, attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)), attention_atol(Q, K, V), 0.0);
  }

  TEST_CASE("scaled_dot_product_attention gives a query with no allowed key a zero output row" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(25);
    const Matrix Q = rng.normal(3, 4), K = rng.normal(5, 4), V = rng.normal(5, 2);
    Mask mask = xt::ones<bool>({3, 5});
    xt::row(mask, 1) = false;
    const Matrix O = attn::scaled_dot_product_attention(Q, K, V, mask);
    CHECK(O(1, 0) == 0.0f);
    CHECK(O(1, 1) == 0.0f);
    const std::vector<bool> allowed = to_oracle(mask);
    CHECK_ALLCLOSE(O, attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed),
                   attention_atol(Q, K, V), 0.0);
  }

  TEST_CASE("scaled_dot_product_attention matches the oracle on every shape, with and without a causal mask" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(24);
    for (const Shape& s : kShapes) {
      INFO(describe(s));
      const Matrix Q = rng.normal(s.n_q, s.d_k), K = rng.normal(s.n_kv, s.d_k), V = rng.normal(s.n_kv, s.d_v);
      const Mat q = to_oracle(Q), k = to_oracle(K), v = to_oracle(V);
      const double atol = attention_atol(Q, K, V);
      CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V), attn::oracle::attention(q, k, v), atol, 0.0);
      if (s.n_q > s.n_kv) continue;  // a causal mask needs a key for every query's own position
      const Mask causal = attn::causal_mask(s.n_q, s.n_kv);
      const std::vector<bool> allowed = to_oracle(causal);
      CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V, causal), attn::oracle::attention(q, k, v, &allowed),
                     atol, 0.0);
    }
  }

  TEST_CASE("scaled_dot_product_attention matches the oracle under every one of the 2^6 masks of a 2 x 3 problem" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(27);
    for (auto [n_q, n_kv] : {std::array<std::size_t, 2>{2, 3}, {3, 2}}) {
      const Matrix Q = rng.normal(n_q, 4), K = rng.normal(n_kv, 4), V = rng.normal(n_kv, 3);
      const double atol = attention_atol(Q, K, V);
      for (unsigned bits = 0; bits < (1u << (n_q * n_kv)); ++bits) {
        INFO("n_q = ", n_q, ", n_kv = ", n_kv, ", mask bits ", bits);
        Mask mask = xt::zeros<bool>({n_q, n_kv});  // (n_q, n_kv)
        for (std::size_t b = 0; b < mask.size(); ++b) mask.data()[b] = ((bits >> b) & 1u) != 0;
        const std::vector<bool> allowed = to_oracle(mask);
        CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V, mask),
                       attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed), atol, 0.0);
      }
    }
  }

  TEST_CASE("scaled_dot_product_attention gives a masked key no weight even when its score dominates the row" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    // d_k = 1: the scores are 1e4, 10 and 0, exact in float32, and the mask hides the first key. The weights are
    // the softmax of (10, 0) alone; a softmax over every score with the masked weights zeroed afterwards leaves
    // exp(10 - 1e4) = 0 for the allowed keys (a row of zeros, or 0/0).
    const Matrix Q = {{10.0f}, {10.0f}};                           // (n_q, d_k)
    const Matrix K = {{1000.0f}, {1.0f}, {0.0f}};                  // (n_kv, d_k)
    const Matrix V = {{-5.0f, 5.0f}, {1.0f, 2.0f}, {3.0f, 4.0f}};  // (n_kv, d_v)
    const Mask mask = {{false, true, true}, {false, true, true}};  // (n_q, n_kv)
    const std::vector<bool> allowed = to_oracle(mask);
    INFO("a masked key must score -inf before the softmax, not lose its weight after it");
    CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V, mask),
                   attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed), attention_atol(Q, K, V),
                   0.0);
  }

  TEST_CASE("scaled_dot_product_attention matches the oracle under random masks with fully masked rows" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(28);
    for (double density : {0.05, 0.3, 0.9}) {
      INFO("density ", density);
      const Matrix Q = rng.normal(13, 6), K = rng.normal(29, 6), V = rng.normal(29, 5);
      Mask mask = random_mask(rng, 13, 29, density);
      xt::row(mask, 4) = false;  // at least one query with nothing to look at
      const std::vector<bool> allowed = to_oracle(mask);
      CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q, K, V, mask),
                     attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed),
                     attention_atol(Q, K, V), 0.0);
    }
  }

  TEST_CASE("scaled_dot_product_attention gives convex combinations of V's rows, the best key's row when it dominates" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(30);
    // V's entries lie near 3, far from 0, so a zero output is outside their range.
    const Matrix Q = rng.normal(11, 7, 0.0f, 3.0f), K = rng.normal(19, 7, 0.0f, 3.0f), V = rng.normal(19, 6, 3.0f);
    const Matrix O = attn::scaled_dot_product_attention(Q, K, V);  // (11, 6)
    const double atol = attention_atol(Q, K, V);
    for (std::size_t c = 0; c < V.shape(1); ++c) {
      const double lo = xt::amin(xt::col(V, c))(), hi = xt::amax(xt::col(V, c))();
      for (std::size_t i = 0; i < O.shape(0); ++i) {
        CHECK(O(i, c) >= lo - atol);
        CHECK(O(i, c) <= hi + atol);
      }
    }
    // Query i matches key i with score 40/√3 ≈ 23 and the others with 0: their weights are e^-23 ≈ 1e-10, so
    // row i of the output is V's row i to float32 rounding (uniform weights would give the mean row).
    const Matrix Q3 = 40.0f * xt::eye<float>(3), K3 = xt::eye<float>(3);  // (3, 3)
    const Matrix V3 = rng.normal(3, 4, 3.0f);                             // (3, 4)
    CHECK_ALLCLOSE(attn::scaled_dot_product_attention(Q3, K3, V3), to_oracle(V3), 0.0, 1e-6);
  }

  TEST_CASE("scaled_dot_product_attention over zero keys gives zero rows, and zero queries no rows" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(31);
    const Matrix Q = rng.normal(3, 4), K = xt::zeros<float>({0, 4}), V = xt::zeros<float>({0, 2});
    const Matrix O = attn::scaled_dot_product_attention(Q, K, V);
    REQUIRE(O.shape(0) == 3);
    REQUIRE(O.shape(1) == 2);
    CHECK(xt::amax(xt::abs(O))() == 0.0f);
    const Matrix none =
        attn::scaled_dot_product_attention(xt::zeros<float>({0, 4}), rng.normal(5, 4), rng.normal(5, 2));
    CHECK(none.shape(0) == 0);
    CHECK(none.shape(1) == 2);
  }

  TEST_CASE("scaled_dot_product_attention rejects a NaN in Q, as softmax_rows documents" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(32);
    Matrix Q = rng.normal(2, 3);
    Q(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(attn::scaled_dot_product_attention(Q, rng.normal(4, 3), rng.normal(4, 2)), std::invalid_argument);
  }

  TEST_CASE("scaled_dot_product_attention rejects shapes that do not fit, naming both of them" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    const Matrix Q = xt::zeros<float>({2, 4}), K = xt::zeros<float>({3, 4}), V = xt::zeros<float>({4, 2});
    SUBCASE("K and V with different numbers of rows") {
      CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(Q, K, V), std::invalid_argument, "3", "4", "2");
    }
    const Matrix V3 = xt::zeros<float>({3, 2});
    SUBCASE("Q and K with different d_k") {
      const Matrix Q5 = xt::zeros<float>({2, 5});
      CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(Q5, K, V3), std::invalid_argument, "2", "5", "3", "4");
    }
    SUBCASE("a mask that is not (n_q, n_kv)") {
      const Mask wrong = xt::ones<bool>({3, 3});
      CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(Q, K, V3, wrong), std::invalid_argument, "3", "2", "4");
    }
  }

  TEST_CASE("scaled_dot_product_attention refuses a mask with one dimension 0 instead of taking it for no mask" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    const Matrix Q = xt::ones<float>({3, 2}), K = xt::ones<float>({3, 2}), V = xt::ones<float>({3, 2});
    for (const auto& shape : {std::array<std::size_t, 2>{0, 3}, {3, 0}}) {
      const Mask empty_but_shaped = xt::zeros<bool>(shape);
      CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(Q, K, V, empty_but_shaped), std::invalid_argument,
                          std::to_string(shape[0]).c_str(), std::to_string(shape[1]).c_str());
    }
    CHECK_NOTHROW(attn::scaled_dot_product_attention(Q, K, V, Mask()));  // (0, 0) is "no mask"
  }

  TEST_CASE("scaled_dot_product_attention refuses NaN or Inf in Q, K or V, naming it, and scores that would overflow" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    attn::Rng rng(29);
    const Matrix Q = rng.normal(3, 2), K = rng.normal(4, 2), V = rng.normal(4, 2);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      Matrix v = V;  // a bad value: it never reaches a score, so only the input check can catch it
      v(3, 1) = bad;
      CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(Q, K, v), std::invalid_argument, "V", "7");
      Matrix k = K;
      k(1, 0) = bad;
      CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(Q, k, V), std::invalid_argument, "K", "2");
    }
    // q = 1e20, k = -1e20: every score overflows to -inf, which must not pass for "masked" (a row of zeros).
    const Matrix huge = xt::ones<float>({3, 2}) * 1e20f, minus_huge = xt::ones<float>({4, 2}) * -1e20f;
    CHECK_THROWS_NAMING(attn::scaled_dot_product_attention(huge, minus_huge, V), std::invalid_argument, "overflow");
  }

  // The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
  // values, each call refused naming what was wrong or answered as the contract says.
  TEST_CASE("project under the hostile battery" * doctest::test_suite("02_qkv_trace/project")) {
    // hostile battery: project
    attn::Rng rng(4721);
    hostile::battery(
        "project", {"X", "W"}, [](const Matrix& X, const Matrix& W) { return attn::project(X, W); },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(3, 2)))
        .fits([](const Matrix& X, const Matrix& W) { return X.shape(1) == W.shape(0); })
        .answer([](const Matrix& P, const Matrix& X, const Matrix& W) {
          return P.shape(0) == X.shape(0) && P.shape(1) == W.shape(1) &&
                 (X.shape(1) > 0 || xt::all(xt::equal(P, 0.0f)));
        })
        .non_finite_passes("a projection promises no check of its entries: NaN or ±inf in X or W flows to the result")
        .run();
  }

  TEST_CASE("scaled_scores under the hostile battery" * doctest::test_suite("02_qkv_trace/scaled_scores")) {
    // hostile battery: scaled_scores
    attn::Rng rng(4722);
    hostile::battery(
        "scaled_scores", {"Q", "K"}, [](const Matrix& Q, const Matrix& K) { return attn::scaled_scores(Q, K); },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(5, 3)))
        .fits([](const Matrix& Q, const Matrix& K) { return Q.shape(1) == K.shape(1); })
        .answer([](const Matrix& S, const Matrix& Q, const Matrix& K) {
          return S.shape(0) == Q.shape(0) && S.shape(1) == K.shape(0) &&
                 (Q.shape(1) > 0 || xt::all(xt::equal(S, 0.0f)));
        })
        .non_finite_passes("the scores promise no check of their inputs: a NaN in Q or K is a NaN in its scores")
        .run();
  }

  TEST_CASE("softmax_rows under the hostile battery" * doctest::test_suite("02_qkv_trace/softmax_rows")) {
    // hostile battery: softmax_rows
    attn::Rng rng(4723);
    hostile::battery(
        "softmax_rows", {"S"}, [](const Matrix& S) { return attn::softmax_rows(S); }, Matrix(rng.normal(3, 4)))
        .answer([](const Matrix& A, const Matrix& S) {
          bool rows = A.shape() == S.shape();
          for (std::size_t i = 0; rows && i < A.shape(0); ++i)
            rows = A.shape(1) == 0 || std::abs(xt::sum<double>(xt::row(A, i))() - 1.0) < 1e-5;
          return rows;
        })
        .exempt("with -inf", "-inf is a masked score: weight 0, answered")
        .run();
  }

  TEST_CASE("causal_mask under the hostile battery" * doctest::test_suite("02_qkv_trace/causal_mask")) {
    // hostile battery: causal_mask
    hostile::battery(
        "causal_mask", {"n_q", "n_kv"}, [](std::size_t n_q, std::size_t n_kv) { return attn::causal_mask(n_q, n_kv); },
        std::size_t{3}, std::size_t{5})
        .fits([](std::size_t n_q, std::size_t n_kv) { return n_q <= n_kv && n_kv <= 5; })
        .answer([](const Mask& m, std::size_t n_q, std::size_t n_kv) {
          bool ok = m.shape(0) == n_q && m.shape(1) == n_kv;
          for (std::size_t i = 0; ok && i < n_q; ++i)
            for (std::size_t j = 0; j < n_kv; ++j) ok = ok && m(i, j) == (j <= i + (n_kv - n_q));
          return ok;
        })
        .exempt("n_kv = 2^32", "a 4 GiB mask fits the memory available, its contract's limit, past the battery's 4 GiB")
        .run();
  }

  TEST_CASE("scaled_dot_product_attention under the hostile battery" *
            doctest::test_suite("02_qkv_trace/scaled_dot_product_attention")) {
    // hostile battery: scaled_dot_product_attention
    attn::Rng rng(4724);
    Mask mask = xt::ones<bool>({4, 5});
    mask(0, 4) = false;
    hostile::battery(
        "scaled_dot_product_attention", {"Q", "K", "V", "mask"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& m) {
          return attn::scaled_dot_product_attention(Q, K, V, m);
        },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(5, 3)), Matrix(rng.normal(5, 2)), mask)
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& m) {
          return K.shape(1) == Q.shape(1) && V.shape(0) == K.shape(0) && m.shape(0) == Q.shape(0) &&
                 m.shape(1) == K.shape(0);
        })
        .answer([](const Matrix& O, const Matrix& Q, const Matrix&, const Matrix& V, const Mask&) {
          return O.shape(0) == Q.shape(0) && O.shape(1) == V.shape(1);
        })
        .run();
  }
}
