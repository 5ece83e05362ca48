// Chapter 09's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/09_mqa_gqa_oracle.hpp) or closed forms, never from the other track.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "09_mqa_gqa/mqa_gqa.hpp"
#include "attn/random_heads.hpp"
#include "attn/rng.hpp"
#include "oracle/09_mqa_gqa_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;
using attn::oracle::Heads;
using attn::oracle::Mat;
namespace hostile = attn::test::hostile;

// Float32 against float64 with N(0,1) entries and d_k ≤ 16: a score q·k/√d_k carries a rounding error of
// about d_k·2^-24·|q||k|/√d_k ≈ 16·6e-8·4 ≈ 4e-6; softmax turns it into a relative weight error of that
// size, and the output (a convex combination of values of size ~3) inherits ~1e-5. atol = rtol = 1e-4
// leaves a margin of ten, as chapter 02 does.
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-4;

/// (heads, n, d) → (heads·n, d): heads stacked, so one CHECK_ALLCLOSE compares them all.
Matrix stacked(const Tensor3& T) {
  Matrix flat = xt::zeros<float>({T.shape(0) * T.shape(1), T.shape(2)});  // (heads·n, d)
  std::copy(T.begin(), T.end(), flat.begin());
  return flat;
}
Mat stacked(const Heads& heads) {
  Mat flat(0, heads.empty() ? 0 : heads[0].cols);
  for (const Mat& m : heads) {
    flat.rows += m.rows;
    flat.v.insert(flat.v.end(), m.v.begin(), m.v.end());
  }
  return flat;
}

/// The (h, d) matrix of row t of every head of an oracle result: what one decode step returns.
Mat row_of_every_head(const Heads& heads, std::size_t t) {
  Mat out(heads.size(), heads[0].cols);
  for (std::size_t i = 0; i < heads.size(); ++i)
    for (std::size_t c = 0; c < out.cols; ++c) out(i, c) = heads[i](t, c);
  return out;
}

/// Token t of a head-major tensor: (heads, d), the row a decode step receives.
Matrix token(const Tensor3& T, std::size_t t) { return xt::view(T, xt::all(), t, xt::all()); }

}  // namespace

TEST_SUITE("09_mqa_gqa") {
  TEST_CASE("kv_group_of gives h/g consecutive query heads the same key/value head" *
            doctest::test_suite("09_mqa_gqa/kv_group_of")) {
    const std::array<std::size_t, 8> gqa{0, 0, 0, 0, 1, 1, 1, 1};
    for (std::size_t i = 0; i < 8; ++i) {
      CHECK(attn::kv_group_of(i, 8, 2) == gqa[i]);
      CHECK(attn::kv_group_of(i, 8, 8) == i);  // MHA: every head its own
      CHECK(attn::kv_group_of(i, 8, 1) == 0);  // MQA: one for all
    }
    CHECK(attn::kv_group_of(5, 6, 3) == 2);  // not a power of two
    CHECK(attn::kv_group_of(0, 1, 1) == 0);
  }

  TEST_CASE("kv_group_of rejects g that does not divide h, g = 0 and a head past h, naming them" *
            doctest::test_suite("09_mqa_gqa/kv_group_of")) {
    CHECK_THROWS_NAMING(attn::kv_group_of(0, 6, 4), std::invalid_argument, "6", "4");  // h and g
    CHECK_THROWS_AS(attn::kv_group_of(0, 6, 0), std::invalid_argument);
    CHECK_THROWS_AS(attn::kv_group_of(8, 8, 2), std::invalid_argument);
  }

  TEST_CASE("grouped_attention with g = h is multi-head attention: every head its own K and V" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    attn::Rng rng(91);
    for (auto [h, n, d_k, d_v] : {std::array<std::size_t, 4>{1, 1, 1, 1}, {4, 7, 8, 5}, {3, 13, 16, 16}}) {
      const Tensor3 Q = attn::normal_heads(rng, h, n, d_k), K = attn::normal_heads(rng, h, n, d_k),
                    V = attn::normal_heads(rng, h, n, d_v);
      Heads expected;  // multi-head attention: head i is plain attention with Q[i], K[i], V[i]
      const Heads q = attn::test::to_oracle(Q), k = attn::test::to_oracle(K), v = attn::test::to_oracle(V);
      for (std::size_t i = 0; i < h; ++i) expected.push_back(attn::oracle::attention(q[i], k[i], v[i]));
      CHECK_ALLCLOSE(stacked(attn::grouped_attention(Q, K, V)), stacked(expected), kAtol, kRtol);
    }
  }

  TEST_CASE("grouped_attention with g = 1 is multi-query attention: every head reads the one K and V" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    attn::Rng rng(92);
    const std::size_t h = 5, n = 9, d_k = 8, d_v = 3;
    const Tensor3 Q = attn::normal_heads(rng, h, n, d_k), K = attn::normal_heads(rng, 1, n, d_k),
                  V = attn::normal_heads(rng, 1, n, d_v);
    const Heads q = attn::test::to_oracle(Q), k = attn::test::to_oracle(K), v = attn::test::to_oracle(V);
    Heads expected;
    for (std::size_t i = 0; i < h; ++i) expected.push_back(attn::oracle::attention(q[i], k[0], v[0]));
    CHECK_ALLCLOSE(stacked(attn::grouped_attention(Q, K, V)), stacked(expected), kAtol, kRtol);
  }

  TEST_CASE("grouped_attention matches the oracle for every g dividing h, causal or not, n_q != n_kv" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    attn::Rng rng(93);
    const std::size_t h = 6, n_q = 5, n_kv = 7, d_k = 5, d_v = 4;
    for (std::size_t g : {6, 3, 2, 1}) {
      const Tensor3 Q = attn::normal_heads(rng, h, n_q, d_k), K = attn::normal_heads(rng, g, n_kv, d_k),
                    V = attn::normal_heads(rng, g, n_kv, d_v);
      for (bool causal : {false, true}) {
        CAPTURE(g);
        CAPTURE(causal);
        CHECK_ALLCLOSE(stacked(attn::grouped_attention(Q, K, V, causal)),
                       stacked(attn::oracle::grouped_attention(attn::test::to_oracle(Q), attn::test::to_oracle(K),
                                                               attn::test::to_oracle(V), causal)),
                       kAtol, kRtol);
      }
    }
  }

  TEST_CASE("grouped_attention stays finite and exact with logits of ±1e4" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    attn::Rng rng(94);
    Tensor3 Q = attn::normal_heads(rng, 4, 3, 4), K = attn::normal_heads(rng, 2, 3, 4);
    const Tensor3 V = attn::normal_heads(rng, 2, 3, 2);
    Q(1, 0, 0) = 1.0e4f;  // head 1 (group 0) query 0: a huge score on key 0 or 2, depending on K's sign
    K(0, 0, 0) = 1.0f;
    K(0, 1, 0) = -1.0f;
    K(0, 2, 0) = 0.0f;
    const Tensor3 O = attn::grouped_attention(Q, K, V);
    CHECK(std::isfinite(O(1, 0, 0)));
    // All weight lands on key 0 (score 1e4/2 more than the others'): the output is V[0] row 0, exactly.
    CHECK(O(1, 0, 0) == V(0, 0, 0));
    CHECK(O(1, 0, 1) == V(0, 0, 1));
  }

  TEST_CASE("causal grouped_attention gives a future key no weight even when its score dominates the row" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    // h = 2 query heads share g = 1 K/V head; d_k = 1, every query is 10 and the keys are 0, 1 and 1000: query 1's
    // scores are 0 and 10 for the keys it may see and 1e4 for the future key 2, all exact in float32. Zeroing the
    // future weights after a softmax over every score leaves exp(10 - 1e4) = 0 for the visible keys.
    const Tensor3 Q = xt::full_like(Tensor3(xt::zeros<float>({2, 3, 1})), 10.0f);  // (h, n, d_k)
    Tensor3 K = xt::zeros<float>({1, 3, 1});                                       // (g, n, d_k)
    K(0, 1, 0) = 1.0f;
    K(0, 2, 0) = 1000.0f;
    Tensor3 V = xt::zeros<float>({1, 3, 2});  // (g, n, d_v): rows (1, 2), (3, 4), (5, 6)
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t c = 0; c < 2; ++c) V(0, t, c) = static_cast<float>(2 * t + c + 1);
    INFO("a future key must score -inf before the softmax, not lose its weight after it");
    CHECK_ALLCLOSE(stacked(attn::grouped_attention(Q, K, V, /*causal=*/true)),
                   stacked(attn::oracle::grouped_attention(attn::test::to_oracle(Q), attn::test::to_oracle(K),
                                                           attn::test::to_oracle(V), true)),
                   kAtol, kRtol);
  }

  TEST_CASE("grouped_attention rejects g that does not divide h and mismatched shapes, naming them" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    const Tensor3 Q = xt::zeros<float>({6, 2, 4}), K4 = xt::zeros<float>({4, 3, 4}), V4 = xt::zeros<float>({4, 3, 2});
    CHECK_THROWS_NAMING(attn::grouped_attention(Q, K4, V4), std::invalid_argument, "6", "4");  // h and g
    const Tensor3 K = xt::zeros<float>({2, 3, 4}), V = xt::zeros<float>({2, 5, 2}),
                  K_wide = xt::zeros<float>({2, 3, 8});
    CHECK_THROWS_NAMING(attn::grouped_attention(Q, K, V), std::invalid_argument, "2", "5");
    const Tensor3 V_ok = xt::zeros<float>({2, 3, 2});
    CHECK_THROWS_NAMING(attn::grouped_attention(Q, K_wide, V_ok), std::invalid_argument, "2", "3", "8");
  }

  TEST_CASE("decode_step, token by token with the KV cache, equals the rows of full causal attention" *
            doctest::test_suite("09_mqa_gqa/decode_step")) {
    attn::Rng rng(95);
    for (auto [h, g, n, d_k, d_v] :
         {std::array<std::size_t, 5>{4, 2, 9, 8, 5}, {6, 1, 7, 4, 4}, {3, 3, 5, 16, 2}, {1, 1, 1, 3, 3}}) {
      const Tensor3 Q = attn::normal_heads(rng, h, n, d_k), K = attn::normal_heads(rng, g, n, d_k),
                    V = attn::normal_heads(rng, g, n, d_v);
      const Heads full = attn::oracle::grouped_attention(attn::test::to_oracle(Q), attn::test::to_oracle(K),
                                                         attn::test::to_oracle(V), /*causal=*/true);
      attn::KVCache cache(g, n, d_k, d_v);
      for (std::size_t t = 0; t < n; ++t) {
        CAPTURE(t);
        const Matrix O_t = attn::decode_step(cache, token(Q, t), token(K, t), token(V, t));  // (h, d_v)
        CHECK(cache.length() == t + 1);
        CHECK_ALLCLOSE(O_t, row_of_every_head(full, t), kAtol, kRtol);
      }
    }
  }

  TEST_CASE("the first decode_step returns the token's own value in every head of its group" *
            doctest::test_suite("09_mqa_gqa/decode_step")) {
    attn::Rng rng(96);
    const Tensor3 Q = attn::normal_heads(rng, 4, 1, 6), K = attn::normal_heads(rng, 2, 1, 6),
                  V = attn::normal_heads(rng, 2, 1, 3);
    attn::KVCache cache(2, 4, 6, 3);
    const Matrix O = attn::decode_step(cache, token(Q, 0), token(K, 0), token(V, 0));  // (4, 3)
    Mat expected(4, 3);  // one cached token: weight 1 on it, whatever the query
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t c = 0; c < 3; ++c) expected(i, c) = V(i / 2, 0, c);
    CHECK_ALLCLOSE(O, expected, 0.0, 1e-6);
  }

  TEST_CASE("KVCache::append stores row t of every KV head and refuses a token past its capacity" *
            doctest::test_suite("09_mqa_gqa/KVCache::append")) {
    attn::KVCache cache(2, 3, 4, 1);
    for (std::size_t t = 0; t < 3; ++t) {
      Matrix k = xt::zeros<float>({2, 4}), v = xt::zeros<float>({2, 1});  // (g, d_k), (g, d_v)
      k(1, 2) = static_cast<float>(t + 1);
      v(0, 0) = static_cast<float>(10 * (t + 1));
      cache.append(k, v);
    }
    CHECK(cache.length() == 3);
    CHECK(cache.keys()(1, 2, 2) == 3.0f);
    CHECK(cache.values()(0, 1, 0) == 20.0f);
    const Matrix k = xt::zeros<float>({2, 4}), v = xt::zeros<float>({2, 1});
    CHECK_THROWS_NAMING(cache.append(k, v), std::invalid_argument, "3");  // its capacity
    CHECK(cache.length() == 3);
  }

  TEST_CASE("KVCache::append rejects keys or values of the wrong shape, leaving the cache unchanged" *
            doctest::test_suite("09_mqa_gqa/KVCache::append")) {
    attn::KVCache cache(2, 5, 4, 3);
    // Ones, so that a row written before the refusal shows in keys() or values(), which start as zeros.
    const Matrix k_bad = xt::ones<float>({1, 4}), v = xt::ones<float>({2, 3});
    CHECK_THROWS_NAMING(cache.append(k_bad, v), std::invalid_argument, "1", "4");
    const Matrix k = xt::ones<float>({2, 4}), v_bad = xt::ones<float>({2, 4});
    CHECK_THROWS_NAMING(cache.append(k, v_bad), std::invalid_argument, "2", "4");
    CHECK(cache.length() == 0);
    CHECK_MESSAGE(xt::all(xt::equal(cache.keys(), 0.0f)), "a refused append wrote into keys(): check k and v first");
    CHECK_MESSAGE(xt::all(xt::equal(cache.values(), 0.0f)),
                  "a refused append wrote into values(): check k and v first");
  }

  TEST_CASE("decode_step refuses a full cache and queries whose head count g does not divide" *
            doctest::test_suite("09_mqa_gqa/decode_step")) {
    attn::KVCache cache(4, 1, 2, 2);
    const Matrix k = xt::zeros<float>({4, 2}), v = xt::zeros<float>({4, 2});
    const Matrix q6 = xt::zeros<float>({6, 2});  // h = 6 query heads cannot share g = 4 KV heads
    CHECK_THROWS_NAMING(attn::decode_step(cache, q6, k, v), std::invalid_argument, "6", "4");  // h and g
    CHECK(cache.length() == 0);
    const Matrix q8 = xt::zeros<float>({8, 2});
    attn::decode_step(cache, q8, k, v);
    CHECK_THROWS_NAMING(attn::decode_step(cache, q8, k, v), std::invalid_argument, "1");  // its capacity
    const Matrix q_wide = xt::zeros<float>({8, 3});
    CHECK_THROWS_NAMING(attn::decode_step(cache, q_wide, k, v), std::invalid_argument, "8", "3");
  }

  TEST_CASE("kv_cache_bytes is 2 · layers · g · d_k · n · bytes, exactly" *
            doctest::test_suite("09_mqa_gqa/kv_cache_bytes")) {
    // A 70B-class model (80 layers, 8 KV heads of 128) at 128K tokens in bf16: exactly 40 GiB.
    CHECK(attn::kv_cache_bytes(80, 8, 128, 131072, 2) == 40ull * 1024 * 1024 * 1024);
    // A 7B-class model without grouping (32 layers, 32 KV heads of 128) at 4K tokens in bf16: 2 GiB.
    CHECK(attn::kv_cache_bytes(32, 32, 128, 4096, 2) == 2ull * 1024 * 1024 * 1024);
    CHECK(attn::kv_cache_bytes(1, 1, 1, 1, 1) == 2);
    CHECK(attn::kv_cache_bytes(3, 5, 7, 0, 4) == 0);
    CHECK(attn::kv_cache_bytes(3, 5, 7, 11, 4) == 2 * 3 * 5 * 7 * 11 * 4);
  }

  TEST_CASE("mean_pool_kv_heads averages each group of h/g consecutive heads" *
            doctest::test_suite("09_mqa_gqa/mean_pool_kv_heads")) {
    attn::Rng rng(97);
    const Tensor3 heads = attn::normal_heads(rng, 6, 5, 3);
    for (std::size_t g : {6, 3, 2, 1}) {
      CAPTURE(g);
      CHECK_ALLCLOSE(stacked(attn::mean_pool_kv_heads(heads, g)),
                     stacked(attn::oracle::mean_pool_heads(attn::test::to_oracle(heads), g)), 1e-6, 1e-6);
    }
    CHECK_THROWS_NAMING(attn::mean_pool_kv_heads(heads, 4), std::invalid_argument, "6", "4");  // h and g
  }

  TEST_CASE("mean_pool_kv_heads then grouped_attention is multi-head attention when a group's heads agree" *
            doctest::test_suite("09_mqa_gqa/mean_pool_kv_heads")) {
    attn::Rng rng(98);
    const std::size_t h = 4, g = 2, n = 6, d = 8;
    const Tensor3 Q = attn::normal_heads(rng, h, n, d), K_g = attn::normal_heads(rng, g, n, d),
                  V_g = attn::normal_heads(rng, g, n, d);
    Tensor3 K = xt::zeros<float>({h, n, d}), V = xt::zeros<float>({h, n, d});  // (h, n, d): each head repeated
    for (std::size_t i = 0; i < h; ++i) {
      xt::view(K, i, xt::all(), xt::all()) = xt::view(K_g, i / 2, xt::all(), xt::all());
      xt::view(V, i, xt::all(), xt::all()) = xt::view(V_g, i / 2, xt::all(), xt::all());
    }
    const Tensor3 O = attn::grouped_attention(Q, attn::mean_pool_kv_heads(K, g), attn::mean_pool_kv_heads(V, g));
    CHECK_ALLCLOSE(stacked(O),
                   stacked(attn::oracle::grouped_attention(attn::test::to_oracle(Q), attn::test::to_oracle(K),
                                                           attn::test::to_oracle(V), false)),
                   kAtol, kRtol);
  }

  TEST_CASE("decode_step that fails, on a NaN or on an overflowing score, leaves the cache exactly as it was" *
            doctest::test_suite("09_mqa_gqa/decode_step")) {
    attn::KVCache cache(1, 4, 2, 2);
    const Matrix q = xt::ones<float>({2, 2}), k = xt::ones<float>({1, 2}), v = xt::ones<float>({1, 2});
    attn::decode_step(cache, q, k, v);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Matrix q_nan = q, k_nan = k, v_nan = v;
    q_nan(1, 0) = k_nan(0, 1) = v_nan(0, 0) = nan;
    CHECK_THROWS_NAMING(attn::decode_step(cache, q_nan, k, v), std::invalid_argument, "Q", "2");
    CHECK_THROWS_NAMING(attn::decode_step(cache, q, k_nan, v), std::invalid_argument, "K", "1");
    CHECK_THROWS_NAMING(attn::decode_step(cache, q, k, v_nan), std::invalid_argument, "V", "0");
    CHECK(cache.length() == 1);
    // A huge key (‖k‖ ≈ 2.8e19) is fine beside a small query, but a later huge query meets it in the cache:
    // q·k ≈ 8e38 overflows float. The step has appended by then, and must take its token back out.
    const Matrix big = xt::ones<float>({1, 2}) * 2e19f, q_big = xt::ones<float>({2, 2}) * 2e19f;
    attn::decode_step(cache, xt::ones<float>({2, 2}) * 1e-3f, big, v);
    CHECK(cache.length() == 2);
    const attn::Tensor3 keys_before = cache.keys(), values_before = cache.values();  // (1, 4, 2)
    CHECK_THROWS_AS(attn::decode_step(cache, q_big, xt::zeros<float>({1, 2}), v), std::invalid_argument);
    CHECK(cache.length() == 2);
    CHECK(xt::view(cache.keys(), 0, xt::range(0, 2)) == xt::view(keys_before, 0, xt::range(0, 2)));
    CHECK(xt::view(cache.values(), 0, xt::range(0, 2)) == xt::view(values_before, 0, xt::range(0, 2)));
    attn::decode_step(cache, q, k, v);  // and the next good step goes where the failed one would have
    CHECK(cache.length() == 3);
  }

  TEST_CASE("kv_cache_bytes and the cache refuse sizes whose bytes pass 64 bits, naming them" *
            doctest::test_suite("09_mqa_gqa/kv_cache_bytes")) {
    const std::size_t huge = std::size_t{1} << 62;
    CHECK_THROWS_NAMING(attn::KVCache(4, huge, 4, 4), std::invalid_argument, "4611686018427387904");  // the size n
    // 2^40 positions of 4 + 4 floats: 32 TiB fit in 64 bits but in no machine's memory; refused before allocating.
    CHECK_THROWS_NAMING(attn::KVCache(1, std::size_t{1} << 40, 4, 4), std::invalid_argument, "available");
    CHECK_THROWS_NAMING(attn::kv_cache_bytes(1, 1, std::size_t{1} << 40, std::size_t{1} << 40, 4),
                        std::invalid_argument, "1099511627776");  // 2^82 bytes, not 0
    CHECK(attn::kv_cache_bytes(1, 1, std::size_t{1} << 30, std::size_t{1} << 30, 4) == std::size_t{1} << 63);
  }

  TEST_CASE("grouped_attention refuses a NaN in Q, K or V and scores that would overflow, naming them" *
            doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    attn::Rng rng(97);
    const Tensor3 Q = attn::normal_heads(rng, 4, 3, 2), K = attn::normal_heads(rng, 2, 3, 2),
                  V = attn::normal_heads(rng, 2, 3, 2);
    Tensor3 v_nan = V;
    v_nan(1, 2, 1) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::grouped_attention(Q, K, v_nan), std::invalid_argument, "V");
    const Tensor3 huge = xt::ones<float>({4, 3, 2}) * 1e20f;
    CHECK_THROWS_NAMING(attn::grouped_attention(huge, xt::ones<float>({2, 3, 2}) * 1e20f, V), std::invalid_argument,
                        "overflow");
  }

  // The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
  // values, each call refused naming what was wrong or answered as the contract says.
  TEST_CASE("kv_group_of under the hostile battery" * doctest::test_suite("09_mqa_gqa/kv_group_of")) {
    // hostile battery: kv_group_of
    hostile::battery(
        "kv_group_of", {"head", "h", "g"},
        [](std::size_t head, std::size_t h, std::size_t g) { return attn::kv_group_of(head, h, g); }, std::size_t{5},
        std::size_t{8}, std::size_t{2})
        .fits([](std::size_t head, std::size_t h, std::size_t g) { return g > 0 && h % g == 0 && head < h; })
        .answer([](std::size_t j, std::size_t head, std::size_t h, std::size_t g) { return j == head / (h / g); })
        .run();
  }

  TEST_CASE("grouped_attention under the hostile battery" * doctest::test_suite("09_mqa_gqa/grouped_attention")) {
    // hostile battery: grouped_attention
    attn::Rng rng(4901);
    hostile::battery(
        "grouped_attention", {"Q", "K", "V", "causal"},
        [](const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal) {
          return attn::grouped_attention(Q, K, V, causal);
        },
        attn::normal_heads(rng, 4, 3, 2), attn::normal_heads(rng, 2, 5, 2), attn::normal_heads(rng, 2, 5, 3), true)
        .fits([](const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal) {
          const std::size_t h = Q.shape(0), g = K.shape(0);
          return V.shape(0) == g && V.shape(1) == K.shape(1) && Q.shape(2) == K.shape(2) && g > 0 && h % g == 0 &&
                 (!causal || Q.shape(1) <= K.shape(1));
        })
        .answer([](const Tensor3& O, const Tensor3& Q, const Tensor3&, const Tensor3& V, bool) {
          return O.shape(0) == Q.shape(0) && O.shape(1) == Q.shape(1) && O.shape(2) == V.shape(2);
        })
        .run();
  }

  TEST_CASE("kv_cache_bytes under the hostile battery" * doctest::test_suite("09_mqa_gqa/kv_cache_bytes")) {
    // hostile battery: kv_cache_bytes
    // 2 · layers · g · d_k · n · b, or nothing once it passes 64 bits (a zero factor makes it 0 however large the rest)
    const auto product = [](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n,
                            std::size_t b) -> std::optional<std::size_t> {
      std::size_t p = 2;
      bool wrapped = false;
      for (const std::size_t f : {layers, g, d_k, n, b}) {
        if (f == 0) return std::size_t{0};
        wrapped = wrapped || __builtin_mul_overflow(p, f, &p);
      }
      if (wrapped) return std::nullopt;
      return p;
    };
    hostile::battery(
        "kv_cache_bytes", {"layers", "g", "d_k", "n", "bytes_per_element"},
        [](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n, std::size_t b) {
          return attn::kv_cache_bytes(layers, g, d_k, n, b);
        },
        std::size_t{4}, std::size_t{2}, std::size_t{8}, std::size_t{16}, std::size_t{2})
        .fits([&](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n, std::size_t b) {
          return product(layers, g, d_k, n, b).has_value();
        })
        .answer([&](std::size_t bytes, std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n,
                    std::size_t b) { return product(layers, g, d_k, n, b) == bytes; })
        .run();
  }

  TEST_CASE("mean_pool_kv_heads under the hostile battery" * doctest::test_suite("09_mqa_gqa/mean_pool_kv_heads")) {
    // hostile battery: mean_pool_kv_heads
    attn::Rng rng(4902);
    hostile::battery(
        "mean_pool_kv_heads", {"heads", "g"},
        [](const Tensor3& heads, std::size_t g) { return attn::mean_pool_kv_heads(heads, g); },
        attn::normal_heads(rng, 4, 3, 2), std::size_t{2})
        .fits(
            [](const Tensor3& heads, std::size_t g) { return g > 0 && heads.shape(0) > 0 && heads.shape(0) % g == 0; })
        .answer([](const Tensor3& pooled, const Tensor3& heads, std::size_t g) {
          return pooled.shape(0) == g && pooled.shape(1) == heads.shape(1) && pooled.shape(2) == heads.shape(2);
        })
        .non_finite_passes("a mean of the heads promises no check of their entries: a NaN in a head is in its mean")
        .run();
  }

  TEST_CASE("KVCache::append under the hostile battery" * doctest::test_suite("09_mqa_gqa/KVCache::append")) {
    // hostile battery: append
    hostile::battery(
        "KVCache::append", {"k", "v"},
        [](const Matrix& k, const Matrix& v) {
          attn::KVCache cache(2, 3, 4, 3);  // (g = 2, capacity 3, d_k = 4, d_v = 3), one token held
          cache.append(Matrix(xt::ones<float>({2, 4})), Matrix(xt::ones<float>({2, 3})));
          const attn::Tensor3 K = cache.keys(), V = cache.values();
          try {
            cache.append(k, v);
          } catch (const std::invalid_argument&) {
            if (cache.length() != 1 || !xt::all(xt::equal(cache.keys(), K)) || !xt::all(xt::equal(cache.values(), V)))
              throw std::logic_error("a refused append changed the cache");
            throw;
          }
          return cache.length();
        },
        Matrix(xt::full_like(xt::ones<float>({2, 4}), 2.0f)), Matrix(xt::full_like(xt::ones<float>({2, 3}), 3.0f)))
        .fits([](const Matrix& k, const Matrix& v) {
          return k.shape(0) == 2 && k.shape(1) == 4 && v.shape(0) == 2 && v.shape(1) == 3;
        })
        .answer([](std::size_t length, const Matrix&, const Matrix&) { return length == 2; })
        .non_finite_passes("append stores what it is given: decode_step checks each token before it appends it")
        .run();
  }

  TEST_CASE("decode_step under the hostile battery" * doctest::test_suite("09_mqa_gqa/decode_step")) {
    // hostile battery: decode_step
    attn::Rng rng(4903);
    hostile::battery(
        "decode_step", {"q", "k", "v"},
        [](const Matrix& q, const Matrix& k, const Matrix& v) {
          attn::KVCache cache(2, 3, 4, 3);  // (g = 2, capacity 3, d_k = 4, d_v = 3), one token held
          cache.append(Matrix(xt::ones<float>({2, 4})), Matrix(xt::ones<float>({2, 3})));
          const attn::Tensor3 K = cache.keys(), V = cache.values();
          try {
            return attn::decode_step(cache, q, k, v);
          } catch (const std::invalid_argument&) {
            if (cache.length() != 1 || !xt::all(xt::equal(cache.keys(), K)) || !xt::all(xt::equal(cache.values(), V)))
              throw std::logic_error("a refused decode_step changed the cache");
            throw;
          }
        },
        Matrix(rng.normal(4, 4)), Matrix(rng.normal(2, 4)), Matrix(rng.normal(2, 3)))
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v) {
          // h = 0 divides by g: no query head, an empty (0, d_v) answer (grouped_attention answers it so too)
          return q.shape(0) % 2 == 0 && q.shape(1) == 4 && k.shape(0) == 2 && k.shape(1) == 4 && v.shape(0) == 2 &&
                 v.shape(1) == 3;
        })
        .answer([](const Matrix& O, const Matrix& q, const Matrix&, const Matrix&) {
          return O.shape(0) == q.shape(0) && O.shape(1) == 3;
        })
        .run();
  }
}
