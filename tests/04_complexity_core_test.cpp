// Chapter 04's counts and heap probe on bad input, on the solution track only (the exercise suites stay as they are).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#include "04_complexity/complexity.hpp"
#include "04_complexity/exponent.hpp"
#include "04_complexity/heap_counter.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("04_complexity: bad input") {
  TEST_CASE("attention_flops and attention_bytes answer every size, 0 and SIZE_MAX included, without wrapping") {
    // bad input answered: attention_flops, attention_bytes
    constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
    const double m = static_cast<double>(kMax);
    CHECK(attn::attention_flops(0, 5, 7, 9).total() == 0.0);
    CHECK(attn::attention_flops(kMax, kMax, kMax, kMax).scores == 2.0 * m * m * m);  // in double: no wrap
    CHECK(std::isfinite(attn::attention_flops(kMax, kMax, kMax, kMax).total()));
    CHECK(attn::attention_bytes(kMax, kMax, 1, 1).score_matrix == 4.0 * m * m);
    CHECK(attn::attention_bytes(0, 0, 0, 0).moved == 0.0);
  }

  TEST_CASE("measure_heap_peak hands an exception of the work to the caller") {
    CHECK_THROWS_NAMING(attn::ch04::measure_heap_peak([] { throw std::invalid_argument("the work's own refusal"); }),
                        std::invalid_argument, "the work's own refusal");
  }
}

TEST_SUITE("04_complexity: the exponent of recorded times") {
  TEST_CASE("exponent_between fits the points in range, gives 0 for fewer than two, and refuses a time of 0") {
    // bad input answered: exponent_between
    const std::map<std::size_t, double> t{{256, 1.0}, {512, 4.0}, {1024, 16.0}, {4096, 1.0}};  // n² up to 1024
    CHECK(attn::exponent_between(t, 0, 1024) == doctest::Approx(2.0).epsilon(1e-12));
    CHECK(attn::exponent_between(t, 512, 1024, 11.0) == doctest::Approx(2.0).epsilon(1e-12));  // x = 11·n
    CHECK(attn::exponent_between(t, 300, 700) == 0.0);                                         // one point: no slope
    CHECK(attn::exponent_between(t, 2048, 1024) == 0.0);                                       // an empty range
    CHECK_THROWS_NAMING(attn::exponent_between({{1, 1.0}, {2, 0.0}}), std::invalid_argument, "fit_power_law");
  }
}

// Every public function of the chapter's own code under the hostile-input battery (tests/support/hostile.hpp): each
// argument replaced in turn by its type's hostile values, each call refused naming what was wrong, or answered as the
// contract says.
TEST_SUITE("04_complexity: hostile battery") {
  TEST_CASE("exponent_between under the battery") {
    // hostile battery: exponent_between
    namespace hostile = attn::test::hostile;
    // The benchmark's points as a list of times for n = 64, 128, 256, …: the battery's list values.
    hostile::battery(
        "exponent_between", {"y_by_n|y", "lo", "hi", "x_per_n|x"},
        [](const std::vector<double>& y, std::size_t lo, std::size_t hi, double x_per_n) {
          std::map<std::size_t, double> y_by_n;
          for (std::size_t i = 0; i < y.size(); ++i) y_by_n[std::size_t{64} << i] = y[i];
          return attn::exponent_between(y_by_n, lo, hi, x_per_n);
        },
        std::vector<double>{1.0, 4.1, 15.9, 64.2}, std::size_t{0}, std::numeric_limits<std::size_t>::max(), 1.0)
        .fits([](const std::vector<double>& y, std::size_t lo, std::size_t hi, double x_per_n) {
          std::size_t points = 0;
          bool positive = true;
          for (std::size_t i = 0; i < y.size(); ++i)
            if ((std::size_t{64} << i) >= lo && (std::size_t{64} << i) <= hi) {
              ++points;
              positive = positive && y[i] > 0;
            }
          // Fewer than two points in [lo, hi] answer 0 whatever the rest; two or more are fitted.
          return points < 2 || (positive && x_per_n > 0 && std::isfinite(x_per_n * 64.0 * 8.0));
        })
        .answer([](double e, const std::vector<double>&, std::size_t, std::size_t, double) { return std::isfinite(e); })
        .run();
  }
}
