// Chapter 05's benchmarks (`./course bench 05`, or `ch05_flash_cpu bench`): 8 heads, d = 64, FLOPs counted as
// the FlashAttention papers do: 4·n²·d per head (two products), half of it under a causal mask. Full attention,
// the exercise's flash_attention, flash_fast with OpenBLAS in its tiles and with its own micro-kernels, each
// against the machine's ceilings measured in the same run; then tile_phases, the profile of one tile.
// Figures from a run are on the measurements page (book/measure_05_flash_cpu.md), never in these comments.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "02_qkv_trace/qkv_trace.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "attn/bench.hpp"
#include "attn/cblas.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"
#include "attn/rng.hpp"

namespace {

using attn::Matrix;
namespace ch05 = attn::ch05;

const attn::BenchCeilings ceilings_at{1, 2};  // flash_simple runs on one core, the others on two

constexpr std::size_t kHeads = 8, kD = 64;

/// Q, K, V (h, n, d) of the run at \p n, drawn once (tensors 0, 1, 2; head by head with head()).
const attn::RandomInputs& inputs(std::size_t n) { return attn::random_inputs(3, kHeads, n, kD, n); }

/// One attention-shaped sgemm per head, S = Q_h K_hᵀ (n, n) with k = d, into a buffer allocated once:
/// the ceiling is the product, not page faults.
void sgemm_heads(const attn::RandomInputs& in, std::size_t n, Matrix& S) {
  const int ni = static_cast<int>(n), di = static_cast<int>(kD);
  for (std::size_t h = 0; h < kHeads; ++h)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, ni, di, 1.0f, in.head(0, h).data(), di,
                in.head(1, h).data(), di, 0.0f, S.data(), ni);
}

double sgemm_flops(std::size_t n) { return 2.0 * kHeads * static_cast<double>(n * n * kD); }

/// Runs `work` in the benchmark loop and returns its GFLOP/s (wall clock). Also reports GFLOPS and
/// GFLOPS_per_core: FLOPs per second of CPU time summed over all the process's threads, which stays
/// meaningful when other processes share the cores (the wall-clock rate does not).
attn::CallSeconds time_gflops(benchmark::State& state, double flops, const std::function<void()>& work) {
  const attn::CallSeconds s = attn::time_benchmark_calls(state, work);
  state.counters["GFLOPS"] = flops / s.wall / 1e9;
  state.counters["GFLOPS_per_core"] = flops / s.cpu / 1e9;
  return s;
}

/// The attention-shaped sgemm rate at \p n on 2 threads: sgemm_ceiling's in this run, or measured here when a
/// filter left it out.
double attention_sgemm_gflops(std::size_t n) {
  return attn::recorded_or_measured("sgemm_attention GFLOP/s", n, [n] {
    const attn::BlasThreads blas(2);
    Matrix S = xt::zeros<float>({n, n});  // (n, n)
    return sgemm_flops(n) / attn::median_seconds([&] { sgemm_heads(inputs(n), n, S); }, 3) / 1e9;
  });
}

/// Times `work` (which runs on \p threads cores) and reports its rate as a percentage of the machine's
/// ceilings at that thread count, measured in this run (attn/ceilings.hpp), and of the attention-shaped
/// sgemm when it ran on as many threads (2).
attn::CallSeconds measure(benchmark::State& state, double flops, std::size_t n, int threads,
                          const std::function<void()>& work) {
  const attn::CallSeconds s = time_gflops(state, flops, work);
  attn::report_against_ceilings(state, flops / s.wall / 1e9, threads, threads == 2 ? attention_sgemm_gflops(n) : 0.0);
  // Per CPU-second against the core's own peak: what other jobs on a shared machine disturb least.
  state.counters["pct_core_peak"] = 100.0 * flops / s.cpu / 1e9 / attn::ceilings(threads).fma_peak_per_core;
  return s;
}

double bench_flops(std::size_t n, bool causal) {
  const double per_head = 4.0 * static_cast<double>(n) * static_cast<double>(n) * kD;
  return static_cast<double>(kHeads) * (causal ? per_head / 2 : per_head);
}

void sgemm_ceiling(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const attn::RandomInputs& in = inputs(n);
  const attn::BlasThreads blas(2);
  Matrix S = xt::zeros<float>({n, n});  // (n, n)
  const attn::CallSeconds s = time_gflops(state, sgemm_flops(n), [&] {
    sgemm_heads(in, n, S);
    benchmark::DoNotOptimize(S.data());
  });
  attn::record("sgemm_attention GFLOP/s", n, sgemm_flops(n) / s.wall / 1e9);
  attn::report_against_ceilings(state, sgemm_flops(n) / s.wall / 1e9, 2);
}

void full(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const attn::RandomInputs& in = inputs(n);
  const attn::Mask mask = causal ? attn::causal_mask(n, n) : attn::Mask();
  const attn::BlasThreads blas(2);
  measure(state, bench_flops(n, causal), n, 2, [&] {
    for (std::size_t h = 0; h < kHeads; ++h)
      benchmark::DoNotOptimize(attn::scaled_dot_product_attention(in.head(0, h), in.head(1, h), in.head(2, h), mask));
  });
}

void flash_simple(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const attn::RandomInputs& in = inputs(n);
  const attn::BlasThreads blas(1);  // the exercise is single-threaded code; its (64, 256) tiles are too small to split
  measure(state, bench_flops(n, causal), n, 1, [&] {
    for (std::size_t h = 0; h < kHeads; ++h)
      benchmark::DoNotOptimize(attn::flash_attention(in.head(0, h), in.head(1, h), in.head(2, h), causal, 64, 256));
  });
}

/// One flash_fast call on the inputs at \p n.
void flash_fast_call(std::size_t n, bool causal) {
  const attn::RandomInputs& in = inputs(n);
  benchmark::DoNotOptimize(ch05::flash_attention_fast(in.tensor(0), in.tensor(1), in.tensor(2), causal));
}

void flash_fast(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const attn::CallSeconds s =
      measure(state, bench_flops(n, causal), n, ch05::FastConfig{}.threads, [&] { flash_fast_call(n, causal); });
  if (!causal) attn::record("flash_fast cpu", n, s.cpu);  // what tile_phases sets its tiles against
}

// [tile_phases]
// The profile summary, measured the same way on any CPU: one tile of flash_fast (B_r × B_c = 128 × 512 at
// d = 64, in cache, one core) in its three phases — the score kernel with the row maxima, exp and sum row by
// row, the P·V kernel — each timed on its own. Counters: each product's rate against one core's FMA peak
// (`scores_pct_core_peak`, `pv_pct_core_peak`), exp's nanoseconds per score, each phase's share of the tile
// (`pct_tile_…`), and `pct_call_in_tiles`: the 2048 tiles of a flash_fast call at n = 4096 (8 heads) over that
// call's CPU time (flash_fast's in this run, or measured here when a filter left it out). The rest of a call is
// the work between the tiles: the running max and sum, O's rescaling, packing K, the input check, the output's
// first touches and the threads.
void tile_phases(benchmark::State& state) {
  const ch05::FastConfig cfg;
  const std::size_t rows = cfg.B_r, cols = cfg.B_c, panels = ch05::key_panels(cols);
  if (panels == 0 || cols % ch05::key_panel_width() != 0) {
    state.SkipWithError("no micro-kernels on this CPU: flash_fast's products are OpenBLAS calls");
    return;
  }
  attn::Rng rng(5);
  const Matrix Q = rng.normal(rows, kD), K = rng.normal(cols, kD), V = rng.normal(cols, kD);  // (rows|cols, d)
  std::vector<float> packed(panels * kD * ch05::key_panel_width()), S(rows * cols), O(rows * kD, 0.0f), m(rows);
  ch05::pack_keys(K.data(), cols, kD, packed.data());
  const std::vector<std::size_t> visible(rows, cols);
  using Clock = std::chrono::steady_clock;
  double scores_s = 0.0, exp_s = 0.0, pv_s = 0.0, sum = 0.0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
    ch05::scores_tile(Q.data(), rows, kD, kD, packed.data(), panels, 0.125f, S.data(), cols, visible.data(), m.data());
    const auto t1 = Clock::now();
    for (std::size_t r = 0; r < rows; ++r) sum += ch05::exp_shift_sum(S.data() + r * cols, cols, m[r]);
    const auto t2 = Clock::now();
    ch05::accumulate_pv(S.data(), rows, cols, cols, V.data(), kD, kD, O.data(), kD);
    const auto t3 = Clock::now();
    scores_s += std::chrono::duration<double>(t1 - t0).count();
    exp_s += std::chrono::duration<double>(t2 - t1).count();
    pv_s += std::chrono::duration<double>(t3 - t2).count();
  }
  benchmark::DoNotOptimize(sum + O[0]);
  const double calls = static_cast<double>(state.iterations()), tile_s = scores_s + exp_s + pv_s;
  const double product_flops = 2.0 * static_cast<double>(rows * cols * kD) * calls;
  const double core_peak = attn::ceilings(1).fma_peak_per_core;
  state.counters["scores_pct_core_peak"] = 100.0 * product_flops / scores_s / 1e9 / core_peak;
  state.counters["pv_pct_core_peak"] = 100.0 * product_flops / pv_s / 1e9 / core_peak;
  state.counters["exp_ns_per_score"] = 1e9 * exp_s / (calls * static_cast<double>(rows * cols));
  state.counters["pct_tile_scores"] = 100.0 * scores_s / tile_s;
  state.counters["pct_tile_exp"] = 100.0 * exp_s / tile_s;
  state.counters["pct_tile_pv"] = 100.0 * pv_s / tile_s;
  const double tiles_per_call = static_cast<double>(kHeads * (4096 / rows) * (4096 / cols));
  const double call_cpu_s = attn::recorded_or_measured("flash_fast cpu", 4096, [] {
    return attn::time_calls([] { flash_fast_call(4096, false); }, {3, 1}).cpu;
  });
  state.counters["pct_call_in_tiles"] = 100.0 * tiles_per_call * tile_s / calls / call_cpu_s;
}
// [tile_phases]

// The previous rung: the same kernel with OpenBLAS doing both products of every tile (it packs K_j and V_j
// again for every query block and zeroes S before writing it), instead of the micro-kernels.
void flash_fast_openblas(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  ch05::use_tile_kernels("none");
  measure(state, bench_flops(n, causal), n, ch05::FastConfig{}.threads, [&] { flash_fast_call(n, causal); });
  ch05::use_tile_kernels("auto");
}

BENCHMARK(sgemm_ceiling)->ArgName("n")->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(full)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(flash_simple)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(flash_fast_openblas)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(flash_fast)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(tile_phases)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
