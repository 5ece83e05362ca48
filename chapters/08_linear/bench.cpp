// Chapter 08's benchmarks (`./course bench 08`, or `ch08_linear bench`): linear attention against the fastest
// exact attention of the course, chapter 05's FlashAttention kernel (non-causal linear against non-causal flash,
// the causal recurrence against causal flash), with chapter 02's softmax attention as a third line, over n from
// 256 to 65,536 at d = m = 64, every contender on one core; then the crossovers by bisection, the exponents and
// the speed-ups. Figures from a run are on the measurements page (book/measure_08_linear.md), never in these
// comments.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "04_complexity/exponent.hpp"
#include "08_linear/contenders.hpp"
#include "08_linear/features.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"

namespace {

namespace ch08 = attn::ch08;
using ch08::Contenders;

constexpr std::size_t kBenchD = 64;

// [benchmarks]
const attn::BenchCeilings ceilings_at{1};  // every contender runs on one core

void BM_sgemm_ceiling(benchmark::State& state) {
  // The machine's own ceiling, measured in the same run: OpenBLAS sgemm on (1024, 64)·(64, 1024) — the shape
  // of Q Kᵀ for n = 1024, d = 64 — and on a square 1024³ product.
  const attn::BlasThreads blas(1);  // the same single core as the attention benchmarks
  for (auto _ : state) {
    state.counters["QKt_GFLOPs"] = attn::sgemm_gflops(1024, 1024, kBenchD, 3);
    state.counters["square_GFLOPs"] = attn::sgemm_gflops(1024, 1024, 1024, 3);
  }
}
BENCHMARK(BM_sgemm_ceiling)->Iterations(1)->Unit(benchmark::kMillisecond);

/// What a contender's FLOP counter counts: softmax's n² pairs, causal's half of them, or linear's n·m.
enum class Cost { kQuadratic, kCausalQuadratic, kLinear };

/// One contender over n; the time is wall-clock (every contender runs on one core, so it matches the
/// process CPU time printed next to it on a quiet machine), recorded under \p name for the summary; the counter
/// is its FLOP rate.
void BM_attention(benchmark::State& state, void (Contenders::*method)() const, Cost cost, const char* name) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const Contenders c(n, kBenchD);
  const double seconds = attn::time_benchmark_calls(state, [&] { (c.*method)(); }).wall;
  attn::record(name, n, seconds);
  const double nn = static_cast<double>(n), quadratic = ch08::softmax_flops(nn, kBenchD);
  const double flops = cost == Cost::kQuadratic         ? quadratic
                       : cost == Cost::kCausalQuadratic ? quadratic / 2
                                                        : ch08::linear_flops(nn, kBenchD, kBenchD);
  state.counters["FLOPs"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  attn::report_against_ceilings(state, flops / seconds / 1e9, 1);  // every contender runs on one core
}
/// The settings every contender shares: n doubling from 256, milliseconds, wall time with process CPU time.
void over_n(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(2)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
}
BENCHMARK_CAPTURE(BM_attention, softmax_ch02, &Contenders::softmax, Cost::kQuadratic, "softmax")
    ->Apply(over_n)
    ->Range(256, 8192);
BENCHMARK_CAPTURE(BM_attention, flash_ch05, &Contenders::flash, Cost::kQuadratic, "flash")
    ->Apply(over_n)
    ->Range(256, 65536);
BENCHMARK_CAPTURE(BM_attention, flash_causal_ch05, &Contenders::flash_causal, Cost::kCausalQuadratic, "flash causal")
    ->Apply(over_n)
    ->Range(256, 65536);
BENCHMARK_CAPTURE(BM_attention, linear, &Contenders::linear, Cost::kLinear, "linear")->Apply(over_n)->Range(256, 65536);
BENCHMARK_CAPTURE(BM_attention, causal_recurrence, &Contenders::causal, Cost::kLinear, "causal")
    ->Apply(over_n)
    ->Range(256, 65536);

constexpr std::size_t kLargest = 65536;

/// One contender's wall seconds per call at n = 8192 … 65,536: this run's benchmarks', or measured here (median of
/// 3) when a filter left them out, so the summary reads the same whatever ran before it.
std::map<std::size_t, double> large_n_seconds(const char* name, void (Contenders::*method)() const) {
  std::map<std::size_t, double> t;
  for (std::size_t n = 8192; n <= kLargest; n *= 2)
    t[n] = attn::recorded_or_measured(name, n, [&] {
      const Contenders c(n, kBenchD);
      return attn::time_calls([&] { (c.*method)(); }, {3, 1}).wall;
    });
  return t;
}

void BM_crossover_and_exponents(benchmark::State& state) {
  // The crossovers by bisection (non-causal linear against non-causal flash, the causal recurrence against
  // causal flash), the exponents fitted to the times above over n = 8192..65536, and the speed-ups at the
  // largest n, all from this run.
  std::map<std::string, std::map<std::size_t, double>> t;
  t["flash"] = large_n_seconds("flash", &Contenders::flash);
  t["flash causal"] = large_n_seconds("flash causal", &Contenders::flash_causal);
  t["linear"] = large_n_seconds("linear", &Contenders::linear);
  t["causal"] = large_n_seconds("causal", &Contenders::causal);
  const auto exponent = [&](const char* name) { return attn::exponent_between(t[name], 8192, kLargest); };
  for (auto _ : state) {
    const std::size_t cross = ch08::measured_crossover(16, 4096, kBenchD, ch08::cpu_timer(&Contenders::flash));
    const std::size_t cross_causal = ch08::measured_crossover(
        16, 4096, kBenchD, ch08::cpu_timer(&Contenders::flash_causal), ch08::cpu_timer(&Contenders::causal));
    const double speedup = t["flash"][kLargest] / t["linear"][kLargest];
    const double speedup_causal = t["flash causal"][kLargest] / t["causal"][kLargest];
    state.counters["crossover_n"] = static_cast<double>(cross);
    state.counters["crossover_causal_n"] = static_cast<double>(cross_causal);
    state.counters["speedup_linear"] = speedup;
    state.counters["speedup_causal"] = speedup_causal;
    for (const char* name : {"flash", "flash causal", "linear", "causal"})
      state.counters[fmt::format("exp_{}", name)] = exponent(name);
    fmt::print(
        "\nSummary (d = m = {}, one core each): at n = {} non-causal linear attention is {:.0f}× faster than "
        "chapter 05's flash,\nthe causal recurrence {:.0f}× faster than causal flash. Time ~ n^e over n = 8192..{}:\n"
        "linear {:.2f}, causal recurrence {:.2f}, flash {:.2f}, causal flash {:.2f}.\n"
        "Crossover by bisection: linear beats flash from n ≈ {}, the recurrence beats causal flash from n ≈ {} "
        "(0 = not below 4096).\n\n",
        kBenchD, kLargest, speedup, speedup_causal, kLargest, exponent("linear"), exponent("causal"), exponent("flash"),
        exponent("flash causal"), cross, cross_causal);
  }
}
BENCHMARK(BM_crossover_and_exponents)->Iterations(1)->Unit(benchmark::kSecond);
// [benchmarks]

}  // namespace
