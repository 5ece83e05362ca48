// Chapter 09's cache bookkeeping on bad input (mqa_gqa.hpp: the given part of KVCache), on the solution track only
// (the exercise suites stay as they are).
#include <doctest/doctest.h>

#include <cstddef>

#include "09_mqa_gqa/mqa_gqa.hpp"
#include "support/throws.hpp"

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
}
