// Chapter 07 on bad input: the mask builders of sparse.hpp and the pattern tools of patterns.hpp, on the
// solution track only (the learner's exercise suites stay as they are). A size whose mask cannot fit must be
// refused before allocating, with the estimate; a parameter out of range named; never a hang.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <vector>

#include "07_sparse/patterns.hpp"
#include "07_sparse/sparse.hpp"
#include "support/allclose.hpp"
#include "support/throws.hpp"

namespace {

using attn::Mask;

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
