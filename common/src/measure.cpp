// Timing, memory and the machine's ceilings.
#include "attn/measure.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn {

double median_seconds(const std::function<void()>& work, int repeats, int warmup) {
  require(repeats > 0, fmt::format("median_seconds: repeats must be positive, got {}", repeats));
  for (int i = 0; i < warmup; ++i) work();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

double cpu_seconds(const std::function<void()>& work) {
  work();  // warm-up: first-touch page faults and cold caches are not what we compare
  std::vector<double> batches;
  for (int b = 0; b < 3; ++b) {
    std::size_t calls = 0;
    const std::clock_t start = std::clock();
    double used = 0.0;
    do {
      work();
      ++calls;
      used = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
    } while (used < 1e-3);
    batches.push_back(used / static_cast<double>(calls));
  }
  std::sort(batches.begin(), batches.end());
  return batches[1];
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::map<std::string, std::map<std::size_t, double>>& bench_record() {
  static std::map<std::string, std::map<std::size_t, double>> record;
  return record;
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

double copy_bandwidth_gbs(std::size_t bytes, int repeats) {
  std::vector<char> from(bytes, 1), to(bytes, 0);
  const double seconds = median_seconds([&] { std::memcpy(to.data(), from.data(), bytes); }, repeats);
  return 2.0 * static_cast<double>(bytes) / seconds / 1e9;  // every byte read once and written once
}

double triad_bandwidth_gbs(std::size_t floats, std::size_t threads, int repeats) {
  require(threads > 0, "triad_bandwidth_gbs: threads must be ≥ 1");
  checked_allocation("triad_bandwidth_gbs: 3 arrays × floats × 4 bytes", {3, floats, sizeof(float)});
  std::vector<float> a(floats), b(floats, 1.0f), c(floats, 2.0f);
  const std::size_t part = (floats + threads - 1) / threads;
  const double seconds = median_seconds(
      [&] {
        std::atomic<std::size_t> next{0};
        run_on_threads(threads, [&] {
          const std::size_t t = next.fetch_add(1), begin = std::min(floats, t * part),
                            end = std::min(floats, begin + part);
          for (std::size_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
        });
      },
      repeats);
  return 3.0 * static_cast<double>(floats) * sizeof(float) / seconds / 1e9;
}

std::string human_bytes(double bytes, bool binary) {
  const double step = binary ? 1024.0 : 1000.0;
  static const char* binary_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  static const char* decimal_units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= step && u < 5) {
    bytes /= step;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes)
                : fmt::format("{:.{}f} {}", bytes,
                              bytes < 10    ? 2
                              : bytes < 100 ? 1
                                            : 0,
                              binary ? binary_units[u] : decimal_units[u]);
}

Progress::Progress(std::size_t total, bool enabled) : total_(total), enabled_(enabled && isatty(STDERR_FILENO)) {}

Progress::~Progress() {
  if (enabled_) fmt::print(stderr, "\r\033[K");  // leave the terminal clean for what follows
}

void Progress::update(std::size_t done, const std::string& what) {
  if (enabled_) fmt::print(stderr, "\r\033[K[{}/{}] {}", done, total_, what);
}

CallSeconds time_benchmark_calls(benchmark::State& state, const std::function<void()>& work) {
  double wall = 0.0;
  const std::clock_t cpu_start = std::clock();  // process CPU time: every thread's
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    work();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double calls = static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  return {wall / calls, static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC / calls};
}

}  // namespace attn
