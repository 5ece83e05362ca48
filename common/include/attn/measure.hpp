/// \file
/// Measuring on this machine: wall-clock medians, peak memory, and the machine's own ceilings (the
/// matrix-multiply rate of OpenBLAS and the memory bandwidth) that a chapter sets its timings against.
/// Timings never go into the book's captured output (it must be deterministic); they belong to runs and
/// benchmarks.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>

namespace benchmark {
class State;
}

namespace attn {

/// Runs \p work \p warmup times untimed, then \p repeats times, and returns the median wall time in
/// seconds (std::chrono::steady_clock). The median ignores the odd run disturbed by the system.
double median_seconds(const std::function<void()>& work, int repeats = 5, int warmup = 1);

/// Seconds of CPU time one call of \p work takes: one warm-up call, then the median of 3 batches, each
/// repeating the call until it has used at least a millisecond. CPU time (std::clock) rather than wall time:
/// with one BLAS thread it is this core's work alone, steady on a busy machine where wall time also counts
/// waiting for a core. Only for single-threaded work: std::clock adds up the time of every thread.
double cpu_seconds(const std::function<void()>& work);

/// The CPU seconds this thread has used so far (CLOCK_THREAD_CPUTIME_ID): what Google Benchmark's "CPU"
/// column and its rates use. The difference of two readings counts the time the thread ran, not the time it
/// waited for a core.
double thread_cpu_seconds();

/// What the benchmarks of this run recorded for a summary benchmark that follows (exponents, crossovers):
/// name → n → value (seconds per call, or a rate). Empty until a benchmark writes into it.
std::map<std::string, std::map<std::size_t, double>>& bench_record();

/// The process's peak resident set size so far, in bytes (getrusage's ru_maxrss).
std::size_t peak_rss_bytes();

/// Memory the system reports as available now, in bytes (MemAvailable in /proc/meminfo; 0 if unknown).
std::size_t available_memory_bytes();

/// This machine's float32 matrix-multiply rate, in GFLOP/s: OpenBLAS sgemm of (m, k)·(k, n), counted as
/// 2·m·n·k FLOPs, median of \p repeats runs. The ceiling a chapter's attention timings are compared with.
double sgemm_gflops(std::size_t m, std::size_t n, std::size_t k, int repeats = 5);

/// This machine's memory bandwidth, in GB/s: copying \p bytes (read + write counted), median of
/// \p repeats runs. Pick \p bytes well above the last-level cache (e.g. 256 MiB).
double copy_bandwidth_gbs(std::size_t bytes, int repeats = 5);

/// This machine's memory bandwidth as STREAM's triad measures it, in GB/s: a = b + s·c over \p floats floats
/// per array, split over \p threads threads (2 reads and 1 write counted per element, as STREAM does), median of
/// \p repeats runs. The ceiling of a memory-bound kernel that runs on as many threads; pick \p floats so that
/// the three arrays are well above the last-level cache.
/// \throws std::invalid_argument when threads is 0 (and whatever a worker throws, such as std::bad_alloc).
double triad_bandwidth_gbs(std::size_t floats, std::size_t threads, int repeats = 5);

/// "1.50 KiB", "40.0 GB"...: \p bytes in binary (KiB, MiB, GiB) or decimal (kB, MB, GB) units.
std::string human_bytes(double bytes, bool binary = true);

/// A progress line on stderr for long runs ("[3/10] n = 1024"), redrawn in place in a terminal and
/// silent when stderr is not a terminal or when \p enabled is false (the book's runs).
class Progress {
 public:
  Progress(std::size_t total, bool enabled);
  ~Progress();
  /// Step \p done of total, with a short description of what is running now.
  void update(std::size_t done, const std::string& what);

 private:
  std::size_t total_;
  bool enabled_;
};

/// Seconds per call of a benchmark's work: by wall clock, and by the process's CPU time (every thread's),
/// which the other jobs on a shared machine disturb far less.
struct CallSeconds {
  double wall = 0.0;
  double cpu = 0.0;
};

/// Runs \p work once per iteration of \p state's loop and returns its seconds per call (chapters 10 and 11
/// take in-run ratios of these).
CallSeconds time_benchmark_calls(benchmark::State& state, const std::function<void()>& work);

}  // namespace attn
