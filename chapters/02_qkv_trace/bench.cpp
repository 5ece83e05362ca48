// Chapter 02's benchmarks (`./course bench 02`, or `ch02_qkv_trace bench`): the reference attention at
// d_k = d_v = 64 against the machine's ceilings and against the sgemm of QKᵀ alone at the same shape.
// Figures from a run are on the measurements page (book/measure_02_qkv_trace.md), never in these comments.
#include <benchmark/benchmark.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"

namespace {

using attn::Matrix;

// OpenBLAS runs its own threads (its default count): the rates are per wall-clock second, not per second of this
// thread, and are read against the ceilings at as many threads.
const attn::BenchCeilings ceilings_at{attn::hardware_threads()};

/// Q, K and V (n, 64), drawn once per n.
const Matrix& input(std::size_t i, std::size_t n) { return attn::random_inputs(3, 1, n, 64, 1).head(i, 0); }

// [bench]
// Attention at d_k = d_v = 64 against the machine's own ceiling: the sgemm of QKᵀ alone at the same shape.
void BM_scaled_dot_product_attention(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const Matrix &Q = input(0, n), &K = input(1, n), &V = input(2, n);  // (n, 64) each
  const attn::CallSeconds s =
      attn::time_benchmark_calls(state, [&] { benchmark::DoNotOptimize(attn::scaled_dot_product_attention(Q, K, V)); });
  // QKᵀ and A·V: 2·n²·d_k + 2·n²·d_v FLOPs (the softmax's n² exps are not counted).
  const double flops = 4.0 * double(n) * double(n) * 64.0;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  attn::report_against_ceilings(state, flops / s.wall / 1e9, attn::hardware_threads());
}
BENCHMARK(BM_scaled_dot_product_attention)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(2048)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_ceiling_sgemm_QKt(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const Matrix &Q = input(0, n), &K = input(1, n);  // (n, 64) each
  const attn::CallSeconds s =
      attn::time_benchmark_calls(state, [&] { benchmark::DoNotOptimize(attn::matmul(Q, K, true)); });
  const double flops = 2.0 * double(n) * double(n) * 64.0;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  attn::report_against_ceilings(state, flops / s.wall / 1e9, attn::hardware_threads());
}
BENCHMARK(BM_ceiling_sgemm_QKt)->Arg(256)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);
// [bench]

}  // namespace
