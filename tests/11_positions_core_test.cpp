// Chapter 11's own code on bad input: the modifier kernel (flex.hpp), its block masks and the modifiers
// (modifiers.hpp). Chapter code, not an exercise, so these run on the solution track only (like the core
// tests of chapters 12 and 13). Expected values are closed forms; a bad parameter must be an std::invalid_argument
// naming it, never a crash, a huge allocation or a silently wrong mask.
#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>

#include "11_positions/flex.hpp"
#include "11_positions/modifiers.hpp"
#include "attn/random_heads.hpp"
#include "attn/rng.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Tensor3;
namespace ch11 = attn::ch11;
namespace hostile = attn::test::hostile;

constexpr std::size_t kBig = std::size_t{1} << 32;
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

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
    const Tensor3 Q = attn::normal_heads(rng, 1, 12, 4), K = attn::normal_heads(rng, 1, 12, 4),
                  V = attn::normal_heads(rng, 1, 12, 4);
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
    const Tensor3 Q = attn::normal_heads(rng, 1, 8, 4), K = attn::normal_heads(rng, 1, 8, 4),
                  V = attn::normal_heads(rng, 1, 8, 4);
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
    const Tensor3 X = attn::normal_heads(rng, 1, 6, 4);
    CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::NoScoreMod{}, ch11::SlidingWindow{0}),
                         doctest::Contains("window = 0"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch11::make_block_mask(ch11::SlidingWindow{0}, 1, 6, 6, 2, 2), doctest::Contains("window = 0"),
                         std::invalid_argument);
  }

  TEST_CASE("SoftCap refuses a cap that is NaN, infinite, zero or negative") {
    attn::Rng rng(1104);
    const Tensor3 X = attn::normal_heads(rng, 1, 6, 4);
    for (const float cap :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 0.0f, -2.0f}) {
      CAPTURE(cap);
      CHECK_THROWS_WITH_AS(ch11::flex_attention(X, X, X, ch11::SoftCap{cap}), doctest::Contains("SoftCap's cap"),
                           std::invalid_argument);
    }
  }

  TEST_CASE("Alibi refuses too few or too many slopes for the heads, and a NaN, infinite or negative slope") {
    attn::Rng rng(1105);
    const Tensor3 X = attn::normal_heads(rng, 4, 6, 4);
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

// Bad input, one case per function of positions.hpp and modifiers.hpp that had none (cmake/check_bad_input.py).
TEST_SUITE("11_positions: bad input") {
  TEST_CASE("tiles_of refuses a tile size of 0 instead of dividing by it") {
    CHECK_THROWS_NAMING(ch11::tiles_of(5, 0), std::invalid_argument, "B = 0");
    CHECK(ch11::tiles_of(kMax, 2) == kMax / 2 + 1);  // ⌈(2^64 − 1) / 2⌉, no wrap
  }

  TEST_CASE("BlockMask::at refuses a head, query block or key block past the mask, and a mask missing tiles") {
    const ch11::BlockMask bm = ch11::make_block_mask(ch11::Causal{}, 1, 4, 4, 2, 2);  // 1 head × 2 × 2 tiles
    CHECK_THROWS_NAMING(bm.at(0, 2, 0), std::out_of_range, "(0, 2, 0)", "2 × 2");
    CHECK_THROWS_NAMING(bm.at(0, 0, 2), std::out_of_range, "(0, 0, 2)");
    CHECK_THROWS_NAMING(bm.at(1, 0, 0), std::out_of_range, "(1, 0, 0)", "1 heads");
    ch11::BlockMask edited = bm;
    edited.tiles.pop_back();  // tiles is public: a mask edited by hand may hold fewer than heads × T_r × T_c
    CHECK_THROWS_NAMING(edited.at(0, 1, 1), std::out_of_range, "3 stored");
    CHECK(bm.at(0, 1, 0) == ch11::Tile::full);  // the lower-left tile of a causal 4 × 4 in 2 × 2 tiles
  }

  TEST_CASE("DocumentMask refuses a query or key past its document list (std::out_of_range, as documented)") {
    using attn::DocumentMask;
    CHECK_THROWS_AS(DocumentMask({{0, 0, 1}, true, 0})(0, 3, 0), std::out_of_range);
    CHECK_THROWS_AS(DocumentMask({{0, 0, 1}, true, 0})(0, 0, 3), std::out_of_range);
    CHECK_THROWS_AS(DocumentMask({{0, 0, 1}, true, kMax})(0, 2, 0), std::out_of_range);  // q + offset wraps to q − 1
  }

  TEST_CASE("Causal, SlidingWindow and PrefixLM refuse an offset past the keys, which wrapped q + offset") {
    // An offset near SIZE_MAX wrapped q + offset to q − 1: a causal mask hiding the diagonal, silently.
    CHECK_THROWS_NAMING(ch11::make_block_mask(ch11::Causal{kMax}, 1, 4, 4, 2, 2), std::invalid_argument,
                        "Causal's offset", "n_kv = 4");
    CHECK_THROWS_NAMING(ch11::make_block_mask(ch11::Causal{5}, 1, 4, 4, 2, 2), std::invalid_argument, "offset = 5");
    CHECK_THROWS_NAMING(ch11::make_block_mask(ch11::SlidingWindow{2, kMax}, 1, 4, 4, 2, 2), std::invalid_argument,
                        "SlidingWindow's offset");
    CHECK_THROWS_NAMING(ch11::make_block_mask(ch11::PrefixLM{2, kMax}, 1, 4, 4, 2, 2), std::invalid_argument,
                        "PrefixLM's offset");
    attn::Rng rng(1106);
    const Tensor3 X = attn::normal_heads(rng, 1, 4, 4);
    CHECK_THROWS_NAMING(ch11::flex_attention(X, X, X, ch11::NoScoreMod{}, ch11::PrefixLM{2, 5}), std::invalid_argument,
                        "flex_attention", "PrefixLM's offset = 5");
    // The bounds themselves are accepted: offset n_kv − n_q, and a prefix longer than the keys (every key).
    CHECK_NOTHROW(ch11::check_modifier("test", ch11::PrefixLM{9, 0}, 1, 4, 4));
    CHECK_NOTHROW(ch11::check_modifier("test", ch11::Causal{2}, 1, 2, 4));
  }

  TEST_CASE("check_modifier names the caller and the modifier's parameter for every modifier it checks") {
    CHECK_THROWS_NAMING(ch11::check_modifier("caller", ch11::SoftCap{-1.0f}, 1, 2, 2), std::invalid_argument, "caller",
                        "SoftCap's cap");
    CHECK_THROWS_NAMING(ch11::check_modifier("caller", ch11::SlidingWindow{0}, 1, 2, 2), std::invalid_argument,
                        "caller", "window = 0");
    CHECK_THROWS_NAMING(ch11::check_modifier("caller", ch11::Alibi{attn::Vector{0.5f}}, 2, 2, 2), std::invalid_argument,
                        "caller", "1 slopes for 2 heads");
    CHECK_THROWS_NAMING(ch11::check_modifier("caller", ch11::Causal{3}, 1, 2, 2), std::invalid_argument, "caller",
                        "Causal's offset = 3");
    CHECK_THROWS_NAMING(ch11::check_offset("caller", "Mine", kMax, 2), std::invalid_argument, "caller",
                        "Mine's offset");
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile values,
// each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("11_positions: the hostile battery") {
  TEST_CASE("tiles_of under the hostile battery") {
    // hostile battery: tiles_of
    hostile::battery(
        "tiles_of", {"n", "B"}, [](std::size_t n, std::size_t B) { return ch11::tiles_of(n, B); }, std::size_t{7},
        std::size_t{3})
        .fits([](std::size_t, std::size_t B) { return B > 0; })
        .answer([](std::size_t T, std::size_t n, std::size_t B) { return T == n / B + (n % B != 0 ? 1 : 0); })
        .run();
  }

  TEST_CASE("BlockMask::at under the hostile battery") {
    // hostile battery: at
    const ch11::BlockMask bm = ch11::make_block_mask(ch11::Causal{}, 2, 4, 4, 2, 2);  // 2 heads × 2 × 2 tiles
    hostile::battery(
        "BlockMask::at", {"h", "i", "j"},
        [&](std::size_t h, std::size_t i, std::size_t j) {
          try {
            return static_cast<int>(bm.at(h, i, j));
          } catch (const std::out_of_range& e) {  // its documented refusal: judged as one, by its message
            throw std::invalid_argument(e.what());
          }
        },
        std::size_t{1}, std::size_t{1}, std::size_t{0})
        .fits([](std::size_t h, std::size_t i, std::size_t j) { return h < 2 && i < 2 && j < 2; })
        .run();
  }

  TEST_CASE("the modifiers under the hostile battery") {
    // hostile battery: operator()
    // A modifier is the kernel's inner call, on indices the kernel made: check_modifier() checks its parameters
    // once, before any call. Any head, query or key must still be a clean answer: no crash, no read past slopes.
    const auto no_nan_in_nan_out = "a score_mod rewrites scores the kernel checked finite (require_attention_inputs)";
    const auto sizes = [](auto mod, const char* name) {
      hostile::battery(
          name, {"head", "q", "kv"},
          [mod](std::size_t head, std::size_t q, std::size_t kv) { return mod(head, q, kv); }, std::size_t{0},
          std::size_t{3}, std::size_t{2})
          .run();
    };
    sizes(ch11::NoMask{}, "NoMask");
    sizes(ch11::Causal{2}, "Causal");
    sizes(ch11::SlidingWindow{2, 2}, "SlidingWindow");
    sizes(ch11::PrefixLM{2, 2}, "PrefixLM");
    const auto scores = [&](auto mod, const char* name) {
      hostile::battery(
          name, {"s", "head", "q", "kv"},
          [mod](float s, std::size_t head, std::size_t q, std::size_t kv) { return mod(s, head, q, kv); }, 0.5f,
          std::size_t{0}, std::size_t{3}, std::size_t{2})
          .exempt("s = NaN", no_nan_in_nan_out)
          .run();
    };
    scores(ch11::NoScoreMod{}, "NoScoreMod");
    scores(ch11::SoftCap{30.0f}, "SoftCap");
    scores(ch11::Alibi{attn::alibi_slopes(2), 1}, "Alibi");
  }

  TEST_CASE("check_modifier and check_offset under the hostile battery") {
    // hostile battery: check_modifier, check_offset
    hostile::battery(
        "check_offset", {"offset", "n_kv"},
        [](std::size_t offset, std::size_t n_kv) {
          ch11::check_offset("test", "Causal", offset, n_kv);
          return offset;
        },
        std::size_t{2}, std::size_t{5})
        .fits([](std::size_t offset, std::size_t n_kv) { return offset <= n_kv; })
        .run();
    hostile::battery(
        "check_modifier (Alibi)", {"heads", "n_q", "n_kv"},
        [](std::size_t heads, std::size_t n_q, std::size_t n_kv) {
          ch11::check_modifier("test", ch11::Alibi{attn::alibi_slopes(2), 1}, heads, n_q, n_kv);
          return heads;
        },
        std::size_t{2}, std::size_t{4}, std::size_t{5})
        .fits([](std::size_t heads, std::size_t n_q, std::size_t n_kv) {
          const std::size_t max = static_cast<std::size_t>(INT_MAX);
          return heads == 2 && n_q <= max && n_kv <= max && 1 <= max - n_q;
        })
        .run();
    hostile::battery(
        "check_modifier (SlidingWindow)", {"window", "offset", "n_kv"},
        [](std::size_t window, std::size_t offset, std::size_t n_kv) {
          ch11::check_modifier("test", ch11::SlidingWindow{window, offset}, 1, 4, n_kv);
          return window;
        },
        std::size_t{3}, std::size_t{1}, std::size_t{5})
        .fits([](std::size_t window, std::size_t offset, std::size_t n_kv) { return window > 0 && offset <= n_kv; })
        .run();
    hostile::battery(
        "check_modifier (SoftCap)", {"cap"},
        [](float cap) {
          ch11::check_modifier("test", ch11::SoftCap{cap}, 1, 4, 5);
          return cap;
        },
        30.0f)
        .fits([](float cap) { return std::isfinite(cap) && cap > 0.0f; })
        .run();
  }

  TEST_CASE("flex_attention under the hostile battery") {
    // hostile battery: flex_attention
    attn::Rng rng(1103);
    hostile::battery(
        "flex_attention", {"Q", "K", "V", "B_r", "B_c", "threads"},
        [](const Tensor3& Q, const Tensor3& K, const Tensor3& V, std::size_t B_r, std::size_t B_c, int threads) {
          return ch11::flex_attention(Q, K, V, ch11::SoftCap{20.0f}, ch11::Causal{1}, nullptr,
                                      ch11::FlexConfig{B_r, B_c, threads})
              .O;
        },
        attn::normal_heads(rng, 2, 4, 3), attn::normal_heads(rng, 2, 5, 3), attn::normal_heads(rng, 2, 5, 2),
        std::size_t{2}, std::size_t{4}, 2)
        .fits([](const Tensor3& Q, const Tensor3& K, const Tensor3& V, std::size_t B_r, std::size_t B_c, int threads) {
          const long double scores = static_cast<long double>(threads) * B_r * B_c * 4;
          return K.shape(0) == Q.shape(0) && V.shape(0) == Q.shape(0) && K.shape(2) == Q.shape(2) &&
                 V.shape(1) == K.shape(1) && K.shape(1) >= 1 && B_r > 0 && B_c > 0 && threads > 0 &&
                 scores < (1ull << 30);
        })
        .answer([](const Tensor3& O, const Tensor3& Q, const Tensor3&, const Tensor3& V, std::size_t, std::size_t,
                   int) { return O.shape(0) == Q.shape(0) && O.shape(1) == Q.shape(1) && O.shape(2) == V.shape(2); })
        .exempt("= 2^32",
                "score tiles of 32+ GiB: answered or refused by the memory available, past the battery's 4 GiB")
        .run();
  }
}
