// The machine's ceilings, measured in the run that uses them (see attn/ceilings.hpp).
#include "attn/ceilings.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <map>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "attn/cblas.hpp"
#include "attn/errors.hpp"
#include "attn/measure.hpp"
#include "attn/tensor.hpp"
#include "attn/vector.hpp"

namespace attn {
namespace {

constexpr long kIterations = 20'000'000;  // multiply-adds per chain (attn::fma_loop, common/src/fma_loop.cpp)

/// The FMA loop of the vector path the course's kernels run (attn::vector_path(), so ATTN_VECTOR_ISA moves the
/// peak with them), its name and the float lanes of one FMA.
struct FmaLoop {
  float (*run)(long);
  const char* isa;
  int lanes;
};

FmaLoop fma_loop_of_vector_path() {
  return {fma_loop, vector_path_name(vector_path()), static_cast<int>(vector_lanes())};
}

}  // namespace

double fma_peak_gflops(int threads, std::string* isa, int repeats) {
  require(threads > 0, fmt::format("fma_peak_gflops: threads must be positive, got {}", threads));
  const FmaLoop loop = fma_loop_of_vector_path();
  if (isa != nullptr) *isa = loop.isa;
  std::atomic<float> sink{0.0f};
  const double seconds = median_seconds(
      [&] {  // every thread runs the same loop at once: the wall time of the slowest is the machine's
        std::vector<std::thread> pool;
        for (int t = 1; t < threads; ++t) pool.emplace_back([&] { sink = sink + loop.run(kIterations); });
        sink = sink + loop.run(kIterations);
        for (auto& th : pool) th.join();
      },
      repeats);
  benchmark::DoNotOptimize(sink.load());
  const double flops = 2.0 * kFmaChains * loop.lanes * static_cast<double>(kIterations) * threads;
  return flops / seconds / 1e9;
}

double square_sgemm_gflops(int threads, std::size_t n, int repeats) {
  const BlasThreads blas(threads);
  std::vector<float> A(n * n, 1.0f), B(n * n, 0.5f), C(n * n);  // (n, n) each
  const int ni = static_cast<int>(n);
  const double seconds = median_seconds(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, A.data(), ni, B.data(), ni, 0.0f,
                    C.data(), ni);
        benchmark::DoNotOptimize(C.data());
      },
      repeats);
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds / 1e9;
}

const Ceilings& ceilings(int threads) {
  static std::map<int, Ceilings> measured;
  auto it = measured.find(threads);
  if (it != measured.end()) return it->second;
  Ceilings c;
  c.threads = threads;
  c.fma_peak = fma_peak_gflops(threads, &c.fma_isa);
  c.square_sgemm = square_sgemm_gflops(threads);
  if (threads == 1) {
    const FmaLoop loop = fma_loop_of_vector_path();  // one thread, timed by the CPU time it gets
    const std::clock_t cpu_start = std::clock();
    benchmark::DoNotOptimize(loop.run(kIterations));
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    c.fma_peak_per_core = 2.0 * kFmaChains * loop.lanes * static_cast<double>(kIterations) / cpu / 1e9;
  } else {
    c.fma_peak_per_core = ceilings(1).fma_peak_per_core;  // one core's peak, whatever the thread count
  }
  c.triad = triad_seconds(Ceilings::kTriadFloats, static_cast<std::size_t>(threads));
  return measured.emplace(threads, c).first->second;
}

void add_ceilings_to_benchmark_context(const std::vector<int>& threads) {
  for (int t : threads) {
    const Ceilings& c = ceilings(t);
    benchmark::AddCustomContext(fmt::format("ceilings_{}_thread{}", t, t == 1 ? "" : "s"),
                                fmt::format("FMA peak ({}) {:.1f} GFLOP/s ({:.1f} per CPU-second of one core), "
                                            "sgemm 2048^3 {:.1f} GFLOP/s, triad {:.1f} GB/s",
                                            c.fma_isa, c.fma_peak, c.fma_peak_per_core, c.square_sgemm, c.triad_gbs()));
  }
}

namespace {
std::vector<int>& registered_ceiling_threads() {
  static std::vector<int> threads;
  return threads;
}
}  // namespace

BenchCeilings::BenchCeilings(std::initializer_list<int> threads) {
  std::vector<int>& all = registered_ceiling_threads();
  for (int t : threads)
    if (std::find(all.begin(), all.end(), t) == all.end()) all.push_back(t);
}

std::vector<int> bench_ceiling_threads() { return registered_ceiling_threads(); }

void report_against_ceilings(benchmark::State& state, double gflops, int threads, double attention_sgemm,
                             bool per_cpu_second) {
  const Ceilings& c = ceilings(threads);
  if (per_cpu_second) {
    state.counters["pct_fma_peak"] = 100.0 * gflops / c.fma_peak_per_core;
    return;
  }
  state.counters["pct_fma_peak"] = 100.0 * gflops / c.fma_peak;
  state.counters["pct_sgemm_sq"] = 100.0 * gflops / c.square_sgemm;
  if (attention_sgemm > 0.0) state.counters["pct_sgemm_attn"] = 100.0 * gflops / attention_sgemm;
}

}  // namespace attn
