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

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "attn/cblas.hpp"
#include "attn/errors.hpp"
#include "attn/measure.hpp"
#include "attn/tensor.hpp"
#include "attn/vector.hpp"

namespace attn {
namespace {

// [fma_peak]
// kChains independent accumulators: an FMA's result is ready after ~4 cycles and a core starts up to two
// per cycle, so at least 8 chains must be in flight to keep both units busy; 12 leave margin and still fit
// in the 16 vector registers of AVX2. acc ← acc·a + b with a + b = 1 stays near 1: no overflow, no
// denormals (which would slow the loop down).
constexpr int kChains = 12;
constexpr long kIterations = 20'000'000;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) float fma_loop_avx512(long iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  alignas(64) float lanes[16];
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(lanes, acc[c]);
    for (float v : lanes) sum += v;
  }
  return sum;  // used by the caller, so the loop cannot be dropped
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  alignas(32) float lanes[8];
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(lanes, acc[c]);
    for (float v : lanes) sum += v;
  }
  return sum;
}
#endif

#if defined(__aarch64__)
// NEON is part of every arm64 CPU. Its 128-bit FMAs reach the core's peak on the SVE machines readers meet too
// (Neoverse V1 and V2, Graviton 3 and 4: as many 128-bit pipes as their SVE width needs); the 32 vector registers
// hold the 12 chains with room to spare.
float fma_loop_neon(long iterations) {
  float32x4_t acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = vdupq_n_f32(1.0f + 0.01f * static_cast<float>(c));
  const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(0.001f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = vfmaq_f32(b, acc[c], a);  // b + acc·a with one rounding
  }
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += vaddvq_f32(acc[c]);
  return sum;
}
#endif

float fma_loop_scalar(long iterations) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 1.0f + 0.01f * static_cast<float>(c);
  for (long i = 0; i < iterations; ++i)
    for (float& x : acc) x = x * 0.999f + 0.001f;
  float sum = 0.0f;
  for (float x : acc) sum += x;
  return sum;
}

/// The loop of the vector path the course's kernels run (attn::vector_path(), so ATTN_VECTOR_ISA moves the peak
/// with them), its name and the float lanes of one FMA.
struct FmaLoop {
  float (*run)(long);
  const char* isa;
  int lanes;
};

FmaLoop fma_loop_of_vector_path() {
  switch (vector_path()) {
#if defined(__x86_64__) && defined(__GNUC__)
    case VectorPath::avx512: return {fma_loop_avx512, "AVX-512", 16};
    case VectorPath::avx2: return {fma_loop_avx2, "AVX2+FMA", 8};
#elif defined(__aarch64__)
    case VectorPath::neon: return {fma_loop_neon, "NEON", 4};
#endif
    default: break;
  }
  return {fma_loop_scalar, "portable", 1};
}
// [fma_peak]

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
  const double flops = 2.0 * kChains * loop.lanes * static_cast<double>(kIterations) * threads;
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
    c.fma_peak_per_core = 2.0 * kChains * loop.lanes * static_cast<double>(kIterations) / cpu / 1e9;
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
