// Chapter 02's scaling study on bad input (scaling_study.hpp), on the solution track only (the exercise suites
// stay as they are).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <limits>

#include "02_qkv_trace/scaling_study.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace ch02 = attn::ch02;
namespace hostile = attn::test::hostile;

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
                        std::invalid_argument, "18446744073709551615");
    CHECK_THROWS_NAMING(ch02::measure_scaling({4, std::size_t{1} << 40}, 8, 4, 1), std::invalid_argument,
                        "d_k = 1099511627776");
  }
}

// Every public function of the scaling study under the hostile-input battery (tests/support/hostile.hpp): each
// argument replaced in turn by its type's hostile values, each call refused naming what was wrong, or answered as
// the contract says.
TEST_SUITE("02_qkv_trace: hostile battery") {
  TEST_CASE("the scaling study's functions under the battery") {
    // hostile battery: softmax_jacobian_norm, measure_scaling
    hostile::battery(
        "softmax_jacobian_norm", {"p"}, [](const attn::Vector& p) { return ch02::softmax_jacobian_norm(p); },
        attn::Vector{0.25f, 0.25f, 0.5f})
        .fits([](const attn::Vector& p) {  // any length of probabilities has a norm (0 for none)
          return std::all_of(p.begin(), p.end(), [](float x) { return x >= 0.0f && x <= 1.0f; });
        })
        .answer([](double norm, const attn::Vector&) { return norm >= 0; })
        .run();
    hostile::battery(
        "measure_scaling", {"d_ks|d_k", "n_keys|keys", "trials", "seed"},
        [](const std::vector<std::size_t>& d_ks, std::size_t n_keys, std::size_t trials, std::uint64_t seed) {
          return ch02::measure_scaling(d_ks, n_keys, trials, seed).rows.size();
        },
        std::vector<std::size_t>{4, 8}, std::size_t{8}, std::size_t{4}, std::uint64_t{1})
        .fits([](const std::vector<std::size_t>& d_ks, std::size_t n_keys, std::size_t trials, std::uint64_t) {
          bool widths = true;
          for (std::size_t d : d_ks) widths = widths && d > 0 && d <= 8;
          return widths && n_keys >= 2 && n_keys <= 8 && trials >= 2 && trials <= 4;
        })
        .answer([](std::size_t rows, const std::vector<std::size_t>& d_ks, std::size_t, std::size_t, std::uint64_t) {
          return rows == d_ks.size();
        })
        .run();
  }
}
