/// \file
/// The machine's ceilings, measured in the same run as the benchmarks that are set against them:
///   - the FMA peak of the cores: a loop of fused multiply-adds on registers only (no memory), in the widest
///     instruction set the CPU has (AVX-512 or AVX2, chosen at run time) — nothing float32 runs faster;
///   - a compute-bound square sgemm (OpenBLAS, 2048³): what a very good library reaches on real data;
///   - STREAM's triad (a = b + s·c over three 64 MiB arrays): the bandwidth memory allows as many threads, the
///     ceiling of a kernel that streams its data (a decode step, a scan, a graph's gathers);
///   - (per chapter) the attention-shaped sgemm, e.g. S = Q·Kᵀ with k = d = 64: bound by writing S to memory,
///     so a fused kernel that never writes S can beat it — a reference, not a ceiling.
/// A kernel's rate is reported as a percentage of each (counters pct_fma_peak, pct_sgemm_sq, pct_sgemm_attn).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "attn/measure.hpp"

namespace benchmark {
class State;
}

namespace attn {

/// GFLOP/s of the register-only FMA loop on \p threads threads at once (each FMA counted as 2 FLOPs),
/// median of \p repeats runs; \p isa receives the instruction set used, that of attn::vector_path() ("AVX-512",
/// "AVX2+FMA", "NEON" or "portable").
double fma_peak_gflops(int threads, std::string* isa = nullptr, int repeats = 3);

/// GFLOP/s of OpenBLAS's sgemm (n, n)·(n, n) with \p threads BLAS threads (2n³ FLOPs), median of \p repeats.
double square_sgemm_gflops(int threads, std::size_t n = 2048, int repeats = 3);

/// The machine-wide ceilings at one thread count, measured once per process and thread count.
struct Ceilings {
  int threads = 0;
  double fma_peak = 0.0;      ///< GFLOP/s, fma_peak_gflops(threads)
  std::string fma_isa;        ///< its instruction set
  double square_sgemm = 0.0;  ///< GFLOP/s, square_sgemm_gflops(threads)
  /// The FMA loop's FLOPs per second of CPU time on one thread: the core's own peak, which other jobs on a
  /// shared machine disturb far less than the wall-clock figures (compare a kernel's GFLOPS_per_core).
  double fma_peak_per_core = 0.0;
  /// One STREAM triad on `threads` threads over kTriadFloats floats per array, by each clock (attn::time_calls():
  /// median of 5): with one thread its CPU times count this core's time alone, steady on a shared machine.
  CallSeconds triad;
  static constexpr std::size_t kTriadFloats = std::size_t{1} << 24;  ///< 64 MiB per array, 192 MiB in all
  /// The bytes one triad moves: two arrays read, one written, as STREAM counts them.
  static constexpr double kTriadBytes = 3.0 * kTriadFloats * sizeof(float);
  /// The triad's bandwidth in GB/s by the wall clock: what a memory-bound kernel on `threads` threads is read against.
  double triad_gbs() const { return kTriadBytes / triad.wall / 1e9; }
};
const Ceilings& ceilings(int threads);

/// Measures ceilings(t) for each thread count \p t in \p threads and adds them to Google Benchmark's context
/// ("ceilings_2_threads: FMA peak (AVX-512) …, sgemm 2048^3 …, triad … GB/s"): the run's header shows them
/// before any kernel runs. attn::Chapter calls it for `chNN bench` with bench_ceiling_threads().
void add_ceilings_to_benchmark_context(const std::vector<int>& threads);

/// Declared once in a chapter's bench.cpp, at namespace scope, with the thread counts its benchmarks run on:
/// `chNN bench` measures the ceilings at those counts before any benchmark and prints them in the run's header.
/// \code
/// const attn::BenchCeilings ceilings_at{1, 2};  // one core for the exercise's kernel, two for the fast one
/// \endcode
struct BenchCeilings {
  BenchCeilings(std::initializer_list<int> threads);
};

/// Every thread count a BenchCeilings of this program named, in order, each once.
std::vector<int> bench_ceiling_threads();

/// Adds to \p state the counters pct_fma_peak and pct_sgemm_sq (a rate of \p gflops on \p threads threads
/// against ceilings(threads)) and, when \p attention_sgemm > 0, pct_sgemm_attn.
/// With \p per_cpu_second, \p gflops counts FLOPs per second of CPU time of one thread (as a benchmark on a
/// shared machine may): then only pct_fma_peak is reported, against Ceilings::fma_peak_per_core.
void report_against_ceilings(benchmark::State& state, double gflops, int threads, double attention_sgemm = 0.0,
                             bool per_cpu_second = false);

}  // namespace attn
