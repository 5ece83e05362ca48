// Chapter 07 on bad input: the mask builders of sparse.hpp and the pattern tools of patterns.hpp, on the
// solution track only (the learner's exercise suites stay as they are). A size whose mask cannot fit must be
// refused before allocating, with the estimate; a parameter out of range named; never a hang.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "07_sparse/patterns.hpp"
#include "07_sparse/sparse.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Mask;
using attn::Matrix;
namespace hostile = attn::test::hostile;

constexpr std::size_t kWraps = std::size_t{1} << 32;  // n·n wraps 64 bits
constexpr std::size_t kHuge = std::size_t{1} << 22;   // n·n bools = 16 TiB: past any memory

}  // namespace

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("07_sparse: bad input") {
  TEST_CASE("every mask builder refuses an (n, n) mask that wraps or cannot fit, before allocating") {
    CHECK_THROWS_NAMING(attn::local_window_mask(kHuge, 4), std::invalid_argument, "local_window_mask", "available");
    CHECK_THROWS_NAMING(attn::local_window_mask(kWraps, 4), std::invalid_argument, "local_window_mask");
    CHECK_THROWS_NAMING(attn::global_mask(kHuge, {0}), std::invalid_argument, "global_mask");
    CHECK_THROWS_NAMING(attn::dilated_mask(kHuge, 2, 3), std::invalid_argument, "dilated_mask");
    CHECK_THROWS_NAMING(attn::random_mask(kHuge, 2, 1), std::invalid_argument, "random_mask", "available");
    CHECK_THROWS_NAMING(attn::longformer_mask(kHuge, 4, {0}), std::invalid_argument, "available");
    CHECK_THROWS_NAMING(attn::bigbird_mask(kWraps, 4, {0}, 2, 1), std::invalid_argument, "(n, n) mask");
    CHECK_THROWS_NAMING(attn::strided_mask(kHuge, 64), std::invalid_argument, "available");
  }

  TEST_CASE("the published patterns refuse a global position past n, and a stride of 0") {
    CHECK_THROWS_NAMING(attn::longformer_mask(8, 2, {3, 8}), std::invalid_argument, "global position 8", "n = 8");
    CHECK_THROWS_NAMING(attn::bigbird_mask(8, 2, {9}, 2, 1), std::invalid_argument, "global position 9");
    CHECK_THROWS_NAMING(attn::strided_mask(8, 0), std::invalid_argument, "stride");
  }

  TEST_CASE(
      "mask_union refuses masks of two shapes, and receptive_field refuses a non-square mask and endless layers") {
    const Mask a = attn::local_window_mask(4, 1), b = xt::zeros<bool>({4, 5});
    CHECK_THROWS_NAMING(attn::mask_union(a, b), std::invalid_argument, "(4, 4)", "(4, 5)");
    CHECK_THROWS_NAMING(attn::receptive_field(b, 2), std::invalid_argument, "(4, 5)");
    // SIZE_MAX layers of n³ steps each never ended.
    CHECK_THROWS_NAMING(attn::receptive_field(a, std::numeric_limits<std::size_t>::max()), std::invalid_argument,
                        "18446744073709551615 layers");
    // At the limit, a window's field stops growing after n layers: the answer comes at once, every pair reached.
    const Mask all = attn::receptive_field(a, attn::kMaxReceptiveLayers);
    CHECK(attn::allowed_pairs(all) == 16);
  }

  TEST_CASE("allowed_pairs, mask_density, sparse_rows and random_mask answer empty masks and r past n") {
    // bad input answered: allowed_pairs, mask_density, sparse_rows, random_mask
    const Mask empty = xt::zeros<bool>({0, 0}), none = xt::zeros<bool>({3, 2});
    CHECK(attn::allowed_pairs(empty) == 0);
    CHECK(attn::mask_density(empty) == 0.0);  // not 0/0
    CHECK(attn::mask_density(none) == 0.0);
    const attn::SparseRows rows = attn::sparse_rows(none);
    CHECK(rows.row_start == std::vector<std::size_t>{0, 0, 0, 0});
    CHECK(rows.cols.empty());
    CHECK(attn::allowed_pairs(attn::random_mask(5, 99, 1)) == 25);  // r > n: every key, once
    CHECK(attn::random_mask(0, 3, 1).size() == 0);
  }
}

// The defect a hostile call found in chapter 07's own code.
TEST_SUITE("07_sparse: hostile input") {
  TEST_CASE("window_block_layout with a tile wider than the sequence builds the one tile the sequence has") {
    // bad input answered: window_block_layout
    const attn::BlockLayout L = attn::window_block_layout(4, 1, false, 1, std::size_t{1} << 33);
    CHECK(L.tiles() == 4);  // one column of tiles, one tile per row of 1
    CHECK(L.computed_pairs() == 16);
    // Attending with it asked for a score tile of B_r × B_c = 2^33 floats (32 GiB) before: now the keys there are.
    const attn::Matrix Q{{1.0f, 0.0f}, {0.0f, 1.0f}, {1.0f, 1.0f}, {0.5f, 0.0f}};
    const attn::Matrix O = attn::block_sparse_attention(Q, Q, Q, L, 1);
    const attn::Matrix expected =
        attn::block_sparse_attention(Q, Q, Q, attn::window_block_layout(4, 1, false, 1, 4), 1);
    const auto cmp = attn::test::allclose(O, attn::test::to_oracle(expected), 1e-6, 1e-6);  // kernels differ: rounding
    CHECK_MESSAGE(cmp.ok, cmp.report);
  }
}

// Defects the battery below found in block_sparse_attention's check of a hand-made layout.
TEST_SUITE("07_sparse: hostile input") {
  TEST_CASE("block_sparse_attention refuses a decreasing row_start before reading tiles, and a key tile that wraps") {
    const Matrix Q = xt::ones<float>({4, 3}), K = xt::ones<float>({5, 3}), V = xt::ones<float>({5, 2});
    const attn::BlockLayout good = attn::block_layout(xt::ones<bool>({4, 5}), 2, 2);  // 2 × 3 tiles, all full
    attn::BlockLayout backwards = good;
    backwards.row_start = {0, 8, 6};  // row 0 would run over tiles 0 .. 7 of 6: checked before any is read
    CHECK_THROWS_NAMING(attn::block_sparse_attention(Q, K, V, backwards), std::invalid_argument, "row_start", "8");
    attn::BlockLayout wraps = good;
    wraps.col_tile[1] = std::size_t{1} << 63;  // · B_c = 2 wraps to column 0: once taken for key tile 0
    CHECK_THROWS_NAMING(attn::block_sparse_attention(Q, K, V, wraps), std::invalid_argument, "col_tile[1]",
                        "9223372036854775808");
  }
}

// The hostile-input battery (tests/support/hostile.hpp) on chapter 07's own code: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says. The index
// lists and the layout are given to the battery field by field, so each field is made hostile in turn.
TEST_SUITE("07_sparse: hostile battery") {
  constexpr std::size_t kFits = std::size_t{1} << 20;  // an (n, n) mask of bools below this n fits in the memory

  TEST_CASE("the pattern tools under the hostile battery") {
    // hostile battery: mask_union, random_mask, allowed_pairs, mask_density, receptive_field, sparse_rows
    Mask a = xt::zeros<bool>({4, 5}), b = xt::zeros<bool>({4, 5});
    a(0, 1) = a(2, 3) = b(1, 1) = b(2, 3) = true;
    hostile::battery(
        "mask_union", {"a", "b"}, [](const Mask& x, const Mask& y) { return attn::mask_union(x, y); }, a, b)
        .fits([](const Mask& x, const Mask& y) { return x.shape() == y.shape(); })
        .answer([](const Mask& u, const Mask& x, const Mask& y) {
          bool ok = u.shape() == x.shape();
          for (std::size_t i = 0; ok && i < u.size(); ++i) ok = u.data()[i] == (x.data()[i] || y.data()[i]);
          return ok;
        })
        .run();
    hostile::battery(
        "random_mask", {"n", "r", "seed"},
        [](std::size_t n, std::size_t r, std::uint64_t seed) { return attn::random_mask(n, r, seed); }, std::size_t{6},
        std::size_t{2}, std::uint64_t{7})
        .fits([](std::size_t n, std::size_t, std::uint64_t) { return n < kFits; })
        .answer([](const Mask& m, std::size_t n, std::size_t r, std::uint64_t) {
          return m.shape(0) == n && m.shape(1) == n && attn::allowed_pairs(m) == n * std::min(n, r);
        })
        .run();
    hostile::battery(
        "allowed_pairs", {"mask"}, [](const Mask& m) { return attn::allowed_pairs(m); }, a)
        .answer(
            [](std::size_t pairs, const Mask& m) { return pairs == std::size_t(std::count(m.begin(), m.end(), true)); })
        .run();
    hostile::battery(
        "mask_density", {"mask"}, [](const Mask& m) { return attn::mask_density(m); }, a)
        .answer([](double d, const Mask& m) { return d >= 0.0 && d <= 1.0 && (m.size() > 0 || d == 0.0); })
        .run();
    Mask square = xt::zeros<bool>({5, 5});
    for (std::size_t i = 0; i < 5; ++i) square(i, i) = square(i, (i + 1) % 5) = true;
    hostile::battery(
        "receptive_field", {"mask", "layers"},
        [](const Mask& m, std::size_t layers) { return attn::receptive_field(m, layers); }, square, std::size_t{2})
        .fits([](const Mask& m, std::size_t layers) {
          return m.shape(0) == m.shape(1) && layers <= attn::kMaxReceptiveLayers;
        })
        .answer([](const Mask& R, const Mask& m, std::size_t) { return R.shape() == m.shape(); })
        .run();
    hostile::battery(
        "sparse_rows", {"mask"},
        [](const Mask& m) {
          const attn::SparseRows rows = attn::sparse_rows(m);
          return std::vector<std::size_t>{rows.n_q, rows.n_kv, rows.row_start.size(), rows.cols.size()};
        },
        a)
        .answer([](const std::vector<std::size_t>& r, const Mask& m) {
          return r[0] == m.shape(0) && r[1] == m.shape(1) && r[2] == m.shape(0) + 1 && r[3] == attn::allowed_pairs(m);
        })
        .run();
  }

  TEST_CASE("the sparse kernels and the window's layout under the hostile battery") {
    // hostile battery: row_sparse_attention, window_block_layout, block_sparse_attention
    attn::Rng rng(4717);
    const Matrix Q(rng.normal(4, 3)), K(rng.normal(5, 3)), V(rng.normal(5, 2));
    Mask mask = xt::ones<bool>({4, 5});
    mask(0, 3) = mask(0, 4) = mask(3, 0) = false;
    const attn::SparseRows rows = attn::sparse_rows(mask);
    hostile::battery(
        "row_sparse_attention", {"Q", "K", "V", "n_q", "n_kv", "row_start", "cols"},
        [](const Matrix& q, const Matrix& k, const Matrix& v, std::size_t n_q, std::size_t n_kv,
           const std::vector<std::size_t>& row_start, const std::vector<std::size_t>& cols) {
          return attn::row_sparse_attention(q, k, v, attn::SparseRows{n_q, n_kv, row_start, cols});
        },
        Q, K, V, rows.n_q, rows.n_kv, rows.row_start, rows.cols)
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v, std::size_t n_q, std::size_t n_kv,
                 const std::vector<std::size_t>& row_start, const std::vector<std::size_t>& cols) {
          bool ok = q.shape(0) == n_q && k.shape(0) == n_kv && v.shape(0) == n_kv && q.shape(1) == k.shape(1) &&
                    row_start.size() == n_q + 1 && row_start[0] == 0 && row_start.back() == cols.size();
          for (std::size_t i = 0; ok && i + 1 < row_start.size(); ++i) ok = row_start[i] <= row_start[i + 1];
          for (std::size_t t = 0; ok && t < cols.size(); ++t) ok = cols[t] < n_kv;
          return ok;
        })
        .answer([](const Matrix& O, const Matrix& q, const Matrix&, const Matrix& v, std::size_t, std::size_t,
                   const std::vector<std::size_t>&,
                   const std::vector<std::size_t>&) { return O.shape(0) == q.shape(0) && O.shape(1) == v.shape(1); })
        .run();
    hostile::battery(
        "window_block_layout", {"n", "w", "causal", "B_r", "B_c"},
        [](std::size_t n, std::size_t w, bool causal, std::size_t B_r, std::size_t B_c) {
          const attn::BlockLayout L = attn::window_block_layout(n, w, causal, B_r, B_c);
          return std::vector<std::size_t>{L.n_q, L.row_start.size(), L.computed_pairs()};
        },
        std::size_t{7}, std::size_t{1}, false, std::size_t{2}, std::size_t{3})
        .fits([](std::size_t n, std::size_t, bool, std::size_t B_r, std::size_t B_c) {
          return B_r >= 1 && B_c >= 1 && n < kFits;
        })
        .answer([](const std::vector<std::size_t>& r, std::size_t n, std::size_t w, bool causal, std::size_t B_r,
                   std::size_t) {
          const std::size_t T_r = n / B_r + (n % B_r != 0);
          return r[0] == n && r[1] == T_r + 1 && r[2] >= attn::allowed_pairs(attn::local_window_mask(n, w, causal));
        })
        .run();
    const attn::BlockLayout L = attn::block_layout(mask, 2, 2);
    hostile::battery(
        "block_sparse_attention",
        {"Q", "K", "V", "n_q", "n_kv", "B_r", "B_c", "row_start", "col_tile", "tile_mask", "masks", "threads"},
        [](const Matrix& q, const Matrix& k, const Matrix& v, std::size_t n_q, std::size_t n_kv, std::size_t B_r,
           std::size_t B_c, const std::vector<std::size_t>& row_start, const std::vector<std::size_t>& col_tile,
           const std::vector<std::size_t>& tile_mask, const std::vector<Mask>& masks, std::size_t threads) {
          return attn::block_sparse_attention(
              q, k, v, attn::BlockLayout{n_q, n_kv, B_r, B_c, row_start, col_tile, tile_mask, masks}, threads);
        },
        Q, K, V, L.n_q, L.n_kv, L.B_r, L.B_c, L.row_start, L.col_tile, L.tile_mask, L.masks, std::size_t{2})
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v, std::size_t n_q, std::size_t n_kv, std::size_t B_r,
                 std::size_t B_c, const std::vector<std::size_t>& row_start, const std::vector<std::size_t>& col_tile,
                 const std::vector<std::size_t>& tile_mask, const std::vector<Mask>& masks, std::size_t threads) {
          // The layout's rule, written out: tiles that exist, lists that agree, a piece of the mask per partial tile.
          if (!(q.shape(1) == k.shape(1) && k.shape(0) == v.shape(0) && q.shape(0) == n_q && k.shape(0) == n_kv &&
                B_r >= 1 && B_c >= 1 && threads >= 1))
            return false;
          const std::size_t T_r = n_q / B_r + (n_q % B_r != 0), T_c = n_kv / B_c + (n_kv % B_c != 0);
          if (!(row_start.size() == T_r + 1 && row_start[0] == 0 && row_start.back() == col_tile.size() &&
                tile_mask.size() == col_tile.size()))
            return false;
          for (std::size_t r = 0; r < T_r; ++r)  // all of row_start first: a late decrease lets a row run past
            if (row_start[r] > row_start[r + 1]) return false;
          for (std::size_t r = 0; r < T_r; ++r) {
            for (std::size_t t = row_start[r]; t < row_start[r + 1]; ++t) {
              if (col_tile[t] >= T_c) return false;
              if (tile_mask[t] == attn::BlockLayout::kFull) continue;
              const std::size_t h = std::min(B_r, n_q - r * B_r), w = std::min(B_c, n_kv - col_tile[t] * B_c);
              if (tile_mask[t] >= masks.size() || masks[tile_mask[t]].shape(0) != h ||
                  masks[tile_mask[t]].shape(1) != w)
                return false;
            }
          }
          return true;
        })
        .answer([](const Matrix& O, const Matrix& q, const Matrix&, const Matrix& v, std::size_t, std::size_t,
                   std::size_t, std::size_t, const std::vector<std::size_t>&, const std::vector<std::size_t>&,
                   const std::vector<std::size_t>&, const std::vector<Mask>&,
                   std::size_t) { return O.shape(0) == q.shape(0) && O.shape(1) == v.shape(1); })
        .run();
  }
}
