// Chapter 09's benchmarks (`./course bench 09`, or `ch09_mqa_gqa bench`): the decode step for g = h, h/4, 1
// (h = 32, d_k = 128, fp32) with the learner's decode_step() and decode_fast.cpp's decode_attend_fast(), each
// against its roofline bound: the cache's bytes at this machine's memory bandwidth (STREAM's triad, one of the
// run's ceilings) or the step's FLOPs at the in-cache product rate (the same step with its cache in L2),
// whichever takes longer; then the MHA : GQA : MQA time ratios. One core for everything (OpenBLAS set to one
// thread): the decode step and the triad it is compared with run on the same single core, so "% of triad"
// compares like with like. Figures from a run are on the measurements page (book/measure_09_mqa_gqa.md), never
// in these comments.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "09_mqa_gqa/decode_fast.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "09_mqa_gqa/step_cost.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"

namespace {

using attn::Matrix;
using attn::ch09::step_cost;
using attn::ch09::StepCost;

const attn::BenchCeilings ceilings_at{1};  // the decode benchmarks run on one core

constexpr std::size_t kH = 32, kDk = 128;

/// The two decode kernels the bench compares: the learner's decode_step() (OpenBLAS, three passes over the
/// scores) and chapter 09's decode_attend_fast() (one pass, each group's K and V read once).
enum class Kernel : int { learner = 0, fast = 1 };

/// The triad's bytes per second of this thread's CPU time, on one core: the run's ceiling (attn::ceilings).
double triad_bytes_per_s() {
  const attn::Ceilings& c = attn::ceilings(1);
  return attn::Ceilings::kTriadBytes / c.triad.thread_cpu;
}

/// A cheap deterministic fill (a linear congruential generator): a GiB of N(0,1) numbers would take longer
/// than the benchmark, and a decode step's speed does not depend on the values.
void fill(float* p, std::size_t count, std::uint32_t seed) {
  std::uint32_t x = seed;
  for (std::size_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<float>(x >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

/// STREAM's triad, a = b + s·c on one core: two arrays read, one written, nothing reused; the speed memory allows.
/// It is one of the run's ceilings (attn::ceilings, measured once before the benchmarks); this row shows it.
void BM_Triad(benchmark::State& state) {
  const attn::Ceilings& c = attn::ceilings(1);
  double wall = c.triad.wall;  // a non-const lvalue: the one DoNotOptimize form Google Benchmark 1.7 and 1.9 share
  for (auto _ : state) benchmark::DoNotOptimize(wall);
  state.counters["GB/s"] = triad_bytes_per_s() / 1e9;
  state.counters["floats"] = static_cast<double>(attn::Ceilings::kTriadFloats);
}
BENCHMARK(BM_Triad)->Arg(1 << 24)->ArgName("floats")->Unit(benchmark::kMillisecond)->MinTime(0.3);

/// A cache of n - 1 tokens and the next token's q, k, v. BM_DecodeStep keeps it between Google Benchmark's
/// repeated calls for the same (g, n): filling a GiB takes longer than timing it.
struct DecodeSetup {
  std::size_t g, n;
  attn::KVCache cache;
  Matrix q, k, v;  // (h, d_k), (g, d_k), (g, d_v)
  DecodeSetup(std::size_t g_, std::size_t n_, std::size_t h = kH)
      : g(g_),
        n(n_),
        cache(g_, n_, kDk, kDk),
        q(xt::zeros<float>({h, kDk})),
        k(xt::zeros<float>({g_, kDk})),
        v(xt::zeros<float>({g_, kDk})) {
    for (std::size_t t = 0; t + 1 < n; ++t) {
      fill(k.data(), k.size(), static_cast<std::uint32_t>(2 * t + 1));
      fill(v.data(), v.size(), static_cast<std::uint32_t>(2 * t + 2));
      cache.append(k, v);
    }
    fill(q.data(), q.size(), 7);
  }
};

/// The setup of (g, n), kept until another is asked for: the largest cache is 1 GiB, so only one lives at a time.
DecodeSetup& setup(std::size_t g, std::size_t n) {
  static std::unique_ptr<DecodeSetup> kept;
  if (!kept || kept->g != g || kept->n != n) {
    kept.reset();  // free the previous cache first
    kept = std::make_unique<DecodeSetup>(g, n);
  }
  return *kept;
}

/// One decode step over exactly n cached tokens: back to n - 1, then the n-th token appended and attended,
/// by the learner's decode_step() or by the append and chapter 09's decode_attend_fast().
void step_at_full_length(DecodeSetup& s, Kernel kernel) {
  s.cache.truncate(s.n - 1);
  Matrix O;  // (h, d_v)
  if (kernel == Kernel::learner) {
    O = attn::decode_step(s.cache, s.q, s.k, s.v);
  } else {
    s.cache.append(s.k, s.v);
    O = attn::ch09::decode_attend_fast(s.cache, s.q);
  }
  benchmark::DoNotOptimize(O.data());
}

/// The series names of bench_record(): the in-cache product rate by r, the step's seconds by n.
std::string in_cache_series(Kernel kernel) { return fmt::format("in-cache FLOP/s, kernel {}", int(kernel)); }
std::string step_series(std::size_t g, Kernel kernel) {
  return fmt::format("step s, g = {}, kernel {}", g, int(kernel));
}

/// The in-cache FLOP rate of the decode step for r query rows per KV head (h = r, g = 1, 512 cached tokens): \p
/// seconds per step by this thread's CPU time.
double in_cache_rate(std::size_t r, double seconds) { return step_cost(r, 1, 512, kDk, sizeof(float)).flops / seconds; }

/// The in-cache product rate for r query rows per KV head: the faster kernel's, this run's BM_DecodeInCache's or
/// measured here when a filter left it out.
double in_cache_flops_per_s(std::size_t r) {
  double best = 0;
  for (Kernel kernel : {Kernel::learner, Kernel::fast})
    best = std::max(
        best, attn::recorded_or_measured(in_cache_series(kernel), r, [&] {
          const attn::BlasThreads blas(1);
          DecodeSetup s(1, 512, r);
          return in_cache_rate(r, attn::time_calls([&] { step_at_full_length(s, kernel); }, {5, 1, 0.01}).thread_cpu);
        }));
  return best;
}

/// The ceiling of the arithmetic: the same decode step for r = q_heads_per_kv query heads sharing one K/V head
/// (h = r, g = 1) over 512 cached tokens, whose 512 KiB of K and V stay in the core's L2 cache, so memory never
/// limits it.
/// r = 1 is MHA's matrix-vector products, r = 4 GQA's and r = 32 MQA's thin matrix products; fast = 0 the
/// learner's kernel, 1 decode_attend_fast(). The faster of the two is the roofline's compute ceiling for r.
void BM_DecodeInCache(benchmark::State& state) {
  const attn::BlasThreads blas(1);
  const std::size_t r = static_cast<std::size_t>(state.range(0)), n = 512;
  const Kernel kernel = static_cast<Kernel>(state.range(1));
  DecodeSetup s(1, n, r);
  const double seconds = attn::time_benchmark_calls(state, [&] { step_at_full_length(s, kernel); }).thread_cpu;
  const double flops_per_s = in_cache_rate(r, seconds);
  attn::record(in_cache_series(kernel), r, flops_per_s);
  state.counters["GFLOP/s"] = flops_per_s / 1e9;
  attn::report_against_ceilings(state, flops_per_s / 1e9, 1, 0.0, /*per_cpu_second=*/true);
}
BENCHMARK(BM_DecodeInCache)
    ->ArgsProduct({{1, 4, 32}, {0, 1}})
    ->ArgNames({"q_heads_per_kv", "fast"})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.2);

// [roofline]
/// The roofline bound of one decode step: the time its bytes take at the triad's bandwidth or its FLOPs at
/// the in-cache product rate for r query rows per KV head, whichever is longer.
double roofline_seconds(const StepCost& c, std::size_t r) {
  return std::max(c.bytes / triad_bytes_per_s(), c.flops / in_cache_flops_per_s(r));
}
// [roofline]

/// Seconds per decode step at (g, n) by this thread's CPU time: this run's BM_DecodeStep's, or measured here.
double step_seconds(std::size_t g, std::size_t n, Kernel kernel) {
  return attn::recorded_or_measured(step_series(g, kernel), n, [&] {
    const attn::BlasThreads blas(1);
    DecodeSetup& s = setup(g, n);
    return attn::time_calls([&] { step_at_full_length(s, kernel); }, {5, 1, 0.01}).thread_cpu;
  });
}

// [bench_decode]
void BM_DecodeStep(benchmark::State& state) {
  const attn::BlasThreads blas(1);
  const std::size_t g = static_cast<std::size_t>(state.range(0)), n = static_cast<std::size_t>(state.range(1));
  const Kernel kernel = static_cast<Kernel>(state.range(2));
  DecodeSetup& s = setup(g, n);
  const double seconds = attn::time_benchmark_calls(state, [&] { step_at_full_length(s, kernel); }).thread_cpu;
  attn::record(step_series(g, kernel), n, seconds);
  const StepCost c = step_cost(kH, g, n, kDk, sizeof(float));
  const std::size_t r = kH / g;
  const double ceiling = in_cache_flops_per_s(r);
  // Rates from this loop's CPU time per step (Google Benchmark's "CPU" column), so they compare directly.
  state.counters["KV_MiB"] = c.bytes / (1024.0 * 1024.0);
  state.counters["GB/s"] = c.bytes / seconds / 1e9;
  state.counters["%triad"] = 100.0 * c.bytes / seconds / triad_bytes_per_s();
  state.counters["GFLOP/s"] = c.flops / seconds / 1e9;
  attn::report_against_ceilings(state, c.flops / seconds / 1e9, 1, 0.0, /*per_cpu_second=*/true);
  state.counters["%in-L2"] = 100.0 * c.flops / seconds / ceiling;
  state.counters["%roofline"] = 100.0 * roofline_seconds(c, r) / seconds;  // the bound's time over the step's
  state.counters["mem_bound"] = c.bytes / triad_bytes_per_s() >= c.flops / ceiling ? 1 : 0;  // which binds
}
// [bench_decode]
BENCHMARK(BM_DecodeStep)
    ->ArgsProduct({{static_cast<long>(kH), static_cast<long>(kH / 4), 1}, {1024, 4096, 16384, 32768}, {0, 1}})
    ->ArgNames({"g", "n", "fast"})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

/// The MHA : GQA and MHA : MQA time ratios at one cache length, from the decode steps timed above (or measured
/// here when a filter left them out), next to the ideal h/g a purely memory-bound step would reach. (Its own time
/// column is meaningless.)
void BM_DecodeRatio(benchmark::State& state) {
  std::size_t n = static_cast<std::size_t>(state.range(0));  // not const: DoNotOptimize (see BM_Triad)
  const Kernel kernel = static_cast<Kernel>(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(n);
  const double mha = step_seconds(kH, n, kernel), gqa = step_seconds(kH / 4, n, kernel),
               mqa = step_seconds(1, n, kernel);
  state.counters["MHA:GQA"] = mha / gqa;
  state.counters["ideal_GQA"] = static_cast<double>(4);
  state.counters["MHA:MQA"] = mha / mqa;
  state.counters["ideal_MQA"] = static_cast<double>(kH);
}
BENCHMARK(BM_DecodeRatio)->ArgsProduct({{1024, 4096, 16384, 32768}, {0, 1}})->ArgNames({"n", "fast"})->Iterations(1);

}  // namespace
