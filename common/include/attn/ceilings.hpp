/// \file
/// The machine's ceilings, measured in the same run as the benchmarks that are set against them:
///   - the FMA peak of the cores: a loop of fused multiply-adds on registers only (no memory), in the widest
///     instruction set the CPU has (AVX-512 or AVX2, chosen at run time) — nothing float32 runs faster;
///   - a compute-bound square sgemm (OpenBLAS, 2048³): what a very good library reaches on real data;
///   - (per chapter) the attention-shaped sgemm, e.g. S = Q·Kᵀ with k = d = 64: bound by writing S to memory,
///     so a fused kernel that never writes S can beat it — a reference, not a ceiling.
/// A kernel's rate is reported as a percentage of each (counters pct_fma_peak, pct_sgemm_sq, pct_sgemm_attn).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace benchmark {
class State;
}

namespace attn {

/// GFLOP/s of the register-only FMA loop on \p threads threads at once (each FMA counted as 2 FLOPs),
/// median of \p repeats runs; \p isa receives the instruction set used ("AVX-512", "AVX2+FMA", "scalar").
double fma_peak_gflops(int threads, std::string* isa = nullptr, int repeats = 3);

/// GFLOP/s of OpenBLAS's sgemm (n, n)·(n, n) with \p threads BLAS threads (2n³ FLOPs), median of \p repeats.
/// Leaves OpenBLAS at \p threads threads.
double square_sgemm_gflops(int threads, std::size_t n = 2048, int repeats = 3);

/// The two machine-wide ceilings at one thread count, measured once per process and thread count.
struct Ceilings {
  int threads = 0;
  double fma_peak = 0.0;      ///< GFLOP/s, fma_peak_gflops(threads)
  std::string fma_isa;        ///< its instruction set
  double square_sgemm = 0.0;  ///< GFLOP/s, square_sgemm_gflops(threads)
  /// The FMA loop's FLOPs per second of CPU time on one thread: the core's own peak, which other jobs on a
  /// shared machine disturb far less than the wall-clock figures (compare a kernel's GFLOPS_per_core).
  double fma_peak_per_core = 0.0;
};
const Ceilings& ceilings(int threads);

/// Measures ceilings(t) for each thread count \p t in \p threads and adds them to Google Benchmark's context
/// ("ceilings_2_threads: FMA peak (AVX-512) 230 GFLOP/s, sgemm 2048³ 181 GFLOP/s"): the run's header shows
/// them before any kernel runs. attn::Chapter calls it for `chNN bench` (see Chapter::bench_ceilings()).
void add_ceilings_to_benchmark_context(const std::vector<int>& threads);

/// Adds to \p state the counters pct_fma_peak and pct_sgemm_sq (a rate of \p gflops on \p threads threads
/// against ceilings(threads)) and, when \p attention_sgemm > 0, pct_sgemm_attn.
/// With \p per_cpu_second, \p gflops counts FLOPs per second of CPU time of one thread (as a benchmark on a
/// shared machine may): then only pct_fma_peak is reported, against Ceilings::fma_peak_per_core.
void report_against_ceilings(benchmark::State& state, double gflops, int threads, double attention_sgemm = 0.0,
                             bool per_cpu_second = false);

}  // namespace attn
