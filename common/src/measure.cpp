// Timing, memory and the machine's ceilings.
#include "attn/measure.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <limits>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "attn/tensor.hpp"

namespace attn {

namespace {

/// The three clocks of CallSeconds, read at one instant.
struct Clocks {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  double cpu = process_cpu_seconds();
  double thread_cpu = thread_cpu_seconds();

  static double process_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  /// Seconds since this reading, by each clock, divided by \p calls.
  CallSeconds since(double calls = 1.0) const {
    const Clocks now;
    const double wall_s = std::chrono::duration<double>(now.wall - wall).count() / calls;
    return {wall_s, (now.cpu - cpu) / calls, (now.thread_cpu - thread_cpu) / calls, wall_s};
  }
};

}  // namespace

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

CallSeconds time_calls(const std::function<void()>& work, const Repeats& r) {
  require(r.repeats > 0, fmt::format("time_calls: repeats must be positive, got {}", r.repeats));
  require(r.warmup >= 0, fmt::format("time_calls: warmup must not be negative, got {}", r.warmup));
  for (int i = 0; i < r.warmup; ++i) {
    if (r.setup) r.setup();
    work();
  }
  std::vector<double> wall, cpu, thread_cpu;
  for (int i = 0; i < r.repeats; ++i) {
    CallSeconds total;  // over the calls of this repeat, setups left out
    double calls = 0.0;
    do {
      if (r.setup) r.setup();
      const Clocks start;
      work();
      const CallSeconds s = start.since();
      total.wall += s.wall;
      total.cpu += s.cpu;
      total.thread_cpu += s.thread_cpu;
      calls += 1.0;
    } while (total.wall < r.min_seconds);
    wall.push_back(total.wall / calls);
    cpu.push_back(total.cpu / calls);
    thread_cpu.push_back(total.thread_cpu / calls);
  }
  const double fastest = *std::min_element(wall.begin(), wall.end());
  return {median(wall), median(cpu), median(thread_cpu), fastest};
}

double median_seconds(const std::function<void()>& work, int repeats, int warmup) {
  require(repeats > 0, fmt::format("median_seconds: repeats must be positive, got {}", repeats));
  return time_calls(work, {repeats, warmup, 0.0}).wall;
}

double cpu_seconds(const std::function<void()>& work) { return time_calls(work, {3, 1, 1e-3}).cpu; }

CallSeconds time_benchmark_calls(benchmark::State& state, const std::function<void()>& work) {
  double fastest = std::numeric_limits<double>::infinity();
  const Clocks loop;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    work();
    fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  CallSeconds s = loop.since(static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1)));
  s.fastest = std::isfinite(fastest) ? fastest : 0.0;
  return s;
}

std::map<std::string, std::map<std::size_t, double>>& bench_record() {
  static std::map<std::string, std::map<std::size_t, double>> record;
  return record;
}

std::vector<std::size_t> doublings(std::size_t from, std::size_t to) {
  require(from > 0, "doublings: a sweep from 0 never grows; start at 1 or more");
  std::vector<std::size_t> sizes;
  for (std::size_t n = from; n <= to; n *= 2) {
    sizes.push_back(n);
    if (n > to / 2) break;  // the next doubling would pass `to` (or wrap)
  }
  return sizes;
}

std::size_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::size_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

double sgemm_gflops(std::size_t m, std::size_t n, std::size_t k, int repeats) {
  Rng rng(7);
  const Matrix a = rng.normal(m, k);  // (m, k)
  const Matrix b = rng.normal(k, n);  // (k, n)
  Matrix c;                           // (m, n)
  const double seconds = median_seconds([&] { c = xt::linalg::dot(a, b); }, repeats);
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / seconds / 1e9;
}

// [triad]
CallSeconds triad_seconds(std::size_t floats, std::size_t threads, const Repeats& r) {
  require(threads > 0, "triad_bandwidth_gbs: threads must be ≥ 1");
  checked_allocation("triad_bandwidth_gbs: 3 arrays × floats × 4 bytes", {3, floats, sizeof(float)});
  std::vector<float> a(floats), b(floats, 1.0f), c(floats, 2.0f);
  const std::size_t part = (floats + threads - 1) / threads;
  return time_calls(
      [&] {
        std::atomic<std::size_t> next{0};
        run_on_threads(threads, [&] {
          const std::size_t t = next.fetch_add(1), begin = std::min(floats, t * part),
                            end = std::min(floats, begin + part);
          for (std::size_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
        });
        benchmark::ClobberMemory();
      },
      r);
}
// [triad]

double triad_bandwidth_gbs(std::size_t floats, std::size_t threads, int repeats) {
  const double seconds = triad_seconds(floats, threads, {repeats, 1, 0.0}).wall;
  return 3.0 * static_cast<double>(floats) * sizeof(float) / seconds / 1e9;
}

Progress::Progress(std::size_t total, bool enabled) : total_(total), enabled_(enabled && isatty(STDERR_FILENO)) {}

Progress::~Progress() {
  if (enabled_) fmt::print(stderr, "\r\033[K");  // leave the terminal clean for what follows
}

void Progress::update(std::size_t done, const std::string& what) {
  if (enabled_) fmt::print(stderr, "\r\033[K[{}/{}] {}", done, total_, what);
}

}  // namespace attn
