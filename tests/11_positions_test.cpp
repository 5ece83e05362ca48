// Chapter 11's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/11_positions_oracle.hpp) or closed forms, never from the other track. The modifier kernel
// (chapter code) is checked against dense float64 attention with the same bias and mask.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "11_positions/flex.hpp"
#include "11_positions/modifiers.hpp"
#include "11_positions/positions.hpp"
#include "attn/rng.hpp"
#include "oracle/11_positions_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;
using attn::Vector;
using attn::test::to_oracle;
namespace oracle = attn::oracle;
namespace ch11 = attn::ch11;
namespace hostile = attn::test::hostile;

// float32 attention against float64 with inputs of size ~1: each score carries d_k·2^-24 relative error, the
// softmax and the weighted sum n_kv·2^-24 more; four times their sum bounds it with margin.
double attention_tolerance(std::size_t n_kv, std::size_t d_k) {
  return 4.0 * static_cast<double>(n_kv + d_k) * std::ldexp(1.0, -24);
}

Tensor3 one_head(const Matrix& m) { return xt::expand_dims(m, 0); }  // (1, n, d)

}  // namespace

TEST_SUITE("11_positions") {
  TEST_CASE("sinusoidal_encoding follows the definition, and PE_p · PE_q depends only on p − q" *
            doctest::test_suite("11_positions/sinusoidal_encoding")) {
    const std::size_t n = 64, d = 16;
    const Matrix PE = attn::sinusoidal_encoding(n, d);
    // sin and cos of an angle computed in double, rounded once to float32: half an ulp of a value ≤ 1.
    INFO("PE(p, 2i) = sin(p·ω_i), PE(p, 2i+1) = cos(p·ω_i), ω_i = 10000^(−2i/d): do pairs share one frequency?");
    CHECK_ALLCLOSE(PE, oracle::sinusoidal(n, d), 1e-7, 0.0);
    CHECK_ALLCLOSE(attn::sinusoidal_encoding(5, 7), oracle::sinusoidal(5, 7), 1e-7, 0.0);  // odd d: a last sine
    for (std::size_t k : {1, 5, 20}) {
      const double first = static_cast<double>(xt::sum(xt::row(PE, 0) * xt::row(PE, k))());
      for (std::size_t p : {3, 17, 40}) {
        // Σ_i cos(k·ω_i) whatever p: d products of size ≤ 1, float32 rounding ≲ d·2^-24·2.
        CHECK(static_cast<double>(xt::sum(xt::row(PE, p) * xt::row(PE, p + k))()) ==
              doctest::Approx(first).epsilon(1e-5));
      }
    }
  }

  TEST_CASE("apply_rope turns each pair of columns by position times its frequency and keeps every norm" *
            doctest::test_suite("11_positions/apply_rope")) {
    attn::Rng rng(110);
    const Matrix X = rng.normal(9, 8);
    for (const std::size_t first : {std::size_t{0}, std::size_t{1000}}) {
      Matrix R = X;
      attn::apply_rope(R, first, 10000.0f);
      // Two products per entry on cos/sin rounded to float32: ~4·2^-24 of |x| ≲ 3.
      INFO("pair i = columns (2i, 2i+1), angle = (first_position + row)·base^(−2i/d)");
      CHECK_ALLCLOSE(R, oracle::rope(to_oracle(X), first, 10000.0), 1e-6, 1e-6);
      const Vector before = xt::sum(X * X, {1}), after = xt::sum(R * R, {1});  // (9) squared norms
      CHECK_ALLCLOSE(after, to_oracle(before), 1e-5, 1e-5);
    }
  }

  TEST_CASE("after apply_rope, q_m · k_n depends only on m − n, for many shifts" *
            doctest::test_suite("11_positions/apply_rope")) {
    attn::Rng rng(111);
    const Matrix q = rng.normal(1, 64), k = rng.normal(1, 64);
    for (std::size_t gap : {0, 1, 7, 100}) {
      Matrix q0 = q, k0 = k;
      attn::apply_rope(q0, gap);
      attn::apply_rope(k0, 0);
      const double reference = static_cast<double>(xt::sum(q0 * k0)());
      // The property holds for vectors that are not rotated at all: first, the vectors must be rotated.
      // q_m · k_0 of the float64 rotation, 64 products of size ~1: float32 rounding ~1e-5 of Σ|q_c k_c| ≈ 50.
      double rotated = 0.0;
      const oracle::Mat q64 = oracle::rope(to_oracle(q), gap, 10000.0), k64 = oracle::rope(to_oracle(k), 0, 10000.0);
      for (std::size_t c = 0; c < 64; ++c) rotated += q64(0, c) * k64(0, c);
      CAPTURE(gap);
      CHECK_MESSAGE(reference == doctest::Approx(rotated).epsilon(1e-5).scale(50), "q at position ", gap,
                    " and k at 0 must be rotated by their positions before the product");
      for (std::size_t shift : {1, 13, 500, 3000}) {
        Matrix qs = q, ks = k;
        attn::apply_rope(qs, gap + shift);
        attn::apply_rope(ks, shift);
        // 64 products of rotated entries: rounding of the rotation (~1e-6 relative at positions ~3000, whose
        // angles are rounded once to float32 cos/sin) times Σ|q_c k_c| ≈ 50.
        CHECK(static_cast<double>(xt::sum(qs * ks)()) == doctest::Approx(reference).epsilon(2e-4).scale(50));
      }
    }
  }

  TEST_CASE("apply_rope refuses an odd d or a base of 1, and leaves X unchanged" *
            doctest::test_suite("11_positions/apply_rope")) {
    Matrix X = {{1.0f, 2.0f, 3.0f}};  // (1, 3)
    const Matrix before = X;
    CHECK_THROWS_NAMING(attn::apply_rope(X, 0), std::invalid_argument, "1", "3");
    CHECK(X == before);
    Matrix Y = {{1.0f, 2.0f}};
    CHECK_THROWS_AS(attn::apply_rope(Y, 5, 1.0f), std::invalid_argument);
    CHECK(Y == Matrix{{1.0f, 2.0f}});
  }

  TEST_CASE("alibi_slopes are the paper's: 2^(−8k/h) for h a power of two, filled from 2h's otherwise" *
            doctest::test_suite("11_positions/alibi_slopes")) {
    INFO("for h = 8 the slopes are 1/2, 1/4, …, 1/256");
    CHECK(attn::alibi_slopes(8) == Vector{0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f, 0.00390625f});
    CHECK(attn::alibi_slopes(1) == Vector{0.00390625f});
    const Vector four = attn::alibi_slopes(4);
    CHECK(four == Vector{0.25f, 0.0625f, 0.015625f, 0.00390625f});
    INFO("h = 6: the four slopes of h = 4, then every other slope of h = 8 (1/2, 1/8), not 2^(−8k/6)");
    CHECK(attn::alibi_slopes(6) == Vector{0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f});
    // Every h from 1 to 40 against the paper's own recursion in float64: each slope is one exp2, rounded once
    // to float (ε relative; the powers of two exactly).
    for (std::size_t h = 1; h <= 40; ++h) {
      CAPTURE(h);
      CHECK_ALLCLOSE(attn::alibi_slopes(h), oracle::alibi_slopes(h), 0.0, 2.0 * std::ldexp(1.0, -24));
    }
    CHECK_THROWS_AS(attn::alibi_slopes(0), std::invalid_argument);
  }

  TEST_CASE("alibi_bias subtracts the slope times the distance, queries aligned to the end, and refuses bad slopes" *
            doctest::test_suite("11_positions/alibi_bias")) {
    const Matrix bias = attn::alibi_bias(2, 4, 0.5f);  // queries at positions 2 and 3
    CHECK(bias == Matrix{{-1.0f, -0.5f, -0.0f, -0.5f}, {-1.5f, -1.0f, -0.5f, -0.0f}});
    CHECK(attn::alibi_bias(3, 3, 0.0f) == Matrix(xt::zeros<float>({3, 3})));
    CHECK_THROWS_AS(attn::alibi_bias(3, 3, -0.25f), std::invalid_argument);
    CHECK_THROWS_AS(attn::alibi_bias(3, 3, std::numeric_limits<float>::quiet_NaN()), std::invalid_argument);
    CHECK_THROWS_AS(attn::alibi_bias(3, 3, std::numeric_limits<float>::infinity()), std::invalid_argument);
    CHECK_THROWS_AS(attn::alibi_bias(4, 3, 0.5f), std::invalid_argument);
  }

  TEST_CASE("DocumentMask keeps each token inside its own document, causally, with the file's alignment" *
            doctest::test_suite("11_positions/DocumentMask")) {
    const attn::DocumentMask docs{{0, 0, 0, 1, 1, 2, 2, 2, 2, 2}, true};
    CHECK(docs(0, 2, 0));
    CHECK(docs(0, 2, 2));
    CHECK_FALSE(docs(0, 1, 2));  // the future of the same document
    CHECK_FALSE(docs(0, 3, 2));  // the previous document
    CHECK(docs(0, 4, 3));
    CHECK_FALSE(docs(0, 9, 4));
    CHECK(docs(0, 9, 5));
    const attn::DocumentMask both_ways{{0, 0, 1}, false};
    CHECK(both_ways(0, 0, 1));
    CHECK_FALSE(both_ways(0, 0, 2));
    CHECK_THROWS_AS(docs(0, 10, 0), std::out_of_range);
    INFO("with 4 queries for the 10 tokens, query q is token q + 6: the queries are the last tokens");
    const attn::DocumentMask last_four{docs.document, true, 6};
    CHECK(last_four(0, 0, 5));        // token 6 sees token 5, the start of its document
    CHECK_FALSE(last_four(0, 0, 4));  // but not the document before it
    CHECK_FALSE(last_four(0, 0, 7));  // nor its future
    CHECK(last_four(0, 3, 9));
    CHECK_THROWS_AS(last_four(0, 4, 0), std::out_of_range);
  }

  TEST_CASE("make_block_mask of a DocumentMask skips exactly the empty tiles" *
            doctest::test_suite("11_positions/make_block_mask")) {
    const attn::DocumentMask docs{{0, 0, 0, 1, 1, 2, 2, 2, 2, 2}, true};
    // Tiles of 2 × 3 over 10 × 10: count by hand what the block mask must say, tile by tile.
    const ch11::BlockMask bm = ch11::make_block_mask(docs, 1, 10, 10, 2, 3);
    std::size_t empty = 0, full = 0;
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        std::size_t allowed = 0, pairs = 0;
        for (std::size_t q = 2 * i; q < 2 * i + 2; ++q)
          for (std::size_t kv = 3 * j; kv < std::min<std::size_t>(10, 3 * j + 3); ++kv, ++pairs) {
            const bool same = (q < 3 ? 0 : q < 5 ? 1 : 2) == (kv < 3 ? 0 : kv < 5 ? 1 : 2);
            allowed += same && kv <= q;
          }
        empty += allowed == 0;
        full += allowed == pairs;
        CHECK(bm.at(0, i, j) == (allowed == 0       ? ch11::Tile::empty
                                 : allowed == pairs ? ch11::Tile::full
                                                    : ch11::Tile::partial));
      }
    CHECK(bm.count(ch11::Tile::empty) == empty);
    CHECK(bm.count(ch11::Tile::full) == full);
  }

  TEST_CASE(
      "flex_attention with each modifier (alibi_slopes, DocumentMask, ...) equals dense float64 attention, same bias "
      "and mask" *
      doctest::test_suite("11_positions/make_block_mask")) {
    attn::Rng rng(112);
    const std::size_t h = 2;
    for (const auto& shape :
         {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 4}, {37, 37, 16}, {70, 130, 32}, {130, 130, 8}}) {
      const std::size_t n_q = std::get<0>(shape), n_kv = std::get<1>(shape),
                        d = std::get<2>(shape);  // lambdas capture these
      CAPTURE(n_q);
      CAPTURE(n_kv);
      Tensor3 Q = xt::zeros<float>({h, n_q, d}), K = xt::zeros<float>({h, n_kv, d}), V = K;
      for (std::size_t k = 0; k < h; ++k) {
        xt::view(Q, k) = rng.normal(n_q, d);
        xt::view(K, k) = rng.normal(n_kv, d);
        xt::view(V, k) = rng.normal(n_kv, d);
      }
      const std::size_t offset = n_kv - n_q;
      const Vector slopes = attn::alibi_slopes(h);
      const attn::DocumentMask docs{[&] {
                                      std::vector<std::size_t> doc(n_kv);
                                      for (std::size_t t = 0; t < n_kv; ++t) doc[t] = t / 29;  // documents of 29 tokens
                                      return doc;
                                    }(),
                                    true, offset};
      const double tol = attention_tolerance(n_kv, d);
      // n is a multiple of neither tile. B_c = 24 is not a whole number of chapter 05's key panels (16 or 32
      // keys), so both products are OpenBLAS calls; B_c = 64 is, so they run on its micro-kernels.
      for (const ch11::FlexConfig config : {ch11::FlexConfig{16, 24, 2}, ch11::FlexConfig{16, 64, 2}})
        for (std::size_t k = 0; k < h; ++k) {
          CAPTURE(config.B_c);
          const oracle::Mat q = to_oracle(Matrix(xt::view(Q, k))), kk = to_oracle(Matrix(xt::view(K, k))),
                            v = to_oracle(Matrix(xt::view(V, k)));
          const auto identity = [](double s, std::size_t, std::size_t) { return s; };
          const auto all = [](std::size_t, std::size_t) { return true; };
          const auto check = [&](const attn::ch05::FlashHeadsOutput& out, const oracle::Mat& expected,
                                 const char* what) {
            INFO(std::string(what));
            CHECK_ALLCLOSE(Matrix(xt::view(out.O, k)), expected, tol, 0.0);
          };
          check(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::NoMask{}, nullptr, config),
                oracle::modified_attention(q, kk, v, identity, all), "no modifier");
          check(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::Causal{offset}, nullptr, config),
                oracle::modified_attention(q, kk, v, identity,
                                           [&](std::size_t i, std::size_t j) { return j <= i + offset; }),
                "causal");
          check(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::SlidingWindow{10, offset}, nullptr, config),
                oracle::modified_attention(
                    q, kk, v, identity,
                    [&](std::size_t i, std::size_t j) { return j <= i + offset && i + offset < j + 10; }),
                "sliding window of 10");
          check(ch11::flex_attention(Q, K, V, ch11::Alibi{slopes, offset}, ch11::Causal{offset}, nullptr, config),
                oracle::modified_attention(
                    q, kk, v,
                    [&](double s, std::size_t i, std::size_t j) {
                      return s - oracle::alibi_slopes(h)[k] *
                                     std::fabs(static_cast<double>(i + offset) - static_cast<double>(j));
                    },
                    [&](std::size_t i, std::size_t j) { return j <= i + offset; }),
                "ALiBi with your alibi_slopes, causal");
          check(ch11::flex_attention(Q, K, V, ch11::SoftCap{1.5f}, ch11::NoMask{}, nullptr, config),
                oracle::modified_attention(
                    q, kk, v, [](double s, std::size_t, std::size_t) { return 1.5 * std::tanh(s / 1.5); }, all),
                "soft-capping at 1.5");
          // Prefix-LM and documents, aligned like every mask: query i sits at position i + offset.
          check(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::PrefixLM{9, offset}, nullptr, config),
                oracle::modified_attention(q, kk, v, identity,
                                           [&](std::size_t i, std::size_t j) { return j < 9 || j <= i + offset; }),
                "prefix-LM with a prefix of 9");
          check(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, docs, nullptr, config),
                oracle::modified_attention(
                    q, kk, v, identity,
                    [&](std::size_t i, std::size_t j) { return (i + offset) / 29 == j / 29 && j <= i + offset; }),
                "your DocumentMask, documents of 29 tokens");
        }
    }
  }

  TEST_CASE(
      "sinusoidal_encoding and alibi_bias give empty matrices for zero sizes and refuse, before allocating, "
      "sizes that cannot fit" *
      doctest::test_suite("11_positions/alibi_bias")) {
    CHECK(attn::sinusoidal_encoding(0, 8).shape(0) == 0);
    CHECK(attn::sinusoidal_encoding(4, 0).shape(1) == 0);
    CHECK(attn::alibi_bias(0, 0, 0.5f).size() == 0);
    CHECK(attn::alibi_bias(0, 3, 0.5f).shape(1) == 3);
    const std::size_t big = std::size_t{1} << 32, huge = std::size_t{1} << 40;
    // 2^32 × 2^32 floats wrap 64 bits; 2^40 × 8 floats (32 TiB) do not, but no machine has them available.
    CHECK_THROWS_NAMING(attn::sinusoidal_encoding(big, big), std::invalid_argument, "sinusoidal_encoding");
    CHECK_THROWS_NAMING(attn::sinusoidal_encoding(huge, 8), std::invalid_argument, "available");
    CHECK_THROWS_NAMING(attn::alibi_bias(big, big, 0.5f), std::invalid_argument, "alibi_bias");
    CHECK_THROWS_NAMING(attn::alibi_bias(huge, huge, 0.5f), std::invalid_argument, "alibi_bias");
    CHECK_THROWS_NAMING(attn::alibi_bias(8, huge, 0.5f), std::invalid_argument, "available");
  }

  TEST_CASE("apply_rope refuses a NaN or infinite entry of X, naming it, and leaves X unchanged" *
            doctest::test_suite("11_positions/apply_rope")) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
      Matrix X{{1.0f, 2.0f, 3.0f, 4.0f}, {5.0f, 6.0f, 7.0f, bad}};
      const Matrix before = X;
      CHECK_THROWS_NAMING(attn::apply_rope(X, 3), std::invalid_argument, "X", "7");
      for (std::size_t i = 0; i + 1 < X.size(); ++i) CHECK(X.data()[i] == before.data()[i]);
    }
  }

  TEST_CASE(
      "flex_attention with a DocumentMask mask_mod that refuses one row gives it zeros, never NaN, and rejects bad "
      "input" *
      doctest::test_suite("11_positions/make_block_mask")) {
    attn::Rng rng(113);
    const Tensor3 Q = one_head(rng.normal(12, 8)), K = one_head(rng.normal(12, 8)), V = one_head(rng.normal(12, 4));
    const attn::DocumentMask docs{{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, true};
    // Row 3 is refused everything on top of the document mask.
    const auto refuse_row_3 = [&](std::size_t h, std::size_t q, std::size_t kv) { return q != 3 && docs(h, q, kv); };
    const attn::ch05::FlashHeadsOutput out =
        ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, refuse_row_3, nullptr, {4, 4, 2});
    CHECK(xt::all(xt::isfinite(out.O)));
    CHECK(xt::all(xt::equal(xt::view(out.O, 0, 3), 0.0f)));
    CHECK(std::isinf(out.lse(0, 3)));
    const ch11::BlockMask other = ch11::make_block_mask(docs, 1, 12, 12, 4, 8);  // other tiles
    CHECK_THROWS_NAMING(ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, docs, &other, {4, 4, 2}),
                        std::invalid_argument, "block mask");
    CHECK_THROWS_NAMING(ch11::flex_attention(Q, one_head(rng.normal(12, 7)), V), std::invalid_argument, "1", "12", "7");
  }

  TEST_CASE(
      "flex_attention with alibi_slopes gives bit-identical results on 1, 2 and 3 threads, on every instruction set "
      "of chapter 05's micro-kernels" *
      doctest::test_suite("11_positions/make_block_mask")) {
    attn::Rng rng(114);
    const std::size_t h = 3, n = 150, d = 32;
    Tensor3 Q = xt::zeros<float>({h, n, d}), K = Q, V = Q;  // (h, n, d)
    for (std::size_t k = 0; k < h; ++k) {
      xt::view(Q, k) = rng.normal(n, d);
      xt::view(K, k) = rng.normal(n, d);
      xt::view(V, k) = rng.normal(n, d);
    }
    const ch11::Alibi alibi{attn::alibi_slopes(h)};
    for (const char* isa : {"AVX-512", "AVX2+FMA", "NEON", "none"}) {
      if (!attn::ch05::use_tile_kernels(isa)) continue;  // this CPU cannot run it
      CAPTURE(isa);
      const attn::ch05::FlashHeadsOutput one =
          ch11::flex_attention(Q, K, V, alibi, ch11::Causal{}, nullptr, ch11::FlexConfig{32, 64, 1});
      for (std::size_t k = 0; k < h; ++k) {
        const oracle::Mat q = to_oracle(Matrix(xt::view(Q, k))), kk = to_oracle(Matrix(xt::view(K, k))),
                          v = to_oracle(Matrix(xt::view(V, k)));
        const double slope = oracle::alibi_slopes(h)[k];  // h = 3: 1/16, 1/256, then 1/4
        CHECK_ALLCLOSE(Matrix(xt::view(one.O, k)),
                       oracle::modified_attention(
                           q, kk, v,
                           [&](double s, std::size_t i, std::size_t j) {
                             return s - slope * std::fabs(static_cast<double>(i) - static_cast<double>(j));
                           },
                           [](std::size_t i, std::size_t j) { return j <= i; }),
                       attention_tolerance(n, d), 0.0);
      }
      for (const int threads : {2, 3}) {
        CAPTURE(threads);
        // Each (head, query block) is computed by one thread, in the same order whichever thread it is.
        const attn::ch05::FlashHeadsOutput many =
            ch11::flex_attention(Q, K, V, alibi, ch11::Causal{}, nullptr, ch11::FlexConfig{32, 64, threads});
        CHECK(many.O == one.O);
        CHECK(many.lse == one.lse);
      }
    }
    attn::ch05::use_tile_kernels("auto");
  }

  TEST_CASE("make_block_mask marks each tile empty, partial or full, per head, the ragged last tiles included" *
            doctest::test_suite("11_positions/make_block_mask")) {
    // Head 0: a window |q − kv| ≤ 2; head 1: keys below 4 only; head 2: every pair. 10 queries × 13 keys in
    // tiles of 4 × 5: the last row of tiles has 2 queries and the last column 3 keys, so a tile is full when
    // all of ITS pairs are allowed (4 × 5 = 20 is never reached there: head 2's ragged tiles are full too).
    const attn::MaskModFn mask = [](std::size_t h, std::size_t q, std::size_t kv) {
      return h == 0 ? (q > kv ? q - kv : kv - q) <= 2 : h == 1 ? kv < 4 : true;
    };
    const std::size_t n_q = 10, n_kv = 13, B_r = 4, B_c = 5;
    const ch11::BlockMask bm = attn::make_block_mask(mask, 3, n_q, n_kv, B_r, B_c);
    REQUIRE(bm.T_r == 3);
    REQUIRE(bm.T_c == 3);
    REQUIRE(bm.tiles.size() == 3 * 3 * 3);
    for (std::size_t h = 0; h < 3; ++h)
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
          std::size_t allowed = 0, pairs = 0;
          for (std::size_t q = i * B_r; q < std::min(n_q, (i + 1) * B_r); ++q)
            for (std::size_t kv = j * B_c; kv < std::min(n_kv, (j + 1) * B_c); ++kv, ++pairs) allowed += mask(h, q, kv);
          const ch11::Tile want = allowed == 0       ? ch11::Tile::empty
                                  : allowed == pairs ? ch11::Tile::full
                                                     : ch11::Tile::partial;
          CAPTURE(h);
          CAPTURE(i);
          CAPTURE(j);
          CHECK_MESSAGE(bm.at(h, i, j) == want, "the tile has ", allowed, " allowed of its ", pairs,
                        " pairs: none is empty, all is full (count the pairs the tile really has)");
        }
    CHECK(attn::make_block_mask(mask, 2, 0, 0, 4, 5).tiles.empty());  // no query, no key: no tile
    CHECK_THROWS_NAMING(attn::make_block_mask(mask, 1, 4, 4, 0, 2), std::invalid_argument, "B_r");
  }

  TEST_CASE("flex_attention_tiles equals float64 attention with the same score_mod and mask_mod, lse included" *
            doctest::test_suite("11_positions/flex_attention_tiles")) {
    attn::Rng rng(115);
    const std::size_t n_q = 11, n_kv = 17, d = 8, offset = n_kv - n_q;
    const Matrix Q = rng.normal(n_q, d), K = rng.normal(n_kv, d), V = rng.normal(n_kv, 3);
    const oracle::Mat q = to_oracle(Q), k = to_oracle(K), v = to_oracle(V);
    const float slope = 0.25f, cap = 1.5f;
    const std::vector<std::size_t> docs{0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2};  // (n_kv)
    // Soft-capping after a score would be masked: a masked score must stay -inf, not become −cap.
    const attn::ScoreModFn alibi = [&](float s, std::size_t, std::size_t i, std::size_t j) {
      return s - slope * static_cast<float>(i + offset > j ? i + offset - j : j - i - offset);
    };
    const attn::ScoreModFn softcap = [&](float s, std::size_t, std::size_t, std::size_t) {
      return cap * std::tanh(s / cap);
    };
    const attn::MaskModFn causal = [&](std::size_t, std::size_t i, std::size_t j) { return j <= i + offset; };
    const attn::MaskModFn same_doc = [&](std::size_t, std::size_t i, std::size_t j) {
      return docs[i + offset] == docs[j] && j <= i + offset;
    };
    const oracle::ScoreFn alibi64 = [&](double s, std::size_t i, std::size_t j) {
      return s - static_cast<double>(slope) * std::fabs(static_cast<double>(i + offset) - static_cast<double>(j));
    };
    const oracle::ScoreFn softcap64 = [&](double s, std::size_t, std::size_t) {
      return static_cast<double>(cap) * std::tanh(s / static_cast<double>(cap));
    };
    const double tol = attention_tolerance(n_kv, d);
    for (const auto& [B_r, B_c] : {std::pair<std::size_t, std::size_t>{4, 5}, {3, 8}, {16, 32}}) {
      CAPTURE(B_r);
      CAPTURE(B_c);
      const auto run = [&](const attn::ScoreModFn& score, const attn::MaskModFn& mask, const oracle::ScoreFn& score64,
                           const char* what) {
        INFO(what);
        const attn::FlashOutput out =
            attn::flex_attention_tiles(Q, K, V, 0, score, mask, attn::make_block_mask(mask, 1, n_q, n_kv, B_r, B_c));
        const oracle::MaskFn allowed = [&](std::size_t i, std::size_t j) { return mask(0, i, j); };
        CHECK_ALLCLOSE(out.O, oracle::modified_attention(q, k, v, score64, allowed), tol, 0.0);
        CHECK_ALLCLOSE(out.lse, oracle::modified_log_sum_exp(q, k, score64, allowed), tol, tol);
      };
      run(alibi, causal, alibi64, "ALiBi, causal");
      run(softcap, same_doc, softcap64, "soft-capping, documents: the mask after score_mod");
    }
  }

  TEST_CASE("flex_attention_tiles skips the empty tiles and calls mask_mod only in partial ones" *
            doctest::test_suite("11_positions/flex_attention_tiles")) {
    // A causal mask over 12 × 12 in tiles of 4 × 4: of 9 tiles, 3 are empty (above the diagonal), 3 full and
    // 3 partial. score_mod runs once per pair of the 6 tiles computed (96 pairs), mask_mod once per pair of
    // the 3 partial ones (48 pairs); a loop that visits every tile makes 144 score_mod calls.
    attn::Rng rng(116);
    const Matrix Q = rng.normal(12, 4), K = rng.normal(12, 4), V = rng.normal(12, 2);
    std::size_t score_calls = 0, mask_calls = 0;
    const attn::MaskModFn causal = [](std::size_t, std::size_t i, std::size_t j) { return j <= i; };
    const ch11::BlockMask bm = attn::make_block_mask(causal, 1, 12, 12, 4, 4);
    const attn::ScoreModFn counting_score = [&](float s, std::size_t, std::size_t, std::size_t) {
      ++score_calls;
      return s;
    };
    const attn::MaskModFn counting_mask = [&](std::size_t h, std::size_t i, std::size_t j) {
      ++mask_calls;
      return causal(h, i, j);
    };
    const attn::FlashOutput out = attn::flex_attention_tiles(Q, K, V, 0, counting_score, counting_mask, bm);
    CHECK_MESSAGE(out.tiles_visited == 6, "tiles_visited = ", out.tiles_visited, ": the 3 empty tiles are skipped");
    CHECK_MESSAGE(score_calls == 96, score_calls, " score_mod calls: an empty tile is never computed");
    CHECK_MESSAGE(mask_calls == 48, mask_calls, " mask_mod calls: a full tile needs no mask");
    // A query that may see nothing: zeros and lse = -inf, never NaN.
    const attn::MaskModFn none_for_3 = [](std::size_t, std::size_t i, std::size_t j) { return i != 3 && j <= i; };
    const attn::FlashOutput blind = attn::flex_attention_tiles(
        Q, K, V, 0, [](float s, std::size_t, std::size_t, std::size_t) { return s; }, none_for_3,
        attn::make_block_mask(none_for_3, 1, 12, 12, 4, 4));
    CHECK(xt::all(xt::equal(xt::row(blind.O, 3), 0.0f)));
    CHECK(std::isinf(blind.lse(3)));
    CHECK(xt::all(xt::isfinite(blind.O)));
    CHECK_THROWS_NAMING(attn::flex_attention_tiles(Q, rng.normal(12, 3), V, 0, counting_score, causal, bm),
                        std::invalid_argument, "12", "3");
    CHECK_THROWS_AS(
        attn::flex_attention_tiles(Q, K, V, 0, counting_score, causal, attn::make_block_mask(causal, 1, 12, 11, 4, 4)),
        std::invalid_argument);  // a block mask made for 11 keys
  }
}

// The defects hostile calls found in chapter 11's reference answers.
TEST_SUITE("11_positions: hostile input") {
  TEST_CASE("apply_rope refuses a first position whose rows would wrap past 2^64 − 1, leaving X unchanged" *
            doctest::test_suite("11_positions/apply_rope")) {
    Matrix X = {{1.0f, 2.0f}, {3.0f, 4.0f}};  // (2, 2): row 1 sat at position SIZE_MAX + 1 = 0 before
    const Matrix before = X;
    const std::size_t last = std::numeric_limits<std::size_t>::max();
    CHECK_THROWS_NAMING(attn::apply_rope(X, last), std::invalid_argument, "apply_rope", "first_position");
    CHECK(X == before);
    Matrix one = {{1.0f, 0.0f}};
    CHECK_NOTHROW(attn::apply_rope(one, last));  // one row at the last position: no wrap
  }

  TEST_CASE("alibi_slopes refuses a head count past the memory instead of looping or allocating it" *
            doctest::test_suite("11_positions/alibi_slopes")) {
    // h ≥ 2^63 never returned (2·c wrapped to 0); 2^40 heads asked for 4 TiB.
    for (const std::size_t h : {std::size_t{1} << 63, std::numeric_limits<std::size_t>::max(), std::size_t{1} << 40}) {
      CAPTURE(h);
      CHECK_THROWS_NAMING(attn::alibi_slopes(h), std::invalid_argument, "alibi_slopes");
    }
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile values,
// each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("11_positions: the hostile battery") {
  TEST_CASE("sinusoidal_encoding under the hostile battery" * doctest::test_suite("11_positions/sinusoidal_encoding")) {
    // hostile battery: sinusoidal_encoding
    hostile::battery(
        "sinusoidal_encoding", {"n", "d"}, [](std::size_t n, std::size_t d) { return attn::sinusoidal_encoding(n, d); },
        std::size_t{6}, std::size_t{5})
        .fits([](std::size_t n, std::size_t d) { return static_cast<long double>(n) * d * 4 < (1ull << 30); })
        .answer([](const Matrix& PE, std::size_t n, std::size_t d) {
          bool bounded = true;  // a loop, not xt::all: xtensor offsets a null pointer for an empty tensor
          for (std::size_t i = 0; i < PE.size(); ++i) bounded = bounded && std::abs(PE.data()[i]) <= 1.0f;
          return PE.shape(0) == n && PE.shape(1) == d && bounded;
        })
        .exempt("= 2^32",
                "n·d floats of 16 GiB or more: answered or refused by the memory available, its contract's "
                "limit, past the battery's 4 GiB")
        .run();
  }

  TEST_CASE("apply_rope under the hostile battery" * doctest::test_suite("11_positions/apply_rope")) {
    // hostile battery: apply_rope
    attn::Rng rng(1101);
    hostile::battery(
        "apply_rope", {"X", "first_position", "base"},
        [](Matrix& X, std::size_t first_position, float base) {
          attn::apply_rope(X, first_position, base);
          return X;
        },
        Matrix(rng.normal(3, 4)), std::size_t{2}, 10000.0f)
        .fits([](const Matrix& X, std::size_t first_position, float base) {
          const std::size_t n = X.shape(0);
          return X.shape(1) % 2 == 0 && std::isfinite(base) && base > 1.0f &&
                 (n == 0 || first_position <= std::numeric_limits<std::size_t>::max() - (n - 1));
        })
        .answer([](const Matrix& R, const Matrix& X, std::size_t, float) { return R.shape() == X.shape(); })
        .run();
  }

  TEST_CASE("alibi_slopes under the hostile battery" * doctest::test_suite("11_positions/alibi_slopes")) {
    // hostile battery: alibi_slopes
    hostile::battery(
        "alibi_slopes", {"h"}, [](std::size_t h) { return attn::alibi_slopes(h); }, std::size_t{6})
        .fits([](std::size_t h) { return h > 0 && h < (std::size_t{1} << 28); })
        .answer([](const Vector& m, std::size_t h) { return m.size() == h && xt::all(m > 0.0f) && xt::all(m <= 1.0f); })
        .exempt("h = 2^32",
                "h floats of 16 GiB: answered or refused by the memory available, its contract's limit, "
                "past the battery's 4 GiB")
        .run();
  }

  TEST_CASE("alibi_bias under the hostile battery" * doctest::test_suite("11_positions/alibi_bias")) {
    // hostile battery: alibi_bias
    hostile::battery(
        "alibi_bias", {"n_q", "n_kv", "slope"},
        [](std::size_t n_q, std::size_t n_kv, float slope) { return attn::alibi_bias(n_q, n_kv, slope); },
        std::size_t{3}, std::size_t{5}, 0.5f)
        .fits([](std::size_t n_q, std::size_t n_kv, float slope) {
          return std::isfinite(slope) && slope >= 0.0f && n_q <= n_kv &&
                 static_cast<long double>(n_q) * n_kv * 4 < (1ull << 30);
        })
        .answer([](const Matrix& bias, std::size_t n_q, std::size_t n_kv, float) {
          bool penalties = true;  // a loop, not xt::all: xtensor offsets a null pointer for an empty tensor
          for (std::size_t i = 0; i < bias.size(); ++i) penalties = penalties && bias.data()[i] <= 0.0f;
          return bias.shape(0) == n_q && bias.shape(1) == n_kv && penalties;
        })
        .exempt("n_kv = 2^32",
                "n_q·n_kv floats of 48 GiB: answered or refused by the memory available, its "
                "contract's limit, past the battery's 4 GiB")
        .run();
  }

  TEST_CASE("DocumentMask under the hostile battery" * doctest::test_suite("11_positions/DocumentMask")) {
    // hostile battery: operator()
    const attn::DocumentMask documents{{0, 0, 1, 1, 1}, true, 1};  // 5 keys, 4 queries: offset 1
    hostile::battery(
        "DocumentMask", {"head", "q|query", "kv|key"},
        [&](std::size_t head, std::size_t q, std::size_t kv) {
          try {
            return documents(head, q, kv);
          } catch (const std::out_of_range& e) {  // its documented refusal: judged as one, by its message
            throw std::invalid_argument(e.what());
          }
        },
        std::size_t{0}, std::size_t{2}, std::size_t{3})
        .fits([](std::size_t, std::size_t q, std::size_t kv) { return q < 4 && kv < 5; })
        .run();
  }

  TEST_CASE("make_block_mask under the hostile battery" * doctest::test_suite("11_positions/make_block_mask")) {
    // hostile battery: make_block_mask
    const auto tiles = [](std::size_t heads, std::size_t n_q, std::size_t n_kv, std::size_t B_r, std::size_t B_c) {
      return static_cast<long double>(heads) * ch11::tiles_of(n_q, B_r) * ch11::tiles_of(n_kv, B_c);
    };
    hostile::battery(
        "make_block_mask", {"mask_mod", "heads", "n_q", "n_kv", "B_r", "B_c"},
        [](const attn::MaskModFn& mask_mod, std::size_t heads, std::size_t n_q, std::size_t n_kv, std::size_t B_r,
           std::size_t B_c) { return attn::make_block_mask(mask_mod, heads, n_q, n_kv, B_r, B_c); },
        attn::MaskModFn(ch11::Causal{1}), std::size_t{2}, std::size_t{5}, std::size_t{6}, std::size_t{2},
        std::size_t{4})
        .fits([&](const attn::MaskModFn&, std::size_t heads, std::size_t n_q, std::size_t n_kv, std::size_t B_r,
                  std::size_t B_c) {
          return B_r > 0 && B_c > 0 && tiles(heads, n_q, n_kv, B_r, B_c) < (1ull << 30) &&
                 static_cast<long double>(heads) * n_q * n_kv < 18446744073709551616.0L;
        })
        .answer([](const ch11::BlockMask& bm, const attn::MaskModFn&, std::size_t heads, std::size_t n_q,
                   std::size_t n_kv, std::size_t B_r, std::size_t B_c) {
          return bm.heads == heads && bm.n_q == n_q && bm.n_kv == n_kv && bm.T_r == ch11::tiles_of(n_q, B_r) &&
                 bm.T_c == ch11::tiles_of(n_kv, B_c) && bm.tiles.size() == heads * bm.T_r * bm.T_c;
        })
        .exempt("n_q = 2^32",
                "4+ GiB of tiles and 2^35 mask_mod calls: answered when the memory available allows "
                "(its contract's limit), past the battery's 4 GiB")
        .exempt("n_kv = 2^32", "as n_q = 2^32")
        .run();
  }

  TEST_CASE("flex_attention_tiles under the hostile battery" *
            doctest::test_suite("11_positions/flex_attention_tiles")) {
    // hostile battery: flex_attention_tiles
    attn::Rng rng(1102);
    const attn::MaskModFn causal = ch11::Causal{1};  // 4 queries, 5 keys
    const attn::ScoreModFn none = ch11::NoScoreMod{};
    hostile::battery(
        "flex_attention_tiles", {"Q", "K", "V", "head", "score_mod", "mask_mod", "block_mask"},
        [](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t head, const attn::ScoreModFn& score_mod,
           const attn::MaskModFn& mask_mod, const ch11::BlockMask& block_mask) {
          return attn::flex_attention_tiles(Q, K, V, head, score_mod, mask_mod, block_mask).O;
        },
        Matrix(rng.normal(4, 3)), Matrix(rng.normal(5, 3)), Matrix(rng.normal(5, 2)), std::size_t{0}, none, causal,
        attn::make_block_mask(causal, 1, 4, 5, 2, 2))
        .fits([](const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t, const attn::ScoreModFn&,
                 const attn::MaskModFn&, const ch11::BlockMask&) {
          // the block mask is for 4 queries and 5 keys, one head (every head reads it)
          return Q.shape(0) == 4 && K.shape(0) == 5 && K.shape(1) == Q.shape(1) && V.shape(0) == 5;
        })
        .answer([](const Matrix& O, const Matrix& Q, const Matrix&, const Matrix& V, std::size_t,
                   const attn::ScoreModFn&, const attn::MaskModFn&,
                   const ch11::BlockMask&) { return O.shape(0) == Q.shape(0) && O.shape(1) == V.shape(1); })
        .run();
  }
}
