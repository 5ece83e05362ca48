/// \file
/// Measuring on this machine: the one timing helper (time_calls: wall and CPU time, repetitions, median), peak
/// memory, and the rates the ceilings are made of (OpenBLAS's sgemm, STREAM's triad; attn/ceilings.hpp keeps
/// them once per run).
/// Timings never go into the book's captured output (it must be deterministic); they belong to runs and
/// benchmarks.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace benchmark {
class State;
}

namespace attn {

/// Seconds per call of some work, by three clocks: the wall clock (std::chrono::steady_clock), the process's CPU
/// time (every thread's: CLOCK_PROCESS_CPUTIME_ID) and the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
/// On a shared machine the CPU times count only the time the work ran, the wall time also the time it waited
/// for a core; `fastest` (the shortest wall time of one repeat) is the run the other jobs disturbed least.
struct CallSeconds {
  double wall = 0.0;
  double cpu = 0.0;
  double thread_cpu = 0.0;
  double fastest = 0.0;
};

/// How time_calls() repeats the work: `{3, 1}` is three timed repeats after one warm-up call.
struct Repeats {
  Repeats(int repeats_ = 5, int warmup_ = 1, double min_seconds_ = 0.0, std::function<void()> setup_ = {})
      : repeats(repeats_), warmup(warmup_), min_seconds(min_seconds_), setup(std::move(setup_)) {}
  int repeats;                  ///< timed repeats; the median of each clock is reported
  int warmup;                   ///< untimed calls first (first-touch page faults, cold caches)
  double min_seconds;           ///< each repeat calls the work until this much wall time has passed (at least once)
  std::function<void()> setup;  ///< when set, runs untimed before every call (a barrier between MPI ranks, say)
};

/// The course's one timing helper: runs \p work r.warmup times untimed, then r.repeats timed repeats (each one
/// or more calls, see Repeats::min_seconds), and returns the median seconds per call by each clock (and the
/// fastest repeat's wall time). The median ignores the odd run disturbed by the system.
/// \throws std::invalid_argument when r.repeats < 1 or r.warmup < 0.
CallSeconds time_calls(const std::function<void()>& work, const Repeats& r = {});

/// time_calls(work, {repeats, warmup}).wall: the median wall time of one call.
double median_seconds(const std::function<void()>& work, int repeats = 5, int warmup = 1);

/// time_calls(work, {3, 1, 1e-3}).cpu: the median process CPU time of one call, batches of at least a millisecond.
/// With one BLAS thread it is this core's work alone, steady on a busy machine where wall time also counts
/// waiting for a core. Only for single-threaded work: the process's CPU time adds up every thread's.
double cpu_seconds(const std::function<void()>& work);

/// The same clocks around a Google Benchmark loop: runs \p work once per iteration of \p state's loop (Google
/// Benchmark decides how many) and returns the mean seconds per call by each clock, and the fastest iteration.
CallSeconds time_benchmark_calls(benchmark::State& state, const std::function<void()>& work);

/// The CPU seconds this thread has used so far (CLOCK_THREAD_CPUTIME_ID): what Google Benchmark's "CPU"
/// column and its rates use. The difference of two readings counts the time the thread ran, not the time it
/// waited for a core.
double thread_cpu_seconds();

/// What the benchmarks of this run recorded for a summary that follows (exponents, crossovers, ratios):
/// name → n → value (seconds per call, or a rate). Empty until a benchmark writes into it. A summary reads it
/// through recorded_or_measured() (attn/bench.hpp), never directly, so that it does not depend on the order in
/// which the benchmarks ran.
std::map<std::string, std::map<std::size_t, double>>& bench_record();

/// The sizes of a doubling sweep: \p from, 2·from, 4·from, … up to \p to (inclusive when it is one of them).
/// \throws std::invalid_argument when from is 0 (the sweep would never grow).
std::vector<std::size_t> doublings(std::size_t from, std::size_t to);

/// The process's peak resident set size so far, in bytes (getrusage's ru_maxrss).
std::size_t peak_rss_bytes();

/// Memory the system reports as available now, in bytes (MemAvailable in /proc/meminfo; 0 if unknown).
std::size_t available_memory_bytes();

/// This machine's float32 matrix-multiply rate, in GFLOP/s: OpenBLAS sgemm of (m, k)·(k, n), counted as
/// 2·m·n·k FLOPs, median of \p repeats runs. The ceiling a chapter's attention timings are compared with.
double sgemm_gflops(std::size_t m, std::size_t n, std::size_t k, int repeats = 5);

/// This machine's memory bandwidth as STREAM's triad measures it, in GB/s: a = b + s·c over \p floats floats
/// per array, split over \p threads threads (2 reads and 1 write counted per element, as STREAM does), median of
/// \p repeats runs. The ceiling of a memory-bound kernel that runs on as many threads; pick \p floats so that
/// the three arrays are well above the last-level cache.
/// \throws std::invalid_argument when threads is 0 (and whatever a worker throws, such as std::bad_alloc).
double triad_bandwidth_gbs(std::size_t floats, std::size_t threads, int repeats = 5);

/// The triad of triad_bandwidth_gbs() timed by time_calls() with \p r: seconds per triad by each clock (one
/// triad moves 3 · \p floats · 4 bytes). attn::ceilings() keeps one per thread count for the whole run.
CallSeconds triad_seconds(std::size_t floats, std::size_t threads, const Repeats& r = {});

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

}  // namespace attn
