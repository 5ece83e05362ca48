// Chapter 02's scaling study on bad input (scaling_study.hpp), on the solution track only (the exercise suites
// stay as they are).
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>

#include "02_qkv_trace/scaling_study.hpp"
#include "support/throws.hpp"

namespace ch02 = attn::ch02;

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("02_qkv_trace: bad input") {
  TEST_CASE("softmax_jacobian_norm refuses an entry that is no probability: NaN, negative or above 1") {
    CHECK_THROWS_NAMING(ch02::softmax_jacobian_norm(attn::Vector{0.5f, std::numeric_limits<float>::quiet_NaN()}),
                        std::invalid_argument, "p[1] = nan");
    CHECK_THROWS_NAMING(ch02::softmax_jacobian_norm(attn::Vector{1.5f, -0.5f}), std::invalid_argument, "p[0] = 1.5");
    CHECK_THROWS_NAMING(ch02::softmax_jacobian_norm(attn::Vector{0.5f, std::numeric_limits<float>::infinity()}),
                        std::invalid_argument, "p[1] = inf");
    CHECK(ch02::softmax_jacobian_norm(attn::Vector{0.0f, 1.0f, 0.0f}) == 0.0);  // one-hot: no gradient
  }

  TEST_CASE("measure_scaling refuses a zero width, too few keys or trials, and a study of endless work, at once") {
    CHECK_THROWS_NAMING(ch02::measure_scaling({4, 0}, 8, 4, 1), std::invalid_argument, "d_k = 0");
    CHECK_THROWS_NAMING(ch02::measure_scaling({4}, 1, 4, 1), std::invalid_argument, "1 keys");
    CHECK_THROWS_NAMING(ch02::measure_scaling({4}, 8, 1, 1), std::invalid_argument, "1 trials");
    // SIZE_MAX trials drew keys for ever; a huge width allocated (n_keys, d_k) keys per trial.
    CHECK_THROWS_NAMING(ch02::measure_scaling({4}, 8, std::numeric_limits<std::size_t>::max(), 1),
                        std::invalid_argument, "multiply-adds");
    CHECK_THROWS_NAMING(ch02::measure_scaling({4, std::size_t{1} << 40}, 8, 4, 1), std::invalid_argument,
                        "d_k = 1099511627776");
  }
}
