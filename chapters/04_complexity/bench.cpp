// Chapter 04's benchmarks (`./course bench 04`, or `ch04_complexity bench`): the story's two sweeps through
// Google Benchmark, with its complexity fit (O(n²) in n, O(n) in d), and the product QKᵀ alone on the same
// shapes, each rate read against the machine's ceilings measured in the same run. Figures from a run belong in
// recordings (book/recorded/), never in these comments.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/complexity.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"

namespace {

using attn::Matrix;

// [benchmarks]
// OpenBLAS's default: one thread per hardware thread; the ceilings are measured with as many.
const attn::BenchCeilings ceilings_at{attn::hardware_threads()};

/// Q, K and V (n, d), drawn once per shape.
const Matrix& input(std::size_t i, std::size_t n, std::size_t d) {
  return attn::random_inputs(3, 1, n, d, 4).head(i, 0);
}

// One benchmark body for both sweeps: full attention at (n, d), its FLOP rate as a counter, and the size
// that varies handed to Google Benchmark's complexity fit.
void full_attention(benchmark::State& state, std::size_t n, std::size_t d, std::size_t varying) {
  const Matrix &Q = input(0, n, d), &K = input(1, n, d), &V = input(2, n, d);  // (n, d) each
  const double seconds = attn::time_benchmark_calls(state, [&] {
                           benchmark::DoNotOptimize(attn::scaled_dot_product_attention(Q, K, V));
                         }).wall;
  state.SetComplexityN(static_cast<std::int64_t>(varying));
  state.counters["FLOP/s"] =
      benchmark::Counter(attn::attention_flops(n, n, d, d).total(), benchmark::Counter::kIsIterationInvariantRate);
  attn::report_against_ceilings(state, attn::attention_flops(n, n, d, d).total() / seconds / 1e9,
                                attn::hardware_threads());
}

void BM_full_attention_n(benchmark::State& state) {  // d = 64, n varies
  const auto n = static_cast<std::size_t>(state.range(0));
  full_attention(state, n, 64, n);
}

void BM_full_attention_d(benchmark::State& state) {  // n = 512, d varies
  const auto d = static_cast<std::size_t>(state.range(0));
  full_attention(state, 512, d, d);
}

// The reference on the same shapes: the product Q Kᵀ alone, (n, d)·(d, n), as one OpenBLAS sgemm.
void BM_sgemm_scores_n(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t d = 64;
  const Matrix &Q = input(0, n, d), &K = input(1, n, d);  // (n, d) each
  const double seconds = attn::time_benchmark_calls(state, [&] {
                           benchmark::DoNotOptimize(attn::matmul(Q, K, /*transpose_b=*/true));
                         }).wall;
  state.SetComplexityN(state.range(0));
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * n * d), benchmark::Counter::kIsIterationInvariantRate);
  attn::report_against_ceilings(state, 2.0 * static_cast<double>(n * n * d) / seconds / 1e9, attn::hardware_threads());
}

// Wall time (UseRealTime), not the main thread's CPU time: OpenBLAS runs the products on several threads.
BENCHMARK(BM_full_attention_n)
    ->RangeMultiplier(2)
    ->Range(256, 4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Complexity(benchmark::oNSquared);
BENCHMARK(BM_sgemm_scores_n)
    ->RangeMultiplier(2)
    ->Range(256, 4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Complexity(benchmark::oNSquared);
BENCHMARK(BM_full_attention_d)
    ->RangeMultiplier(2)
    ->Range(32, 1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Complexity(benchmark::oN);
// [benchmarks]

}  // namespace
