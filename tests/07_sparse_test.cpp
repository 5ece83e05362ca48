// Chapter 07's tests, run against both tracks. Masks are checked against the rule that defines each
// pattern, written here pair by pair, and pair counts against closed forms; every attention result is
// checked against the float64 oracle's dense attention under the same mask (tests/oracle).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/heap_counter.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "07_sparse/sparse.hpp"
#include "attn/checks.hpp"
#include "attn/rng.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Mask;
using attn::Matrix;
using attn::test::to_oracle;
namespace hostile = attn::test::hostile;

// float32 against float64 with Q, K, V ~ N(0, 1) and d_k ≤ 16: a score's rounding error is below
// d_k·2^-24·Σ_c|q_c k_c| ≈ 16·6e-8·16 ≈ 1.5e-5, which the softmax turns into a relative error of the
// same size in each weight; outputs are convex combinations of V entries (|v| < 5), so differences stay
// below 1e-4 (the sums over ≤ 40 keys add ≤ 40·6e-8 relative).
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-4;

/// The mask the rule \p allowed(i, j) defines, (n, n), written independently of the solutions.
Mask by_rule(std::size_t n, const std::function<bool(std::size_t, std::size_t)>& allowed) {
  Mask m = xt::zeros<bool>({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) m(i, j) = allowed(i, j);
  return m;
}

std::size_t dist(std::size_t i, std::size_t j) { return i > j ? i - j : j - i; }

attn::oracle::Mat oracle_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& mask) {
  const std::vector<bool> allowed = to_oracle(mask);
  return attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed);
}

/// The patterns every kernel is run on, at sequence length n: name and mask.
std::vector<std::pair<const char*, Mask>> patterns(std::size_t n) {
  return {{"window w=2", attn::local_window_mask(n, 2)},
          {"causal window w=3", attn::local_window_mask(n, 3, true)},
          {"window wider than n", attn::local_window_mask(n, n + 5)},
          {"dilated w=2 r=3", attn::dilated_mask(n, 2, 3)},
          {"only itself (dilated w=0)", attn::dilated_mask(n, 0, 1)},
          {"Longformer", attn::longformer_mask(n, 1, {0})},
          {"BigBird", attn::bigbird_mask(n, 1, {0}, 2, 7)},
          {"strided, stride 4", attn::strided_mask(n, 4)}};
}

}  // namespace

TEST_SUITE("07_sparse") {
  TEST_CASE("local_window_mask allows exactly |i - j| <= w, or i - w <= j <= i when causal" *
            doctest::test_suite("07_sparse/local_window_mask")) {
    for (std::size_t n : {1u, 2u, 7u, 13u})
      for (std::size_t w : {0u, 1u, 3u, 20u}) {
        CAPTURE(n);
        CAPTURE(w);
        CHECK(attn::local_window_mask(n, w) == by_rule(n, [&](auto i, auto j) { return dist(i, j) <= w; }));
        CHECK(attn::local_window_mask(n, w, true) == by_rule(n, [&](auto i, auto j) { return j <= i && i - j <= w; }));
      }
    CHECK(attn::local_window_mask(0, 3).size() == 0);
  }

  TEST_CASE("local_window_mask as wide as the sequence is full attention, its causal twin the causal mask" *
            doctest::test_suite("07_sparse/local_window_mask")) {
    CHECK(attn::local_window_mask(9, 9) == Mask(xt::ones<bool>({9, 9})));
    CHECK(attn::local_window_mask(9, 100, true) == attn::causal_mask(9, 9));
    // w = SIZE_MAX: i + w must saturate, not wrap around to i - 1 (which would drop every row's own key and after).
    constexpr std::size_t kHuge = std::numeric_limits<std::size_t>::max();
    CHECK_MESSAGE(attn::local_window_mask(9, kHuge) == Mask(xt::ones<bool>({9, 9})),
                  "local_window_mask(9, SIZE_MAX) should allow every pair: does i + w wrap around?");
    CHECK(attn::local_window_mask(9, kHuge, true) == attn::causal_mask(9, 9));
  }

  TEST_CASE("local_window_mask's pair count and density match the closed form n(2w+1) - w(w+1)" *
            doctest::test_suite("07_sparse/local_window_mask")) {
    // Row i loses the keys past either end: in all, w(w+1)/2 at each end (w < n).
    for (auto [n, w] : {std::array<std::size_t, 2>{64, 4}, {100, 7}, {1, 0}, {13, 12}}) {
      const Mask m = attn::local_window_mask(n, w);
      CHECK(attn::allowed_pairs(m) == n * (2 * w + 1) - w * (w + 1));
      CHECK(attn::mask_density(m) ==
            doctest::Approx(static_cast<double>(n * (2 * w + 1) - w * (w + 1)) / static_cast<double>(n * n)));
      CHECK(attn::allowed_pairs(attn::local_window_mask(n, w, true)) == n * (w + 1) - w * (w + 1) / 2);
    }
  }

  TEST_CASE("global_mask opens the rows and columns of the global positions, 2gn - g² pairs" *
            doctest::test_suite("07_sparse/global_mask")) {
    const std::size_t n = 11;
    const Mask m = attn::global_mask(n, {0, 5, 5});  // a duplicate changes nothing
    CHECK(m == by_rule(n, [](auto i, auto j) { return i == 0 || j == 0 || i == 5 || j == 5; }));
    CHECK(attn::allowed_pairs(m) == 2 * 2 * n - 2 * 2);
    CHECK(attn::allowed_pairs(attn::global_mask(n, {})) == 0);
  }

  TEST_CASE("global_mask rejects a position past the end, naming it and n" *
            doctest::test_suite("07_sparse/global_mask")) {
    CHECK_THROWS_NAMING(attn::global_mask(4, {1, 4}), std::invalid_argument, "4");
    CHECK_THROWS_NAMING(attn::global_mask(4, {9}), std::invalid_argument, "9");
  }

  TEST_CASE("dilated_mask allows j = i + k·dilation for |k| <= w, and dilation 1 is the plain window" *
            doctest::test_suite("07_sparse/dilated_mask")) {
    for (std::size_t n : {1u, 10u, 17u})
      for (std::size_t r : {1u, 2u, 5u}) {
        CAPTURE(n);
        CAPTURE(r);
        const auto rule = [&](std::size_t i, std::size_t j) { return dist(i, j) % r == 0 && dist(i, j) / r <= 2; };
        CHECK(attn::dilated_mask(n, 2, r) == by_rule(n, rule));
        CHECK(attn::dilated_mask(n, 2, r, true) == by_rule(n, [&](auto i, auto j) { return j <= i && rule(i, j); }));
      }
    CHECK(attn::dilated_mask(12, 3, 1) == attn::local_window_mask(12, 3));
    CHECK_THROWS_AS(attn::dilated_mask(5, 1, 0), std::invalid_argument);
  }

  TEST_CASE("dilated_mask with a dilation past n allows only the diagonal, even where k·dilation wraps around" *
            doctest::test_suite("07_sparse/dilated_mask")) {
    // 3 · 0xAAAAAAAAAAAAAAAB = 2^65 + 1 = 1 modulo 2^64: a bound written k·dilation <= i (or i + k·dilation < n)
    // lets k = 3 through as a distance of 1, allowing both neighbours. Every real distance k·dilation exceeds n.
    constexpr std::size_t kInverseOf3 = 0xAAAAAAAAAAAAAAABull;
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      CHECK_MESSAGE(attn::dilated_mask(8, 3, kInverseOf3, causal) == attn::local_window_mask(8, 0),
                    "dilated_mask(8, 3, 0xAAAAAAAAAAAAAAAB) should allow the diagonal alone: does k·dilation wrap?");
    }
  }

  TEST_CASE("the published patterns, unions of local_window_mask, global_mask, dilated_mask, match their papers" *
            doctest::test_suite("07_sparse/dilated_mask")) {
    const std::size_t n = 20;
    CHECK(attn::longformer_mask(n, 2, {0}) ==
          by_rule(n, [](auto i, auto j) { return dist(i, j) <= 2 || i == 0 || j == 0; }));
    // Sparse Transformer, stride 5: the last 5 positions and every 5th before, causal.
    CHECK(attn::strided_mask(n, 5) ==
          by_rule(n, [](auto i, auto j) { return j <= i && (i - j < 5 || (i - j) % 5 == 0); }));
    const Mask bigbird = attn::bigbird_mask(n, 2, {0}, 3, 42);
    CHECK(bigbird == attn::bigbird_mask(n, 2, {0}, 3, 42));  // seeded: the same pattern every time
    CHECK(attn::mask_union(bigbird, attn::longformer_mask(n, 2, {0})) == bigbird);
    for (std::size_t i = 1; i < n; ++i) {  // window + global + random adds at most 3 keys per row
      const std::size_t row = attn::allowed_pairs(Mask(xt::view(bigbird, xt::range(i, i + 1), xt::all())));
      const std::size_t base =
          attn::allowed_pairs(Mask(xt::view(attn::longformer_mask(n, 2, {0}), xt::range(i, i + 1), xt::all())));
      CHECK(row >= base);
      CHECK(row <= base + 3);
    }
  }

  TEST_CASE("local_window_mask in two layers reaches 2w, and global tokens connect any two positions in two hops" *
            doctest::test_suite("07_sparse/dilated_mask")) {
    const std::size_t n = 30;
    CHECK(attn::allowed_pairs(attn::local_window_mask(n, 2)) == n * 5 - 6);  // n(2w + 1) - w(w + 1)
    CHECK(attn::receptive_field(attn::local_window_mask(n, 2), 2) == attn::local_window_mask(n, 4));
    CHECK(attn::receptive_field(attn::dilated_mask(n, 1, 3), 1) == attn::dilated_mask(n, 1, 3));
    const Mask longformer = attn::longformer_mask(n, 1, {0});
    CHECK(attn::allowed_pairs(attn::receptive_field(longformer, 1)) < n * n);
    CHECK(attn::allowed_pairs(attn::receptive_field(longformer, 2)) == n * n);
  }

  TEST_CASE("sliding_window_attention equals the oracle's dense attention under the window mask" *
            doctest::test_suite("07_sparse/sliding_window_attention")) {
    attn::Rng rng(71);
    for (auto [n, w, d_k, d_v] : {std::array<std::size_t, 4>{1, 0, 1, 1},
                                  {1, 5, 3, 2},
                                  {13, 2, 5, 7},
                                  {31, 4, 16, 3},
                                  {9, 20, 8, 8},
                                  {40, 0, 4, 4}}) {
      CAPTURE(n);
      CAPTURE(w);
      const Matrix Q = rng.normal(n, d_k), K = rng.normal(n, d_k), V = rng.normal(n, d_v);
      for (bool causal : {false, true}) {
        CAPTURE(causal);
        const Mask mask = by_rule(n, [&](auto i, auto j) { return (causal ? j <= i : true) && dist(i, j) <= w; });
        CHECK_ALLCLOSE(attn::sliding_window_attention(Q, K, V, w, causal), oracle_attention(Q, K, V, mask), kAtol,
                       kRtol);
      }
    }
  }

  TEST_CASE("sliding_window_attention never holds an (n, n) matrix: its heap peak stays far below one" *
            doctest::test_suite("07_sparse/sliding_window_attention")) {
    // n = 2048, w = 2, d = 8: an (n, n) float score matrix is 16 MiB and the window's bool mask 4 MiB; the output O
    // is 64 KiB and one row's window 5 floats. The bound, 1 MiB, fails chapter 02's dense attention under the
    // window mask (it holds both) and leaves room for any O(n·w) bookkeeping.
    attn::Rng rng(79);
    const std::size_t n = 2048, w = 2, d = 8;
    const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
    const std::size_t bound = std::size_t{1} << 20;
    for (const bool causal : {false, true}) {
      CAPTURE(causal);
      Matrix O;
      const std::size_t peak =
          attn::ch04::measure_heap_peak([&] { O = attn::sliding_window_attention(Q, K, V, w, causal); });
      CHECK_MESSAGE(peak <= bound, "sliding_window_attention held ", peak, " bytes of heap at its peak; an (n, n) = (",
                    n, ", ", n, ") float matrix is ", n * n * sizeof(float), " bytes and the bound is ", bound,
                    ": compute the window's scores only");
      CHECK_ALLCLOSE(O, oracle_attention(Q, K, V, attn::local_window_mask(n, w, causal)), kAtol, kRtol);
    }
  }

  TEST_CASE("sliding_window_attention survives logits of ±1e4" *
            doctest::test_suite("07_sparse/sliding_window_attention")) {
    // K rows are one-hot and Q holds multiples of 1e4, so every score (q·k/√4) is exact in float32 and
    // the comparison is limited only by exp and the weighted sum: a few ulp of the outputs.
    const std::size_t n = 6, d_k = 4;
    Matrix K = xt::zeros<float>({n, d_k});
    for (std::size_t j = 0; j < n; ++j) K(j, j % d_k) = 1.0f;
    const Matrix Q = {{2e4f, 0, -2e4f, 0}, {0, 2e4f, 0, 0},    {-2e4f, 2e4f, 2e4f, 0},
                      {0, 0, 0, 2e4f},     {2e4f, 2e4f, 0, 0}, {0, -2e4f, 0, -2e4f}};
    attn::Rng rng(72);
    const Matrix V = rng.normal(n, 3);
    const Matrix O = attn::sliding_window_attention(Q, K, V, 2);
    CHECK_ALLCLOSE(O, oracle_attention(Q, K, V, attn::local_window_mask(n, 2)), 1e-6, 1e-6);
  }

  TEST_CASE("sliding_window_attention rejects shapes that do not fit, naming them" *
            doctest::test_suite("07_sparse/sliding_window_attention")) {
    const Matrix Q = xt::zeros<float>({4, 3}), K = xt::zeros<float>({5, 3}), V = xt::zeros<float>({4, 2});
    CHECK_THROWS_NAMING(attn::sliding_window_attention(Q, K, V, 1), std::invalid_argument, "5", "3");
    const Matrix K2 = xt::zeros<float>({4, 2});
    CHECK_THROWS_NAMING(attn::sliding_window_attention(Q, K2, V, 1), std::invalid_argument, "4", "2");
  }

  TEST_CASE("row lists of every pattern built on local_window_mask give the oracle's attention under that mask" *
            doctest::test_suite("07_sparse/dilated_mask")) {
    attn::Rng rng(73);
    for (std::size_t n : {1u, 6u, 23u}) {
      const Matrix Q = rng.normal(n, 8), K = rng.normal(n, 8), V = rng.normal(n, 5);
      CHECK(attn::local_window_mask(n, 2) == by_rule(n, [](auto i, auto j) { return dist(i, j) <= 2; }));
      for (const auto& [name, mask] : patterns(n)) {
        CAPTURE(name);
        CAPTURE(n);
        const attn::SparseRows rows = attn::sparse_rows(mask);
        CHECK(rows.cols.size() == attn::allowed_pairs(mask));
        CHECK_ALLCLOSE(attn::row_sparse_attention(Q, K, V, rows), oracle_attention(Q, K, V, mask), kAtol, kRtol);
      }
    }
  }

  TEST_CASE("a query allowed only itself copies its value row, in sliding_window_attention and every sparse path" *
            doctest::test_suite("07_sparse/block_layout")) {
    attn::Rng rng(74);
    const Matrix Q = rng.normal(7, 4), K = rng.normal(7, 4), V = rng.normal(7, 3);
    const Mask itself = attn::dilated_mask(7, 0, 1);  // the diagonal
    CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::block_layout(itself, 3, 3)), to_oracle(V), 0.0, 0.0);
    CHECK_ALLCLOSE(attn::sliding_window_attention(Q, K, V, 0), to_oracle(V), 0.0, 0.0);
  }

  TEST_CASE("block_layout makes block-sparse attention equal the oracle for every pattern, tile size, thread count" *
            doctest::test_suite("07_sparse/block_layout")) {
    attn::Rng rng(75);
    for (std::size_t n : {1u, 13u, 32u}) {
      const Matrix Q = rng.normal(n, 8), K = rng.normal(n, 8), V = rng.normal(n, 6);
      for (const auto& [name, mask] : patterns(n))
        for (auto [B_r, B_c, threads] : {std::array<std::size_t, 3>{4, 4, 1}, {5, 3, 3}, {16, 16, 2}, {1, 64, 1}}) {
          CAPTURE(name);
          CAPTURE(n);
          CAPTURE(B_r);
          CAPTURE(B_c);
          const attn::BlockLayout layout = attn::block_layout(mask, B_r, B_c);
          CHECK(layout.computed_pairs() >= attn::allowed_pairs(mask));
          CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, layout, threads), oracle_attention(Q, K, V, mask), kAtol,
                         kRtol);
        }
    }
  }

  TEST_CASE(
      "block_layout's tiles, and the band's, give the oracle's answer on each instruction set of chapter 05's "
      "micro-kernels and on OpenBLAS: several key tiles, partial and ragged ones, runs of full tiles, a gap "
      "between runs" *
      doctest::test_suite("07_sparse/block_layout")) {
    attn::Rng rng(77);
    // n = 150, w = 40, tiles of 32 × 64: three key tiles, the last 22 keys wide, all partial in the band, and
    // folded as one run of three when every tile is kept. n = 2500, w = 300: keys packed in more than one chunk
    // of 64 panels (the last ragged), and runs of up to eight full tiles between each row's partial ones. Sums
    // over ≤ 601 keys add ≤ 601·6e-8 ≈ 4e-5 relative: kAtol and kRtol still hold.
    for (const auto [n, w] : {std::array<std::size_t, 2>{150, 40}, {2500, 300}}) {
      CAPTURE(n);
      const Matrix Q = rng.normal(n, 16), K = rng.normal(n, 16), V = rng.normal(n, 12);
      const attn::oracle::Mat band =
          oracle_attention(Q, K, V, by_rule(n, [w = w](std::size_t i, std::size_t j) { return dist(i, j) <= w; }));
      const bool every_tile = n < 200;  // the dense oracle only where it is quick
      const attn::oracle::Mat all =
          every_tile ? oracle_attention(Q, K, V, by_rule(n, [](std::size_t, std::size_t) { return true; }))
                     : attn::oracle::Mat();
      // Two runs of full tiles in every row with a gap between them: a run must end where the keys jump.
      const Mask gapped = by_rule(n, [](std::size_t, std::size_t j) { return j < 128 || (j >= 256 && j < 384); });
      const attn::oracle::Mat two_runs = oracle_attention(Q, K, V, gapped);
      for (const char* isa : {"AVX-512", "AVX2+FMA", "none"}) {
        if (!attn::ch05::use_tile_kernels(isa)) continue;  // this CPU cannot run it
        CAPTURE(isa);
        CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::window_block_layout(n, w, false, 32, 64), 2), band,
                       kAtol, kRtol);
        CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::block_layout(gapped, 32, 64), 2), two_runs, kAtol,
                       kRtol);
        if (every_tile)
          CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::window_block_layout(n, n, false, 32, 64), 2), all,
                         kAtol, kRtol);
      }
    }
    attn::ch05::use_tile_kernels("auto");
  }

  TEST_CASE("every sparse path over local_window_mask gives a fully masked row zeros, never NaN" *
            doctest::test_suite("07_sparse/block_layout")) {
    attn::Rng rng(76);
    const std::size_t n = 10;
    const Matrix Q = rng.normal(n, 4), K = rng.normal(n, 4), V = rng.normal(n, 3);
    Mask mask = attn::local_window_mask(n, 2);
    CHECK(mask == by_rule(n, [](auto i, auto j) { return dist(i, j) <= 2; }));
    xt::row(mask, 3) = false;  // query 3 may see nothing
    const auto expected = oracle_attention(Q, K, V, mask);
    CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::block_layout(mask, 4, 4)), expected, kAtol, kRtol);
    CHECK_ALLCLOSE(attn::row_sparse_attention(Q, K, V, attn::sparse_rows(mask)), expected, kAtol, kRtol);
    const Mask none = attn::global_mask(n, {});  // nothing allowed anywhere
    CHECK(attn::block_layout(none, 4, 4).tiles() == 0);
    CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::block_layout(none, 4, 4)), attn::oracle::Mat(n, 3, 0.0),
                   0.0, 0.0);
  }

  TEST_CASE("block_layout keeps only tiles with allowed pairs and marks the full ones" *
            doctest::test_suite("07_sparse/block_layout")) {
    // n = 16, window w = 3, tiles 4 × 4: each query tile keeps its diagonal tile (full: no two of its
    // positions are more than 3 apart) and the tiles on either side (partial, 6 allowed pairs each).
    const attn::BlockLayout L = attn::block_layout(attn::local_window_mask(16, 3), 4, 4);
    CHECK(L.row_start == std::vector<std::size_t>{0, 2, 5, 8, 10});
    CHECK(L.col_tile == std::vector<std::size_t>{0, 1, 0, 1, 2, 1, 2, 3, 2, 3});
    CHECK(L.tiles() == 10);
    CHECK(L.partial_tiles() == 6);
    CHECK(L.computed_pairs() == 10 * 16);
    REQUIRE(L.tile_mask[0] == attn::BlockLayout::kFull);
    const Mask upper_corner = {{false, false, false, false},
                               {true, false, false, false},
                               {true, true, false, false},
                               {true, true, true, false}};
    REQUIRE(L.tile_mask[1] < L.masks.size());
    CHECK(L.masks[L.tile_mask[1]] == upper_corner);  // query tile 0, key tile 1: rows 1..3 see keys 4..6
    const attn::BlockLayout full = attn::block_layout(Mask(xt::ones<bool>({10, 7})), 4, 3);
    CHECK(full.tiles() == 3 * 3);
    CHECK(full.partial_tiles() == 0);
    CHECK(full.computed_pairs() == 70);  // edge tiles are smaller: exactly the 10 × 7 pairs
    CHECK_THROWS_AS(attn::block_layout(Mask(xt::ones<bool>({2, 2})), 0, 4), std::invalid_argument);
  }

  TEST_CASE("the window's layout built from the band equals block_layout of the window mask" *
            doctest::test_suite("07_sparse/block_layout")) {
    for (auto [n, w, B] : {std::array<std::size_t, 3>{16, 2, 4}, {37, 5, 8}, {9, 30, 4}, {1, 0, 2}, {50, 7, 6}})
      for (bool causal : {false, true}) {
        CAPTURE(n);
        CAPTURE(w);
        CAPTURE(causal);
        const attn::BlockLayout expected = attn::block_layout(attn::local_window_mask(n, w, causal), B, B);
        const attn::BlockLayout band = attn::window_block_layout(n, w, causal, B, B);
        CHECK(band.row_start == expected.row_start);
        CHECK(band.col_tile == expected.col_tile);
        REQUIRE(band.partial_tiles() == expected.partial_tiles());
        for (std::size_t t = 0; t < band.tiles(); ++t) {
          REQUIRE((band.tile_mask[t] == attn::BlockLayout::kFull) ==
                  (expected.tile_mask[t] == attn::BlockLayout::kFull));
          if (band.tile_mask[t] != attn::BlockLayout::kFull)
            CHECK(band.masks[band.tile_mask[t]] == expected.masks[expected.tile_mask[t]]);
        }
      }
  }

  TEST_CASE(
      "sliding_window_attention and every sparse kernel refuse NaN, Inf and scores that would overflow, naming them" *
      doctest::test_suite("07_sparse/sliding_window_attention")) {
    attn::Rng rng(77);
    const std::size_t n = 8;
    const Matrix Q = rng.normal(n, 4), K = rng.normal(n, 4), V = rng.normal(n, 3);
    const Mask window = attn::local_window_mask(n, 2);
    const attn::SparseRows rows = attn::sparse_rows(window);
    const attn::BlockLayout layout = attn::window_block_layout(n, 2, false, 4, 4);
    const std::vector<std::function<Matrix(const Matrix&, const Matrix&, const Matrix&)>> kernels = {
        [&](const Matrix& q, const Matrix& k, const Matrix& v) { return attn::row_sparse_attention(q, k, v, rows); },
        [&](const Matrix& q, const Matrix& k, const Matrix& v) {
          return attn::block_sparse_attention(q, k, v, layout, 2);
        },
        [&](const Matrix& q, const Matrix& k, const Matrix& v) { return attn::sliding_window_attention(q, k, v, 2); }};
    for (std::size_t which = 0; which < kernels.size(); ++which) {
      CAPTURE(which);
      for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        Matrix q = Q, k = K, v = V;
        q(5, 1) = bad;  // row 5's window holds keys 3..7: a silent kernel would hide it or spread NaN
        CHECK_THROWS_NAMING(kernels[which](q, K, V), std::invalid_argument, "Q", "21");
        k(0, 0) = bad;
        CHECK_THROWS_NAMING(kernels[which](Q, k, V), std::invalid_argument, "K", "0");
        v(7, 2) = bad;
        CHECK_THROWS_NAMING(kernels[which](Q, K, v), std::invalid_argument, "V", "23");
      }
      // q = k = 1e20: q·k overflows float although every input is finite.
      const Matrix huge = xt::ones<float>({n, std::size_t{4}}) * 1e20f;
      CHECK_THROWS_NAMING(kernels[which](huge, huge, V), std::invalid_argument, "overflow");
    }
  }

  TEST_CASE("local_window_mask of SIZE_MAX allows every pair, so the window kernels equal dense attention" *
            doctest::test_suite("07_sparse/sliding_window_attention")) {
    constexpr std::size_t kHuge = std::numeric_limits<std::size_t>::max();
    const std::size_t n = 6;
    const Mask all = attn::local_window_mask(n, kHuge);
    CHECK(attn::allowed_pairs(all) == n * n);  // not 21 of 36 with the diagonal dropped (i + w wrapped)
    CHECK(attn::allowed_pairs(attn::local_window_mask(n, kHuge, true)) == n * (n + 1) / 2);
    CHECK(attn::allowed_pairs(attn::dilated_mask(n, kHuge, kHuge)) == n);  // only the diagonal fits
    CHECK(attn::window_block_layout(n, kHuge, false, 2, 3).tiles() == 6);  // every tile of 3 × 2
    CHECK(attn::window_block_layout(n, kHuge, false, 2, 3).partial_tiles() == 0);
    // 2^33 tokens: billions of tiles (a terabyte of partial masks even for a window of 64) are refused before any
    // is built, with the estimate.
    CHECK_THROWS_NAMING(attn::window_block_layout(std::size_t{1} << 33, 64, false, 64, 64), std::invalid_argument,
                        "available");
    CHECK_THROWS_AS(attn::window_block_layout(std::size_t{1} << 33, kHuge, false, 64, 64), std::invalid_argument);
    attn::Rng rng(78);
    const Matrix Q = rng.normal(n, 4), K = rng.normal(n, 4), V = rng.normal(n, 3);
    const auto dense = attn::oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V));
    CHECK_ALLCLOSE(attn::sliding_window_attention(Q, K, V, kHuge), dense, kAtol, kRtol);
    CHECK_ALLCLOSE(attn::block_sparse_attention(Q, K, V, attn::window_block_layout(n, kHuge, false, 2, 3)), dense,
                   kAtol, kRtol);
  }
}

// What the chapter presents but does not ask for: run on the solution track only (the exercise track
// excludes suites named "...: chapter code", which would pass without any learner code).
TEST_SUITE("07_sparse: chapter code") {
  TEST_CASE("block-sparse attention cuts a tile wider than the keys to the keys, and refuses sizes past 64 bits") {
    // A tile of 3·2^59 key columns over 5 keys once asked every worker for a score tile of that width (a hostile call:
    // window_block_layout(4, 1, false, 1, 2^33) asked for 32 GiB); the tile holds the keys there are. (That the first
    // exception of a worker reaches the caller is run_on_threads()'s, tested in common_test.cpp.)
    const Matrix Q = xt::ones<float>({4, 3}), K = xt::ones<float>({5, 3}), V = xt::ones<float>({5, 2});
    attn::BlockLayout huge;
    huge.n_q = 4;
    huge.n_kv = 5;
    huge.B_r = 2;
    huge.B_c = std::size_t{3} << 59;
    huge.row_start = {0, 1, 2};
    huge.col_tile = {0, 0};
    huge.tile_mask = {attn::BlockLayout::kFull, attn::BlockLayout::kFull};
    attn::set_blas_threads(2);
    const int before = attn::blas_threads();
    for (const std::size_t threads : {1, 2})
      CHECK(attn::block_sparse_attention(Q, K, V, huge, threads) == Matrix(xt::ones<float>({4, 2})));  // mean of ones
    CHECK(attn::blas_threads() == before);
    huge.B_c = std::size_t{1} << 62;  // 2^65 bytes: refused before any thread starts, naming the sizes
    CHECK_THROWS_NAMING(attn::block_sparse_attention(Q, K, V, huge, 2), std::invalid_argument,
                        "2 × 4611686018427387904");
  }

  TEST_CASE("row_sparse_attention refuses index lists that point past the keys or go backwards, never reading them") {
    const Matrix Q = xt::ones<float>({3, 2}), K = xt::ones<float>({4, 2}), V = xt::ones<float>({4, 2});
    attn::SparseRows rows = attn::sparse_rows(xt::ones<bool>({3, 4}));
    attn::SparseRows past = rows;
    past.cols[5] = 4;  // key 4 of 4
    CHECK_THROWS_NAMING(attn::row_sparse_attention(Q, K, V, past), std::invalid_argument, "cols[5] = 4");
    past.cols[5] = std::numeric_limits<std::size_t>::max();
    CHECK_THROWS_AS(attn::row_sparse_attention(Q, K, V, past), std::invalid_argument);
    attn::SparseRows backwards = rows;
    backwards.row_start = {0, 8, 4, 12};  // row 1 would span 8 .. 3
    CHECK_THROWS_NAMING(attn::row_sparse_attention(Q, K, V, backwards), std::invalid_argument, "decreases at row 1");
    attn::SparseRows late_start = rows;
    late_start.row_start[0] = 1;
    CHECK_THROWS_AS(attn::row_sparse_attention(Q, K, V, late_start), std::invalid_argument);
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
// values, each call refused naming what was wrong or answered as the contract says. A mask of (n, n) past the
// memory is refused before allocating; the sizes that fit are answered.
TEST_SUITE("07_sparse: hostile battery") {
  constexpr std::size_t kFits = std::size_t{1} << 20;  // an (n, n) mask of bools below this n fits in the memory

  TEST_CASE("local_window_mask under the hostile battery" * doctest::test_suite("07_sparse/local_window_mask")) {
    // hostile battery: local_window_mask
    hostile::battery(
        "local_window_mask", {"n", "w", "causal"},
        [](std::size_t n, std::size_t w, bool causal) { return attn::local_window_mask(n, w, causal); }, std::size_t{5},
        std::size_t{1}, false)
        .fits([](std::size_t n, std::size_t, bool) { return n < kFits; })
        .answer([](const Mask& m, std::size_t n, std::size_t w, bool causal) {
          return m ==
                 by_rule(n, [&](std::size_t i, std::size_t j) { return j <= i ? i - j <= w : !causal && j - i <= w; });
        })
        .run();
  }

  TEST_CASE("global_mask under the hostile battery" * doctest::test_suite("07_sparse/global_mask")) {
    // hostile battery: global_mask
    hostile::battery(
        "global_mask", {"n", "global"},
        [](std::size_t n, const std::vector<std::size_t>& g) { return attn::global_mask(n, g); }, std::size_t{5},
        std::vector<std::size_t>{0, 3})
        .fits([](std::size_t n, const std::vector<std::size_t>& g) {
          return n < kFits && std::all_of(g.begin(), g.end(), [&](std::size_t p) { return p < n; });
        })
        .answer([](const Mask& m, std::size_t n, const std::vector<std::size_t>& g) {
          const auto in = [&](std::size_t p) { return std::find(g.begin(), g.end(), p) != g.end(); };
          return m == by_rule(n, [&](std::size_t i, std::size_t j) { return in(i) || in(j); });
        })
        .run();
  }

  TEST_CASE("dilated_mask under the hostile battery" * doctest::test_suite("07_sparse/dilated_mask")) {
    // hostile battery: dilated_mask
    hostile::battery(
        "dilated_mask", {"n", "w", "dilation", "causal"},
        [](std::size_t n, std::size_t w, std::size_t r, bool causal) { return attn::dilated_mask(n, w, r, causal); },
        std::size_t{7}, std::size_t{1}, std::size_t{2}, false)
        .fits([](std::size_t n, std::size_t, std::size_t r, bool) { return n < kFits && r >= 1; })
        .answer([](const Mask& m, std::size_t n, std::size_t w, std::size_t r, bool causal) {
          return m == by_rule(n, [&](std::size_t i, std::size_t j) {
                   const std::size_t d = dist(i, j);
                   return d % r == 0 && d / r <= w && (j <= i || !causal);
                 });
        })
        .run();
  }

  TEST_CASE("sliding_window_attention under the hostile battery" *
            doctest::test_suite("07_sparse/sliding_window_attention")) {
    // hostile battery: sliding_window_attention
    attn::Rng rng(4707);
    hostile::battery(
        "sliding_window_attention", {"Q", "K", "V", "w", "causal"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t w, bool causal) {
          return attn::sliding_window_attention(Q, K, V, w, causal);
        },
        Matrix(rng.normal(5, 3)), Matrix(rng.normal(5, 3)), Matrix(rng.normal(5, 2)), std::size_t{1}, false)
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t, bool) {
          return K.shape(0) == Q.shape(0) && V.shape(0) == Q.shape(0) && K.shape(1) == Q.shape(1);
        })
        .answer([](const Matrix& O, const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t w, bool causal) {
          const std::size_t n = Q.shape(0);
          const auto cmp = attn::test::allclose(
              O,
              oracle_attention(Q, K, V,
                               by_rule(n, [&](std::size_t i,
                                              std::size_t j) { return j <= i ? i - j <= w : !causal && j - i <= w; })),
              kAtol, kRtol);
          return cmp.ok;
        })
        .run();
  }

  TEST_CASE("block_layout under the hostile battery" * doctest::test_suite("07_sparse/block_layout")) {
    // hostile battery: block_layout
    Mask mask = xt::ones<bool>({5, 6});
    mask(0, 5) = mask(4, 0) = false;
    hostile::battery(
        "block_layout", {"mask", "B_r", "B_c"},
        [](const Mask& m, std::size_t B_r, std::size_t B_c) { return attn::block_layout(m, B_r, B_c); }, mask,
        std::size_t{2}, std::size_t{4})
        .fits([](const Mask&, std::size_t B_r, std::size_t B_c) { return B_r >= 1 && B_c >= 1; })
        .answer([](const attn::BlockLayout& L, const Mask& m, std::size_t B_r, std::size_t B_c) {
          const std::size_t T_r = m.shape(0) / B_r + (m.shape(0) % B_r != 0);
          return L.n_q == m.shape(0) && L.n_kv == m.shape(1) && L.B_c == B_c && L.row_start.size() == T_r + 1 &&
                 L.computed_pairs() >= attn::allowed_pairs(m) && L.computed_pairs() <= m.size();
        })
        .run();
  }

  TEST_CASE("the published patterns under the hostile battery" * doctest::test_suite("07_sparse/dilated_mask")) {
    // hostile battery: longformer_mask, bigbird_mask, strided_mask
    const auto global_ok = [](std::size_t n, const std::vector<std::size_t>& g) {
      return n < kFits && std::all_of(g.begin(), g.end(), [&](std::size_t p) { return p < n; });
    };
    hostile::battery(
        "longformer_mask", {"n", "w", "global"},
        [](std::size_t n, std::size_t w, const std::vector<std::size_t>& g) { return attn::longformer_mask(n, w, g); },
        std::size_t{6}, std::size_t{1}, std::vector<std::size_t>{0, 4})
        .fits([&](std::size_t n, std::size_t, const std::vector<std::size_t>& g) { return global_ok(n, g); })
        .answer([](const Mask& m, std::size_t n, std::size_t w, const std::vector<std::size_t>&) {
          return m.shape(0) == n && m.shape(1) == n &&
                 attn::allowed_pairs(attn::mask_union(m, attn::local_window_mask(n, w))) == attn::allowed_pairs(m);
        })
        .run();
    hostile::battery(
        "bigbird_mask", {"n", "w", "global", "r", "seed"},
        [](std::size_t n, std::size_t w, const std::vector<std::size_t>& g, std::size_t r, std::uint64_t seed) {
          return attn::bigbird_mask(n, w, g, r, seed);
        },
        std::size_t{6}, std::size_t{1}, std::vector<std::size_t>{0, 4}, std::size_t{2}, std::uint64_t{7})
        .fits([&](std::size_t n, std::size_t, const std::vector<std::size_t>& g, std::size_t, std::uint64_t) {
          return global_ok(n, g);
        })
        .answer([](const Mask& m, std::size_t n, std::size_t w, const std::vector<std::size_t>& g, std::size_t,
                   std::uint64_t) {
          return m.shape(0) == n && m.shape(1) == n &&
                 attn::allowed_pairs(attn::mask_union(m, attn::longformer_mask(n, w, g))) == attn::allowed_pairs(m);
        })
        .run();
    hostile::battery(
        "strided_mask", {"n", "stride"},
        [](std::size_t n, std::size_t stride) { return attn::strided_mask(n, stride); }, std::size_t{9}, std::size_t{3})
        .fits([](std::size_t n, std::size_t stride) { return n < kFits && stride >= 1; })
        .answer([](const Mask& m, std::size_t n, std::size_t stride) {
          return m == by_rule(n, [&](std::size_t i, std::size_t j) {
                   return j <= i && (i - j < stride || (i - j) % stride == 0);
                 });
        })
        .run();
  }
}
