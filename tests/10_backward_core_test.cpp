// Chapter 10's own code on bad input: the fast multithreaded backward (backward_fast.hpp). Chapter code, not an
// exercise, so these run on the solution track only. Expected gradients come from the float64 oracle's chain rule
// (tests/oracle/10_backward_oracle.hpp); a bad size must be refused with the estimate, never crash.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "10_backward/backward_fast.hpp"
#include "attn/rng.hpp"
#include "oracle/10_backward_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;
using attn::test::to_oracle;
namespace ch10 = attn::ch10;
namespace oracle = attn::oracle;

/// One head of random inputs and the forward's O and lse in float64, rounded to float32: (1, n, d) each.
struct Problem {
  Tensor3 Q, K, V, O, dO;
  Matrix lse;
};

Problem random_problem(std::size_t n, std::size_t d) {
  attn::Rng rng(1001);
  Problem p{xt::expand_dims(rng.normal(n, d), 0), xt::expand_dims(rng.normal(n, d), 0),
            xt::expand_dims(rng.normal(n, d), 0), Tensor3(xt::zeros<float>({std::size_t{1}, n, d})),
            xt::expand_dims(rng.normal(n, d), 0), Matrix(xt::zeros<float>({std::size_t{1}, n}))};
  // The forward in double: lse_i = log Σ_j exp(q_i·k_j/√d), O_i = Σ_j p_ij v_j.
  for (std::size_t i = 0; i < n; ++i) {
    double top = -std::numeric_limits<double>::infinity();
    std::vector<double> s(n);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t c = 0; c < d; ++c) s[j] += static_cast<double>(p.Q(0, i, c)) * p.K(0, j, c);
      s[j] /= std::sqrt(static_cast<double>(d));
      top = std::max(top, s[j]);
    }
    double sum = 0.0;
    for (double v : s) sum += std::exp(v - top);
    const double lse = top + std::log(sum);
    p.lse(0, i) = static_cast<float>(lse);
    for (std::size_t c = 0; c < d; ++c) {
      double o = 0.0;
      for (std::size_t j = 0; j < n; ++j) o += std::exp(s[j] - lse) * p.V(0, j, c);
      p.O(0, i, c) = static_cast<float>(o);
    }
  }
  return p;
}

}  // namespace

TEST_SUITE("10_backward") {
  TEST_CASE(
      "flash_backward_fast with tiles or lanes far past the sequence (2^32, 2^62 + 1) gives the right "
      "gradients without allocating for them") {
    const std::size_t n = 20, d = 8;
    const Problem p = random_problem(n, d);
    const oracle::Grads expected =
        oracle::attention_gradients(to_oracle(Matrix(xt::view(p.Q, 0))), to_oracle(Matrix(xt::view(p.K, 0))),
                                    to_oracle(Matrix(xt::view(p.V, 0))), to_oracle(Matrix(xt::view(p.dO, 0))));
    // Chapter 10's bound: eight chained float32 sums of at most 4n + 2d terms, on inputs of size ~1 (the
    // gradients stay below 4 here), plus O and lse rounded once to float32.
    const double tol = 8.0 * static_cast<double>(4 * n + 2 * d) * std::ldexp(1.0, -24) * 4.0;
    const std::size_t big = std::size_t{1} << 32, lanes = (std::size_t{1} << 62) + 1;
    for (const ch10::BackwardConfig& config :
         {ch10::BackwardConfig{big, big, 2, 2}, ch10::BackwardConfig{16, 8, lanes, 2},
          ch10::BackwardConfig{std::size_t{1} << 20, std::size_t{1} << 20, 1000000, 2}}) {
      CAPTURE(config.B_r);
      CAPTURE(config.lanes);
      const ch10::HeadsGrads g = ch10::flash_backward_fast(p.Q, p.K, p.V, p.O, p.lse, p.dO, false, config);
      CHECK_ALLCLOSE(Matrix(xt::view(g.dQ, 0)), expected.dQ, tol, 0.0);
      CHECK_ALLCLOSE(Matrix(xt::view(g.dK, 0)), expected.dK, tol, 0.0);
      CHECK_ALLCLOSE(Matrix(xt::view(g.dV, 0)), expected.dV, tol, 0.0);
    }
  }

  TEST_CASE("flash_backward_fast refuses NaN in O or lse and +inf in lse") {
    const Problem p = random_problem(6, 4);
    Tensor3 O = p.O;
    O(0, 2, 3) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(ch10::flash_backward_fast(p.Q, p.K, p.V, O, p.lse, p.dO, false), doctest::Contains("O[11]"),
                         std::invalid_argument);
    Matrix lse = p.lse;
    lse(0, 4) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH_AS(ch10::flash_backward_fast(p.Q, p.K, p.V, p.O, lse, p.dO, false), doctest::Contains("lse[4]"),
                         std::invalid_argument);
  }

  TEST_CASE("flash_backward_fast refuses a thread count whose tiles cannot fit in memory, before starting any") {
    const Problem p = random_problem(6, 4);
    // 2^31 − 1 threads, each with two (6, 6) tiles: 600 GB of tiles.
    CHECK_THROWS_WITH_AS(ch10::flash_backward_fast(p.Q, p.K, p.V, p.O, p.lse, p.dO, false,
                                                   {64, 128, 2, std::numeric_limits<int>::max()}),
                         doctest::Contains("available"), std::invalid_argument);
  }
}

// The chapter's own code under the hostile-input battery (tests/support/hostile.hpp): each argument replaced in turn
// by its type's hostile values, each call refused naming what was wrong, or answered as the contract says.
TEST_SUITE("10_backward: hostile battery") {
  TEST_CASE("flash_backward_fast under the battery") {
    // hostile battery: flash_backward_fast
    namespace hostile = attn::test::hostile;
    const Problem p = random_problem(5, 4);
    hostile::battery(
        "flash_backward_fast", {"Q", "K", "V", "O", "lse", "dO", "causal", "B_r", "B_c", "lanes", "threads"},
        [](const Tensor3& Q, const Tensor3& K, const Tensor3& V, const Tensor3& O, const Matrix& lse, const Tensor3& dO,
           bool causal, std::size_t B_r, std::size_t B_c, std::size_t lanes, int threads) {
          const ch10::HeadsGrads g = ch10::flash_backward_fast(Q, K, V, O, lse, dO, causal, {B_r, B_c, lanes, threads});
          return std::vector<Tensor3>{g.dQ, g.dK, g.dV};
        },
        p.Q, p.K, p.V, p.O, p.lse, p.dO, false, std::size_t{2}, std::size_t{4}, std::size_t{2}, 2)
        .fits([](const Tensor3& Q, const Tensor3& K, const Tensor3& V, const Tensor3& O, const Matrix& lse,
                 const Tensor3& dO, bool causal, std::size_t B_r, std::size_t B_c, std::size_t lanes, int threads) {
          const std::size_t h = Q.shape(0), n_q = Q.shape(1);
          return K.shape(0) == h && V.shape(0) == h && K.shape(2) == Q.shape(2) && V.shape(1) == K.shape(1) &&
                 O.shape(0) == h && O.shape(1) == n_q && O.shape(2) == V.shape(2) && dO.shape() == O.shape() &&
                 lse.shape(0) == h && lse.shape(1) == n_q && B_r > 0 && B_c > 0 && lanes > 0 && threads > 0 &&
                 (!causal || n_q <= K.shape(1));
        })
        .answer([](const std::vector<Tensor3>& g, const Tensor3& Q, const Tensor3& K, const Tensor3& V, const Tensor3&,
                   const Matrix&, const Tensor3&, bool, std::size_t, std::size_t, std::size_t,
                   int) { return g[0].shape() == Q.shape() && g[1].shape() == K.shape() && g[2].shape() == V.shape(); })
        .exempt("lse with -inf", "-inf marks a row that saw no key: its P is 0 (answered)")
        .exempt("threads = 2147483647",
                "threads past the work items are not started: answered, or refused if it cannot start them")
        .run();
  }
}
