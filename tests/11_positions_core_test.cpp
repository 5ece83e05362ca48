// Chapter 11's own code on bad input: the modifier kernel (flex.hpp), its block masks and the modifiers
// (modifiers.hpp). Chapter code, not an exercise, so these run on the solution track only (like the core
// tests of chapters 12 and 13). Expected values are closed forms; a bad parameter must be an std::invalid_argument
// naming it, never a crash, a huge allocation or a silently wrong mask.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>

#include "11_positions/flex.hpp"
#include "11_positions/modifiers.hpp"
#include "attn/rng.hpp"

namespace {

using attn::Tensor3;
namespace ch11 = attn::ch11;

constexpr std::size_t kBig = std::size_t{1} << 32;
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

Tensor3 random_heads(attn::Rng& rng, std::size_t h, std::size_t n, std::size_t d) {
  Tensor3 T = xt::zeros<float>({h, n, d});  // (h, n, d)
  for (std::size_t k = 0; k < h; ++k) xt::view(T, k) = rng.normal(n, d);
  return T;
}

}  // namespace

TEST_SUITE("11_positions") {
  TEST_CASE("make_block_mask refuses, before allocating, tile counts that wrap or cannot fit in memory") {
    // 2^32 heads × 2^32 query tiles × 1 key tile wraps 64 bits; 2^20 × 2^20 tiles of one head is a terabyte.
    CHECK_THROWS_WITH_AS(ch11::make_block_mask(ch11::Causal{}, kBig, kBig, 1, 1, 1),
                         doctest::Contains("make_block_mask"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch11::make_block_mask(ch11::Causal{}, 1, std::size_t{1} << 20, std::size_t{1} << 20, 1, 1),
                         doctest::Contains("available"), std::invalid_argument);
    // n_q = SIZE_MAX: ⌈n_q / B_r⌉ computed as (n_q + B_r − 1) / B_r would wrap to a handful of tiles.
    CHECK_THROWS_AS(ch11::make_block_mask(ch11::Causal{}, 1, kMax, kMax, 2, 2), std::invalid_argument);
    CHECK_THROWS_AS(ch11::make_block_mask(ch11::Causal{}, 1, 4, 4, 0, 2), std::invalid_argument);
    const ch11::BlockMask empty = ch11::make_block_mask(ch11::Causal{}, 2, 0, 0, 4, 4);
    CHECK(empty.tiles.empty());
  }

  TEST_CASE("a block mask with missing tiles or a wrong tile count is refused by flex_attention, not read past") {
    attn::Rng rng(1101);
    const Tensor3 Q = random_heads(rng, 1, 12, 4), K = random_heads(rng, 1, 12, 4), V = random_heads(rng, 1, 12, 4);
    const ch11::FlexConfig config{4, 4, 1};
    const ch11::BlockMask good = ch11::make_block_mask(ch11::Causal{}, 1, 12, 12, 4, 4);
    REQUIRE(good.tiles.size() == 9);
    ch11::BlockMask missing = good;
    missing.tiles.resize(4);  // 5 tiles lost
    CHECK_THROWS_WITH_AS(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::Causal{}, &missing, config),
                         doctest::Contains("4 tiles"), std::invalid_argument);
    ch11::BlockMask lying = good;
    lying.T_c = 1;  // claims one key tile per row of tiles
    CHECK_THROWS_WITH_AS(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::Causal{}, &lying, config),
                         doctest::Contains("T_c = 1"), std::invalid_argument);
  }

  TEST_CASE("flex_attention refuses, before allocating, score tiles or outputs that cannot fit in memory") {
    attn::Rng rng(1102);
    const Tensor3 Q = random_heads(rng, 1, 8, 4), K = random_heads(rng, 1, 8, 4), V = random_heads(rng, 1, 8, 4);
    // One (2^20, 2^20) score tile is 4 TiB; (2^32, 2^32) tiles wrap 64 bits.
    const std::size_t huge = std::size_t{1} << 20;
    CHECK_THROWS_WITH_AS(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::NoMask{}, nullptr, {huge, huge, 1}),
                         doctest::Contains("score tiles"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::Causal{}, nullptr, {kBig, kBig, 1}),
                         doctest::Contains("flex_attention"), std::invalid_argument);
    // Zero sizes are fine: no heads, no queries, no keys (a query that sees no key gets zeros).
    CHECK(ch11::flex_attention(Tensor3(xt::zeros<float>({0, 8, 4})), Tensor3(xt::zeros<float>({0, 8, 4})),
                               Tensor3(xt::zeros<float>({0, 8, 4})))
              .O.size() == 0);
    const auto no_keys =
        ch11::flex_attention(Q, Tensor3(xt::zeros<float>({1, 0, 4})), Tensor3(xt::zeros<float>({1, 0, 4})));
    CHECK(xt::all(xt::equal(no_keys.O, 0.0f)));
  }

  TEST_CASE("SlidingWindow of SIZE_MAX is the causal mask, and a window of 0 is refused") {
    const ch11::SlidingWindow everything{kMax};
    for (std::size_t q = 0; q < 6; ++q)
      for (std::size_t kv = 0; kv < 6; ++kv) CHECK(everything(0, q, kv) == (kv <= q));
    const ch11::SlidingWindow three{3, 2};  // query q sits at q + 2 and sees positions q, q + 1, q + 2
    CHECK(three(0, 0, 0));
    CHECK(three(0, 0, 2));
    CHECK_FALSE(three(0, 0, 3));
    CHECK_FALSE(three(0, 3, 2));
    attn::Rng rng(1103);
    const Tensor3 X = random_heads(rng, 1, 6, 4);
    CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::NoScoreMod{}, ch11::SlidingWindow{0}),
                         doctest::Contains("window = 0"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch11::make_block_mask(ch11::SlidingWindow{0}, 1, 6, 6, 2, 2), doctest::Contains("window = 0"),
                         std::invalid_argument);
  }

  TEST_CASE("SoftCap refuses a cap that is NaN, infinite, zero or negative") {
    attn::Rng rng(1104);
    const Tensor3 X = random_heads(rng, 1, 6, 4);
    for (const float cap :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 0.0f, -2.0f}) {
      CAPTURE(cap);
      CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::SoftCap{cap}), doctest::Contains("SoftCap's cap"),
                           std::invalid_argument);
    }
  }

  TEST_CASE("Alibi refuses too few or too many slopes for the heads, and a NaN, infinite or negative slope") {
    attn::Rng rng(1105);
    const Tensor3 X = random_heads(rng, 4, 6, 4);
    CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::Alibi{attn::Vector{0.5f}}),
                         doctest::Contains("1 slopes for 4 heads"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::Alibi{xt::zeros<float>({5})}),
                         doctest::Contains("5 slopes for 4 heads"), std::invalid_argument);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.5f}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::Alibi{attn::Vector{0.5f, 0.25f, bad, 0.125f}}),
                           doctest::Contains("slopes[2]"), std::invalid_argument);
    }
  }
}
