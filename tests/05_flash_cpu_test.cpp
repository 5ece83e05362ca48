// Chapter 05's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/oracle.hpp, tests/oracle/05_flash_cpu_oracle.hpp) or from hand counts, never from the other
// track. The fast kernel (chapter code) is checked the same way.
//
// Tolerances follow the FlashAttention papers' rule: the tiled result may be no further from float64 than
// twice chapter 02's float32 full attention on the same input, plus a small absolute floor (kFloor) for
// inputs where full attention happens to be almost exact. Both compute the same sums in float32, in a
// different order: rounding of that size (n·2^-24 relative) is all that may differ.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/heap_counter.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/io_model.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "attn/checks.hpp"
#include "attn/rng.hpp"
#include "oracle/05_flash_cpu_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Mask;
using attn::Matrix;
using attn::OnlineState;
using attn::Vector;
using attn::test::to_oracle;
namespace oracle = attn::oracle;

constexpr double kInf = std::numeric_limits<double>::infinity();
// A few float32 ulps of outputs of size ~1 (2^-24 ≈ 6e-8 each).
constexpr double kFloor = 1e-6;

double max_abs_error(const Matrix& actual, const oracle::Mat& expected) {
  double worst = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(actual.data()[i]) - expected.v[i]));
  return worst;
}

/// Chapter 02's full attention: its error against float64 sets the tolerance of the tiled versions.
double full_attention_error(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal,
                            const oracle::Mat& expected) {
  const Mask mask = causal ? attn::causal_mask(Q.shape(0), K.shape(0)) : Mask();
  return max_abs_error(attn::scaled_dot_product_attention(Q, K, V, mask), expected);
}

// The log-sum-exp of float32 scores: the scores carry d_k·2^-24 relative error each (|s| ≲ 10 here) and
// log ℓ adds n·2^-24; 1e-5 absolute and relative covers both for n ≤ 300.
constexpr double kLseTol = 1e-5;

struct Shape {
  std::size_t n_q, n_kv, d_k, d_v, B_r, B_c;
};

// n = 1, primes, sizes that are not multiples of the tiles, tiles larger than n, n_q < n_kv.
const std::vector<Shape> kShapes = {
    {1, 1, 1, 1, 1, 1},          {1, 1, 8, 8, 4, 4},      {2, 2, 4, 4, 1, 1},       {7, 7, 16, 5, 3, 2},
    {13, 13, 8, 8, 4, 5},        {31, 31, 32, 32, 8, 16}, {64, 64, 64, 64, 16, 16}, {97, 97, 64, 33, 32, 64},
    {100, 131, 16, 16, 7, 11},   {3, 10, 8, 12, 2, 3},    {50, 50, 8, 8, 64, 64},   {257, 257, 32, 32, 64, 64},
    {211, 211, 128, 64, 37, 53},
};

/// The tiles a tiled forward must visit, counted from the definition: query block [r0, r0 + rows) with
/// causal sees keys up to r0 + rows - 1 + (n_kv - n_q), so only the key blocks starting at or before that.
std::size_t expected_tiles(const Shape& s, bool causal) {
  std::size_t tiles = 0;
  for (std::size_t r0 = 0; r0 < s.n_q; r0 += s.B_r) {
    const std::size_t rows = std::min(s.B_r, s.n_q - r0);
    for (std::size_t c0 = 0; c0 < s.n_kv; c0 += s.B_c)
      if (!causal || c0 <= r0 + rows - 1 + (s.n_kv - s.n_q)) ++tiles;
  }
  return tiles;
}

OnlineState to_state(const oracle::State& s) {
  OnlineState out = attn::empty_state(s.m.size(), s.acc.cols);
  for (std::size_t i = 0; i < s.m.size(); ++i) {
    out.m(i) = static_cast<float>(s.m[i]);
    out.l(i) = static_cast<float>(s.l[i]);
  }
  for (std::size_t i = 0; i < s.acc.v.size(); ++i) out.acc.data()[i] = static_cast<float>(s.acc.v[i]);
  return out;
}

// A float32 state against the oracle's: m to float32 rounding of a score, ℓ and acc to the rounding of a
// sum of ≤ 100 terms of size ≤ 1 (relative 100·2^-24 ≈ 6e-6).
void check_state(const OnlineState& actual, const oracle::State& expected) {
  CHECK_ALLCLOSE(actual.m, expected.m, 1e-6, 1e-6);
  CHECK_ALLCLOSE(actual.l, expected.l, 1e-5, 1e-5);
  CHECK_ALLCLOSE(actual.acc, expected.acc, 1e-5, 1e-5);
}

}  // namespace

namespace attn::test::hostile {
// An online-softmax state's parts, for the battery's "each part wrong in each dimension, and with a NaN".
template <>
struct Weights<attn::OnlineState> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::OnlineState& s, F&& f) {
    f("m", s.m);
    f("l", s.l);
    f("acc", s.acc);
  }
};
}  // namespace attn::test::hostile

namespace {

namespace hostile = attn::test::hostile;

// A state of `rows` query rows that has seen some keys (finite m, positive ℓ).
OnlineState seen_state(std::size_t rows, std::size_t d_v, float shift) {
  OnlineState s = attn::empty_state(rows, d_v);
  for (std::size_t r = 0; r < rows; ++r) {
    s.m(r) = shift + static_cast<float>(r);
    s.l(r) = 1.0f + static_cast<float>(r);
    for (std::size_t c = 0; c < d_v; ++c) s.acc(r, c) = 0.5f * static_cast<float>(c) - shift;
  }
  return s;
}

bool state_fits(const OnlineState& s) { return s.m.size() == s.l.size() && s.acc.shape(0) == s.m.size(); }

}  // namespace

TEST_SUITE("05_flash_cpu") {
  TEST_CASE("the IO model counts what a hand count gives, and tiled_io_floats agrees with it" *
            doctest::test_suite("05_flash_cpu/tiled_io_floats")) {
    using attn::ch05::simulate_standard;
    using attn::ch05::simulate_tiled;
    // n = 4, d = 2, B_r = 2: Q 8, K and V 2 blocks × 16, O 8, lse 4 = 52 floats.
    CHECK(attn::tiled_io_floats(4, 2, 2) == 52);
    CHECK(simulate_tiled(4, 2, 64, {2, 2}).total() == 52);
    CHECK(simulate_tiled(4, 2, 64, {2, 2}).writes == 12);
    // n = 5, d = 1, B_r = 2: three query blocks (2, 2, 1): 5 + 3·10 + 5 + 5 = 45.
    CHECK(attn::tiled_io_floats(5, 1, 2) == 45);
    CHECK(simulate_tiled(5, 1, 64, {2, 3}).total() == 45);
    // Standard attention, n = 4, d = 2, M = 16 (product blocks of 2 rows): S = QKᵀ reads Q 8 + K 2·8, writes
    // S 16; softmax reads 16, writes 16; O = PV reads P 16 + V 2·8, writes O 8. 72 reads + 40 writes.
    const attn::ch05::IoCount standard = simulate_standard(4, 2, 16);
    CHECK(standard.reads == 72);
    CHECK(standard.writes == 40);
    // And the formula against the simulator on a sweep, with the simulator's own tile plan.
    for (std::size_t n : {1, 7, 64, 100})
      for (std::size_t d : {1, 8, 32}) {
        const attn::ch05::TilePlan plan = attn::ch05::plan_tiles(d, 4096);
        CHECK(simulate_tiled(n, d, 4096, plan).total() == attn::tiled_io_floats(n, d, plan.B_r));
      }
    CHECK_THROWS_AS(simulate_tiled(64, 32, 1024, {32, 32}), std::invalid_argument);  // does not fit in M
    CHECK_THROWS_AS(attn::tiled_io_floats(4, 2, 0), std::invalid_argument);
  }

  TEST_CASE("merge_states over disjoint key ranges gives the state over their union, in any grouping" *
            doctest::test_suite("05_flash_cpu/merge_states")) {
    attn::Rng rng(55);
    const Matrix Q = rng.normal(6, 8), K = rng.normal(30, 8, 0.0f, 3.0f), V = rng.normal(30, 5);
    const auto part = [&](std::size_t b, std::size_t e) {
      return oracle::partial_state(to_oracle(Q), to_oracle(K), to_oracle(V), b, e);
    };
    const OnlineState a = to_state(part(0, 7)), b = to_state(part(7, 19)), c = to_state(part(19, 30));
    const oracle::State all = part(0, 30);
    check_state(attn::merge_states(attn::merge_states(a, b), c), all);  // (a·b)·c
    check_state(attn::merge_states(a, attn::merge_states(b, c)), all);  // a·(b·c)
    check_state(attn::merge_states(c, attn::merge_states(b, a)), all);  // and in another order
  }

  TEST_CASE("merge_states has the empty state as identity and keeps rows that saw nothing free of NaN" *
            doctest::test_suite("05_flash_cpu/merge_states")) {
    attn::Rng rng(56);
    const Matrix Q = rng.normal(4, 8), K = rng.normal(9, 8), V = rng.normal(9, 3);
    const oracle::State s = oracle::partial_state(to_oracle(Q), to_oracle(K), to_oracle(V), 0, 9);
    check_state(attn::merge_states(to_state(s), attn::empty_state(4, 3)), s);
    check_state(attn::merge_states(attn::empty_state(4, 3), to_state(s)), s);
    const OnlineState none = attn::merge_states(attn::empty_state(4, 3), attn::empty_state(4, 3));
    check_state(none, oracle::partial_state(to_oracle(Q), to_oracle(K), to_oracle(V), 0, 0));
    CHECK_THROWS_AS(attn::merge_states(attn::empty_state(4, 3), attn::empty_state(5, 3)), std::invalid_argument);
    CHECK_THROWS_AS(attn::merge_states(attn::empty_state(4, 3), attn::empty_state(4, 2)), std::invalid_argument);
  }

  TEST_CASE("tile_step gives masked keys no weight and leaves a fully masked row unchanged" *
            doctest::test_suite("05_flash_cpu/tile_step")) {
    attn::Rng rng(58);
    const Matrix Q = rng.normal(3, 4), K = rng.normal(6, 4), V = rng.normal(6, 2);
    Mask allowed = xt::ones<bool>({3, 6});
    xt::row(allowed, 0) = false;  // row 0 sees nothing in this tile
    allowed(1, 5) = false;
    allowed(1, 2) = false;
    OnlineState state = attn::empty_state(3, 2);
    attn::tile_step(state, Q, K, V, allowed);
    CHECK(std::isinf(state.m(0)));
    CHECK(state.l(0) == 0.0f);
    CHECK(xt::all(xt::isfinite(state.acc)));
    // Row 1 must equal the state over keys {0, 1, 3, 4} alone.
    const Matrix K_seen = xt::view(K, xt::keep(0, 1, 3, 4), xt::all()),
                 V_seen = xt::view(V, xt::keep(0, 1, 3, 4), xt::all());
    const Matrix q1 = xt::view(Q, xt::range(1, 2), xt::all());
    const oracle::State e = oracle::partial_state(to_oracle(q1), to_oracle(K_seen), to_oracle(V_seen), 0, 4);
    CHECK(state.m(1) == doctest::Approx(e.m[0]).epsilon(1e-6));
    CHECK(state.l(1) == doctest::Approx(e.l[0]).epsilon(1e-5));
    const Matrix acc1 = xt::view(state.acc, xt::range(1, 2), xt::all());  // (1, d_v)
    CHECK_ALLCLOSE(acc1, e.acc, 1e-5, 1e-5);
    CHECK_THROWS_AS(attn::tile_step(state, Q, xt::zeros<float>({6, 5}), V), std::invalid_argument);
    CHECK_THROWS_AS(attn::tile_step(state, Q, K, V, xt::ones<bool>({3, 5})), std::invalid_argument);
  }

  TEST_CASE("tile_step over every key block reproduces the oracle's state, whatever the block size" *
            doctest::test_suite("05_flash_cpu/tile_step")) {
    attn::Rng rng(57);
    const Matrix Q = rng.normal(5, 16), K = rng.normal(23, 16), V = rng.normal(23, 6);
    const oracle::State expected = oracle::partial_state(to_oracle(Q), to_oracle(K), to_oracle(V), 0, 23);
    for (std::size_t B_c : {1, 4, 10, 23}) {
      OnlineState state = attn::empty_state(5, 6);
      for (std::size_t c0 = 0; c0 < 23; c0 += B_c) {
        const std::size_t c1 = std::min<std::size_t>(23, c0 + B_c);
        attn::tile_step(state, Q, xt::view(K, xt::range(c0, c1), xt::all()), xt::view(V, xt::range(c0, c1), xt::all()));
      }
      check_state(state, expected);
    }
  }

  TEST_CASE("flash_attention never holds an (n_q, n_kv) matrix: its heap peak stays far below one" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    // n = 1024, d = 8: S alone would be 4 MiB (a bool mask of that shape 1 MiB), the output O 32 KiB. The
    // tiled forward holds O, lse and per block a few (B, d) and (B_r, B_c) tiles: the reference solution
    // peaks at 47,360 bytes (48,384 causal). The bound, n_q·n_kv floats / 16 = 256 KiB, leaves room for
    // other tilings and fails for anything holding a score matrix, a weight matrix or a full mask.
    attn::Rng rng(57);
    const std::size_t n = 1024, d = 8;
    const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
    const std::size_t bound = n * n * sizeof(float) / 16;
    const std::vector<bool> allowed = oracle::causal_allowed(n, n);
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      attn::FlashOutput out;
      const std::size_t peak =
          attn::ch04::measure_heap_peak([&] { out = attn::flash_attention(Q, K, V, causal, 32, 32); });
      CHECK_MESSAGE(peak <= bound, "flash_attention held ", peak, " bytes of heap at its peak; an (n_q, n_kv) = (", n,
                    ", ", n, ") float matrix is ", n * n * sizeof(float), " bytes and the bound is ", bound);
      // And it is still attention, within the file's FlashAttention tolerance.
      const oracle::Mat expected =
          oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), causal ? &allowed : nullptr);
      CHECK_ALLCLOSE(out.O, expected, 2.0 * full_attention_error(Q, K, V, causal, expected) + kFloor, 0.0);
    }
  }

  TEST_CASE("flash_attention visits every tile once, and with causal skips the tiles wholly above the diagonal" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    attn::Rng rng(58);
    for (const Shape& s : kShapes) {
      const Matrix Q = rng.normal(s.n_q, s.d_k), K = rng.normal(s.n_kv, s.d_k), V = rng.normal(s.n_kv, s.d_v);
      for (const bool causal : {false, true}) {
        CAPTURE(s.n_q);
        CAPTURE(s.n_kv);
        CAPTURE(s.B_r);
        CAPTURE(s.B_c);
        CAPTURE(causal);
        CHECK(attn::flash_attention(Q, K, V, causal, s.B_r, s.B_c).tiles_visited == expected_tiles(s, causal));
      }
    }
    // By hand: n = 64 in tiles of 16 is a 4 x 4 grid; causal visits 4 + 3 + 2 + 1 = 10 of its 16 tiles.
    const Matrix X = rng.normal(64, 8);
    CHECK(attn::flash_attention(X, X, X, false, 16, 16).tiles_visited == 16);
    const attn::FlashOutput causal = attn::flash_attention(X, X, X, true, 16, 16);
    CHECK(causal.tiles_visited == 10);
    const std::vector<bool> allowed = oracle::causal_allowed(64, 64);
    const oracle::Mat expected = oracle::attention(to_oracle(X), to_oracle(X), to_oracle(X), &allowed);
    CHECK_ALLCLOSE(causal.O, expected, 2.0 * full_attention_error(X, X, X, true, expected) + kFloor, 0.0);
  }

  TEST_CASE("flash_attention equals full attention within the FlashAttention tolerance, for any tiles and masks" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    attn::Rng rng(51);
    std::vector<Shape> shapes = kShapes;
    std::uniform_int_distribution<std::size_t> small(1, 40), length(1, 90), width(1, 64);
    for (int k = 0; k < 8; ++k) {  // and a few drawn at random (seeded: the same every run)
      const std::size_t n_q = length(rng.engine());
      shapes.push_back({n_q, n_q + small(rng.engine()) - 1, width(rng.engine()), width(rng.engine()),
                        small(rng.engine()), small(rng.engine())});
    }
    for (const Shape& s : shapes) {
      const Matrix Q = rng.normal(s.n_q, s.d_k), K = rng.normal(s.n_kv, s.d_k), V = rng.normal(s.n_kv, s.d_v);
      for (const bool causal : {false, true}) {
        CAPTURE(s.n_q);
        CAPTURE(s.n_kv);
        CAPTURE(s.B_r);
        CAPTURE(s.B_c);
        CAPTURE(causal);
        const std::vector<bool> allowed = oracle::causal_allowed(s.n_q, s.n_kv);
        const std::vector<bool>* mask = causal ? &allowed : nullptr;
        const oracle::Mat expected = oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), mask);
        const double tol = 2.0 * full_attention_error(Q, K, V, causal, expected) + kFloor;
        const attn::FlashOutput out = attn::flash_attention(Q, K, V, causal, s.B_r, s.B_c);
        CHECK_ALLCLOSE(out.O, expected, tol, 0.0);
        CHECK_ALLCLOSE(out.lse, oracle::log_sum_exp_rows(to_oracle(Q), to_oracle(K), mask), kLseTol, kLseTol);
      }
    }
  }

  TEST_CASE("flash_attention does not depend on the tile sizes beyond rounding" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    attn::Rng rng(52);
    const Matrix Q = rng.normal(45, 16), K = rng.normal(45, 16), V = rng.normal(45, 8);
    const oracle::Mat expected = oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V));
    const double tol = 2.0 * full_attention_error(Q, K, V, false, expected) + kFloor;
    for (std::size_t B_r : {1, 2, 9, 45, 100})
      for (std::size_t B_c : {1, 4, 44, 45, 46})
        CHECK_ALLCLOSE(attn::flash_attention(Q, K, V, false, B_r, B_c).O, expected, tol, 0.0);
  }

  TEST_CASE("flash_attention stays finite and exact with logits of size 1e4" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    attn::Rng rng(53);
    const Matrix Q = rng.normal(19, 4, 0.0f, 2000.0f), K = rng.normal(23, 4), V = rng.normal(23, 3);  // |s| ~ 1e4
    for (const bool causal : {false, true}) {
      const std::vector<bool> allowed = oracle::causal_allowed(19, 23);
      const oracle::Mat expected =
          oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), causal ? &allowed : nullptr);
      const double tol = 2.0 * full_attention_error(Q, K, V, causal, expected) + kFloor;
      const attn::FlashOutput out = attn::flash_attention(Q, K, V, causal, 4, 5);
      CHECK(xt::all(xt::isfinite(out.O)));
      CHECK_ALLCLOSE(out.O, expected, tol, 0.0);
      // lse ≈ 1e4 in float32: relative rounding of the score, 2^-24·d_k·Σ|q k| / |s| ≲ 1e-6.
      CHECK_ALLCLOSE(out.lse, oracle::log_sum_exp_rows(to_oracle(Q), to_oracle(K), causal ? &allowed : nullptr), 1e-3,
                     1e-6);
    }
  }

  TEST_CASE("flash_attention gives a query without keys zeros and a log-sum-exp of -inf" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    const Matrix Q = xt::ones<float>({3, 4}), K = xt::zeros<float>({0, 4}), V = xt::zeros<float>({0, 2});
    const attn::FlashOutput out = attn::flash_attention(Q, K, V, false, 2, 2);
    CHECK(out.O == Matrix(xt::zeros<float>({3, 2})));
    CHECK_ALLCLOSE(out.lse, std::vector<double>(3, -kInf), 0.0, 0.0);
    const attn::FlashOutput empty = attn::flash_attention(xt::zeros<float>({0, 4}), K, V, true, 2, 2);
    CHECK(empty.O.shape(0) == 0);
  }

  TEST_CASE("flash_attention rejects bad shapes, zero tiles, causal with more queries than keys, and NaN" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    const Matrix Q = xt::zeros<float>({4, 3}), K = xt::zeros<float>({5, 3}), V = xt::zeros<float>({5, 2});
    CHECK_THROWS_NAMING(attn::flash_attention(Q, xt::zeros<float>({5, 2}), V, false, 2, 2), std::invalid_argument, "5",
                        "2");
    CHECK_THROWS_NAMING(attn::flash_attention(Q, K, xt::zeros<float>({4, 2}), false, 2, 2), std::invalid_argument, "4",
                        "2");
    CHECK_THROWS_AS(attn::flash_attention(Q, K, V, false, 0, 2), std::invalid_argument);
    CHECK_THROWS_AS(attn::flash_attention(Q, K, V, false, 2, 0), std::invalid_argument);
    CHECK_THROWS_AS(attn::flash_attention(K, Q, xt::zeros<float>({4, 2}), true, 2, 2), std::invalid_argument);
    Matrix bad = K;
    bad(2, 1) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::flash_attention(Q, bad, V, false, 2, 2), std::invalid_argument, "nan");
    CHECK_THROWS_NAMING(attn::ch05::flash_attention_fast(Q, bad, V, false), std::invalid_argument, "nan");
    bad(2, 1) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(attn::flash_attention(Q, bad, V, false, 2, 2), std::invalid_argument);
  }

  TEST_CASE("attention_row recomputes any row of the attention matrix from the log-sum-exp, without the n x n matrix" *
            doctest::test_suite("05_flash_cpu/attention_row")) {
    attn::Rng rng(54);
    const Matrix Q = rng.normal(37, 16), K = rng.normal(41, 16), V = rng.normal(41, 8);
    for (const bool causal : {false, true}) {
      const std::vector<bool> allowed = oracle::causal_allowed(37, 41);
      const oracle::Mat A = oracle::attention_matrix(to_oracle(Q), to_oracle(K), causal ? &allowed : nullptr);
      const attn::FlashOutput out = attn::flash_attention(Q, K, V, causal, 8, 16);
      for (std::size_t i : {0, 1, 17, 36}) {
        // exp(s - lse) with s and lse each within ~1e-6 of float64: relative error ~2e-6 on every weight.
        CHECK_ALLCLOSE(attn::attention_row(Q, K, out.lse, i, causal), A.row(i), 1e-6, 1e-5);
      }
    }
    CHECK_THROWS_AS(attn::attention_row(Q, K, xt::zeros<float>({37}), 37, false), std::invalid_argument);
    CHECK_THROWS_AS(attn::attention_row(Q, K, xt::zeros<float>({36}), 0, false), std::invalid_argument);
    const Vector none =
        attn::attention_row(Q, K, Vector(Vector::shape_type{37}, -std::numeric_limits<float>::infinity()), 3, false);
    CHECK(xt::all(xt::equal(none, 0.0f)));
  }

  TEST_CASE("attention_row stays finite when the scores reach 1e4, where exp(s) alone overflows" *
            doctest::test_suite("05_flash_cpu/attention_row")) {
    // d_k = 4, so the scores q·k / 2 of query 0 are 1e4, 9999, 0 and -1e4, exact in float32; exp(1e4) is inf, so
    // the weights must come from exp(s - lse), never from exp(s) / exp(lse). The log-sum-exp is the oracle's.
    const Matrix K = {{1, 0, 0, 0}, {1, -1, 0, 0}, {0, 0, 0, 0}, {-1, 0, 0, 0}};        // (n_kv, d_k) = (4, 4)
    const Matrix Q = {{2.0e4f, 2.0f, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};  // (n_q, d_k)
    INFO("scores of 1e4: is each weight exp(s - lse), with s scaled by 1/sqrt(d_k)?");
    const std::vector<double> lse64 = oracle::log_sum_exp_rows(to_oracle(Q), to_oracle(K));
    Vector lse32 = xt::zeros<float>({4});  // (n_q)
    for (std::size_t i = 0; i < 4; ++i) lse32(i) = static_cast<float>(lse64[i]);
    // lse(0) = 1e4 + log(1 + e^-1) rounds to float32's spacing there, 2^-10: each weight is off by up to
    // 2^-11 ≈ 4.9e-4 relative, hence rtol 1e-3.
    CHECK_ALLCLOSE(attn::attention_row(Q, K, lse32, 0, false),
                   oracle::attention_matrix(to_oracle(Q), to_oracle(K)).row(0), 1e-9, 1e-3);
    // Causal, query 0 sees key 0 alone: lse(0) = 1e4 exactly, and the row is exactly (1, 0, 0, 0).
    lse32(0) = 1.0e4f;
    CHECK_ALLCLOSE(attn::attention_row(Q, K, lse32, 0, true), std::vector<double>({1.0, 0.0, 0.0, 0.0}), 0.0, 0.0);
  }

  TEST_CASE("the fast kernel matches the oracle with 1 and 2 threads, and attention_row recomputes A from its lse" *
            doctest::test_suite("05_flash_cpu/attention_row")) {
    attn::Rng rng(59);
    for (const Shape& s : {Shape{1, 1, 8, 8, 0, 0}, Shape{67, 67, 64, 64, 0, 0}, Shape{130, 199, 32, 48, 0, 0},
                           Shape{257, 257, 64, 64, 0, 0}}) {
      const Matrix Q = rng.normal(s.n_q, s.d_k), K = rng.normal(s.n_kv, s.d_k), V = rng.normal(s.n_kv, s.d_v);
      for (const bool causal : {false, true})
        for (const int threads : {1, 2}) {
          CAPTURE(s.n_q);
          CAPTURE(causal);
          CAPTURE(threads);
          const std::vector<bool> allowed = oracle::causal_allowed(s.n_q, s.n_kv);
          const std::vector<bool>* mask = causal ? &allowed : nullptr;
          const oracle::Mat expected = oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), mask);
          const double tol = 2.0 * full_attention_error(Q, K, V, causal, expected) + kFloor;
          const attn::FlashOutput out = attn::ch05::flash_attention_fast(Q, K, V, causal, {16, 32, threads});
          CHECK_ALLCLOSE(out.O, expected, tol, 0.0);
          CHECK_ALLCLOSE(out.lse, oracle::log_sum_exp_rows(to_oracle(Q), to_oracle(K), mask), kLseTol, kLseTol);
          const oracle::Mat A = oracle::attention_matrix(to_oracle(Q), to_oracle(K), mask);
          const std::size_t last = s.n_q - 1;
          CHECK_ALLCLOSE(attn::attention_row(Q, K, out.lse, last, causal), A.row(last), 1e-6, 1e-5);
        }
    }
  }

  TEST_CASE("the fast kernel over several heads equals flash_attention head by head" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    attn::Rng rng(60);
    const std::size_t h = 3, n = 150, d = 32;
    attn::Tensor3 Q = xt::zeros<float>({h, n, d}), K = Q, V = Q;
    for (std::size_t k = 0; k < h; ++k) {
      xt::view(Q, k) = rng.normal(n, d);
      xt::view(K, k) = rng.normal(n, d);
      xt::view(V, k) = rng.normal(n, d);
    }
    const attn::ch05::FlashHeadsOutput fast = attn::ch05::flash_attention_fast(Q, K, V, true, {32, 64, 2});
    for (std::size_t k = 0; k < h; ++k) {
      const Matrix Qk = xt::view(Q, k), Kk = xt::view(K, k), Vk = xt::view(V, k);
      const std::vector<bool> allowed = oracle::causal_allowed(n, n);
      const oracle::Mat expected = oracle::attention(to_oracle(Qk), to_oracle(Kk), to_oracle(Vk), &allowed);
      const double tol = 2.0 * full_attention_error(Qk, Kk, Vk, true, expected) + kFloor;
      CHECK_ALLCLOSE(Matrix(xt::view(fast.O, k)), expected, tol, 0.0);
      // The contract's version agrees with the same oracle: both are FlashAttention, tiled differently.
      CHECK_ALLCLOSE(attn::flash_attention(Qk, Kk, Vk, true, 16, 16).O, expected, tol, 0.0);
    }
    CHECK_THROWS_AS(attn::ch05::flash_attention_fast(Q, K, V, false, {0, 64, 2}), std::invalid_argument);
    // Tiles of 65,536 for 150 tokens (16 GiB per thread if allocated as asked) are cut to the sequence: the same
    // attention, bit for bit, as tiles just covering it.
    const attn::ch05::FlashHeadsOutput huge_tiles = attn::ch05::flash_attention_fast(Q, K, V, true, {65536, 65536, 2});
    const attn::ch05::FlashHeadsOutput one_tile = attn::ch05::flash_attention_fast(Q, K, V, true, {n, 160, 2});
    CHECK(huge_tiles.O == one_tile.O);
    CHECK(huge_tiles.lse == one_tile.lse);
    // 2^31 − 1 threads asked: no more start than there are work items (here one per head), the same bits.
    const attn::ch05::FlashHeadsOutput many =
        attn::ch05::flash_attention_fast(Q, K, V, true, {n, 160, std::numeric_limits<int>::max()});
    CHECK(many.O == one_tile.O);
    CHECK(many.lse == one_tile.lse);
  }

  TEST_CASE("flash_attention and the fast kernel refuse scores that would overflow float, naming the overflow" *
            doctest::test_suite("05_flash_cpu/flash_attention")) {
    // q = k = 1e20: q·k = 2e40 overflows float although every input is finite; -1e20 overflows to -inf.
    for (const float sign : {1.0f, -1.0f}) {
      CAPTURE(sign);
      const Matrix Q = xt::ones<float>({3, 2}) * 1e20f, K = xt::ones<float>({4, 2}) * (sign * 1e20f);
      const Matrix V = xt::ones<float>({4, 2});
      CHECK_THROWS_NAMING(attn::ch05::flash_attention_fast(Q, K, V, false), std::invalid_argument, "overflow");
      CHECK_THROWS_NAMING(attn::flash_attention(Q, K, V, false, 2, 2), std::invalid_argument, "overflow");
    }
    // Just inside the bound: ‖q‖ ‖k‖ = 1e37 (scores ±7e36) still works, and the weights are exact.
    const Matrix Q = xt::ones<float>({2, 1}) * 1e18f, V = {{1.0f}, {2.0f}};
    const Matrix K = {{1e19f}, {-1e19f}};
    const attn::FlashOutput out = attn::ch05::flash_attention_fast(Q, K, V, false);
    CHECK(out.O(0, 0) == 1.0f);  // all weight on the first key: e^{-2e37} is 0
    CHECK(std::isfinite(out.lse(0)));
  }

  TEST_CASE("tiled_io_floats refuses sizes whose count passes 64 bits, naming them, instead of wrapping around" *
            doctest::test_suite("05_flash_cpu/tiled_io_floats")) {
    CHECK_THROWS_NAMING(attn::tiled_io_floats(std::size_t{1} << 40, std::size_t{1} << 40, 1), std::invalid_argument,
                        "1099511627776");
    CHECK_THROWS_AS(attn::tiled_io_floats(std::size_t{1} << 32, 64, 1), std::invalid_argument);  // T_r·2nd = 2^71
    // A large count that fits still comes out exact: n = 2^20, d = 64, one block of all rows.
    const std::size_t n = std::size_t{1} << 20;
    CHECK(attn::tiled_io_floats(n, 64, n) == 4 * n * 64 + n);
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
// values, each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("05_flash_cpu") {
  TEST_CASE("merge_states under the hostile battery" * doctest::test_suite("05_flash_cpu/merge_states")) {
    // hostile battery: merge_states
    hostile::battery(
        "merge_states", {"a", "b"}, [](const OnlineState& a, const OnlineState& b) { return attn::merge_states(a, b); },
        seen_state(3, 2, 0.0f), seen_state(3, 2, 1.5f))
        .fits([](const OnlineState& a, const OnlineState& b) {
          return state_fits(a) && state_fits(b) && a.acc.shape() == b.acc.shape();
        })
        .answer([](const OnlineState& out, const OnlineState& a, const OnlineState&) {
          return out.m.size() == a.m.size() && out.acc.shape() == a.acc.shape();
        })
        .non_finite_passes("states are tile_step's sums, merged as given: their NaN is the merge's (no check promised)")
        .run();
  }

  TEST_CASE("tile_step under the hostile battery" * doctest::test_suite("05_flash_cpu/tile_step")) {
    // hostile battery: tile_step
    attn::Rng rng(5051);
    hostile::battery(
        "tile_step", {"state", "Q_i", "K_j", "V_j", "allowed"},
        [](OnlineState& state, const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Mask& allowed) {
          attn::tile_step(state, Q_i, K_j, V_j, allowed);
          return state;
        },
        seen_state(3, 2, 0.0f), Matrix(rng.normal(3, 4)), Matrix(rng.normal(5, 4)), Matrix(rng.normal(5, 2)),
        Mask(Mask::shape_type{3, 5}, true))
        .fits([](const OnlineState& s, const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Mask& allowed) {
          return state_fits(s) && s.m.size() == Q_i.shape(0) && s.acc.shape(1) == V_j.shape(1) &&
                 Q_i.shape(1) == K_j.shape(1) && V_j.shape(0) == K_j.shape(0) &&
                 (allowed.size() == 0 || (allowed.shape(0) == Q_i.shape(0) && allowed.shape(1) == K_j.shape(0)));
        })
        .answer([](const OnlineState& out, const OnlineState&, const Matrix& Q_i, const Matrix&, const Matrix& V_j,
                   const Mask&) { return out.m.size() == Q_i.shape(0) && out.acc.shape(1) == V_j.shape(1); })
        .non_finite_passes(
            "the inner step of flash_attention, which checks Q, K and V once (require_attention_inputs) "
            "before its tiles: a tile's NaN is carried, as documented (no check promised)")
        .exempt("state.m with", "the state's own values are the running sums of earlier tiles: carried, never checked")
        .exempt("state.l with", "as state.m")
        .exempt("state.acc with", "as state.m")
        .run();
  }

  TEST_CASE("flash_attention under the hostile battery" * doctest::test_suite("05_flash_cpu/flash_attention")) {
    // hostile battery: flash_attention
    attn::Rng rng(5052);
    hostile::battery(
        "flash_attention", {"Q", "K", "V", "causal", "B_r", "B_c"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, bool causal, std::size_t B_r, std::size_t B_c) {
          return attn::flash_attention(Q, K, V, causal, B_r, B_c);
        },
        Matrix(rng.normal(3, 4)), Matrix(rng.normal(5, 4)), Matrix(rng.normal(5, 2)), true, std::size_t{2},
        std::size_t{2})
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, bool causal, std::size_t B_r, std::size_t B_c) {
          return Q.shape(1) == K.shape(1) && V.shape(0) == K.shape(0) && B_r > 0 && B_c > 0 &&
                 (!causal || Q.shape(0) <= K.shape(0));
        })
        .answer([](const attn::FlashOutput& f, const Matrix& Q, const Matrix&, const Matrix& V, bool, std::size_t,
                   std::size_t) {
          return f.O.shape(0) == Q.shape(0) && f.O.shape(1) == V.shape(1) && f.lse.size() == Q.shape(0) &&
                 hostile::all_finite(f.O) && !hostile::detail::has_nan(f.lse);
        })
        .run();
  }

  TEST_CASE("attention_row under the hostile battery" * doctest::test_suite("05_flash_cpu/attention_row")) {
    // hostile battery: attention_row
    attn::Rng rng(5053);
    const Matrix Q0 = rng.normal(3, 4), K0 = rng.normal(5, 4), V0 = rng.normal(5, 2);
    hostile::battery(
        "attention_row", {"Q", "K", "lse", "i", "causal"},
        [](const Matrix& Q, const Matrix& K, const Vector& lse, std::size_t i, bool causal) {
          return attn::attention_row(Q, K, lse, i, causal);
        },
        Q0, K0, Vector(attn::flash_attention(Q0, K0, V0, true, 2, 2).lse), std::size_t{1}, true)
        .fits([](const Matrix& Q, const Matrix& K, const Vector& lse, std::size_t i, bool causal) {
          return Q.shape(1) == K.shape(1) && lse.size() == Q.shape(0) && i < Q.shape(0) &&
                 (!causal || Q.shape(0) <= K.shape(0));
        })
        .answer([](const Vector& a, const Matrix&, const Matrix& K, const Vector&, std::size_t, bool) {
          return a.size() == K.shape(0);  // an lse that is not Q and K's own gives a row of garbage, never NaN
        })
        .exempt("lse with -inf", "-inf marks a row that saw no key: its row is zeros (answered)")
        .run();
  }

  TEST_CASE("tiled_io_floats under the hostile battery" * doctest::test_suite("05_flash_cpu/tiled_io_floats")) {
    // hostile battery: tiled_io_floats
    // n·d + ⌈n/B_r⌉·2·n·d + n·d + n, or nothing once it passes 64 bits
    const auto count = [](std::size_t n, std::size_t d, std::size_t B_r) -> std::optional<std::size_t> {
      const std::size_t T_r = n / B_r + (n % B_r != 0);
      std::size_t nd = 0, kv = 0, sum = 0;
      if (__builtin_mul_overflow(n, d, &nd)) return std::nullopt;
      if (nd > 0 && (__builtin_mul_overflow(T_r, 2, &kv) || __builtin_mul_overflow(kv, nd, &kv))) return std::nullopt;
      if (__builtin_add_overflow(nd, kv, &sum) || __builtin_add_overflow(sum, nd, &sum) ||
          __builtin_add_overflow(sum, n, &sum))
        return std::nullopt;
      return sum;
    };
    hostile::battery(
        "tiled_io_floats", {"n", "d", "B_r"},
        [](std::size_t n, std::size_t d, std::size_t B_r) { return attn::tiled_io_floats(n, d, B_r); }, std::size_t{5},
        std::size_t{1}, std::size_t{2})
        .fits([&](std::size_t n, std::size_t d, std::size_t B_r) { return B_r > 0 && count(n, d, B_r).has_value(); })
        .answer([&](std::size_t floats, std::size_t n, std::size_t d, std::size_t B_r) {
          return count(n, d, B_r) == floats;
        })
        .run();
  }
}

// What the chapter presents but does not ask for: run on the solution track only (the exercise track
// excludes suites named "...: chapter code", which would pass without any learner code).
TEST_SUITE("05_flash_cpu: chapter code") {
  TEST_CASE(
      "the fast kernel cuts key tiles past the sequence to it, refuses tiles that cannot fit before any thread starts, "
      "and restores OpenBLAS's threads") {
    const Matrix Q = xt::ones<float>({4, 3}), K = xt::ones<float>({5, 3}), V = xt::ones<float>({5, 2});
    attn::set_blas_threads(2);
    const int before = attn::blas_threads();
    for (const int threads : {1, 2, 3}) {
      CAPTURE(threads);
      // Tiles of 2 × 3·2^59 floats (an std::length_error in every worker before key tiles were cut to the
      // sequence): every key has the same score, so O is the mean of V's rows, 1.
      const attn::FlashOutput out =
          attn::ch05::flash_attention_fast(Q, K, V, false, attn::ch05::FastConfig{2, std::size_t{3} << 59, threads});
      CHECK(xt::all(xt::equal(out.O, 1.0f)));
      CHECK(attn::blas_threads() == before);
      // B_r is kept as given (chapter 10 recomputes the scores from the forward's own row blocks): 2^32 rows of
      // a cut key tile cannot fit, and are refused with the estimate before any thread starts.
      CHECK_THROWS_NAMING(
          attn::ch05::flash_attention_fast(Q, K, V, false, {std::size_t{1} << 32, std::size_t{1} << 32, threads}),
          std::invalid_argument, "available");
      CHECK(attn::blas_threads() == before);
    }
    // 2^31 − 1 threads asked: one starts per work item (a head's block of 4 rows), not 2^31 − 1 (which would fail
    // to start, or ask for 550 GB of score tiles), and the answer is the 2-thread one, bit for bit.
    CHECK(attn::ch05::flash_attention_fast(Q, K, V, false, {4, 16, std::numeric_limits<int>::max()}).O ==
          attn::ch05::flash_attention_fast(Q, K, V, false, {4, 16, 2}).O);
    CHECK(attn::blas_threads() == before);
  }

  TEST_CASE("concurrent calls of the fast kernel from several threads are each right and leave OpenBLAS as it was") {
    attn::Rng rng(61);
    constexpr std::size_t kCallers = 4;
    std::vector<Matrix> Qs, Ks, Vs;
    std::vector<oracle::Mat> expected;
    for (std::size_t c = 0; c < kCallers; ++c) {
      Qs.push_back(rng.normal(40 + c, 16));  // (n_c, 16): each caller its own problem
      Ks.push_back(rng.normal(40 + c, 16));
      Vs.push_back(rng.normal(40 + c, 8));
      expected.push_back(oracle::attention(to_oracle(Qs[c]), to_oracle(Ks[c]), to_oracle(Vs[c])));
    }
    attn::set_blas_threads(2);
    const int before = attn::blas_threads();
    std::vector<Matrix> results(kCallers * 20);
    std::vector<std::thread> callers;
    for (std::size_t c = 0; c < kCallers; ++c)
      callers.emplace_back([&, c] {
        for (std::size_t k = 0; k < 20; ++k)  // many overlapping calls, so any save/restore race shows up
          results[c * 20 + k] = attn::ch05::flash_attention_fast(Qs[c], Ks[c], Vs[c], false, {8, 16, 2}).O;
      });
    for (auto& t : callers) t.join();
    CHECK(attn::blas_threads() == before);
    for (std::size_t r = 0; r < results.size(); ++r) {
      const std::size_t c = r / 20;
      const double tol = 2.0 * full_attention_error(Qs[c], Ks[c], Vs[c], false, expected[c]) + kFloor;
      CHECK_ALLCLOSE(results[r], expected[c], tol, 0.0);
    }
  }

  TEST_CASE("the vectorised exp is defined for any input: NaN stays NaN, -inf and anything below -87 give 0") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<float> s = {nan, -inf, -1e30f, -3.4e38f, -87.5f, 0.0f, -1.0f, -86.9f};
    for (std::size_t k = 0; k < 20; ++k) s.push_back(-static_cast<float>(k));  // and a vectorised stretch
    for (std::size_t k = 0; k < 40; ++k) s.push_back(-80.0f - 0.5f * static_cast<float>(k));  // across −87
    attn::Vector t = xt::adapt(s, {s.size()});                                                // (n)
    attn::ch05::exp_shift_sum(t.data(), t.size(), 0.0f);  // no undefined behaviour (UBSan checks it)
    CHECK(std::isnan(t(0)));
    std::vector<double> expected;  // exactly 0 below −87 (e^x under the smallest normal float), e^s above
    for (std::size_t j = 1; j < s.size(); ++j) expected.push_back(s[j] < -87.0f ? 0.0 : std::exp(double{s[j]}));
    // Within 2 ulp of float (the header's promise): relative 2.4e-7, 1e-6 with room; the zeros exactly.
    CHECK_ALLCLOSE(attn::Vector(xt::view(t, xt::range(1, s.size()))), expected, 0.0, 1e-6);
    for (std::size_t j = 1; j < s.size(); ++j) {
      CAPTURE(s[j]);
      // A weight is 0 or a normal float: a subnormal one makes the P·V sums crawl on Intel cores.
      CHECK_MESSAGE((t(j) == 0.0f || t(j) >= std::numeric_limits<float>::min()), "e^", s[j], " = ", t(j));
    }
  }

  // The micro-kernels' products against float64, per element: a sum of k products rounded in float32 (with
  // FMA or not) is within γ_k+1 · Σ|terms| of the exact sum, γ_k+1 ≈ (k + 1)·2^-24 (Higham, Accuracy and
  // Stability of Numerical Algorithms, §3.1); the +1 covers the final scaling of S or the O term it adds to.
  TEST_CASE(
      "the tile micro-kernels equal float64 products within the rounding bound on every ISA, and so does "
      "the kernel built on them") {
    const double u = std::ldexp(1.0, -24);
    attn::Rng rng(61);
    int tried = 0;
    for (const std::string isa : {"AVX-512", "AVX2+FMA", "NEON", "none"}) {  // "none": OpenBLAS does the products
      if (!attn::ch05::use_tile_kernels(isa)) continue;                      // this CPU cannot run it
      tried += isa != "none";
      CAPTURE(isa);
      const std::size_t w = attn::ch05::key_panel_width();
      for (const auto& [rows, n_kv, d_k, d_v] : std::vector<std::array<std::size_t, 4>>{
               {1, 1, 1, 3}, {5, 31, 7, 16}, {8, 33, 64, 64}, {13, 70, 64, 93}, {9, 64, 16, 8}, {25, 40, 16, 32}}) {
        if (w == 0) break;
        CAPTURE(rows);
        CAPTURE(n_kv);
        const Matrix Q = rng.normal(rows, d_k), K = rng.normal(n_kv, d_k);
        const std::size_t panels = attn::ch05::key_panels(n_kv), ld_s = panels * w;
        std::vector<float> packed(panels * d_k * w), S(rows * ld_s, -1.0f);
        attn::ch05::pack_keys(K.data(), n_kv, d_k, packed.data());
        attn::ch05::scores_tile(Q.data(), rows, d_k, d_k, packed.data(), panels, 0.125f, S.data(), ld_s);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = 0; j < ld_s; ++j) {
            double exact = 0.0, size = 0.0;
            for (std::size_t k = 0; k < d_k && j < n_kv; ++k) {
              exact += 0.125 * static_cast<double>(Q(r, k)) * static_cast<double>(K(j, k));
              size += std::fabs(0.125 * static_cast<double>(Q(r, k)) * static_cast<double>(K(j, k)));
            }
            // Past the last key the zero padding gives exactly 0.
            REQUIRE(std::fabs(S[r * ld_s + j] - exact) <= static_cast<double>(d_k + 1) * u * size);
          }
        // The row maxima taken in the kernel's epilogue, over each row's visible columns only (a causal cut: some
        // rows see none, some part of a panel, some all keys): the largest of the exact visible scores, within the
        // same bound, and an update of m (a row whose m is already above every score keeps it). Including a hidden
        // column or the zero padding shows wherever a row's visible scores are all negative.
        std::vector<std::size_t> visible(rows);
        std::vector<float> m(rows, -std::numeric_limits<float>::infinity());
        for (std::size_t r = 0; r < rows; ++r) visible[r] = (r * 7 + 3) % (n_kv + 1);
        m[rows - 1] = 1e6f;
        attn::ch05::scores_tile(Q.data(), rows, d_k, d_k, packed.data(), panels, 0.125f, S.data(), ld_s, visible.data(),
                                m.data());
        for (std::size_t r = 0; r < rows; ++r) {
          CAPTURE(r);
          CAPTURE(visible[r]);
          double exact = r == rows - 1 ? 1e6 : -std::numeric_limits<double>::infinity(), size = 0.0;
          for (std::size_t j = 0; j < visible[r]; ++j) {
            double s = 0.0, s_size = 0.0;
            for (std::size_t k = 0; k < d_k; ++k) {
              s += 0.125 * static_cast<double>(Q(r, k)) * static_cast<double>(K(j, k));
              s_size += std::fabs(0.125 * static_cast<double>(Q(r, k)) * static_cast<double>(K(j, k)));
            }
            exact = std::max(exact, s);
            size = std::max(size, s_size);
          }
          if (std::isinf(exact))
            REQUIRE(m[r] == -std::numeric_limits<float>::infinity());  // saw nothing: unchanged
          else  // the largest rounded score is within the largest column's rounding bound of the largest exact one
            REQUIRE(std::fabs(m[r] - exact) <= static_cast<double>(d_k + 1) * u * size);
        }
        const Matrix P = rng.uniform(rows, n_kv, 0.0f, 1.0f), V = rng.normal(n_kv, d_v);
        Matrix O = rng.normal(rows, d_v);
        const Matrix O0 = O;
        attn::ch05::accumulate_pv(P.data(), rows, n_kv, n_kv, V.data(), d_v, d_v, O.data(), d_v);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < d_v; ++c) {
            double exact = O0(r, c), size = std::fabs(static_cast<double>(O0(r, c)));
            for (std::size_t j = 0; j < n_kv; ++j) {
              exact += static_cast<double>(P(r, j)) * static_cast<double>(V(j, c));
              size += std::fabs(static_cast<double>(P(r, j)) * static_cast<double>(V(j, c)));
            }
            REQUIRE(std::fabs(O(r, c) - exact) <= static_cast<double>(n_kv + 1) * u * size);
          }
      }
      // And the whole kernel on this instruction set, as in the test above.
      const Matrix Q = rng.normal(67, 64), K = rng.normal(67, 64), V = rng.normal(67, 64);
      for (const bool causal : {false, true}) {
        const std::vector<bool> allowed = oracle::causal_allowed(67, 67);
        const oracle::Mat expected =
            oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), causal ? &allowed : nullptr);
        const double tol = 2.0 * full_attention_error(Q, K, V, causal, expected) + kFloor;
        CHECK_ALLCLOSE(attn::ch05::flash_attention_fast(Q, K, V, causal, {16, 32, 2}).O, expected, tol, 0.0);
      }
    }
    REQUIRE(attn::ch05::use_tile_kernels("auto"));
    MESSAGE("micro-kernel instruction sets this CPU ran: " << tried << " (the vector path's: "
                                                           << std::string(attn::ch05::tile_kernel_isa()) << ")");
  }

  TEST_CASE("attention_row refuses a NaN or +inf lse and NaN in Q or K, naming them") {
    attn::Rng rng(62);
    const Matrix Q = rng.normal(3, 4), K = rng.normal(5, 4), V = rng.normal(5, 2);
    const attn::FlashOutput f = attn::flash_attention(Q, K, V, false, 2, 2);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      Vector lse = f.lse;
      lse(1) = bad;
      CHECK_THROWS_NAMING(attn::attention_row(Q, K, lse, 1, false), std::invalid_argument, "lse[1]");
    }
    Matrix bad_K = K;
    bad_K(2, 3) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::attention_row(Q, bad_K, f.lse, 0, false), std::invalid_argument, "K[11]");
  }

  TEST_CASE("the fast kernel's input check, shared among its threads, names the first NaN or infinity of Q, K, V") {
    // 2 × 4096 × 8 floats each: large enough for the scan to be shared among the kernel's threads.
    const attn::Tensor3 clean = xt::ones<float>({2, 4096, 8});  // (h, n, d)
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (const int threads : {1, 2, 3}) {
      CAPTURE(threads);
      attn::Tensor3 Q = clean, K = clean, V = clean;
      V(0, 0, 0) = inf;
      K(1, 4095, 7) = nan;  // K's last element, and a later one than V's culprit: K is named first
      K(1, 4095, 6) = -inf;
      CHECK_THROWS_NAMING(attn::ch05::flash_attention_fast(Q, K, V, false, attn::ch05::default_tiles_on(threads)),
                          std::invalid_argument, "K[65534] is -inf");
      Q(0, 2048, 0) = nan;  // the middle of Q
      CHECK_THROWS_NAMING(attn::ch05::flash_attention_fast(Q, K, V, true, attn::ch05::default_tiles_on(threads)),
                          std::invalid_argument, "Q[16384] is nan");
    }
  }
}
