// Chapter 10's tests, run against both tracks. Expected gradients come from the float64 oracle
// (tests/oracle/10_backward_oracle.hpp): the chain rule written out entry by entry, and central differences
// of the loss, which need no calculus at all. Nothing is compared with the other track, nothing is timed.
//
// Tolerance: a float32 gradient entry is a chain of float32 products and sums (S, P, dP, dS, then dQ, dK or
// dV), each a sum over at most n_q + n_kv + d_k + d_v terms. Each sum of m terms carries a relative
// rounding error up to m·2^-24 of its largest partial sums (the γ_m bound), and the chain has about eight
// such steps; so |g32 − g64| ≤ 8·m·2^-24·G with G the size of the gradient's entries (at least 1, the size of
// the inputs). A missing 1/√d_k, a missing D or a transposed product is off by O(G), thousands of times more.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/heap_counter.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "10_backward/backward.hpp"
#include "10_backward/backward_fast.hpp"
#include "attn/rng.hpp"
#include "oracle/05_flash_cpu_oracle.hpp"
#include "oracle/10_backward_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::AttentionGrads;
using attn::Mask;
using attn::Matrix;
using attn::Vector;
using attn::test::to_oracle;
namespace oracle = attn::oracle;
namespace hostile = attn::test::hostile;

constexpr float kInf = std::numeric_limits<float>::infinity();

double largest(const oracle::Grads& g) {
  double m = 1.0;  // the inputs are of size ~1: never ask for more than float32 can give at that size
  for (const oracle::Mat* x : {&g.dQ, &g.dK, &g.dV})
    for (double v : x->v) m = std::max(m, std::fabs(v));
  return m;
}

/// The rounding bound of the header comment, for gradients of size largest(expected).
double gradient_tolerance(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v,
                          const oracle::Grads& expected) {
  return 8.0 * static_cast<double>(n_q + n_kv + d_k + d_v) * std::ldexp(1.0, -24) * largest(expected);
}

void check_grads(const AttentionGrads& actual, const oracle::Grads& expected, double tol) {
  INFO("dQ = ∂L/∂Q (are both 1/√d_k factors there? is D = rowsum(dO∘O) subtracted?)");
  CHECK_ALLCLOSE(actual.dQ, expected.dQ, tol, 0.0);
  INFO("dK = ∂L/∂K = dSᵀ Q / √d_k (a transposed product: rows of dK are keys)");
  CHECK_ALLCLOSE(actual.dK, expected.dK, tol, 0.0);
  INFO("dV = ∂L/∂V = Pᵀ dO (rows of dV are keys; masked pairs add nothing)");
  CHECK_ALLCLOSE(actual.dV, expected.dV, tol, 0.0);
}

struct Inputs {
  Matrix Q, K, V, dO;  // (n_q, d_k), (n_kv, d_k), (n_kv, d_v), (n_q, d_v)
};

Inputs random_inputs(attn::Rng& rng, std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v,
                     float q_std = 1.0f) {
  return {rng.normal(n_q, d_k, 0.0f, q_std), rng.normal(n_kv, d_k), rng.normal(n_kv, d_v), rng.normal(n_q, d_v)};
}

oracle::Grads oracle_grads(const Inputs& in, const std::vector<bool>* allowed) {
  return oracle::attention_gradients(to_oracle(in.Q), to_oracle(in.K), to_oracle(in.V), to_oracle(in.dO), allowed);
}

struct Shape {
  std::size_t n_q, n_kv, d_k, d_v, B_r, B_c;
};

// n = 1, d = 1, ragged sizes (7, 33, 130: multiples of no tile), tiles larger than n, n_q ≠ n_kv.
const std::vector<Shape> kShapes = {
    {1, 1, 1, 1, 1, 1},         {1, 1, 8, 8, 4, 4},      {7, 7, 1, 3, 3, 2},
    {7, 7, 16, 5, 4, 4},        {33, 33, 32, 32, 8, 16}, {20, 45, 16, 8, 7, 11},
    {130, 130, 64, 64, 32, 48}, {50, 50, 8, 8, 64, 64},  {3, 10, 8, 12, 2, 3},
};

/// Queries that each meet one dominant key: K = a·Q for unit rows q_i, with a chosen so that query i's score for key i
/// is at least 50 above its score for any other key (e^-50 ≈ 2e-22: the other weights vanish beside 1 in float32). Q
/// and K are random, so the scores round; V and dO are small nonzero integers, so every product and sum of them (dP =
/// dO Vᵀ, D = rowsum(dO ∘ O) with O = V) is exact and the only rounding left is the scores'. Then P_ii = exp(s_ii −
/// lse_i) = exp(0) = 1 exactly, dV = dO exactly and dS_ii = 0 exactly, provided the backward recomputes s_ii with the
/// very bits the forward computed it with.
Inputs dominant_key_inputs(attn::Rng& rng, std::size_t n, std::size_t d_k, std::size_t d_v) {
  Matrix Q = rng.normal(n, d_k);  // (n, d_k), rows scaled to length 1: q_i·q_i > q_i·q_j for every j ≠ i
  for (std::size_t i = 0; i < n; ++i) {
    auto q = xt::row(Q, i);
    q /= std::sqrt(static_cast<float>(xt::sum(q * q)()));
  }
  double smallest_gap = std::numeric_limits<double>::infinity();  // of q_i·q_i − q_i·q_j, before the factor a
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      if (j != i) {
        double gap = 0.0;
        for (std::size_t c = 0; c < d_k; ++c) gap += static_cast<double>(Q(i, c)) * (Q(i, c) - Q(j, c));
        smallest_gap = std::min(smallest_gap, gap);
      }
  REQUIRE(smallest_gap > 0.0);
  const float a = static_cast<float>(60.0 * std::sqrt(static_cast<double>(d_k)) / smallest_gap);  // gap ≥ 60 exactly
  const auto integers = [&](std::size_t rows, std::size_t cols) {
    Matrix m = xt::floor(rng.uniform(rows, cols, 1.0f, 5.0f));  // (rows, cols) in {1, 2, 3, 4}
    const Matrix sign = rng.uniform(rows, cols);                // (rows, cols)
    return Matrix(xt::where(sign < 0.5f, -m, m));
  };
  return {Q, Matrix(a * Q), integers(n, d_v), integers(n, d_v)};
}

}  // namespace

TEST_SUITE("10_backward") {
  TEST_CASE("softmax_backward is the Jacobian diag(p) − ppᵀ applied to the incoming gradient" *
            doctest::test_suite("10_backward/softmax_backward")) {
    attn::Rng rng(100);
    const Matrix S = rng.normal(5, 9, 0.0f, 2.0f), dP = rng.normal(5, 9);  // (5, 9) each
    Matrix P = Matrix::from_shape({5, 9});                                 // (5, 9)
    oracle::Mat expected(5, 9);
    for (std::size_t r = 0; r < 5; ++r) {
      const std::vector<double> p = oracle::softmax(to_oracle(Matrix(xt::view(S, xt::range(r, r + 1), xt::all()))).v);
      for (std::size_t c = 0; c < 9; ++c) P(r, c) = static_cast<float>(p[c]);
      // The Jacobian itself, J_ck = p_c (δ_ck − p_k), formed here only to check the product without it.
      for (std::size_t c = 0; c < 9; ++c)
        for (std::size_t k = 0; k < 9; ++k)
          expected(r, c) += p[c] * ((c == k ? 1.0 : 0.0) - p[k]) * static_cast<double>(dP(r, k));
    }
    // Each entry is p_c (g_c − Σ p_k g_k): 9 products of size ≤ 3, rounding ≲ 9·2^-24·3 ≈ 2e-6.
    INFO("ds_j = p_j (g_j − Σ_k g_k p_k): does the result still contain the subtraction of the weighted mean?");
    CHECK_ALLCLOSE(attn::softmax_backward(P, dP), expected, 2e-6, 0.0);
  }

  TEST_CASE("softmax_backward gives masked entries and fully masked rows zero, and rejects mismatched shapes" *
            doctest::test_suite("10_backward/softmax_backward")) {
    Matrix P = {{0.5f, 0.0f, 0.5f}, {0.0f, 0.0f, 0.0f}};         // (2, 3): key 1 masked in row 0, row 1 fully masked
    const Matrix dP = {{1.0f, 7.0f, 3.0f}, {2.0f, 4.0f, 8.0f}};  // (2, 3)
    const Matrix dS = attn::softmax_backward(P, dP);
    // Row 0: Σ p g = 2, so ds = (0.5·(1 − 2), 0, 0.5·(3 − 2)) = (−0.5, 0, 0.5), exact in float32.
    CHECK(dS == Matrix{{-0.5f, 0.0f, 0.5f}, {0.0f, 0.0f, 0.0f}});
    CHECK_THROWS_NAMING(attn::softmax_backward(P, xt::zeros<float>({2, 4})), std::invalid_argument, "2", "4");
  }

  TEST_CASE("softmax_backward gives 0 where p = 0 even for an infinite dP, and refuses NaN, or infinity where p > 0" *
            doctest::test_suite("10_backward/softmax_backward")) {
    const Matrix P{{0.5f, 0.5f, 0.0f}, {0.0f, 0.0f, 0.0f}};  // (2, 3): a row with a masked key, a fully masked row
    // Closed form: row 0 has Σ p·g = 0.5·1 + 0.5·3 = 2, so ds = 0.5·(1 − 2), 0.5·(3 − 2), 0 (exact in float32).
    const Matrix dS = attn::softmax_backward(P, Matrix{{1.0f, 3.0f, kInf}, {-kInf, kInf, 2.0f}});
    CHECK(dS == Matrix{{-0.5f, 0.5f, 0.0f}, {0.0f, 0.0f, 0.0f}});
    const float nan = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::softmax_backward(P, Matrix{{1.0f, 3.0f, nan}, {0.0f, 0.0f, 0.0f}}), std::invalid_argument,
                        "dP", "2", "nan");
    CHECK_THROWS_NAMING(attn::softmax_backward(P, Matrix{{1.0f, kInf, 0.0f}, {0.0f, 0.0f, 0.0f}}),
                        std::invalid_argument, "dP", "1", "inf");
    CHECK_THROWS_NAMING(attn::softmax_backward(Matrix{{0.5f, nan, 0.0f}, {0.0f, 0.0f, 0.0f}}, xt::zeros<float>({2, 3})),
                        std::invalid_argument, "P", "1", "nan");
  }

  TEST_CASE(
      "attention_backward refuses NaN or infinite inputs, scores that could overflow, and (n_q, n_kv) "
      "matrices that cannot fit in memory, before allocating them" *
      doctest::test_suite("10_backward/attention_backward")) {
    attn::Rng rng(120);
    const Inputs in = random_inputs(rng, 4, 5, 3, 2);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}) {
      CAPTURE(bad);
      Inputs broken = in;
      broken.Q(1, 2) = bad;
      CHECK_THROWS_NAMING(attn::attention_backward(broken.Q, in.K, in.V, in.dO), std::invalid_argument, "Q", "5");
      broken = in;
      broken.V(4, 1) = bad;
      CHECK_THROWS_NAMING(attn::attention_backward(in.Q, in.K, broken.V, in.dO), std::invalid_argument, "V", "9");
      broken = in;
      broken.dO(3, 0) = bad;
      CHECK_THROWS_NAMING(attn::attention_backward(in.Q, in.K, in.V, broken.dO), std::invalid_argument, "dO", "6");
    }
    Inputs huge = in;
    huge.K(0, 0) = 3e38f;  // finite, but d_k · max|q| · 3e38 is past the overflow bound (attn/checks.hpp)
    CHECK_THROWS_NAMING(attn::attention_backward(in.Q, huge.K, in.V, in.dO), std::invalid_argument, "d_k");
    // 100,000 queries and keys: S, P, dP and dS would be 160 GB.
    const Matrix long_column = xt::zeros<float>({100000, 1});
    CHECK_THROWS_NAMING(attn::attention_backward(long_column, long_column, long_column, long_column),
                        std::invalid_argument, "available");
  }

  TEST_CASE("attention_backward agrees with float64 central differences of the loss" *
            doctest::test_suite("10_backward/attention_backward")) {
    attn::Rng rng(101);
    for (const Shape& s : {Shape{1, 1, 1, 1, 0, 0}, Shape{3, 5, 4, 2, 0, 0}, Shape{6, 6, 8, 8, 0, 0}})
      for (const bool causal : {false, true}) {
        CAPTURE(s.n_q);
        CAPTURE(s.n_kv);
        CAPTURE(causal);
        const Inputs in = random_inputs(rng, s.n_q, s.n_kv, s.d_k, s.d_v);
        const std::vector<bool> allowed = oracle::causal_allowed(s.n_q, s.n_kv);
        const std::vector<bool>* mask = causal ? &allowed : nullptr;
        const oracle::Grads numeric = oracle::finite_difference_gradients(to_oracle(in.Q), to_oracle(in.K),
                                                                          to_oracle(in.V), to_oracle(in.dO), mask);
        // The oracle's chain rule and the differences agree to the differences' own error (~1e-9, see the oracle).
        const oracle::Grads analytic = oracle_grads(in, mask);
        for (std::size_t e = 0; e < numeric.dQ.v.size(); ++e)
          CHECK(std::fabs(numeric.dQ.v[e] - analytic.dQ.v[e]) < 1e-7);
        for (std::size_t e = 0; e < numeric.dK.v.size(); ++e)
          CHECK(std::fabs(numeric.dK.v[e] - analytic.dK.v[e]) < 1e-7);
        const AttentionGrads g =
            attn::attention_backward(in.Q, in.K, in.V, in.dO, causal ? attn::causal_mask(s.n_q, s.n_kv) : Mask());
        check_grads(g, numeric, gradient_tolerance(s.n_q, s.n_kv, s.d_k, s.d_v, numeric));
      }
  }

  TEST_CASE("attention_backward matches the float64 chain rule on ragged shapes, causal or not, n_q ≠ n_kv" *
            doctest::test_suite("10_backward/attention_backward")) {
    attn::Rng rng(102);
    for (const Shape& s : kShapes)
      for (const bool causal : {false, true}) {
        CAPTURE(s.n_q);
        CAPTURE(s.n_kv);
        CAPTURE(s.d_k);
        CAPTURE(causal);
        const Inputs in = random_inputs(rng, s.n_q, s.n_kv, s.d_k, s.d_v);
        const std::vector<bool> allowed = oracle::causal_allowed(s.n_q, s.n_kv);
        const oracle::Grads expected = oracle_grads(in, causal ? &allowed : nullptr);
        const AttentionGrads g =
            attn::attention_backward(in.Q, in.K, in.V, in.dO, causal ? attn::causal_mask(s.n_q, s.n_kv) : Mask());
        check_grads(g, expected, gradient_tolerance(s.n_q, s.n_kv, s.d_k, s.d_v, expected));
      }
  }

  TEST_CASE("attention_backward gives a fully masked row zero gradient and no NaN anywhere" *
            doctest::test_suite("10_backward/attention_backward")) {
    attn::Rng rng(103);
    const Inputs in = random_inputs(rng, 4, 6, 8, 3);
    Mask mask = xt::ones<bool>({4, 6});
    xt::row(mask, 2) = false;  // query 2 may attend to nothing: its output is 0 whatever Q, K, V are
    mask(0, 5) = false;
    const std::vector<bool> allowed = to_oracle(mask);
    const oracle::Grads expected = oracle_grads(in, &allowed);
    const AttentionGrads g = attn::attention_backward(in.Q, in.K, in.V, in.dO, mask);
    CHECK(xt::all(xt::isfinite(g.dQ)));
    CHECK(xt::all(xt::isfinite(g.dK)));
    CHECK(xt::all(xt::isfinite(g.dV)));
    CHECK(xt::all(xt::equal(xt::row(g.dQ, 2), 0.0f)));
    check_grads(g, expected, gradient_tolerance(4, 6, 8, 3, expected));
  }

  TEST_CASE("attention_backward stays finite and right with logits of size 1e4" *
            doctest::test_suite("10_backward/attention_backward")) {
    attn::Rng rng(104);
    const Inputs in = random_inputs(rng, 9, 11, 4, 3, 2000.0f);  // |s| ~ 1e4: every row of P is nearly one-hot
    for (const bool causal : {false, true}) {
      const std::vector<bool> allowed = oracle::causal_allowed(9, 11);
      const oracle::Grads expected = oracle_grads(in, causal ? &allowed : nullptr);
      const AttentionGrads g =
          attn::attention_backward(in.Q, in.K, in.V, in.dO, causal ? attn::causal_mask(9, 11) : Mask());
      CHECK(xt::all(xt::isfinite(g.dQ)));
      CHECK(xt::all(xt::isfinite(g.dK)));
      // With scores ~1e4, a float32 score is off by ~1e4·2^-24·d_k ≈ 2e-3, which moves a weight e^{-Δ} of a
      // near-tie by the same relative amount: the bound above grows by that factor (times |K| ~ 3).
      check_grads(g, expected, gradient_tolerance(9, 11, 4, 3, expected) + 1e-2 * largest(expected));
    }
  }

  TEST_CASE("attention_backward rejects inputs whose shapes do not fit, naming them" *
            doctest::test_suite("10_backward/attention_backward")) {
    const Matrix Q = xt::zeros<float>({4, 3}), K = xt::zeros<float>({5, 3}), V = xt::zeros<float>({5, 2}),
                 dO = xt::zeros<float>({4, 2});
    CHECK_THROWS_NAMING(attn::attention_backward(Q, xt::zeros<float>({5, 2}), V, dO), std::invalid_argument, "5", "2");
    CHECK_THROWS_NAMING(attn::attention_backward(Q, K, V, xt::zeros<float>({4, 3})), std::invalid_argument, "4", "3");
    CHECK_THROWS_NAMING(attn::attention_backward(Q, K, xt::zeros<float>({6, 2}), dO), std::invalid_argument, "6", "2");
    CHECK_THROWS_NAMING(attn::attention_backward(Q, K, V, dO, xt::ones<bool>({4, 4})), std::invalid_argument, "4");
  }

  TEST_CASE("flash_backward_tile over every tile adds up to the full gradients, using D instead of a row sum" *
            doctest::test_suite("10_backward/flash_backward_tile")) {
    attn::Rng rng(105);
    const std::size_t n_q = 10, n_kv = 13, d_k = 8, d_v = 5;
    const Inputs in = random_inputs(rng, n_q, n_kv, d_k, d_v);
    const oracle::Mat O = oracle::attention(to_oracle(in.Q), to_oracle(in.K), to_oracle(in.V));
    const std::vector<double> lse64 = oracle::log_sum_exp_rows(to_oracle(in.Q), to_oracle(in.K));
    Vector lse = Vector::from_shape({n_q}), D = xt::zeros<float>({n_q});  // (n_q) each, from float64
    for (std::size_t r = 0; r < n_q; ++r) {
      lse(r) = static_cast<float>(lse64[r]);
      double d = 0.0;
      for (std::size_t c = 0; c < d_v; ++c) d += static_cast<double>(in.dO(r, c)) * O(r, c);
      D(r) = static_cast<float>(d);
    }
    AttentionGrads g{xt::zeros<float>({n_q, d_k}), xt::zeros<float>({n_kv, d_k}), xt::zeros<float>({n_kv, d_v})};
    const auto rows = [](const auto& m, std::size_t b, std::size_t e) { return xt::view(m, xt::range(b, e)); };
    for (std::size_t r0 = 0; r0 < n_q; r0 += 4)       // tiles of 4 × 5: several key tiles per row, so a row sum
      for (std::size_t c0 = 0; c0 < n_kv; c0 += 5) {  // over one tile is not rowsum(dP ∘ P)
        const std::size_t r1 = std::min(n_q, r0 + 4), c1 = std::min(n_kv, c0 + 5);
        Matrix dQ_i = rows(g.dQ, r0, r1), dK_j = rows(g.dK, c0, c1), dV_j = rows(g.dV, c0, c1);
        attn::flash_backward_tile(rows(in.Q, r0, r1), rows(in.K, c0, c1), rows(in.V, c0, c1), rows(in.dO, r0, r1),
                                  rows(lse, r0, r1), rows(D, r0, r1), dQ_i, dK_j, dV_j);
        xt::view(g.dQ, xt::range(r0, r1)) = dQ_i;
        xt::view(g.dK, xt::range(c0, c1)) = dK_j;
        xt::view(g.dV, xt::range(c0, c1)) = dV_j;
      }
    const oracle::Grads expected = oracle_grads(in, nullptr);
    check_grads(g, expected, gradient_tolerance(n_q, n_kv, d_k, d_v, expected));
  }

  TEST_CASE("flash_backward_tile gives a row whose log-sum-exp is -inf zero gradient even where no mask hides it" *
            doctest::test_suite("10_backward/flash_backward_tile")) {
    // The forward saw no key for row 0 (lse = -inf), but this tile has no mask: exp(s − lse) = exp(+inf)
    // would make its P infinite and every gradient it touches NaN. Its P is zero: the row adds nothing.
    attn::Rng rng(107);
    const Inputs in = random_inputs(rng, 2, 3, 4, 2);
    const Vector lse = {-kInf, 0.5f}, D = {1.0f, 2.0f};
    Matrix dQ = xt::zeros<float>({2, 4}), dK = xt::zeros<float>({3, 4}), dV = xt::zeros<float>({3, 2});
    attn::flash_backward_tile(in.Q, in.K, in.V, in.dO, lse, D, dQ, dK, dV);
    INFO("P(r, c) = exp(s − lse_r) is 0 when lse_r is -inf (the row saw no key), with or without a mask");
    CHECK(xt::all(xt::isfinite(dQ)));
    CHECK(xt::all(xt::isfinite(dK)));
    CHECK(xt::all(xt::isfinite(dV)));
    CHECK(xt::all(xt::equal(xt::row(dQ, 0), 0.0f)));
    // Row 1 alone: dV = Pᵀ·dO over row 1, p_c = exp(s_1c − 0.5) (rounding of exp and s: ~1e-6 relative), taken no
    // higher than 1 (a probability: 0.5 is no log-sum-exp of these scores, backward.hpp).
    oracle::Mat dV_row1(3, 2);
    for (std::size_t c = 0; c < 3; ++c) {
      double s = 0.0;
      for (std::size_t k = 0; k < 4; ++k) s += static_cast<double>(in.Q(1, k)) * in.K(c, k);
      const double p = std::min(1.0, std::exp(s / 2.0 - 0.5));  // √d_k = 2
      for (std::size_t j = 0; j < 2; ++j) dV_row1(c, j) = p * in.dO(1, j);
    }
    CHECK_ALLCLOSE(dV, dV_row1, 1e-5, 1e-5);
  }

  TEST_CASE("flash_backward_tile ignores masked pairs and rows without keys, and changes nothing on bad shapes" *
            doctest::test_suite("10_backward/flash_backward_tile")) {
    attn::Rng rng(106);
    const Inputs in = random_inputs(rng, 3, 4, 6, 2);
    const Vector lse = {-kInf, 0.5f, 0.25f}, D = {1.0f, 2.0f, 3.0f};  // row 0 saw no key in the forward
    Mask allowed = xt::zeros<bool>({3, 4});  // row 1 sees nothing in this tile, row 2 only key 3
    allowed(2, 3) = true;
    Matrix dQ = xt::zeros<float>({3, 6}), dK = xt::zeros<float>({4, 6}), dV = xt::zeros<float>({4, 2});
    attn::flash_backward_tile(in.Q, in.K, in.V, in.dO, lse, D, dQ, dK, dV, allowed);
    CHECK(xt::all(xt::isfinite(dQ)));
    CHECK(xt::all(xt::equal(xt::view(dQ, xt::range(0, 2)), 0.0f)));
    CHECK(xt::all(xt::equal(xt::view(dK, xt::range(0, 3)), 0.0f)));
    CHECK(xt::all(xt::equal(xt::view(dV, xt::range(0, 3)), 0.0f)));
    // Key 3 and row 2 alone: p = exp(s − lse), dV_3 = p·dO_2 (one product, rounding of exp and s ~1e-6).
    double s = 0.0;
    for (std::size_t c = 0; c < 6; ++c) s += static_cast<double>(in.Q(2, c)) * in.K(3, c);
    const double p = std::exp(s / std::sqrt(6.0) - 0.25);
    oracle::Mat dV_3(1, 2);
    for (std::size_t c = 0; c < 2; ++c) dV_3(0, c) = p * in.dO(2, c);
    CHECK_ALLCLOSE(Matrix(xt::view(dV, xt::range(3, 4))), dV_3, 1e-5, 1e-5);
    const Matrix dQ_before = dQ, dK_before = dK, dV_before = dV;
    CHECK_THROWS_NAMING(attn::flash_backward_tile(in.Q, in.K, in.V, in.dO, lse, D, dQ, dK, dV, xt::ones<bool>({3, 3})),
                        std::invalid_argument, "3");
    CHECK_THROWS_AS(attn::flash_backward_tile(in.Q, in.K, in.V, in.dO, lse, D, dQ, dK, dK),  // dV_j of the wrong width
                    std::invalid_argument);
    CHECK(dQ == dQ_before);
    CHECK(dK == dK_before);
    CHECK(dV == dV_before);
  }

  TEST_CASE("flash_backward_tile and flash_backward refuse NaN in lse, O or D and +inf in lse, changing nothing" *
            doctest::test_suite("10_backward/flash_backward")) {
    attn::Rng rng(121);
    const Inputs in = random_inputs(rng, 3, 4, 6, 2);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Matrix dQ = xt::zeros<float>({3, 6}), dK = xt::zeros<float>({4, 6}), dV = xt::zeros<float>({4, 2});
    const Vector lse{0.5f, -kInf, 0.25f}, D{0.1f, 0.2f, 0.3f};  // -inf: a row that saw no key, allowed
    for (const float bad : {nan, kInf}) {
      CAPTURE(bad);
      CHECK_THROWS_NAMING(attn::flash_backward_tile(in.Q, in.K, in.V, in.dO, Vector{0.5f, bad, 0.25f}, D, dQ, dK, dV),
                          std::invalid_argument, "lse_i", "1");
      CHECK_THROWS_NAMING(attn::flash_backward_tile(in.Q, in.K, in.V, in.dO, lse, Vector{0.1f, 0.2f, bad}, dQ, dK, dV),
                          std::invalid_argument, "D_i", "2");
    }
    CHECK(xt::all(xt::equal(dQ, 0.0f)));
    CHECK(xt::all(xt::equal(dK, 0.0f)));
    CHECK(xt::all(xt::equal(dV, 0.0f)));
    const attn::FlashOutput f = attn::flash_attention(in.Q, in.K, in.V, false, 2, 2);
    Matrix O = f.O;
    O(2, 1) = nan;
    CHECK_THROWS_NAMING(attn::flash_backward(in.Q, in.K, in.V, O, f.lse, in.dO, false, 2, 2), std::invalid_argument,
                        "O", "5");
    for (const float bad : {nan, kInf}) {
      Vector bad_lse = f.lse;
      bad_lse(0) = bad;
      CHECK_THROWS_NAMING(attn::flash_backward(in.Q, in.K, in.V, f.O, bad_lse, in.dO, false, 2, 2),
                          std::invalid_argument, "lse", "0");
    }
  }

  TEST_CASE("flash_backward equals the float64 chain rule for any tiles, causal or not, from chapter 05's forward" *
            doctest::test_suite("10_backward/flash_backward")) {
    attn::Rng rng(107);
    for (const Shape& s : kShapes)
      for (const bool causal : {false, true}) {
        CAPTURE(s.n_q);
        CAPTURE(s.n_kv);
        CAPTURE(s.B_r);
        CAPTURE(s.B_c);
        CAPTURE(causal);
        const Inputs in = random_inputs(rng, s.n_q, s.n_kv, s.d_k, s.d_v);
        const attn::FlashOutput fwd = attn::flash_attention(in.Q, in.K, in.V, causal, s.B_r, s.B_c);  // O, lse
        const std::vector<bool> allowed = oracle::causal_allowed(s.n_q, s.n_kv);
        const oracle::Grads expected = oracle_grads(in, causal ? &allowed : nullptr);
        const AttentionGrads g = attn::flash_backward(in.Q, in.K, in.V, fwd.O, fwd.lse, in.dO, causal, s.B_r, s.B_c);
        check_grads(g, expected, gradient_tolerance(s.n_q, s.n_kv, s.d_k, s.d_v, expected));
      }
  }

  TEST_CASE("flash_backward stays finite and right with logits of size 1e4, causal or not" *
            doctest::test_suite("10_backward/flash_backward")) {
    attn::Rng rng(110);
    const Inputs in = random_inputs(rng, 9, 11, 4, 3, 2000.0f);  // |s| ~ 1e4: nearly one-hot rows of P
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      const attn::FlashOutput fwd = attn::flash_attention(in.Q, in.K, in.V, causal, 4, 5);
      const std::vector<bool> allowed = oracle::causal_allowed(9, 11);
      const oracle::Grads expected = oracle_grads(in, causal ? &allowed : nullptr);
      const AttentionGrads g = attn::flash_backward(in.Q, in.K, in.V, fwd.O, fwd.lse, in.dO, causal, 4, 5);
      CHECK(xt::all(xt::isfinite(g.dQ)));
      CHECK(xt::all(xt::isfinite(g.dK)));
      CHECK(xt::all(xt::isfinite(g.dV)));
      // As for attention_backward above: a float32 score ~1e4 is off by ~2e-3, and so is exp(s − lse).
      check_grads(g, expected, gradient_tolerance(9, 11, 4, 3, expected) + 1e-2 * largest(expected));
    }
  }

  TEST_CASE(
      "flash_backward recomputes the forward's scores bit for bit: with one dominant key per query, dV is exactly dO "
      "and dQ, dK vanish" *
      doctest::test_suite("10_backward/flash_backward")) {
    attn::Rng rng(111);
    const std::size_t n = 7, d_v = 8;
    for (const std::size_t d_k : {6, 16, 64}) {  // d_k = 64: OpenBLAS's sums round differently for other shapes
      const Inputs in = dominant_key_inputs(rng, n, d_k, d_v);
      const oracle::Grads expected = oracle_grads(in, nullptr);
      double size = 0.0;  // of the exact dQ and dK: every term has a weight e^-50 or smaller (dS_ii is exactly 0)
      for (const oracle::Mat* x : {&expected.dQ, &expected.dK})
        for (double v : x->v) size = std::max(size, std::fabs(v));
      REQUIRE(size < 1e-18);
      // The forward's tiles, as the contract asks: short tiles at the ends, tiles the diagonal crosses.
      for (const auto& [B_r, B_c] : {std::array<std::size_t, 2>{2, 3}, {4, 4}, {3, 5}, {5, 2}, {1, 7}, {7, 1}})
        for (const bool causal : {false, true}) {
          CAPTURE(d_k);
          CAPTURE(B_r);
          CAPTURE(B_c);
          CAPTURE(causal);
          const attn::FlashOutput fwd = attn::flash_attention(in.Q, in.K, in.V, causal, B_r, B_c);
          REQUIRE(fwd.O == in.V);  // the forward: each output is its dominant key's value, exactly
          const AttentionGrads g = attn::flash_backward(in.Q, in.K, in.V, fwd.O, fwd.lse, in.dO, causal, B_r, B_c);
          INFO(
              "P_ii = exp(s_ii − lse_i) must be exp(0) = 1: compute s_ii with the forward's products, in tiles of "
              "the forward's shapes (a tile the diagonal crosses is not cut), 1/√d_k applied as it did");
          CHECK(g.dV == in.dO);
          // Exactly, dQ and dK are below 1e-18; a float32 entry above 1e-12 is the rounding of a term of size 1.
          CHECK(static_cast<double>(xt::amax(xt::abs(g.dK))()) < 1e-12);
          CHECK(static_cast<double>(xt::amax(xt::abs(g.dQ))()) < 1e-12);
        }
    }
  }

  TEST_CASE("flash_backward holds nothing n×n: its heap peak is the gradients plus a few tiles" *
            doctest::test_suite("10_backward/flash_backward")) {
    const std::size_t n = 512, d = 8, B = 32;
    attn::Rng rng(108);
    const Inputs in = random_inputs(rng, n, n, d, d);
    const attn::FlashOutput fwd = attn::flash_attention(in.Q, in.K, in.V, true, B, B);
    AttentionGrads g;
    const std::size_t heap = attn::ch04::measure_heap_peak(
        [&] { g = attn::flash_backward(in.Q, in.K, in.V, fwd.O, fwd.lse, in.dO, true, B, B); });
    const std::size_t gradients = 3 * n * d * sizeof(float), score_matrix = n * n * sizeof(float);
    // The gradients, D, and room for sixteen tile-sized temporaries (P, dS, K_j, dQ_i ... as copies): ~210 KB.
    const std::size_t allowed = gradients + 16 * sizeof(float) * (B * B + 2 * B * 2 * d + n);
    CAPTURE(heap);
    CAPTURE(allowed);
    CAPTURE(score_matrix);
    INFO("flash_backward may not allocate anything (n_q, n_kv): recompute P tile by tile from lse");
    CHECK(heap <= allowed);
    CHECK(allowed < score_matrix / 4);  // the bound itself is far below one n×n matrix (1 MiB)
    CHECK(heap >= gradients);           // and it really measured the gradients being allocated
  }

  TEST_CASE("flash_backward gives queries without keys zero gradients, and rejects bad input naming it" *
            doctest::test_suite("10_backward/flash_backward")) {
    const Matrix Q = xt::ones<float>({3, 4}), none_k = xt::zeros<float>({0, 4}), none_v = xt::zeros<float>({0, 2});
    const Matrix O = xt::zeros<float>({3, 2}), dO = xt::ones<float>({3, 2});
    const Vector lse = {-kInf, -kInf, -kInf};
    const AttentionGrads g = attn::flash_backward(Q, none_k, none_v, O, lse, dO, false, 2, 2);
    CHECK(g.dQ == Matrix(xt::zeros<float>({3, 4})));
    CHECK(g.dK.shape(0) == 0);
    const Matrix K = xt::zeros<float>({5, 4}), V = xt::zeros<float>({5, 2});
    const Vector lse5 = xt::zeros<float>({3});
    CHECK_THROWS_NAMING(attn::flash_backward(Q, K, V, O, lse5, xt::zeros<float>({3, 3}), false, 2, 2),
                        std::invalid_argument, "3");
    CHECK_THROWS_NAMING(attn::flash_backward(Q, K, V, O, xt::zeros<float>({4}), dO, false, 2, 2), std::invalid_argument,
                        "4");
    CHECK_THROWS_AS(attn::flash_backward(Q, K, V, O, lse5, dO, false, 0, 2), std::invalid_argument);
    CHECK_THROWS_AS(attn::flash_backward(Q, K, V, O, lse5, dO, false, 2, 0), std::invalid_argument);
    CHECK_THROWS_AS(attn::flash_backward(K, Q, xt::zeros<float>({3, 2}), xt::zeros<float>({5, 2}),
                                         xt::zeros<float>({5}), xt::zeros<float>({5, 2}), true, 2, 2),
                    std::invalid_argument);
    Matrix bad = dO;
    bad(1, 1) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::flash_backward(Q, K, V, O, lse5, bad, false, 2, 2), std::invalid_argument, "nan");
  }

  TEST_CASE(
      "the fast backward matches flash_backward's float64 oracle head by head, with the same bits on 1, 2 or 3 "
      "threads" *
      doctest::test_suite("10_backward/flash_backward")) {
    attn::Rng rng(109);
    const std::size_t h = 3, n_q = 100, n_kv = 131, d = 32, d_v = 24;  // d_v ≠ d_k: Kᵀ and Vᵀ have their own widths
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      attn::Tensor3 Q = xt::zeros<float>({h, n_q, d}), K = xt::zeros<float>({h, n_kv, d}),
                    V = xt::zeros<float>({h, n_kv, d_v}), dO = xt::zeros<float>({h, n_q, d_v});
      for (std::size_t k = 0; k < h; ++k) {
        xt::view(Q, k) = rng.normal(n_q, d);
        xt::view(K, k) = rng.normal(n_kv, d);
        xt::view(V, k) = rng.normal(n_kv, d_v);
        xt::view(dO, k) = rng.normal(n_q, d_v);
      }
      attn::Tensor3 O = xt::zeros<float>({h, n_q, d_v});
      Matrix lse = xt::zeros<float>({h, n_q});
      for (std::size_t k = 0; k < h; ++k) {
        const attn::FlashOutput f =
            attn::flash_attention(xt::view(Q, k), xt::view(K, k), xt::view(V, k), causal, 16, 16);
        xt::view(O, k) = f.O;
        xt::view(lse, k) = f.lse;
      }
      // B_c = 24 is no whole number of key panels: the OpenBLAS path. B_c = 32 is (16 or 32 keys a panel): the
      // micro-kernel path, S from K packed and dP from V packed, d_v ≠ d_k included.
      const attn::ch10::BackwardConfig one{16, 24, 2, 1}, two{16, 24, 2, 2}, three{16, 24, 2, 3}, panels{16, 32, 2, 2};
      const attn::ch10::HeadsGrads g1 = attn::ch10::flash_backward_fast(Q, K, V, O, lse, dO, causal, one);
      const attn::ch10::HeadsGrads g2 = attn::ch10::flash_backward_fast(Q, K, V, O, lse, dO, causal, two);
      const attn::ch10::HeadsGrads g3 = attn::ch10::flash_backward_fast(Q, K, V, O, lse, dO, causal, three);
      CHECK(g1.dQ == g2.dQ);  // bit for bit: the lanes fix the order of every addition
      CHECK(g1.dK == g2.dK);
      CHECK(g1.dV == g2.dV);
      CHECK(g1.dQ == g3.dQ);
      CHECK(g1.dK == g3.dK);
      CHECK(g1.dV == g3.dV);
      const attn::ch10::HeadsGrads gp = attn::ch10::flash_backward_fast(Q, K, V, O, lse, dO, causal, panels);
      for (std::size_t k = 0; k < h; ++k) {
        const Inputs in{xt::view(Q, k), xt::view(K, k), xt::view(V, k), xt::view(dO, k)};
        const std::vector<bool> allowed = oracle::causal_allowed(n_q, n_kv);
        const oracle::Grads expected = oracle_grads(in, causal ? &allowed : nullptr);
        const double tol = gradient_tolerance(n_q, n_kv, d, d_v, expected);
        check_grads({xt::view(g2.dQ, k), xt::view(g2.dK, k), xt::view(g2.dV, k)}, expected, tol);
        check_grads({xt::view(gp.dQ, k), xt::view(gp.dK, k), xt::view(gp.dV, k)}, expected, tol);
        // The contract's version agrees with the same oracle: both are FlashAttention-2, tiled differently.
        const Vector lse_k = xt::view(lse, k);
        check_grads(attn::flash_backward(in.Q, in.K, in.V, xt::view(O, k), lse_k, in.dO, causal, 32, 16), expected,
                    tol);
      }
    }
    const attn::Tensor3 Z = xt::zeros<float>({1, 4, 2});
    CHECK_THROWS_AS(attn::ch10::flash_backward_fast(Z, Z, Z, Z, xt::zeros<float>({1, 4}), Z, false, {16, 16, 0, 2}),
                    std::invalid_argument);
    CHECK_THROWS_NAMING(attn::ch10::flash_backward_fast(Z, Z, Z, Z, xt::zeros<float>({1, 5}), Z, false),
                        std::invalid_argument, "1", "5");
  }
}

TEST_SUITE("10_backward: chapter code") {
  TEST_CASE(
      "the fast backward recomputes the fast forward's scores bit for bit, whatever the tiles: with one dominant key "
      "per query, dV is exactly dO and dQ, dK vanish") {
    if (attn::ch05::key_panel_width() == 0) {
      MESSAGE("skipped: this CPU has neither AVX2 nor AVX-512, so both passes use OpenBLAS and agree to rounding");
      return;
    }
    attn::Rng rng(112);
    const std::size_t h = 2, n = 100, d_k = 64, d_v = 8;  // d_k = 64: where OpenBLAS's products round differently
    attn::Tensor3 Q = xt::zeros<float>({h, n, d_k}), K = xt::zeros<float>({h, n, d_k}),
                  V = xt::zeros<float>({h, n, d_v}), dO = xt::zeros<float>({h, n, d_v});
    for (std::size_t k = 0; k < h; ++k) {
      const Inputs in = dominant_key_inputs(rng, n, d_k, d_v);
      xt::view(Q, k) = in.Q;
      xt::view(K, k) = in.K;
      xt::view(V, k) = in.V;
      xt::view(dO, k) = in.dO;
    }
    for (const char* isa : {"AVX-512", "AVX2+FMA", "NEON"}) {
      if (!attn::ch05::use_tile_kernels(isa)) continue;  // a CPU without AVX-512 still checks AVX2
      const std::string isa_name = isa;
      CAPTURE(isa_name);
      // The defaults (forward 128 × 512, backward 64 × 128) and smaller tiles of other shapes: all whole panels.
      for (const auto& [fwd, bwd] : {std::pair<attn::ch05::FastConfig, attn::ch10::BackwardConfig>{{}, {}},
                                     {{16, 64, 2}, {8, 32, 2, 2}},
                                     {{7, 32, 2}, {64, 128, 3, 2}}})
        for (const bool causal : {false, true}) {
          CAPTURE(fwd.B_r);
          CAPTURE(fwd.B_c);
          CAPTURE(bwd.B_r);
          CAPTURE(bwd.B_c);
          CAPTURE(causal);
          const attn::ch05::FlashHeadsOutput f = attn::ch05::flash_attention_fast(Q, K, V, causal, fwd);
          REQUIRE(f.O == V);
          const attn::ch10::HeadsGrads g = attn::ch10::flash_backward_fast(Q, K, V, f.O, f.lse, dO, causal, bwd);
          INFO("P_ii = exp(s_ii − lse_i) must be exp(0) = 1: the backward must compute s_ii as the forward did");
          CHECK(g.dV == dO);
          // As for flash_backward above: exactly, dQ and dK are below 1e-18.
          CHECK(static_cast<double>(xt::amax(xt::abs(g.dK))()) < 1e-12);
          CHECK(static_cast<double>(xt::amax(xt::abs(g.dQ))()) < 1e-12);
        }
    }
    attn::ch05::use_tile_kernels("auto");
  }
}

// The defects hostile calls found in chapter 10's reference answers.
TEST_SUITE("10_backward: hostile input") {
  TEST_CASE("attention_backward refuses a mask with one dimension 0 instead of taking it for no mask" *
            doctest::test_suite("10_backward/attention_backward")) {
    attn::Rng rng(147);
    const Inputs in = random_inputs(rng, 2, 3, 4, 4);
    CHECK_THROWS_NAMING(attn::attention_backward(in.Q, in.K, in.V, in.dO, attn::Mask::from_shape({0, 3})),
                        std::invalid_argument, "attention_backward", "0", "3");
    CHECK_THROWS_NAMING(attn::attention_backward(in.Q, in.K, in.V, in.dO, attn::Mask::from_shape({2, 0})),
                        std::invalid_argument, "2", "0");
    CHECK_NOTHROW(attn::attention_backward(in.Q, in.K, in.V, in.dO, attn::Mask::from_shape({0, 0})));  // no mask
  }

  // The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
  // values, each call refused naming what was wrong or answered as the contract says.
  TEST_CASE("softmax_backward under the hostile battery" * doctest::test_suite("10_backward/softmax_backward")) {
    // hostile battery: softmax_backward
    attn::Rng rng(4801);
    const Matrix P{{0.25f, 0.75f, 0.0f}, {0.5f, 0.25f, 0.25f}};
    hostile::battery(
        "softmax_backward", {"P", "dP"},
        [](const Matrix& p, const Matrix& dp) { return attn::softmax_backward(p, dp); }, P, Matrix(rng.normal(2, 3)))
        .fits([](const Matrix& p, const Matrix& dp) { return p.shape() == dp.shape(); })
        .answer([](const Matrix& dS, const Matrix& p, const Matrix&) { return dS.shape() == p.shape(); })
        .exempt("dP with +inf", "±inf in dP where p = 0 is answered (a masked key), refused elsewhere: either is clean")
        .exempt("dP with -inf", "as dP with +inf")
        .run();
  }

  TEST_CASE("attention_backward under the hostile battery" * doctest::test_suite("10_backward/attention_backward")) {
    // hostile battery: attention_backward
    attn::Rng rng(4802);
    Mask mask = xt::ones<bool>({4, 5});
    mask(0, 3) = mask(0, 4) = false;
    hostile::battery(
        "attention_backward", {"Q", "K", "V", "dO", "mask"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO, const Mask& m) {
          const AttentionGrads g = attn::attention_backward(Q, K, V, dO, m);
          return std::vector<Matrix>{g.dQ, g.dK, g.dV};
        },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(5, 3)), Matrix(rng.normal(5, 2)), Matrix(rng.normal(4, 2)), mask)
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO, const Mask& m) {
          return K.shape(1) == Q.shape(1) && V.shape(0) == K.shape(0) && dO.shape(0) == Q.shape(0) &&
                 dO.shape(1) == V.shape(1) && m.shape(0) == Q.shape(0) && m.shape(1) == K.shape(0);
        })
        .answer([](const std::vector<Matrix>& g, const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix&,
                   const Mask&) {
          return g[0].shape() == Q.shape() && g[1].shape() == K.shape() && g[2].shape() == V.shape();
        })
        .run();
  }

  TEST_CASE("flash_backward_tile under the hostile battery" * doctest::test_suite("10_backward/flash_backward_tile")) {
    // hostile battery: flash_backward_tile
    attn::Rng rng(4803);
    const Matrix Q = rng.normal(2, 3), K = rng.normal(3, 3), V = rng.normal(3, 2);
    const attn::FlashOutput fwd = attn::flash_attention(Q, K, V, false, 2, 3);  // O, lse
    const Matrix dO = rng.normal(2, 2);
    const Vector D = xt::sum(dO * fwd.O, {1});
    hostile::battery(
        "flash_backward_tile", {"Q_i", "K_j", "V_j", "dO_i", "lse_i", "D_i", "dQ_i", "dK_j", "dV_j", "allowed"},
        [](const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& dout, const Vector& lse, const Vector& d,
           Matrix& dQ, Matrix& dK, Matrix& dV, const Mask& allowed) {
          attn::flash_backward_tile(q, k, v, dout, lse, d, dQ, dK, dV, allowed);
          return std::vector<Matrix>{dQ, dK, dV};
        },
        Q, K, V, dO, fwd.lse, D, Matrix(xt::zeros<float>({2, 3})), Matrix(xt::zeros<float>({3, 3})),
        Matrix(xt::zeros<float>({3, 2})), Mask(xt::ones<bool>({2, 3})))
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& dout, const Vector& lse,
                 const Vector& d, const Matrix& dQ, const Matrix& dK, const Matrix& dV, const Mask& allowed) {
          const std::size_t B_r = q.shape(0), B_c = k.shape(0);
          return k.shape(1) == q.shape(1) && v.shape(0) == B_c && dout.shape(0) == B_r && dout.shape(1) == v.shape(1) &&
                 lse.size() == B_r && d.size() == B_r && dQ.shape() == q.shape() && dK.shape() == k.shape() &&
                 dV.shape() == v.shape() && allowed.shape(0) == B_r && allowed.shape(1) == B_c;
        })
        .exempt("lse_i with -inf", "-inf marks a row that saw no key: its P is 0 (answered)")
        .exempt("dQ_i with", "an accumulator the tile adds to: its own values are the caller's, never checked")
        .exempt("dK_j with", "as dQ_i")
        .exempt("dV_j with", "as dQ_i")
        .run();
  }

  TEST_CASE("flash_backward under the hostile battery" * doctest::test_suite("10_backward/flash_backward")) {
    // hostile battery: flash_backward
    attn::Rng rng(4804);
    const Matrix Q = rng.normal(4, 3), K = rng.normal(5, 3), V = rng.normal(5, 2);
    const attn::FlashOutput fwd = attn::flash_attention(Q, K, V, true, 2, 2);  // O, lse
    hostile::battery(
        "flash_backward", {"Q", "K", "V", "O", "lse", "dO", "causal", "B_r", "B_c"},
        [](const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& o, const Vector& lse, const Matrix& dout,
           bool causal, std::size_t B_r, std::size_t B_c) {
          const AttentionGrads g = attn::flash_backward(q, k, v, o, lse, dout, causal, B_r, B_c);
          return std::vector<Matrix>{g.dQ, g.dK, g.dV};
        },
        Q, K, V, fwd.O, fwd.lse, Matrix(rng.normal(4, 2)), true, std::size_t{2}, std::size_t{2})
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v, const Matrix& o, const Vector& lse,
                 const Matrix& dout, bool causal, std::size_t B_r, std::size_t B_c) {
          const std::size_t n_q = q.shape(0);
          return k.shape(1) == q.shape(1) && v.shape(0) == k.shape(0) && o.shape(0) == n_q &&
                 o.shape(1) == v.shape(1) && dout.shape() == o.shape() && lse.size() == n_q && B_r > 0 && B_c > 0 &&
                 (!causal || n_q <= k.shape(0));
        })
        .answer([](const std::vector<Matrix>& g, const Matrix& q, const Matrix& k, const Matrix& v, const Matrix&,
                   const Vector&, const Matrix&, bool, std::size_t, std::size_t) {
          return g[0].shape() == q.shape() && g[1].shape() == k.shape() && g[2].shape() == v.shape();
        })
        .exempt("lse with -inf", "-inf marks a row that saw no key: its P is 0 (answered)")
        .run();
  }
}
