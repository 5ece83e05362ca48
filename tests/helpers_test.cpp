// Tests of the helpers every chapter shares (common/: format.hpp, stats.hpp, the CPU timers of measure.hpp),
// on cases whose answer is known in closed form.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/stats.hpp"

TEST_SUITE("common") {
  TEST_CASE("number formats write fixed, scientific, significant and SI forms as documented") {
    CHECK(attn::fixed(2.0 / 3) == "0.67");
    CHECK(attn::fixed(2.0 / 3, 3) == "0.667");
    CHECK(attn::fixed(-1.5, 0) == "-2");  // an exact tie rounds to even, as printf does
    CHECK(attn::sci(0.000123) == "1.23e-04");
    CHECK(attn::sci(123456.0, 1) == "1.2e+05");
    CHECK(attn::significant(0.000123456) == "0.000123");
    CHECK(attn::significant(1234567.0) == "1.23e+06");
    CHECK(attn::si(512) == "512");
    CHECK(attn::si(2.61e12) == "2.61 T");
    CHECK(attn::si(1500) == "1.5 k");
    CHECK(attn::seconds_str(1.25e-5) == "12.5 µs");
    CHECK(attn::seconds_str(0.0034) == "3.40 ms");
    CHECK(attn::seconds_str(2.0) == "2.00 s");
  }

  TEST_CASE("joined separates words and numbered counts labels from zero") {
    CHECK(attn::joined({"猫", "坐在", "垫子上"}) == "猫 坐在 垫子上");
    CHECK(attn::joined({"a", "b"}, ", ") == "a, b");
    CHECK(attn::joined({}).empty());
    CHECK(attn::numbered("t", 3) == std::vector<std::string>{"t0", "t1", "t2"});
    CHECK(attn::numbered("", 2) == std::vector<std::string>{"0", "1"});
    CHECK(attn::numbered("x", 0).empty());
  }

  TEST_CASE("max_abs_diff and mean_abs_diff measure the largest and the typical difference") {
    const attn::Matrix a = {{1.0f, 2.0f}, {3.0f, 4.0f}};  // (2, 2)
    const attn::Matrix b = {{1.0f, 2.5f}, {1.0f, 4.0f}};  // (2, 2): differences 0, 0.5, 2, 0
    CHECK(attn::max_abs_diff(a, b) == 2.0);               // exact: small binary fractions
    CHECK(attn::mean_abs_diff(a, b) == 0.625);            // exact: 2.5 / 4
    CHECK(attn::max_abs_diff(a, a) == 0.0);
    const attn::Matrix empty = attn::Matrix::from_shape({0, 3});  // (0, 3)
    CHECK(attn::max_abs_diff(empty, empty) == 0.0);
    CHECK(attn::mean_abs_diff(empty, empty) == 0.0);
  }

  TEST_CASE("differences of matrices with different shapes are refused, naming both shapes") {
    const attn::Matrix a = attn::Matrix::from_shape({2, 3});  // (2, 3)
    const attn::Matrix b = attn::Matrix::from_shape({3, 2});  // (3, 2)
    CHECK_THROWS_WITH_AS(attn::max_abs_diff(a, b), doctest::Contains("(2, 3) and (3, 2)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::mean_abs_diff(a, b), doctest::Contains("(2, 3) and (3, 2)"), std::invalid_argument);
  }

  TEST_CASE("relative_error is the Frobenius norm of the difference over that of the exact answer") {
    const attn::Tensor3 exact = xt::ones<float>({2, 2, 2});  // (h, n, d): norm √8
    const attn::Tensor3 approx = 1.5f * exact;               // (h, n, d): difference 0.5 everywhere
    CHECK(attn::relative_error(approx, exact) == 0.5);       // exact: √(8 · 0.25) / √8
    CHECK(attn::relative_error(exact, exact) == 0.0);
    const attn::Tensor3 zeros = xt::zeros<float>({2, 2, 2});  // (h, n, d)
    CHECK_THROWS_AS(attn::relative_error(exact, zeros), std::invalid_argument);
    const attn::Tensor3 other = xt::ones<float>({2, 2, 3});  // (h, n, d)
    CHECK_THROWS_WITH_AS(attn::relative_error(other, exact), doctest::Contains("(2, 2, 3) and (2, 2, 2)"),
                         std::invalid_argument);
  }

  TEST_CASE("entropy_bits is 0 for a one-hot row, 1 for two equal weights and log2(n) for uniform weights") {
    const attn::Matrix A = {{0.0f, 1.0f, 0.0f, 0.0f},       // one key takes everything
                            {0.5f, 0.0f, 0.5f, 0.0f},       // two keys share
                            {0.25f, 0.25f, 0.25f, 0.25f}};  // (3, 4)
    CHECK(attn::entropy_bits(A, 0) == 0.0);
    CHECK(attn::entropy_bits(A, 1) == 1.0);  // exact: log2(0.5) = -1
    CHECK(attn::entropy_bits(A, 2) == 2.0);  // exact: log2(0.25) = -2
    CHECK_THROWS_WITH_AS(attn::entropy_bits(A, 3), doctest::Contains("row 3 of a (3, 4) matrix"),
                         std::invalid_argument);
  }

  TEST_CASE("ranked orders a row's columns by decreasing weight, ties in column order") {
    const attn::Matrix A = {{0.1f, 0.5f, 0.1f, 0.3f}};  // (1, 4)
    CHECK(attn::ranked(A, 0) == std::vector<std::size_t>{1, 3, 0, 2});
    CHECK_THROWS_AS(attn::ranked(A, 1), std::invalid_argument);
  }

  TEST_CASE("cpu_seconds runs the work, warm-up included, and reports a positive time per call") {
    int calls = 0;
    volatile double sink = 0;
    const double s = attn::cpu_seconds([&] {
      ++calls;
      for (int i = 0; i < 10000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
    });
    CHECK(s > 0.0);
    CHECK(calls >= 4);  // one warm-up call and at least one per batch of three
    const double before = attn::thread_cpu_seconds();
    for (int i = 0; i < 100000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
    CHECK(attn::thread_cpu_seconds() >= before);
  }
}
