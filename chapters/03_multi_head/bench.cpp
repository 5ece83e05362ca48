// Chapter 03's benchmarks (`./course bench 03`, or `ch03_multi_head bench`): one layer at n = 256,
// d_model = 256 with 1, 4 and 16 heads, next to this machine's sgemm rate on the same product size and the
// ceilings of the run. Figures from a run belong in recordings (book/recorded/), never in these comments.
#include <benchmark/benchmark.h>

#include "03_multi_head/heads.hpp"
#include "03_multi_head/multi_head.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/rng.hpp"

namespace {

using attn::Matrix;
namespace ch03 = attn::ch03;

// OpenBLAS runs the products on its default threads: the ceilings are measured with as many.
const attn::BenchCeilings ceilings_at{attn::hardware_threads()};

void BM_multi_head(benchmark::State& state) {
  const auto h = static_cast<std::size_t>(state.range(0));
  const std::size_t n = 256, d_model = 256;
  attn::Rng rng(1);
  const Matrix X = rng.normal(n, d_model);  // (n, d_model)
  const attn::MultiHeadWeights W = ch03::random_weights(rng, d_model);
  const attn::CallSeconds s =
      attn::time_benchmark_calls(state, [&] { benchmark::DoNotOptimize(attn::multi_head_attention(X, W, h)); });
  const ch03::Cost c = ch03::multi_head_cost(n, d_model, h);
  state.counters["GFLOP/s"] =
      benchmark::Counter(c.total_flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  attn::report_against_ceilings(state, c.total_flops() / s.wall / 1e9, attn::hardware_threads());
}
// Wall time, not CPU time: OpenBLAS works in its own threads, whose CPU time the benchmark thread does not see.
BENCHMARK(BM_multi_head)->Arg(1)->Arg(4)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond);

/// The sgemm of the layer's own size, (256, 256)·(256, 256): a reference beside the ceilings of the header.
void BM_sgemm_ceiling(benchmark::State& state) {
  for (auto _ : state) state.counters["GFLOP/s"] = attn::sgemm_gflops(256, 256, 256, 3);
}
BENCHMARK(BM_sgemm_ceiling)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace
