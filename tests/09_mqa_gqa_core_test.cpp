// Chapter 09's own code on the solution track only (the exercise suites stay as they are): the cache
// bookkeeping on bad input (mqa_gqa.hpp: the given part of KVCache), and the fast decode kernel
// (decode_fast.hpp) against the float64 oracle (tests/oracle/09_mqa_gqa_oracle.hpp).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <vector>

#include "09_mqa_gqa/decode_fast.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "09_mqa_gqa/step_cost.hpp"
#include "attn/rng.hpp"
#include "oracle/09_mqa_gqa_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::oracle::Heads;
using attn::oracle::Mat;
namespace hostile = attn::test::hostile;

/// A cache of g heads holding n tokens of N(0,1) keys (n, d_k) and values (n, d_v), filled by append,
/// and the same keys and values as the oracle's heads.
struct FilledCache {
  attn::KVCache cache;
  Heads K, V;  // g × (n, d_k), g × (n, d_v)
  FilledCache(attn::Rng& rng, std::size_t g, std::size_t n, std::size_t d_k, std::size_t d_v)
      : cache(g, n + 3, d_k, d_v), K(g, Mat(n, d_k)), V(g, Mat(n, d_v)) {  // spare capacity: rows past length()
    for (std::size_t t = 0; t < n; ++t) {
      const Matrix k = rng.normal(g, d_k), v = rng.normal(g, d_v);  // (g, d_k), (g, d_v)
      cache.append(k, v);
      for (std::size_t j = 0; j < g; ++j) {
        for (std::size_t c = 0; c < d_k; ++c) K[j](t, c) = k(j, c);
        for (std::size_t c = 0; c < d_v; ++c) V[j](t, c) = v(j, c);
      }
    }
  }
};

/// The oracle's answer for one query token q (h, d_k) over every cached token: (h, d_v).
Mat oracle_decode(const Matrix& q, const FilledCache& f) {
  Heads Q;
  for (std::size_t i = 0; i < q.shape(0); ++i) {
    Mat row(1, q.shape(1));
    for (std::size_t c = 0; c < q.shape(1); ++c) row(0, c) = q(i, c);
    Q.push_back(row);
  }
  const Heads O = attn::oracle::grouped_attention(Q, f.K, f.V, /*causal=*/false);  // h × (1, d_v)
  Mat out(O.size(), O[0].cols);
  for (std::size_t i = 0; i < O.size(); ++i)
    for (std::size_t c = 0; c < out.cols; ++c) out(i, c) = O[i](0, c);
  return out;
}

}  // namespace

TEST_SUITE("09_mqa_gqa: decode_attend_fast") {
  TEST_CASE("decode_attend_fast equals the float64 oracle for MHA, GQA and MQA, at any cache length") {
    // Float32 against float64, N(0,1) entries: a score q·k/√d_k is a sum of d_k products of size ~1 whose
    // rounding errors (2^-24 each, random signs) add up to about √d_k·6e-8/√d_k ≈ 1e-7; the softmax turns
    // them into relative weight errors of that size, the output (a convex combination of values of size ~3)
    // inherits a few 1e-7, and the online softmax's rescales add a few ulp. The worst seen over these cases
    // is 9e-7; atol = rtol = 1e-5 leaves a margin of ten.
    attn::Rng rng(961);
    const std::size_t B = attn::ch09::kDecodeKeysPerBlock;
    // (h, g): r = 1 (MHA), 4 (GQA), 32 (MQA); r = 3 (rows not a multiple of the kernel's four); r = 20 and
    // 48 (from r = 16 on, the queries are transposed into panels of 32 and 16 columns, zero-padded).
    // Plain variables, not structured bindings: Clang 14 cannot capture those (CAPTURE does).
    for (const auto& heads : {std::array<std::size_t, 2>{4, 4}, {8, 2}, {32, 1}, {6, 2}, {40, 2}, {48, 1}}) {
      const std::size_t h = heads[0], g = heads[1];
      // n: one token, a small odd count, a block and five, two whole blocks (the kernel's edges).
      for (std::size_t n : {std::size_t{1}, std::size_t{7}, B + 5, 2 * B}) {
        // d: below one vector, a vector and a tail (20, 24), one chunk of four 8-float vectors and a tail (36, 40:
        // the AVX2 and NEON copies' edges), and the bench's 128 (whole chunks of 32 and 64 columns).
        for (const auto& widths : {std::array<std::size_t, 2>{3, 5}, {20, 24}, {36, 40}, {128, 128}}) {
          const std::size_t d_k = widths[0], d_v = widths[1];
          CAPTURE(h);
          CAPTURE(g);
          CAPTURE(n);
          CAPTURE(d_k);
          CAPTURE(d_v);
          const FilledCache f(rng, g, n, d_k, d_v);
          const Matrix q = rng.normal(h, d_k);                          // (h, d_k)
          const Matrix O = attn::ch09::decode_attend_fast(f.cache, q);  // (h, d_v)
          CHECK_ALLCLOSE(O, oracle_decode(q, f), 1e-5, 1e-5);
        }
      }
    }
  }

  TEST_CASE("decode_attend_fast with huge scores (s ≈ 4e3) picks the best key's value, never NaN") {
    // q = 1e3·k_best for a chosen key: its score 1e3·|k_best|²/√d is about 4e3 and thousands above every
    // other, so every weight but one is e^{-thousands} = 0 in any precision and the output is that key's value,
    // whichever block it lies in; a kernel that forgot the running max would overflow e^s to inf and NaN.
    attn::Rng rng(962);
    const std::size_t g = 2, h = 8, n = 3 * attn::ch09::kDecodeKeysPerBlock + 1, d = 16;
    const FilledCache f(rng, g, n, d, d);
    Matrix q = xt::zeros<float>({h, d});  // (h, d)
    for (std::size_t i = 0; i < h; ++i) {
      const std::size_t j = i / (h / g), best = (37 * i + 5) % n;  // a different key for each head
      for (std::size_t c = 0; c < d; ++c) q(i, c) = static_cast<float>(1e3 * f.K[j](best, c));
    }
    const Matrix O = attn::ch09::decode_attend_fast(f.cache, q);  // (h, d)
    CHECK(std::isfinite(static_cast<double>(xt::sum(O)())));
    // The exact answer is the best key's value; the oracle agrees to its own rounding.
    CHECK_ALLCLOSE(O, oracle_decode(q, f), 1e-5, 1e-5);
  }
}

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("09_mqa_gqa: bad input") {
  TEST_CASE("KVCache::truncate refuses to grow the cache, naming both lengths, and leaves it as it was") {
    attn::KVCache cache(2, 4, 3, 3);
    cache.append(attn::Matrix(xt::ones<float>({2, 3})), attn::Matrix(xt::ones<float>({2, 3})));
    CHECK_THROWS_NAMING(cache.truncate(2), std::invalid_argument, "from 1 to 2");
    CHECK(cache.length() == 1);
    cache.truncate(0);  // the bound itself: every token forgotten
    CHECK(cache.length() == 0);
    CHECK_THROWS_NAMING(cache.truncate(1), std::invalid_argument, "from 0 to 1");
  }

  TEST_CASE(
      "decode_attend_fast refuses a query of the wrong width, heads g does not divide, an empty cache and "
      "a NaN or infinite query, naming each") {
    attn::KVCache cache(2, 4, 3, 5);
    const Matrix q = xt::ones<float>({4, 3});  // (h = 4, d_k = 3)
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(cache, q), std::invalid_argument, "empty");
    cache.append(attn::Matrix(xt::ones<float>({2, 3})), attn::Matrix(xt::ones<float>({2, 5})));
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(cache, Matrix(xt::ones<float>({4, 4}))), std::invalid_argument,
                        "(4, 4)", "d_k = 3");
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(cache, Matrix(xt::ones<float>({3, 3}))), std::invalid_argument,
                        "h = 3", "g = 2");
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(cache, Matrix(xt::ones<float>({0, 3}))), std::invalid_argument,
                        "h = 0");
    Matrix q_nan = q;
    q_nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(cache, q_nan), std::invalid_argument, "Q[5]");
    Matrix q_inf = q;
    q_inf(3, 0) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(cache, q_inf), std::invalid_argument, "Q[9]");
    CHECK(cache.length() == 1);  // it only reads the cache
    // Finite query and keys whose scores overflow float (1e20 · 1e20 · 3 / √3): refused, not NaN.
    attn::KVCache big(2, 4, 3, 5);
    big.append(attn::Matrix(xt::full_like(xt::ones<float>({2, 3}), 1e20f)), attn::Matrix(xt::ones<float>({2, 5})));
    CHECK_THROWS_NAMING(attn::ch09::decode_attend_fast(big, Matrix(xt::full_like(q, 1e20f))), std::invalid_argument,
                        "overflowed");
  }
}

TEST_SUITE("09_mqa_gqa: a decode step's cost") {
  TEST_CASE("step_cost counts the cache's bytes and 4·h·n·d_k FLOPs, and refuses a cache whose size wraps") {
    const attn::ch09::StepCost c = attn::ch09::step_cost(8, 2, 16, 4, 4);
    CHECK(c.bytes == 2.0 * 2 * 4 * 16 * 4);  // K and V of g = 2 heads, 16 tokens of d_k = 4, 4 bytes each
    CHECK(c.flops == 4.0 * 8 * 16 * 4);
    CHECK_THROWS_NAMING(attn::ch09::step_cost(8, std::numeric_limits<std::size_t>::max(), 16, 4, 4),
                        std::invalid_argument, "kv_cache_bytes");
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile values,
// each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("09_mqa_gqa: the hostile battery") {
  TEST_CASE("KVCache's constructor under the hostile battery") {
    // hostile battery: KVCache
    hostile::battery(
        "KVCache::KVCache", {"g", "capacity", "d_k", "d_v"},
        [](std::size_t g, std::size_t capacity, std::size_t d_k, std::size_t d_v) {
          const attn::KVCache cache(g, capacity, d_k, d_v);
          return std::vector<std::size_t>{cache.kv_heads(), cache.capacity(), cache.d_k(), cache.d_v(), cache.length()};
        },
        std::size_t{2}, std::size_t{5}, std::size_t{4}, std::size_t{3})
        .fits([](std::size_t g, std::size_t capacity, std::size_t d_k, std::size_t d_v) {
          // valid: g, d_k, d_v at least 1, and K and V small enough for any machine (below 1 GiB)
          const long double bytes = static_cast<long double>(g) * capacity * (static_cast<long double>(d_k) + d_v) * 4;
          return g > 0 && d_k > 0 && d_v > 0 && bytes < (1ull << 30);
        })
        .answer([](const std::vector<std::size_t>& got, std::size_t g, std::size_t capacity, std::size_t d_k,
                   std::size_t d_v) {
          return got == std::vector<std::size_t>{g, capacity, d_k, d_v, 0};
        })
        .run();
  }

  TEST_CASE("KVCache::truncate under the hostile battery") {
    // hostile battery: truncate
    hostile::battery(
        "KVCache::truncate", {"new_length"},
        [](std::size_t new_length) {
          attn::KVCache cache(2, 4, 3, 3);
          for (int t = 0; t < 2; ++t) cache.append(Matrix(xt::ones<float>({2, 3})), Matrix(xt::ones<float>({2, 3})));
          try {
            cache.truncate(new_length);
          } catch (const std::invalid_argument&) {
            if (cache.length() != 2) throw std::logic_error("a refused truncate changed the cache's length");
            throw;
          }
          return cache.length();
        },
        std::size_t{1})
        .fits([](std::size_t new_length) { return new_length <= 2; })
        .answer([](std::size_t length, std::size_t new_length) { return length == new_length; })
        .run();
  }

  TEST_CASE("decode_attend_fast under the hostile battery") {
    // hostile battery: decode_attend_fast
    attn::Rng rng(4904);
    const FilledCache filled(rng, 2, 3, 4, 3);  // g = 2, three tokens of d_k = 4, d_v = 3
    hostile::battery(
        "decode_attend_fast", {"q|Q"}, [&](const Matrix& q) { return attn::ch09::decode_attend_fast(filled.cache, q); },
        Matrix(rng.normal(4, 4)))
        .fits([](const Matrix& q) { return q.shape(0) > 0 && q.shape(0) % 2 == 0 && q.shape(1) == 4; })
        .answer([](const Matrix& O, const Matrix& q) { return O.shape(0) == q.shape(0) && O.shape(1) == 3; })
        .run();
  }

  TEST_CASE("step_cost under the hostile battery") {
    // hostile battery: step_cost
    hostile::battery(
        "step_cost", {"h", "g", "n", "d_k", "bytes_per_element"},
        [](std::size_t h, std::size_t g, std::size_t n, std::size_t d_k, std::size_t b) {
          const attn::ch09::StepCost c = attn::ch09::step_cost(h, g, n, d_k, b);
          return std::vector<double>{c.bytes, c.flops};
        },
        std::size_t{8}, std::size_t{2}, std::size_t{16}, std::size_t{4}, std::size_t{2})
        .fits([](std::size_t, std::size_t g, std::size_t n, std::size_t d_k, std::size_t b) {
          // the cache's bytes 2 · g · d_k · n · b must fit in 64 bits (kv_cache_bytes refuses them otherwise)
          const long double bytes = 2.0L * g * d_k * n * b;
          return bytes < 18446744073709551616.0L;
        })
        .answer([](const std::vector<double>& c, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t) {
          return std::isfinite(c[0]) && std::isfinite(c[1]) && c[0] >= 0 && c[1] >= 0;
        })
        .run();
  }
}
