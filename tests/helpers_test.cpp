// Tests of the helpers every chapter shares (common/: format.hpp, stats.hpp, the CPU timers of measure.hpp),
// on cases whose answer is known in closed form.
#include <doctest/doctest.h>

#include <benchmark/benchmark.h>

#include <array>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/bench.hpp"
#include "attn/blas_threads.hpp"
#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "support/throws.hpp"

TEST_SUITE("common") {
  TEST_CASE("CHECK_THROWS_NAMING finds numbers as tokens, names as words, a Greek letter also as its ASCII name") {
    using attn::test::message_names;
    CHECK(message_names("prune_heads: 3 heads of 2", "3"));
    CHECK(message_names("shapes (2, 3) and [2, 3]", "3"));
    CHECK_FALSE(message_names("33 heads", "3"));
    CHECK_FALSE(message_names("3.5 heads", "3"));
    CHECK(message_names("tensor 'v' is (2, 3)", "v"));
    CHECK_FALSE(message_names("vv and v2", "v"));
    // A contract's ε is its parameter eps in code: a learner may write either.
    CHECK(message_names("layer_norm: ε = 0 must be positive", "ε"));
    CHECK(message_names("layer_norm: eps = 0 must be positive", "ε"));
    CHECK(message_names("layer_norm: epsilon 0", "ε"));
    CHECK_FALSE(message_names("layer_norm: epsx = 0", "ε"));
    CHECK(message_names("gamma is (2), not (3)", "γ"));
    CHECK_FALSE(message_names("the scale must be positive", "ε"));
  }

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
    // Two vectors (a row, a log-sum-exp): the same measure, the same refusal.
    const attn::Vector u = {1.0f, -2.0f, 0.5f}, v = {1.5f, 1.0f, 0.5f};  // (3): differences 0.5, 3, 0
    CHECK(attn::max_abs_diff(u, v) == 3.0);
    CHECK(attn::max_abs_diff(attn::Vector::from_shape({0}), attn::Vector::from_shape({0})) == 0.0);
    CHECK_THROWS_WITH_AS(attn::max_abs_diff(u, attn::Vector::from_shape({2})), doctest::Contains("got (3) and (2)"),
                         std::invalid_argument);
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

TEST_SUITE("common: benchmark support") {
  /// The counters of every run, by the run's name, as Google Benchmark reports them.
  struct CapturedCounters : benchmark::BenchmarkReporter {
    std::map<std::string, std::map<std::string, double>> counters;
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>& runs) override {
      for (const Run& run : runs)
        for (const auto& [name, counter] : run.counters) counters[run.benchmark_name()][name] = counter.value;
    }
  };

  TEST_CASE("a summary row reports the same figures whatever ran before it, and when a filter keeps it alone") {
    // A producer records n² at n = 1, 2, 4; the summary divides the figure at 4 by the one at 1 (16), reading both
    // through recorded_or_measured(), whose measurement (counted) gives what the producer would have recorded.
    int measured = 0;
    const auto producer = [](benchmark::State& state) {
      auto n = static_cast<std::size_t>(state.range(0));  // not const: Google Benchmark 1.9 deprecates that form
      for (auto _ : state) benchmark::DoNotOptimize(n);
      attn::record("square", n, static_cast<double>(n * n));
    };
    const auto summary = [&measured](benchmark::State& state) {
      for (auto _ : state) benchmark::DoNotOptimize(measured);
      const auto square = [&measured](std::size_t n) {
        return attn::recorded_or_measured("square", n, [&measured, n] {
          ++measured;
          return static_cast<double>(n * n);
        });
      };
      state.counters["ratio"] = square(4) / square(1);
    };
    // Order a: the producer registered (and run) first; order b: the summary first.
    benchmark::RegisterBenchmark("order_a/producer", producer)->Arg(1)->Arg(2)->Arg(4)->Iterations(1);
    benchmark::RegisterBenchmark("order_a/summary", summary)->Iterations(1);
    benchmark::RegisterBenchmark("order_b/summary", summary)->Iterations(1);
    benchmark::RegisterBenchmark("order_b/producer", producer)->Arg(1)->Arg(2)->Arg(4)->Iterations(1);
    struct Case {
      const char* filter;
      const char* summary;  // the start of the summary run's name
      int measurements;     // by the summary itself
    };
    for (const Case& c : {Case{"order_a/", "order_a/summary", 0}, Case{"order_b/", "order_b/summary", 2},
                          Case{"order_a/summary", "order_a/summary", 2}}) {
      CAPTURE(c.filter);
      attn::bench_record().clear();
      measured = 0;
      CapturedCounters reporter;
      CHECK(benchmark::RunSpecifiedBenchmarks(&reporter, c.filter) > 0);
      double ratio = 0.0;
      for (const auto& [run, counters] : reporter.counters)
        if (run.rfind(c.summary, 0) == 0 && counters.count("ratio")) ratio = counters.at("ratio");
      CHECK(ratio == 16.0);
      CHECK(measured == c.measurements);
    }
    benchmark::ClearRegisteredBenchmarks();
    attn::bench_record().clear();
  }

  TEST_CASE("random_inputs draws each argument list once, head by head, and keeps it for the run") {
    const attn::RandomInputs& a = attn::random_inputs(2, 3, 5, 4, 7);
    CHECK(&a == &attn::random_inputs(2, 3, 5, 4, 7));  // the same object: drawn once
    CHECK(&a != &attn::random_inputs(2, 3, 5, 4, 8));  // another seed, other inputs
    REQUIRE(a.tensor(0).shape() == std::array<std::size_t, 3>{3, 5, 4});
    attn::Rng rng(7);  // head 0 of tensor 0, then head 0 of tensor 1, then head 1 of tensor 0, ...
    const attn::Matrix h0t0 = rng.normal(5, 4), h0t1 = rng.normal(5, 4), h1t0 = rng.normal(5, 4);
    CHECK(attn::max_abs_diff(a.head(0, 0), h0t0) == 0.0);
    CHECK(attn::max_abs_diff(a.head(1, 0), h0t1) == 0.0);
    CHECK(attn::max_abs_diff(a.head(0, 1), h1t0) == 0.0);
    CHECK(&a.head(0, 1) == &a.head(0, 1));  // a head's matrix is made once
  }

  TEST_CASE("time_calls reports each clock's median per call and runs the setup untimed before every call") {
    int calls = 0, setups = 0;
    const attn::CallSeconds s = attn::time_calls([&] { ++calls; }, {3, 2, 0.0, [&] { ++setups; }});
    CHECK(calls == 5);  // 2 warm-up calls and 3 timed ones
    CHECK(setups == calls);
    CHECK(s.wall >= 0.0);
    CHECK(s.fastest <= s.wall);
    CHECK_THROWS_AS(attn::time_calls([] {}, {0, 1}), std::invalid_argument);
    CHECK(attn::doublings(3, 24) == std::vector<std::size_t>{3, 6, 12, 24});
    CHECK(attn::doublings(5, 4).empty());
    CHECK_THROWS_AS(attn::doublings(0, 4), std::invalid_argument);
    CHECK(attn::median({3.0, 1.0, 2.0}) == 2.0);
    CHECK_THROWS_AS(attn::median({}), std::invalid_argument);
  }

  TEST_CASE("a BLAS-threads guard sets the count while it lives and puts the old one back, also when nested") {
    const int before = attn::blas_threads();
    {
      const attn::BlasThreads one(1);
      CHECK(attn::blas_threads() == 1);
      {
        const attn::BlasThreads two(2);
        CHECK(attn::blas_threads() == 2);
      }
      CHECK(attn::blas_threads() == 1);
    }
    CHECK(attn::blas_threads() == before);
    CHECK_THROWS_AS(attn::BlasThreads(0), std::invalid_argument);
  }

  TEST_CASE("seconds_str with significant digits prints the unit that reads best, as the default does") {
    CHECK(attn::seconds_str(3.2, 3) == "3.2 s");
    CHECK(attn::seconds_str(0.0152, 3) == "15.2 ms");
    CHECK(attn::seconds_str(4e-5, 3) == "40 µs");
    CHECK(attn::human_bytes(1536) == "1.50 KiB");
  }
}
