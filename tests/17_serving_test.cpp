// Chapter 17's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/17_serving_oracle.hpp), closed forms and counts, never from the other track.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "04_complexity/heap_counter.hpp"
#include "12_learning/model.hpp"
#include "12_learning/train.hpp"
#include "17_serving/model_serving.hpp"
#include "17_serving/paged_decode.hpp"
#include "17_serving/serve_sim.hpp"
#include "17_serving/serving.hpp"
#include "17_serving/trace.hpp"
#include "attn/random_heads.hpp"
#include "attn/rng.hpp"
#include "oracle/17_serving_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile_flash.hpp"
#include "support/throws.hpp"

namespace {

using attn::BlockAllocator;
using attn::BlockTable;
using attn::FlashOutput;
using attn::Matrix;
using attn::PagedKVCache;
using attn::Sequence;
using attn::Tensor3;
using attn::oracle::Heads;
using attn::oracle::Mat;

// Float32 against float64 with N(0,1) entries and d_k ≤ 16: a score's rounding error is about
// d_k·2^-24·|q||k|/√d_k ≈ 4e-6; softmax turns it into a relative weight error of that size and the output (a convex
// combination of values of size ~3) inherits ~1e-5. atol = rtol = 1e-4 leaves a margin of ten, as chapter 09 does.
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-4;
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Tokens [first, end) of every head: the oracle's view of one split.
Heads token_range(const Heads& H, std::size_t first, std::size_t end) {
  Heads out;
  for (const Mat& m : H) {
    Mat part(end - first, m.cols);
    for (std::size_t t = first; t < end; ++t)
      for (std::size_t c = 0; c < m.cols; ++c) part(t - first, c) = m(t, c);
    out.push_back(part);
  }
  return out;
}

/// A cache of one layer for g heads of width d, with room for \p blocks blocks of \p B.
PagedKVCache small_cache(std::size_t g, std::size_t d, std::size_t B, std::size_t blocks) {
  const attn::KvShape shape{1, g, d, d, B};
  return PagedKVCache(shape, blocks * attn::kv_block_bytes(shape, sizeof(float)));
}

/// Writes the n tokens of K and V (g, n, d) into \p table through append_slot, token by token; a second table
/// (\p other, when given) takes a block now and then, so the sequence's blocks are scattered through the pool.
void write_tokens(PagedKVCache& cache, BlockTable& table, const Tensor3& K, const Tensor3& V,
                  BlockTable* other = nullptr) {
  for (std::size_t t = 0; t < K.shape(1); ++t) {
    if (other != nullptr && t % 3 == 0) attn::append_slot(*other, cache.pool());
    const std::optional<attn::Slot> slot = attn::append_slot(table, cache.pool());
    REQUIRE(slot.has_value());
    cache.write(0, slot->block, slot->offset, xt::view(K, xt::all(), t, xt::all()),
                xt::view(V, xt::all(), t, xt::all()));
  }
}

/// A FlashOutput from float64 rows: O (rows, d_v) and lse (rows).
FlashOutput as_part(const Mat& O, const std::vector<double>& lse) {
  FlashOutput p{xt::zeros<float>({O.rows, O.cols}), attn::Vector(attn::Vector::shape_type{lse.size()}, 0.0f), 0};
  for (std::size_t i = 0; i < O.rows; ++i) {
    for (std::size_t c = 0; c < O.cols; ++c) p.O(i, c) = static_cast<float>(O(i, c));
    p.lse(i) = static_cast<float>(lse[i]);
  }
  return p;
}

/// n tokens 100·salt, 100·salt + 1, …: a prompt no other salt shares.
std::vector<attn::TokenId> prompt_of(std::size_t n, std::size_t salt) {
  std::vector<attn::TokenId> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = 100 * salt + i;
  return p;
}

/// A table of \p prompt's tokens in blocks of \p cache (allocated through it), its full blocks cached: a prefill.
BlockTable prefilled(attn::PrefixCache& cache, const std::vector<attn::TokenId>& prompt) {
  const std::size_t B = cache.block_size();
  BlockTable t;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (i % B == 0) t.blocks.push_back(*cache.allocate());
    ++t.length;
  }
  cache.insert(t, prompt);
  return t;
}

/// Every running table holds exactly its length's blocks, and the pool's used blocks are theirs (nothing shared).
void check_pool_accounts(const BlockAllocator& pool, const std::vector<Sequence>& running,
                         const std::deque<Sequence>& waiting) {
  std::size_t held = 0;
  for (const Sequence& s : running) {
    CHECK(s.table.blocks.size() == (s.table.length + pool.block_size() - 1) / pool.block_size());
    held += s.table.blocks.size();
    for (const attn::BlockId b : s.table.blocks) CHECK(pool.ref_count(b) == 1);
  }
  for (const Sequence& w : waiting) CHECK(w.table.blocks.empty());
  CHECK(held == pool.used_blocks());
  CHECK(pool.used_blocks() <= pool.total_blocks());
}

}  // namespace

TEST_SUITE("17_serving") {
  // --- append_slot ----------------------------------------------------------------------------------------------

  TEST_CASE("append_slot puts token t at offset t % B and allocates a block exactly at multiples of B" *
            doctest::test_suite("17_serving/append_slot")) {
    for (std::size_t B : {1, 3, 4, 16}) {
      BlockAllocator pool(64, B);
      BlockTable table;
      for (std::size_t t = 0; t < 40; ++t) {
        CAPTURE(B);
        CAPTURE(t);
        const std::size_t free_before = pool.free_blocks();
        const std::optional<attn::Slot> slot = attn::append_slot(table, pool);
        REQUIRE(slot.has_value());
        CHECK(slot->offset == t % B);
        CHECK(table.length == t + 1);
        CHECK(table.blocks.size() == t / B + 1);
        CHECK(slot->block == table.blocks[t / B]);
        CHECK(pool.free_blocks() == free_before - (t % B == 0 ? 1 : 0));  // a block only when the last is full
        CHECK(pool.ref_count(slot->block) == 1);
      }
    }
  }

  TEST_CASE("append_slot fills the last slot of a block without a free block, and fails only past it" *
            doctest::test_suite("17_serving/append_slot")) {
    BlockAllocator pool(2, 3);
    BlockTable table;
    for (std::size_t t = 0; t < 6; ++t) REQUIRE(attn::append_slot(table, pool).has_value());  // 2 blocks, all full
    CHECK(pool.free_blocks() == 0);
    const BlockTable before = table;
    CHECK_FALSE(attn::append_slot(table, pool).has_value());  // token 6 needs a third block
    CHECK(table.length == before.length);
    CHECK(table.blocks == before.blocks);
    CHECK(pool.free_blocks() == 0);
    // A block freed elsewhere lets it go on, at offset 0 of that block.
    BlockAllocator roomy(3, 3);
    BlockTable a;
    for (std::size_t t = 0; t < 5; ++t) REQUIRE(attn::append_slot(a, roomy).has_value());  // 2 blocks, 1 free
    const std::optional<attn::Slot> last = attn::append_slot(a, roomy);                    // token 5: offset 2
    REQUIRE(last.has_value());
    CHECK(last->offset == 2);
    CHECK(roomy.free_blocks() == 1);
  }

  TEST_CASE("append_slot rejects a table whose blocks do not match its length, naming both, unchanged" *
            doctest::test_suite("17_serving/append_slot")) {
    BlockAllocator pool(8, 4);
    BlockTable bad{{*pool.allocate()}, 5};  // 5 tokens need 2 blocks of 4
    CHECK_THROWS_NAMING(attn::append_slot(bad, pool), std::invalid_argument, "5", "1");
    CHECK(bad.length == 5);
    CHECK(pool.free_blocks() == 7);
    BlockTable empty_with_block{{*pool.allocate()}, 0};
    CHECK_THROWS_AS(attn::append_slot(empty_with_block, pool), std::invalid_argument);
  }

  TEST_CASE("append_slot refuses a table that holds SIZE_MAX tokens: one more does not fit in its length, unchanged" *
            doctest::test_suite("17_serving/append_slot")) {
    const std::size_t B = std::size_t{1} << 63, most = std::numeric_limits<std::size_t>::max();
    BlockAllocator pool(4, B);
    BlockTable full{{*pool.allocate(), *pool.allocate()}, most};  // ⌈(2^64 − 1) / 2^63⌉ = 2 blocks, the last not full
    CHECK_THROWS_NAMING(attn::append_slot(full, pool), std::invalid_argument, "18446744073709551615");
    CHECK(full.length == most);  // length + 1 wrapped to 0
    CHECK(full.blocks.size() == 2);
    CHECK(pool.free_blocks() == 2);
  }

  // --- paged_attention ------------------------------------------------------------------------------------------

  TEST_CASE("paged_attention equals contiguous attention for any block size, ragged lengths and grouped heads" *
            doctest::test_suite("17_serving/paged_attention")) {
    attn::Rng rng(171);
    const std::size_t h = 6, d = 8;
    for (std::size_t g : {6, 3, 2, 1})
      for (std::size_t B : {1, 2, 3, 7, 16, 64})
        for (std::size_t n : {1, 5, 16, 17, 33}) {
          CAPTURE(g);
          CAPTURE(B);
          CAPTURE(n);
          PagedKVCache cache = small_cache(g, d, B, 2 * n + 2);
          const Tensor3 K = attn::normal_heads(rng, g, n, d), V = attn::normal_heads(rng, g, n, d);
          const Matrix q = rng.normal(h, d);  // (h, d_k)
          BlockTable table, other;
          write_tokens(cache, table, K, V, &other);  // blocks interleaved with another sequence's
          const Mat expected = attn::oracle::decode_attention(attn::test::to_oracle(q), attn::test::to_oracle(K),
                                                              attn::test::to_oracle(V));
          CHECK_ALLCLOSE(attn::paged_attention(cache, 0, table, q), expected, kAtol, kRtol);
        }
  }

  TEST_CASE("paged_attention reads only the table's tokens: the unused slots of its last block do not count" *
            doctest::test_suite("17_serving/paged_attention")) {
    attn::Rng rng(172);
    const std::size_t h = 4, g = 2, d = 8, B = 4;
    for (std::size_t n : {3, 4, 5, 9}) {
      CAPTURE(n);
      PagedKVCache cache = small_cache(g, d, B, 8);
      const Tensor3 K = attn::normal_heads(rng, g, n, d), V = attn::normal_heads(rng, g, n, d);
      const Matrix q = rng.normal(h, d);
      BlockTable table;
      write_tokens(cache, table, K, V);
      // Loud numbers in every slot past the sequence's end, in its last block and in the next block of the pool.
      const Matrix loud = xt::ones<float>({g, d}) * 50.0f;  // (g, d)
      for (std::size_t o = n % B == 0 ? B : n % B; o < B; ++o) cache.write(0, table.blocks.back(), o, loud, loud);
      const attn::BlockId spare = *cache.pool().allocate();
      for (std::size_t o = 0; o < B; ++o) cache.write(0, spare, o, loud, loud);
      const Mat expected =
          attn::oracle::decode_attention(attn::test::to_oracle(q), attn::test::to_oracle(K), attn::test::to_oracle(V));
      CHECK_ALLCLOSE(attn::paged_attention(cache, 0, table, q), expected, kAtol, kRtol);
    }
  }

  TEST_CASE("paged_attention of one token is its value, and stays finite with scores of 1e4" *
            doctest::test_suite("17_serving/paged_attention")) {
    attn::Rng rng(173);
    const std::size_t h = 2, g = 1, d = 4;
    PagedKVCache cache = small_cache(g, d, 2, 4);
    Tensor3 K = attn::normal_heads(rng, g, 3, d);
    const Tensor3 V = attn::normal_heads(rng, g, 3, d);
    K(0, 1, 0) = 100.0f;  // key 1 wins by a score of 1e4 / 2 for a query of 100 in its first feature
    BlockTable one;
    write_tokens(cache, one, xt::view(K, xt::all(), xt::range(0, 1), xt::all()),
                 xt::view(V, xt::all(), xt::range(0, 1), xt::all()));
    const Matrix q = rng.normal(h, d);
    const Matrix O1 = attn::paged_attention(cache, 0, one, q);  // (h, d_v): all weight on the only token
    for (std::size_t i = 0; i < h; ++i)
      for (std::size_t c = 0; c < d; ++c) CHECK(O1(i, c) == doctest::Approx(V(0, 0, c)).epsilon(1e-6));
    BlockTable three;
    write_tokens(cache, three, K, V);
    Matrix loud = xt::zeros<float>({h, d});
    loud(0, 0) = 100.0f;
    loud(1, 0) = 100.0f;
    const Matrix O = attn::paged_attention(cache, 0, three, loud);
    for (std::size_t c = 0; c < d; ++c) CHECK(O(0, c) == doctest::Approx(V(0, 1, c)).epsilon(1e-6));
  }

  TEST_CASE("paged_attention refuses bad shapes, groups, tables, layers and a NaN query, naming them" *
            doctest::test_suite("17_serving/paged_attention")) {
    attn::Rng rng(174);
    PagedKVCache cache = small_cache(2, 4, 4, 4);
    BlockTable table;
    write_tokens(cache, table, attn::normal_heads(rng, 2, 5, 4), attn::normal_heads(rng, 2, 5, 4));
    CHECK_THROWS_NAMING(attn::paged_attention(cache, 0, table, rng.normal(4, 3)), std::invalid_argument, "4", "3");
    CHECK_THROWS_NAMING(attn::paged_attention(cache, 0, table, rng.normal(3, 4)), std::invalid_argument, "3", "2");
    CHECK_THROWS_NAMING(attn::paged_attention(cache, 0, BlockTable{}, rng.normal(4, 4)), std::invalid_argument, "0");
    BlockTable short_table{{table.blocks[0]}, 5};
    CHECK_THROWS_NAMING(attn::paged_attention(cache, 0, short_table, rng.normal(4, 4)), std::invalid_argument, "5");
    CHECK_THROWS_NAMING(attn::paged_attention(cache, 1, table, rng.normal(4, 4)), std::invalid_argument, "1");
    Matrix q = rng.normal(4, 4);
    q(2, 1) = std::nanf("");
    CHECK_THROWS_NAMING(attn::paged_attention(cache, 0, table, q), std::invalid_argument, "q");
  }

  TEST_CASE("paged_attention weighs values near float's limit without overflow: each weight is normalised first" *
            doctest::test_suite("17_serving/paged_attention")) {
    // Values of 1e38 … 3e38 (finite, as the cache holds): softmax weights sum to 1, so O is a weighted mean of them
    // and never passes the largest. A sum of e^{s − m}·v made before dividing by Σ e^{s − m} (chapter 09's one pass,
    // the chapter's fast ch17::paged_decode) passes float's limit with a handful of them.
    attn::Rng rng(179);
    const std::size_t h = 4, g = 2, d = 4, n = 7;
    PagedKVCache cache = small_cache(g, d, 4, 4);
    const Tensor3 K = attn::normal_heads(rng, g, n, d);
    const Tensor3 V = (xt::clip(attn::normal_heads(rng, g, n, d), -1.0f, 1.0f) + 2.0f) * 1e38f;
    BlockTable table;
    write_tokens(cache, table, K, V);
    for (const float scale : {0.0f, 0.1f}) {  // every score 0 (equal weights), and small scores
      CAPTURE(scale);
      const Matrix q = rng.normal(h, d) * scale;
      const Mat expected =
          attn::oracle::decode_attention(attn::test::to_oracle(q), attn::test::to_oracle(K), attn::test::to_oracle(V));
      CHECK_ALLCLOSE(attn::paged_attention(cache, 0, table, q), expected, kAtol, kRtol);
    }
  }

  TEST_CASE("paged_attention reads the keys where the table puts them: its heap stays far below a gathered copy" *
            doctest::test_suite("17_serving/paged_attention")) {
    // 4,096 tokens, g = 2 KV heads of d = 64: gathered into contiguous K and V they take 2 · 2 · 4096 · 64 floats,
    // 4 MiB. Attention through the table needs at most every score of every head and its weights (2 · h · n floats)
    // and O (h · d_v): 258 KiB, the bound.
    attn::Rng rng(180);
    const std::size_t h = 8, g = 2, d = 64, B = 16, n = 4096;
    PagedKVCache cache = small_cache(g, d, B, n / B);
    BlockTable table;
    write_tokens(cache, table, attn::normal_heads(rng, g, n, d), attn::normal_heads(rng, g, n, d));
    const Matrix q = rng.normal(h, d);
    Matrix O;
    const std::size_t peak = attn::ch04::measure_heap_peak([&] { O = attn::paged_attention(cache, 0, table, q); });
    const std::size_t bound = (2 * h * n + h * d) * sizeof(float), gathered = 2 * g * n * d * sizeof(float);
    CHECK_MESSAGE(peak <= bound, "paged_attention held ", peak,
                  " bytes of heap at its peak; attention through the "
                  "table needs at most ",
                  bound, ", a copy of the keys and values gathered from the blocks ", gathered);
    CHECK(O.shape(0) == h);
  }

  // --- merge_splits ---------------------------------------------------------------------------------------------

  TEST_CASE("merge_splits of the parts of a sequence equals attention over all of it, for any cut" *
            doctest::test_suite("17_serving/merge_splits")) {
    attn::Rng rng(175);
    const std::size_t h = 4, g = 2, n = 23, d = 8;
    const Heads K = attn::test::to_oracle(attn::normal_heads(rng, g, n, d)),
                V = attn::test::to_oracle(attn::normal_heads(rng, g, n, d));
    const Mat q = attn::test::to_oracle(rng.normal(h, d));
    const std::vector<std::vector<std::size_t>> cuts{{0, 23}, {0, 10, 23}, {0, 1, 2, 3, 23}, {0, 7, 8, 15, 22, 23}};
    for (const std::vector<std::size_t>& cut : cuts) {
      CAPTURE(cut.size());
      std::vector<FlashOutput> parts;
      for (std::size_t s = 0; s + 1 < cut.size(); ++s) {
        const Heads Ks = token_range(K, cut[s], cut[s + 1]), Vs = token_range(V, cut[s], cut[s + 1]);
        parts.push_back(as_part(attn::oracle::decode_attention(q, Ks, Vs), attn::oracle::decode_lse(q, Ks)));
      }
      const FlashOutput merged = attn::merge_splits(parts);
      CHECK_ALLCLOSE(merged.O, attn::oracle::decode_attention(q, K, V), kAtol, kRtol);
      CHECK_ALLCLOSE(merged.lse, attn::oracle::decode_lse(q, K), kAtol, kRtol);
    }
  }

  TEST_CASE("merge_splits needs the max: parts with lse near 1e4 merge exactly, without overflow" *
            doctest::test_suite("17_serving/merge_splits")) {
    // Two parts of one row: lse 10000 and 10000 + log 3, so the second holds 3/4 of the softmax's mass. e^10000 is
    // far past float's range: only lse − max keeps the weights finite.
    FlashOutput a{Matrix{{1.0f, 0.0f}}, attn::Vector{10000.0f}, 0};
    FlashOutput b{Matrix{{0.0f, 1.0f}}, attn::Vector{10000.0f + std::log(3.0f)}, 0};
    const FlashOutput m = attn::merge_splits({a, b});
    CHECK(m.O(0, 0) == doctest::Approx(0.25).epsilon(1e-4));
    CHECK(m.O(0, 1) == doctest::Approx(0.75).epsilon(1e-4));
    CHECK(m.lse(0) == doctest::Approx(10000.0 + std::log(4.0)).epsilon(1e-6));
    // and far below: lse of −1e4 (tiny denominators) just as well
    a.lse(0) = -10000.0f;
    b.lse(0) = -10000.0f;
    const FlashOutput low = attn::merge_splits({a, b});
    CHECK(low.O(0, 0) == doctest::Approx(0.5).epsilon(1e-4));
    CHECK(low.lse(0) == doctest::Approx(-10000.0 + std::log(2.0)).epsilon(1e-6));
  }

  TEST_CASE(
      "merge_splits: a part that saw no key weighs nothing, and a row with no key anywhere is zero with lse -inf" *
      doctest::test_suite("17_serving/merge_splits")) {
    const FlashOutput seen{Matrix{{2.0f, 3.0f}, {5.0f, 7.0f}}, attn::Vector{0.5f, -kInf}, 0};
    const FlashOutput empty{Matrix{{0.0f, 0.0f}, {0.0f, 0.0f}}, attn::Vector{-kInf, -kInf}, 0};
    const FlashOutput m = attn::merge_splits({empty, seen, empty});
    CHECK(m.O(0, 0) == doctest::Approx(2.0));
    CHECK(m.O(0, 1) == doctest::Approx(3.0));
    CHECK(m.lse(0) == doctest::Approx(0.5));
    CHECK(m.O(1, 0) == 0.0f);  // never NaN
    CHECK(m.O(1, 1) == 0.0f);
    CHECK(m.lse(1) == -kInf);
    const FlashOutput single = attn::merge_splits({seen});
    CHECK(single.O(0, 1) == doctest::Approx(3.0));
    CHECK(single.lse(0) == doctest::Approx(0.5));
  }

  TEST_CASE("merge_splits refuses no parts, parts of different shapes and a NaN or +inf lse, naming part and row" *
            doctest::test_suite("17_serving/merge_splits")) {
    CHECK_THROWS_AS(attn::merge_splits({}), std::invalid_argument);
    const FlashOutput a{Matrix{{1.0f, 2.0f}}, attn::Vector{0.0f}, 0};
    const FlashOutput wide{Matrix{{1.0f, 2.0f, 3.0f}}, attn::Vector{0.0f}, 0};
    CHECK_THROWS_NAMING(attn::merge_splits({a, wide}), std::invalid_argument, "1");
    const FlashOutput short_lse{Matrix{{1.0f, 2.0f}, {3.0f, 4.0f}}, attn::Vector{0.0f}, 0};
    CHECK_THROWS_AS(attn::merge_splits({short_lse}), std::invalid_argument);
    const FlashOutput rows3{Matrix{{1.0f}, {2.0f}, {3.0f}}, attn::Vector{0.0f, 0.0f, 0.0f}, 0};
    FlashOutput bad = rows3;
    bad.lse(2) = std::nanf("");
    CHECK_THROWS_NAMING(attn::merge_splits({rows3, bad}), std::invalid_argument, "1", "2");
    bad.lse(2) = kInf;
    CHECK_THROWS_NAMING(attn::merge_splits({bad, rows3}), std::invalid_argument, "0", "2");
  }

  // --- copy_on_write --------------------------------------------------------------------------------------------

  TEST_CASE("copy_on_write gives the writer a copy of a shared block and leaves the other table's numbers alone" *
            doctest::test_suite("17_serving/copy_on_write")) {
    attn::Rng rng(176);
    const std::size_t g = 2, d = 4, B = 4;
    PagedKVCache cache = small_cache(g, d, B, 8);
    const Tensor3 K = attn::normal_heads(rng, g, 6, d), V = attn::normal_heads(rng, g, 6, d);
    BlockTable a;
    write_tokens(cache, a, K, V);  // blocks 0 (full) and 1 (2 of 4 slots)
    BlockTable b = attn::share_table(cache.pool(), a);
    const attn::BlockId shared = a.blocks[1];
    const std::size_t free_before = cache.pool().free_blocks();
    REQUIRE(attn::copy_on_write(cache, b, 1));
    CHECK(b.blocks[0] == a.blocks[0]);  // the other blocks stay shared
    CHECK(b.blocks[1] != shared);
    CHECK(a.blocks[1] == shared);
    CHECK(cache.pool().ref_count(shared) == 1);       // released once: A holds it alone now
    CHECK(cache.pool().ref_count(b.blocks[1]) == 1);  // the copy is B's alone
    CHECK(cache.pool().ref_count(a.blocks[0]) == 2);
    CHECK(cache.pool().free_blocks() == free_before - 1);
    CHECK(b.length == a.length);
    // The copy holds the two used slots, for every KV head.
    for (std::size_t j = 0; j < g; ++j)
      for (std::size_t c = 0; c < 2 * d; ++c) {
        CHECK(cache.keys(0, b.blocks[1], j)[c] == cache.keys(0, shared, j)[c]);
        CHECK(cache.values(0, b.blocks[1], j)[c] == cache.values(0, shared, j)[c]);
      }
    // B writes its next token into the copy; A's numbers and A's attention do not change.
    const Matrix q = rng.normal(g, d);
    const Mat a_before =
        attn::oracle::decode_attention(attn::test::to_oracle(q), attn::test::to_oracle(K), attn::test::to_oracle(V));
    const std::optional<attn::Slot> slot = attn::append_slot(b, cache.pool());
    REQUIRE(slot.has_value());
    const Matrix other = xt::ones<float>({g, d}) * 9.0f;
    cache.write(0, slot->block, slot->offset, other, other);
    CHECK_ALLCLOSE(attn::paged_attention(cache, 0, a, q), a_before, kAtol, kRtol);
  }

  TEST_CASE("copy_on_write leaves a block the table holds alone as it is, and a full pool unchanged" *
            doctest::test_suite("17_serving/copy_on_write")) {
    PagedKVCache cache = small_cache(1, 2, 2, 3);
    BlockTable a;
    for (std::size_t t = 0; t < 3; ++t) attn::append_slot(a, cache.pool());  // 2 blocks, 1 free
    const BlockTable before = a;
    CHECK(attn::copy_on_write(cache, a, 1));
    CHECK(a.blocks == before.blocks);
    CHECK(cache.pool().free_blocks() == 1);
    BlockTable b = attn::share_table(cache.pool(), a);
    BlockTable c = attn::share_table(cache.pool(), a);
    REQUIRE(attn::copy_on_write(cache, c, 1));        // takes the last free block
    CHECK(cache.pool().ref_count(a.blocks[1]) == 2);  // A and B still hold it: released once, not twice
    CHECK(cache.pool().free_blocks() == 0);
    const BlockTable b_before = b;
    CHECK_FALSE(attn::copy_on_write(cache, b, 1));  // shared, and no block to copy into
    CHECK(b.blocks == b_before.blocks);
    CHECK(cache.pool().ref_count(a.blocks[1]) == 2);
  }

  TEST_CASE("copy_on_write refuses an index past the table's blocks, naming both" *
            doctest::test_suite("17_serving/copy_on_write")) {
    PagedKVCache cache = small_cache(1, 2, 2, 4);
    BlockTable a;
    for (std::size_t t = 0; t < 3; ++t) attn::append_slot(a, cache.pool());
    CHECK_THROWS_NAMING(attn::copy_on_write(cache, a, 2), std::invalid_argument, "2");
    CHECK_THROWS_NAMING(attn::copy_on_write(cache, a, 7), std::invalid_argument, "7", "2");
  }

  TEST_CASE("copy_on_write copies every layer of the shared block, not only the first" *
            doctest::test_suite("17_serving/copy_on_write")) {
    attn::Rng rng(181);
    const attn::KvShape shape{3, 2, 4, 4, 4};  // 3 layers
    PagedKVCache cache(shape, 6 * attn::kv_block_bytes(shape, sizeof(float)));
    BlockTable a;
    for (std::size_t t = 0; t < 6; ++t) {  // blocks 0 (full) and 1 (2 of 4 slots), every layer its own numbers
      const std::optional<attn::Slot> slot = attn::append_slot(a, cache.pool());
      REQUIRE(slot.has_value());
      for (std::size_t l = 0; l < 3; ++l) cache.write(l, slot->block, slot->offset, rng.normal(2, 4), rng.normal(2, 4));
    }
    BlockTable b = attn::share_table(cache.pool(), a);
    REQUIRE(attn::copy_on_write(cache, b, 1));
    REQUIRE(b.blocks[1] != a.blocks[1]);
    for (std::size_t l = 0; l < 3; ++l)
      for (std::size_t j = 0; j < 2; ++j)
        for (std::size_t c = 0; c < 2 * 4; ++c) {  // the two slots the table uses, in every layer and KV head
          CAPTURE(l);
          CHECK(cache.keys(l, b.blocks[1], j)[c] == cache.keys(l, a.blocks[1], j)[c]);
          CHECK(cache.values(l, b.blocks[1], j)[c] == cache.values(l, a.blocks[1], j)[c]);
        }
  }

  // --- schedule_step --------------------------------------------------------------------------------------------

  TEST_CASE("schedule_step admits waiting requests first come first served while their prompts fit" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(10, 4);
    std::deque<Sequence> waiting{{0, 9, 5, {}}, {1, 12, 5, {}}, {2, 1, 5, {}}};  // 3, 3 and 1 blocks
    std::vector<Sequence> running;
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 8);
    CHECK(plan.admitted == std::vector<std::size_t>{0, 1, 2});
    REQUIRE(running.size() == 3);
    CHECK(running[0].table.length == 9);
    CHECK(running[1].table.length == 12);
    CHECK(running[0].remaining == 4);  // the prefill gives the first token
    CHECK(pool.free_blocks() == 3);
    check_pool_accounts(pool, running, waiting);
    // A request whose prompt does not fit stops admission, even for a smaller one behind it.
    waiting.push_back({3, 20, 2, {}});  // 5 blocks
    waiting.push_back({4, 1, 2, {}});
    const attn::StepPlan next = attn::schedule_step(pool, waiting, running, 8);
    CHECK(next.admitted.empty());
    CHECK(next.decoded == std::vector<std::size_t>{0, 1, 2});
    CHECK(waiting.size() == 2);
  }

  TEST_CASE("schedule_step runs at most max_running sequences" * doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(100, 4);
    std::deque<Sequence> waiting{{0, 3, 5, {}}, {1, 3, 5, {}}, {2, 3, 5, {}}};
    std::vector<Sequence> running;
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 2);
    CHECK(plan.admitted == std::vector<std::size_t>{0, 1});
    CHECK(running.size() == 2);
    CHECK(waiting.size() == 1);
  }

  TEST_CASE("schedule_step decodes one token per running sequence, taking a block only at a block boundary" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(10, 4);
    std::deque<Sequence> waiting{{0, 3, 6, {}}, {1, 4, 6, {}}};  // lengths 3 and 4 after the prefill
    std::vector<Sequence> running;
    attn::schedule_step(pool, waiting, running, 8);
    REQUIRE(pool.free_blocks() == 8);
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 8);
    CHECK(plan.decoded == std::vector<std::size_t>{0, 1});
    CHECK(running[0].table.length == 4);  // offset 3 of its first block
    CHECK(running[1].table.length == 5);  // the fifth token opens a second block
    CHECK(pool.free_blocks() == 7);
    CHECK(running[0].remaining == 4);
    check_pool_accounts(pool, running, waiting);
  }

  TEST_CASE("schedule_step lets finished sequences leave and frees their blocks" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(10, 4);
    std::deque<Sequence> waiting{{0, 5, 1, {}}, {1, 2, 3, {}}};  // request 0 is done after its prefill
    std::vector<Sequence> running;
    attn::schedule_step(pool, waiting, running, 8);
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 8);
    CHECK(plan.finished == std::vector<std::size_t>{0});
    CHECK(plan.decoded == std::vector<std::size_t>{1});
    REQUIRE(running.size() == 1);
    CHECK(pool.used_blocks() == 1);
    check_pool_accounts(pool, running, waiting);
  }

  TEST_CASE("schedule_step preempts the youngest when blocks run out, and never goes over the budget" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(4, 2);
    std::deque<Sequence> waiting{{0, 4, 5, {}}, {1, 4, 5, {}}};  // 2 blocks each: the pool is full after admission
    std::vector<Sequence> running;
    attn::schedule_step(pool, waiting, running, 8);
    REQUIRE(pool.free_blocks() == 0);
    // Both need a third block for their next token: the youngest (1) goes back, the oldest takes a block.
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 8);
    CHECK(plan.preempted == std::vector<std::size_t>{1});
    CHECK(plan.decoded == std::vector<std::size_t>{0});
    REQUIRE(running.size() == 1);
    CHECK(running[0].table.length == 5);
    REQUIRE(waiting.size() == 1);
    CHECK(waiting.front().id == 1);
    CHECK(waiting.front().prompt == 5);  // its 4 cached tokens and the one it generated: recomputed
    CHECK(waiting.front().remaining == 4);
    CHECK(waiting.front().table.blocks.empty());
    check_pool_accounts(pool, running, waiting);
  }

  TEST_CASE("schedule_step preempts the sequence itself when it is the youngest and no block is left" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(3, 2);
    std::deque<Sequence> waiting{{0, 3, 3, {}}, {1, 2, 2, {}}};  // 2 blocks and 1: the pool is full
    std::vector<Sequence> running;
    attn::schedule_step(pool, waiting, running, 8);
    REQUIRE(pool.free_blocks() == 0);
    // Request 0's token 3 fits in its second block; request 1's token 2 needs a block, and it is the youngest.
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 8);
    CHECK(plan.preempted == std::vector<std::size_t>{1});
    CHECK(plan.decoded == std::vector<std::size_t>{0});
    REQUIRE(running.size() == 1);
    CHECK(running[0].id == 0);
    CHECK(pool.free_blocks() == 1);  // its block is back, too few for its 3-token prompt now
    REQUIRE(waiting.size() == 1);
    CHECK(waiting.front().prompt == 3);
    check_pool_accounts(pool, running, waiting);
  }

  TEST_CASE("schedule_step sends a preempted sequence to the front of the queue, ahead of requests that waited" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(4, 2);
    std::deque<Sequence> waiting{{0, 4, 5, {}}, {1, 4, 5, {}}, {2, 1, 3, {}}};  // 0 and 1 fill the pool; 2 waits
    std::vector<Sequence> running;
    attn::schedule_step(pool, waiting, running, 8);
    REQUIRE(pool.free_blocks() == 0);
    REQUIRE(waiting.size() == 1);
    // Request 0 needs a third block: 1 goes back (2 blocks freed, 0 takes one). Its prompt of 5 needs 3 blocks and 1
    // is free: it waits at the front, and request 2 (one block, which is free) waits behind it (first come first
    // served: 1 came first).
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 8);
    CHECK(plan.preempted == std::vector<std::size_t>{1});
    CHECK(plan.admitted.empty());
    REQUIRE(waiting.size() == 2);
    CHECK(waiting[0].id == 1);
    CHECK(waiting[1].id == 2);
    CHECK(pool.free_blocks() == 1);
  }

  TEST_CASE("schedule_step looks only at the requests a step could admit: a long queue costs a step nothing" *
            doctest::test_suite("17_serving/schedule_step")) {
    // 5,000 requests wait; the last could never fit (40 tokens: 10 blocks of a pool of 8). A step admits at most
    // min(max_running, blocks) = 4 of them, and checks those: the request at the back is checked when it gets there.
    BlockAllocator pool(8, 4);
    std::deque<Sequence> waiting;
    for (std::size_t i = 0; i < 5000; ++i) waiting.push_back({i, 3, 2, {}});
    waiting.push_back({5000, 40, 1, {}});
    std::vector<Sequence> running;
    const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 4);
    CHECK(plan.admitted == std::vector<std::size_t>{0, 1, 2, 3});
    CHECK(waiting.size() == 4997);
    std::deque<Sequence> near{{0, 3, 2, {}}, {5000, 40, 1, {}}};  // within the first four: refused, naming it
    CHECK_THROWS_NAMING(attn::schedule_step(pool, near, running, 4), std::invalid_argument, "5000");
  }

  TEST_CASE("schedule_step serves a whole random trace within the budget, every request its tokens" *
            doctest::test_suite("17_serving/schedule_step")) {
    attn::ch17::TraceSpec spec;
    spec.requests = 60;
    spec.arrivals_per_step = 0.7;
    spec.prompt_min = 1;
    spec.prompt_max = 40;
    spec.output_mean = 12;
    spec.output_max = 60;
    const std::vector<attn::ch17::Request> trace = attn::ch17::request_trace(spec);
    for (std::size_t B : {1, 4, 16}) {
      CAPTURE(B);
      BlockAllocator pool(120 / B + 2, B);
      std::deque<Sequence> waiting;
      std::vector<Sequence> running;
      std::map<std::size_t, std::size_t> tokens;  // id → tokens generated
      std::size_t next = 0, finished = 0;
      for (std::size_t step = 0; finished < trace.size() && step < 100000; ++step) {
        for (; next < trace.size() && trace[next].arrival <= step; ++next)
          waiting.push_back({trace[next].id, trace[next].prompt, trace[next].output, {}});
        const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, 16);
        finished += plan.finished.size();
        for (const std::size_t id : plan.decoded) ++tokens[id];
        for (const std::size_t id : plan.admitted) ++tokens[id];
        CHECK(running.size() <= 16);
        check_pool_accounts(pool, running, waiting);
      }
      REQUIRE(finished == trace.size());
      for (const attn::ch17::Request& r : trace) CHECK(tokens[r.id] == r.output);
      CHECK(pool.free_blocks() == pool.total_blocks());
    }
  }

  TEST_CASE("schedule_step refuses max_running = 0 and a request that could never run, naming it, unchanged" *
            doctest::test_suite("17_serving/schedule_step")) {
    BlockAllocator pool(4, 4);
    std::deque<Sequence> waiting{{7, 3, 2, {}}};
    std::vector<Sequence> running;
    CHECK_THROWS_NAMING(attn::schedule_step(pool, waiting, running, 0), std::invalid_argument, "max_running");
    std::deque<Sequence> too_long{{0, 3, 2, {}}, {9, 10, 8, {}}};  // 17 tokens: 5 blocks of a 4-block pool
    CHECK_THROWS_NAMING(attn::schedule_step(pool, too_long, running, 4), std::invalid_argument, "9");
    CHECK(too_long.size() == 2);
    CHECK(pool.free_blocks() == 4);
    std::deque<Sequence> nothing_to_do{{5, 3, 0, {}}};
    CHECK_THROWS_NAMING(attn::schedule_step(pool, nothing_to_do, running, 4), std::invalid_argument, "5");
    std::deque<Sequence> no_prompt{{6, 0, 2, {}}};
    CHECK_THROWS_NAMING(attn::schedule_step(pool, no_prompt, running, 4), std::invalid_argument, "6");
  }

  // --- lookup_prefix --------------------------------------------------------------------------------------------

  TEST_CASE("lookup_prefix finds every full block of a cached prefix, in order, and takes each" *
            doctest::test_suite("17_serving/lookup_prefix")) {
    const std::size_t B = 4;
    BlockAllocator pool(16, B);
    attn::PrefixCache cache(pool);
    const std::vector<attn::TokenId> prompt = prompt_of(3 * B + 2, 1);  // 3 full blocks and 2 tokens
    BlockTable first = prefilled(cache, prompt);
    const std::vector<attn::BlockId> cached(first.blocks.begin(), first.blocks.begin() + 3);
    cache.release(first);  // its 3 full blocks stay cached, evictable
    REQUIRE(cache.evictable() == 3);
    const BlockTable found = attn::lookup_prefix(cache, prompt);
    INFO("a block's key is block_hash(the previous block's key, its tokens, B), from kNoParent: the keys chain");
    CHECK(found.blocks == cached);
    CHECK(found.length == 3 * B);
    INFO("each block found must be taken (cache.take()): the table holds it, and the cache must not evict it");
    for (const attn::BlockId b : cached) CHECK(pool.ref_count(b) == 2);
    CHECK(cache.evictable() == 0);
  }

  TEST_CASE("lookup_prefix stops at the first block not found: a block after a miss is another prefix's" *
            doctest::test_suite("17_serving/lookup_prefix")) {
    const std::size_t B = 4;
    BlockAllocator pool(4, B);  // exactly the prompt's blocks: the next allocation must evict
    attn::PrefixCache cache(pool);
    const std::vector<attn::TokenId> prompt = prompt_of(4 * B, 2);
    BlockTable table = prefilled(cache, prompt);
    const std::vector<attn::BlockId> blocks = table.blocks;
    cache.release(table);  // evictable, the last block first: 3, 2, 1, 0
    // Take blocks 2 and 3 back (as another request would), then evict: block 1 goes, 0, 2 and 3 stay cached.
    std::uint64_t key = attn::kNoParent;
    for (std::size_t k = 0; k < 4; ++k) {
      key = attn::block_hash(key, prompt, k * B, B);
      if (k >= 2) cache.take(*cache.find(key));
    }
    const std::optional<attn::BlockId> fresh = cache.allocate();
    REQUIRE(fresh == blocks[1]);
    std::vector<attn::TokenId> longer = prompt;
    longer.push_back(99);
    const BlockTable found = attn::lookup_prefix(cache, longer);
    INFO("blocks 2 and 3 are cached but block 1 is not: the walk must stop at block 1 (break, not continue)");
    CHECK(found.blocks == std::vector<attn::BlockId>{blocks[0]});
    CHECK(found.length == B);
  }

  TEST_CASE("lookup_prefix leaves the prompt's last token to compute, even when the whole prompt is cached" *
            doctest::test_suite("17_serving/lookup_prefix")) {
    const std::size_t B = 4;
    BlockAllocator pool(16, B);
    attn::PrefixCache cache(pool);
    const std::vector<attn::TokenId> prompt = prompt_of(3 * B, 3);
    BlockTable table = prefilled(cache, prompt);
    const std::vector<attn::BlockId> blocks = table.blocks;
    cache.release(table);
    INFO("at most (n − 1) / B blocks: the last prompt token's output is the first token, so it is always computed");
    const BlockTable whole = attn::lookup_prefix(cache, prompt);  // 3B tokens: 2 blocks, not 3
    CHECK(whole.blocks == std::vector<attn::BlockId>{blocks[0], blocks[1]});
    CHECK(whole.length == 2 * B);
    std::vector<attn::TokenId> one_more = prompt;
    one_more.push_back(7);  // 3B + 1 tokens: all three blocks
    const BlockTable three = attn::lookup_prefix(cache, one_more);
    CHECK(three.blocks == blocks);
    CHECK(three.length == 3 * B);
    const std::vector<attn::TokenId> short_prompt(prompt.begin(), prompt.begin() + 3);  // no full block
    CHECK(attn::lookup_prefix(cache, short_prompt).blocks.empty());
  }

  TEST_CASE("lookup_prefix finds nothing for a prompt whose first block differs, whatever follows" *
            doctest::test_suite("17_serving/lookup_prefix")) {
    const std::size_t B = 4;
    BlockAllocator pool(16, B);
    attn::PrefixCache cache(pool);
    const std::vector<attn::TokenId> prompt = prompt_of(3 * B + 1, 4);
    BlockTable table = prefilled(cache, prompt);
    cache.release(table);
    std::vector<attn::TokenId> other = prompt;
    other[0] += 1000;  // the same blocks 1 and 2, after another first block: their keys and values differ
    INFO("equal tokens in a block are not enough: its key must chain to the keys of every block before it");
    const BlockTable found = attn::lookup_prefix(cache, other);
    CHECK(found.blocks.empty());
    CHECK(found.length == 0);
    CHECK(cache.evictable() == 3);  // nothing taken
    CHECK_THROWS_NAMING(attn::lookup_prefix(cache, {}), std::invalid_argument, "prompt");
    CHECK(cache.evictable() == 3);
  }

  TEST_CASE("chapter 12's model generates the same tokens paged and batched with a shared prefix as one at a time" *
            doctest::test_suite("17_serving/schedule_step")) {
    attn::ch12::TrainSettings s;
    s.steps = 60;  // a model that has learnt a little: the tokens are not all alike
    const attn::ch12::Model model = attn::ch12::train_induction(attn::ch12::Config{}, s).model;
    std::vector<attn::ch17::Prompt> prompts;
    const std::vector<std::size_t> system{5, 9, 2, 14, 7, 20, 1, 11, 3};
    for (std::size_t r = 0; r < 7; ++r) {
      attn::ch17::Prompt p{system, 2 + r % 5};
      for (std::size_t i = 0; i <= r % 3; ++i) p.tokens.push_back(system[(2 * r + i) % system.size()]);
      prompts.push_back(p);
    }
    const auto alone = attn::ch17::generate_one_at_a_time(model, prompts);
    for (const auto [B, blocks, max_running] : {std::array<std::size_t, 3>{4, 12, 3}, {2, 40, 8}, {3, 9, 5}}) {
      CAPTURE(B);
      CAPTURE(blocks);
      attn::ch17::ModelServeLog log;
      const auto batched = attn::ch17::generate_batched(model, prompts, B, blocks, max_running, log);
      CHECK(batched == alone);
      CHECK(log.shared_blocks == system.size() / B);
      CHECK(log.most_running > 1);
    }
  }
}

TEST_SUITE("17_serving: chapter code") {
  TEST_CASE("the fast paged decode and its ranges equal the oracle for any block size and grouping") {
    attn::Rng rng(177);
    // d_k not a multiple of 16: the vector loop's tail. r = h/g = 2, 8 and 16 query rows per group: 16 takes the
    // kernel's other way to the scores (by panel, as MQA does). B = 48: a block longer than the kernel's stretch.
    const std::size_t h = 16, d = 20;
    for (std::size_t g : {8, 2, 1})
      for (std::size_t B : {1, 5, 16, 32, 48})
        for (std::size_t n : {1, 17, 70}) {
          CAPTURE(g);
          CAPTURE(B);
          CAPTURE(n);
          PagedKVCache cache = small_cache(g, d, B, 2 * n + 2);
          const Tensor3 K = attn::normal_heads(rng, g, n, d), V = attn::normal_heads(rng, g, n, d);
          const Matrix q = rng.normal(h, d);
          BlockTable table, other;
          write_tokens(cache, table, K, V, &other);
          const Mat oq = attn::test::to_oracle(q);
          const Heads oK = attn::test::to_oracle(K), oV = attn::test::to_oracle(V);
          CHECK_ALLCLOSE(attn::ch17::paged_decode(cache, 0, table, q), attn::oracle::decode_attention(oq, oK, oV),
                         kAtol, kRtol);
          const std::size_t first = n / 3, end = n - n / 4;
          const FlashOutput part = attn::ch17::paged_decode_range(cache, 0, table, q, first, end);
          const Heads Ks = token_range(oK, first, end), Vs = token_range(oV, first, end);
          if (first < end) {
            CHECK_ALLCLOSE(part.O, attn::oracle::decode_attention(oq, Ks, Vs), kAtol, kRtol);
            CHECK_ALLCLOSE(part.lse, attn::oracle::decode_lse(oq, Ks), kAtol, kRtol);
          }
          for (std::size_t splits : {1, 2, 3, 7, 1000}) {
            const FlashOutput split = attn::ch17::split_kv_decode(cache, 0, table, q, splits, 3);
            CHECK_ALLCLOSE(split.O, attn::oracle::decode_attention(oq, oK, oV), kAtol, kRtol);
            CHECK_ALLCLOSE(split.lse, attn::oracle::decode_lse(oq, oK), kAtol, kRtol);
          }
        }
  }

  TEST_CASE("the paged prefill of a chunk equals causal attention over the prefix and the chunk, for any cut") {
    attn::Rng rng(179);
    // Chunks that start inside a block and end inside another, a chunk of one token (a decode), a chunk that is the
    // whole prompt (first = 0), and r = 1, 2 and 8 rows per group; B = 48 is longer than the kernel's stretch.
    const std::size_t h = 8, d = 20, n = 53;
    for (std::size_t g : {8, 4, 1})
      for (std::size_t B : {1, 5, 16, 48})
        for (const auto& [first, c] :
             std::vector<std::pair<std::size_t, std::size_t>>{{0, n}, {0, 1}, {7, 19}, {16, 16}, {52, 1}, {3, 40}}) {
          CAPTURE(g);
          CAPTURE(B);
          CAPTURE(first);
          CAPTURE(c);
          PagedKVCache cache = small_cache(g, d, B, 2 * n + 2);
          const Tensor3 K = attn::normal_heads(rng, g, n, d), V = attn::normal_heads(rng, g, n, d);
          const Tensor3 Q = attn::normal_heads(rng, h, c, d);  // (h, c, d_k)
          BlockTable table, other;
          write_tokens(cache, table, K, V, &other);  // the whole sequence: tokens past first + c are not attended
          const Heads expected = attn::oracle::prefill_attention(attn::test::to_oracle(Q), attn::test::to_oracle(K),
                                                                 attn::test::to_oracle(V), first);
          const Tensor3 O = attn::ch17::paged_prefill(cache, 0, table, Q, first);  // (h, c, d_v)
          REQUIRE(O.shape(0) == h);
          REQUIRE(O.shape(1) == c);
          for (std::size_t i = 0; i < h; ++i) {
            CAPTURE(i);
            const Matrix O_i = xt::view(O, i, xt::all(), xt::all());  // (c, d_v)
            CHECK_ALLCLOSE(O_i, expected[i], kAtol, kRtol);
          }
        }
  }

  TEST_CASE("the paged prefill refuses a chunk past the table, bad shapes and a NaN query, naming them") {
    attn::Rng rng(180);
    PagedKVCache cache = small_cache(2, 4, 4, 4);
    BlockTable table;
    write_tokens(cache, table, attn::normal_heads(rng, 2, 6, 4), attn::normal_heads(rng, 2, 6, 4));
    const Tensor3 Q = attn::normal_heads(rng, 4, 3, 4);  // (h = 4, c = 3, d_k = 4)
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 0, table, Q, 4), std::invalid_argument, "first", "c", "6");
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 0, table, Q, std::numeric_limits<std::size_t>::max()),
                        std::invalid_argument, "first");
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 0, table, attn::normal_heads(rng, 3, 3, 4), 0),
                        std::invalid_argument, "h", "g");
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 0, table, attn::normal_heads(rng, 4, 3, 5), 0),
                        std::invalid_argument, "(4, 3, 5)");
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 0, table, attn::normal_heads(rng, 4, 0, 4), 0),
                        std::invalid_argument, "(4, 0, 4)");
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 1, table, Q, 0), std::invalid_argument, "layer");
    Tensor3 bad = Q;
    bad(1, 2, 3) = std::nanf("");
    CHECK_THROWS_NAMING(attn::ch17::paged_prefill(cache, 0, table, bad, 0), std::invalid_argument, "Q");
  }

  TEST_CASE("an empty range gives zeros and lse = -inf") {
    attn::Rng rng(178);
    PagedKVCache cache = small_cache(1, 4, 4, 4);
    BlockTable table;
    write_tokens(cache, table, attn::normal_heads(rng, 1, 5, 4), attn::normal_heads(rng, 1, 5, 4));
    const FlashOutput none = attn::ch17::paged_decode_range(cache, 0, table, rng.normal(2, 4), 3, 3);
    CHECK(xt::amax(xt::abs(none.O))() == 0.0f);
    CHECK(none.lse(0) == -kInf);
  }

  TEST_CASE("the paged simulation counts what the trace asks: every token generated, no KV waste with B = 1") {
    attn::ch17::TraceSpec spec;
    spec.requests = 50;
    spec.prompt_max = 64;
    spec.output_mean = 20;
    spec.output_max = 64;
    const auto trace = attn::ch17::request_trace(spec);
    std::size_t tokens = 0;
    for (const auto& r : trace) tokens += r.output;
    const attn::ch17::ServeStats paged = attn::ch17::serve_paged(trace, 4096, 1, 64);
    CHECK(paged.generated == tokens);
    CHECK(paged.waste() == 0.0);
    const attn::ch17::ServeStats fixed =
        attn::ch17::serve_reserving(trace, attn::ch17::Batching::fixed, 128 * 16, 128, 16);
    const attn::ch17::ServeStats orca =
        attn::ch17::serve_reserving(trace, attn::ch17::Batching::continuous, 128 * 16, 128, 16);
    CHECK(fixed.generated == tokens);
    CHECK(orca.generated == tokens);
    CHECK(orca.steps <= fixed.steps);
    CHECK(orca.waste() > 0.0);
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile values,
// each call refused naming what was wrong or answered as the contract says. A block table is battered as its two
// fields (blocks, length); a part of merge_splits through hostile::Weights<FlashOutput> (support/hostile_flash.hpp).

namespace {

namespace hostile = attn::test::hostile;

/// ⌈n / B⌉ without wrapping: the blocks a table of n tokens holds.
std::size_t blocks_needed(std::size_t n, std::size_t B) { return n / B + (n % B != 0 ? 1 : 0); }

/// Whether every block of \p blocks is one of the pool's and held by some table.
bool all_held(const BlockAllocator& pool, const std::vector<std::size_t>& blocks) {
  for (const std::size_t b : blocks)
    if (b >= pool.total_blocks() || pool.ref_count(b) == 0) return false;
  return true;
}

}  // namespace

TEST_SUITE("17_serving: the hostile battery") {
  TEST_CASE("append_slot under the hostile battery" * doctest::test_suite("17_serving/append_slot")) {
    // hostile battery: append_slot
    // A pool of 4 blocks of B = 4; the table holds 6 tokens in blocks 0 and 1 (the pool's only held blocks).
    const auto pool_of = [] {
      BlockAllocator pool(4, 4);
      pool.allocate();
      pool.allocate();
      return pool;
    };
    hostile::battery(
        "append_slot", {"blocks|table", "length|table"},
        [&](const std::vector<std::size_t>& blocks, std::size_t length) {
          BlockAllocator pool = pool_of();
          BlockTable table{blocks, length};
          const std::optional<attn::Slot> slot = attn::append_slot(table, pool);
          return std::vector<std::size_t>{slot ? slot->block : 99, slot ? slot->offset : 99, table.length,
                                          table.blocks.size()};
        },
        std::vector<std::size_t>{0, 1}, std::size_t{6})
        .fits([&](const std::vector<std::size_t>& blocks, std::size_t length) {
          // The token lands in the last block when it is not full: that block must be one the pool holds.
          return blocks.size() == blocks_needed(length, 4) && (length % 4 == 0 || all_held(pool_of(), {blocks.back()}));
        })
        .answer([](const std::vector<std::size_t>& r, const std::vector<std::size_t>&, std::size_t length) {
          return r[0] < 4 && r[1] == length % 4 && r[2] == length + 1 && r[3] == blocks_needed(length + 1, 4);
        })
        .run();
  }

  TEST_CASE("paged_attention under the hostile battery" * doctest::test_suite("17_serving/paged_attention")) {
    // hostile battery: paged_attention
    attn::Rng rng(1701);
    PagedKVCache cache = small_cache(2, 4, 4, 4);
    BlockTable table;
    write_tokens(cache, table, attn::normal_heads(rng, 2, 5, 4), attn::normal_heads(rng, 2, 5, 4));
    const Matrix good_q = rng.normal(4, 4);
    // The contract's words for each refusal: a wrong d_k names the shapes (q's), a g that does not divide h names h
    // and g, a bad table its length, a missing layer the layer.
    const auto run = [&](const auto& attend) {
      hostile::battery(
          "paged_attention", {"layer", "blocks|table", "length|table", "q|h|g"},
          [&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& q) {
            return attend(layer, BlockTable{blocks, length}, q);
          },
          std::size_t{0}, table.blocks, table.length, good_q)
          .fits([&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& q) {
            bool exist = true;
            for (const std::size_t b : blocks) exist = exist && b < cache.pool().total_blocks();
            return layer == 0 && length > 0 && blocks.size() == blocks_needed(length, 4) && exist && q.shape(1) == 4 &&
                   q.shape(0) > 0 && q.shape(0) % 2 == 0;
          })
          .answer([](const Matrix& O, std::size_t, const std::vector<std::size_t>&, std::size_t, const Matrix& q) {
            return O.shape(0) == q.shape(0) && O.shape(1) == 4 && hostile::all_finite(O);
          })
          .run();
    };
    run([&](std::size_t layer, const BlockTable& t, const Matrix& q) {
      return attn::paged_attention(cache, layer, t, q);
    });
    // A refusal of g ∤ h that names h and g, as the contract asks, and not q's shape: the battery takes it too.
    run([&](std::size_t layer, const BlockTable& t, const Matrix& q) {
      if (q.shape(1) == 4 && (q.shape(0) == 0 || q.shape(0) % 2 != 0))
        throw std::invalid_argument(fmt::format("paged_attention: h = {} is not a multiple of g = 2", q.shape(0)));
      return attn::paged_attention(cache, layer, t, q);
    });
  }

  TEST_CASE("merge_splits under the hostile battery" * doctest::test_suite("17_serving/merge_splits")) {
    // hostile battery: merge_splits
    attn::Rng rng(1702);
    const auto part = [&] { return FlashOutput{rng.normal(2, 3), attn::Vector(xt::row(rng.normal(1, 2), 0)), 0}; };
    hostile::battery(
        "merge_splits", {"parts"}, [](const std::vector<FlashOutput>& parts) { return attn::merge_splits(parts).O; },
        std::vector<FlashOutput>{part(), part()})
        .fits([](const std::vector<FlashOutput>& parts) {
          bool same = !parts.empty();
          for (const FlashOutput& p : parts)
            same = same && p.O.shape() == parts[0].O.shape() && p.lse.size() == parts[0].O.shape(0);
          return same;
        })
        .answer([](const Matrix& O, const std::vector<FlashOutput>& parts) { return O.shape() == parts[0].O.shape(); })
        .exempt("O with a NaN",
                "a part's O is the caller's result, weighed and added: the contract checks the lse (whose -inf "
                "means no key), not every entry of O, so a NaN there may pass into the merged O")
        .run();
  }

  TEST_CASE("copy_on_write under the hostile battery" * doctest::test_suite("17_serving/copy_on_write")) {
    // hostile battery: copy_on_write
    // Two tables share blocks 0 and 1 (6 tokens, B = 4); the battered table is the second one.
    attn::Rng rng(1703);
    const Tensor3 K = attn::normal_heads(rng, 1, 6, 2), V = attn::normal_heads(rng, 1, 6, 2);
    hostile::battery(
        "copy_on_write", {"blocks|table", "length|table", "index"},
        [&](const std::vector<std::size_t>& blocks, std::size_t length, std::size_t index) {
          PagedKVCache cache = small_cache(1, 2, 4, 6);
          BlockTable first;
          write_tokens(cache, first, K, V);
          attn::share_table(cache.pool(), first);
          BlockTable table{blocks, length};
          const bool copied = attn::copy_on_write(cache, table, index);
          return std::vector<std::size_t>{copied, cache.pool().ref_count(table.blocks[index]), table.length};
        },
        std::vector<std::size_t>{0, 1}, std::size_t{6}, std::size_t{1})
        .fits([](const std::vector<std::size_t>& blocks, std::size_t length, std::size_t index) {
          bool held = true;  // blocks 0 and 1 are the pool's held blocks
          for (const std::size_t b : blocks) held = held && b < 2;
          return index < blocks.size() && blocks.size() == blocks_needed(length, 4) && held;
        })
        .answer([](const std::vector<std::size_t>& r, const std::vector<std::size_t>&, std::size_t length,
                   std::size_t) { return r[0] == 1 && r[1] == 1 && r[2] == length; })
        .run();
  }

  TEST_CASE("schedule_step under the hostile battery" * doctest::test_suite("17_serving/schedule_step")) {
    // hostile battery: schedule_step
    // A pool of 6 blocks of B = 4. Running: request 1, 5 tokens in blocks 0 and 1. Waiting: request 7, holding
    // block 0 (shared with request 1: 4 tokens), with its prompt and remaining tokens.
    hostile::battery(
        "schedule_step",
        {"prompt|request", "remaining|request", "blocks|request|table", "length|request|table", "max_running"},
        [](std::size_t prompt, std::size_t remaining, const std::vector<std::size_t>& blocks, std::size_t length,
           std::size_t max_running) {
          BlockAllocator pool(6, 4);
          std::vector<Sequence> running{{1, 5, 3, {}}};
          for (int t = 0; t < 5; ++t) attn::append_slot(running[0].table, pool);
          pool.retain(0);
          std::deque<Sequence> waiting{{7, prompt, remaining, BlockTable{blocks, length}}};
          const attn::StepPlan plan = attn::schedule_step(pool, waiting, running, max_running);
          return std::vector<std::size_t>{plan.decoded.size(), plan.admitted.size(), pool.used_blocks(),
                                          pool.total_blocks()};
        },
        std::size_t{3}, std::size_t{2}, std::vector<std::size_t>{0}, std::size_t{4}, std::size_t{2})
        .fits([](std::size_t prompt, std::size_t remaining, const std::vector<std::size_t>& blocks, std::size_t length,
                 std::size_t max_running) {
          const long double longest = (static_cast<long double>(length) + prompt + remaining - 1) / 4;
          return prompt >= 1 && remaining >= 1 && max_running >= 1 && length % 4 == 0 && blocks.size() == length / 4 &&
                 longest <= 6 && (blocks.empty() || (blocks.size() == 1 && blocks[0] == 0));
        })
        .answer([](const std::vector<std::size_t>& r, std::size_t, std::size_t, const std::vector<std::size_t>&,
                   std::size_t, std::size_t) { return r[0] == 1 && r[2] <= r[3]; })
        .run();
  }
  TEST_CASE("lookup_prefix under the hostile battery" * doctest::test_suite("17_serving/lookup_prefix")) {
    // hostile battery: lookup_prefix
    hostile::battery(
        "lookup_prefix", {"prompt"},
        [](const std::vector<std::size_t>& prompt) {
          BlockAllocator pool(8, 2);
          attn::PrefixCache cache(pool);
          BlockTable t{{*cache.allocate(), *cache.allocate()}, 4};
          cache.insert(t, {1, 2, 3, 4});
          cache.release(t);
          const BlockTable found = attn::lookup_prefix(cache, prompt);
          return std::vector<std::size_t>{found.length, found.blocks.size()};
        },
        std::vector<std::size_t>{1, 2, 3, 4, 5})
        .fits([](const std::vector<std::size_t>& prompt) { return !prompt.empty(); })
        .answer([](const std::vector<std::size_t>& r, const std::vector<std::size_t>& prompt) {
          return r[0] == 2 * r[1] && r[0] < prompt.size() && r[1] <= 2;
        })
        .run();
  }
}
