// Chapter 14's benchmarks (`./course bench 14`, or `ch14_state_space bench`), in one run with this machine's
// ceilings (the STREAM triad on one thread among them): the selective scan at d = 64, N = 16, n = 65,536
// (sequential, time-parallel and channel-parallel on 2 threads) with each kernel this CPU runs, the exponential
// alone, FFT against direct convolution from n = 256 to 65,536 with fitted exponents, and the decode step of the
// SSM against chapter 09's KV cache from n = 1K to 64K with fitted exponents. The scans and the triad are compared
// on the wall clock (the threaded scans need it), and the one-thread scan also in CPU time; the convolution and
// decode summaries use the thread's CPU time (the machine is shared: see the load beside the figures in the book).
// Figures from a run are on the measurements page (book/measure_14_state_space.md), never in these comments.
#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "04_complexity/exponent.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "14_state_space/lti.hpp"
#include "14_state_space/scan.hpp"
#include "14_state_space/state_space.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"
#include "attn/rng.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch14 = attn::ch14;
using ch14::kDecodeD;
using ch14::kDecodeDk;
using ch14::kDecodeH;
using ch14::kDecodeN;

const attn::BenchCeilings ceilings_at{1};  // the triad on one thread: what one core's memory traffic can reach

/// The triad's bytes per second on one thread by each clock: the mean wall time, the fastest repeat, and this
/// thread's CPU time (attn::ceilings, measured once before the benchmarks).
double triad_per_s(double attn::CallSeconds::*clock) {
  return attn::Ceilings::kTriadBytes / (attn::ceilings(1).triad.*clock);
}

/// STREAM's triad on one thread, a = b + s·c: two arrays read, one written; the speed memory allows one core. It is
/// one of the run's ceilings (attn::ceilings(), measured once before the benchmarks); this row shows it by each clock.
void BM_Triad(benchmark::State& state) {
  const attn::Ceilings& c = attn::ceilings(1);
  double wall = c.triad.wall;  // a non-const lvalue: the one DoNotOptimize form Google Benchmark 1.7 and 1.9 share
  for (auto _ : state) benchmark::DoNotOptimize(wall);
  state.counters["GB/s"] = triad_per_s(&attn::CallSeconds::wall) / 1e9;
  state.counters["GB/s_best"] = triad_per_s(&attn::CallSeconds::fastest) / 1e9;
  state.counters["GB/s_cpu"] = triad_per_s(&attn::CallSeconds::thread_cpu) / 1e9;
}
BENCHMARK(BM_Triad)->Arg(1 << 24)->ArgName("floats")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);

constexpr std::size_t kScanN = 65536, kScanD = 64, kScanState = 16;

const ch14::ScanInputs& bench_scan_inputs() {
  static const ch14::ScanInputs in = [] {
    attn::Rng rng(14);
    return ch14::scan_inputs(rng, kScanN, kScanD, kScanState);
  }();
  return in;
}

/// Keys of one series' entries in attn::bench_record(): which figure each value is.
constexpr std::size_t kWall = 0, kBest = 1, kCpu = 2, kPath = 3, kWork = 4;

// [bench_exp]
/// The scan's other ceiling: its kernels' exponential alone, on one thread, over one token's d·N = 1024 decays
/// (4 KiB each way, in the L1 cache) as the scan computes them. Every token needs that many, so n·d·N divided by
/// this rate is the least time the scan's exponentials take on one core, whatever the memory does. One call is
/// 1,000 tokens' worth, so that reading the clock around it costs nothing beside it.
constexpr std::size_t kExpCount = kScanD * kScanState, kExpTokens = 1000;
void vector_exp_call() {
  static const std::vector<float> exponents = [] {  // (d·N) Δ·A-like values in [−1.6, 0)
    std::vector<float> e(kExpCount);
    for (std::size_t i = 0; i < kExpCount; ++i)
      e[i] = -0.001f * static_cast<float>((1 + i % 100) * (1 + i % kScanState));
    return e;
  }();
  static std::vector<float> decays(kExpCount);  // (d·N) their exponentials
  for (std::size_t t = 0; t < kExpTokens; ++t) {
    ch14::vector_exp(exponents.data(), decays.data(), kExpCount);
    benchmark::DoNotOptimize(decays.data());
    benchmark::ClobberMemory();
  }
}

void record_exp_rate(const attn::CallSeconds& s) {
  const double exps = static_cast<double>(kExpCount * kExpTokens);
  attn::record("exp/s", kWall, exps / s.wall);
  attn::record("exp/s", kBest, exps / s.fastest);
  attn::record("exp/s", kCpu, exps / s.thread_cpu);
}

void BM_VectorExp(benchmark::State& state) {
  const attn::CallSeconds s = attn::time_benchmark_calls(state, vector_exp_call);
  record_exp_rate(s);
  const double exps = static_cast<double>(kExpCount * kExpTokens);
  state.counters["Gexp/s"] = exps / s.wall / 1e9;
  state.counters["Gexp/s_cpu"] = exps / s.thread_cpu / 1e9;
  state.SetLabel(fmt::format("{}, {}", ch14::scan_kernel_isa(), ch14::scan_kernel_exp()));
}
// [bench_exp]
BENCHMARK(BM_VectorExp)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.3);

/// Exponentials per second of this thread's CPU time: BM_VectorExp's in this run, or measured here.
double exp_rate_cpu() {
  return attn::recorded_or_measured("exp/s", kCpu, [] {
    const attn::CallSeconds s = attn::time_calls(vector_exp_call, {5, 1, 0.01});
    record_exp_rate(s);
    return static_cast<double>(kExpCount * kExpTokens) / s.thread_cpu;
  });
}

/// One selective scan on the bench inputs: its seconds by each clock, and its threads' CPU time (path, work).
struct ScanTime {
  attn::CallSeconds s;
  double path = 0, work = 0, fixup = 0;  // CPU seconds per call
  std::size_t fixup_tokens = 0;          // the same every call: it depends on Δ and A only
};

/// Runs \p timer over one scan on \p threads threads split by \p split, adding up its ScanStats.
template <class Timer>
ScanTime time_scan(int threads, ch14::ScanSplit split, Timer&& timer) {
  const ch14::ScanInputs& in = bench_scan_inputs();
  ScanTime t;
  double calls = 0;
  t.s = timer([&] {
    ch14::ScanStats stats;
    const ch14::SelectiveScanOutput out =
        ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, threads, split, &stats);
    benchmark::DoNotOptimize(out.y.data());
    t.path += stats.critical_path;
    t.work += stats.total;
    t.fixup += stats.fixup;
    t.fixup_tokens = stats.fixup_tokens;
    calls += 1;
  });
  t.path /= calls;
  t.work /= calls;
  t.fixup /= calls;
  return t;
}

void record_scan(const std::string& name, const ScanTime& t) {
  for (const auto& [key, value] :
       {std::pair<std::size_t, double>{kWall, t.s.wall}, {kBest, t.s.fastest}, {kPath, t.path}, {kWork, t.work}})
    attn::record("scan " + name, key, value);
}

/// The sequential scan's figure \p key (kWall, kBest, kPath or kWork): its benchmark's in this run, or measured here.
double sequential_scan(std::size_t key) {
  return attn::recorded_or_measured("scan sequential", key, [key] {
    const attn::BlasThreads blas(1);
    const ScanTime t = time_scan(1, ch14::ScanSplit::time, [](const std::function<void()>& work) {
      return attn::time_calls(work, {3, 1});
    });
    record_scan("sequential", t);
    return key == kWall ? t.s.wall : key == kBest ? t.s.fastest : key == kPath ? t.path : t.work;
  });
}

// [bench_scan]
/// The selective scan at n = 65,536, d = 64, N = 16: sequential (1 thread), in time chunks or split by channels
/// (2 threads). Bytes: x, Δ, B, C read and y written once; "%triad" against the one-thread triad of this run.
void BM_SelectiveScan(benchmark::State& state) {
  const attn::BlasThreads blas(1);
  const int threads = static_cast<int>(state.range(0));
  const auto split = state.range(1) == 0 ? ch14::ScanSplit::time : ch14::ScanSplit::channels;
  const ScanTime t = time_scan(
      threads, split, [&](const std::function<void()>& work) { return attn::time_benchmark_calls(state, work); });
  const double bytes = ch14::selective_scan_bytes(kScanN, kScanD, kScanState);
  record_scan(threads == 1 ? "sequential" : split == ch14::ScanSplit::time ? "time" : "channels", t);
  // Against the triad on the same clock: mean wall time, best iteration, and (one thread) CPU time.
  state.counters["GB/s"] = bytes / t.s.wall / 1e9;
  state.counters["%triad"] = 100.0 * bytes / t.s.wall / triad_per_s(&attn::CallSeconds::wall);
  state.counters["%triad_best"] = 100.0 * bytes / t.s.fastest / triad_per_s(&attn::CallSeconds::fastest);
  if (threads == 1)
    state.counters["%triad_cpu"] = 100.0 * bytes / t.s.thread_cpu / triad_per_s(&attn::CallSeconds::thread_cpu);
  state.counters["Gupdates/s"] = static_cast<double>(kScanN * kScanD * kScanState) / t.s.wall / 1e9;
  // Against the exponential's ceiling, in CPU time: the share of the scan's time (its critical path on T threads)
  // that its n·d·N exponentials need at the rate BM_VectorExp measured, shared by the T threads.
  state.counters["%exp_floor"] =
      100.0 * static_cast<double>(kScanN * kScanD * kScanState) / exp_rate_cpu() / threads / t.path;
  if (threads > 1) {
    state.counters["speedup"] = sequential_scan(kWall) / t.s.wall;
    state.counters["speedup_best"] = sequential_scan(kBest) / t.s.fastest;
    // In CPU time, which the other jobs on the machine do not inflate: the longest thread of every phase (what an
    // idle core per thread would take) and the work of all threads, both against the sequential scan.
    state.counters["speedup_cpu_path"] = sequential_scan(kPath) / t.path;
    state.counters["work_vs_seq"] = t.work / sequential_scan(kWork);
    // The extra work r = work/sequential − 1 caps T threads at T/(1 + r); the fix-up's own share of it, and how
    // many tokens it corrected (time split only).
    state.counters["cap_T/(1+r)"] = threads * sequential_scan(kWork) / t.work;
    if (split == ch14::ScanSplit::time) {
      state.counters["r_fixup"] = t.fixup / sequential_scan(kWork);
      state.counters["fixup_tokens"] = static_cast<double>(t.fixup_tokens);
    }
  }
  state.SetLabel(ch14::scan_kernel_isa());
}
// [bench_scan]
BENCHMARK(BM_SelectiveScan)
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({2, 1})
    ->ArgNames({"threads", "channels"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

// [bench_kernels]
/// The sequential scan with each kernel this CPU runs (each vector path's, chapter 05's exponential in all): portable,
/// then AVX2+FMA and AVX-512. CPU time, against the triad's.
void BM_ScanKernel(benchmark::State& state) {
  static const char* const isas[] = {"portable", "AVX2+FMA", "AVX-512"};
  const char* isa = isas[state.range(0)];
  if (!ch14::use_scan_kernels(isa)) {
    state.SkipWithError(fmt::format("the {} kernels do not run on this CPU or build", isa).c_str());
    return;
  }
  const attn::BlasThreads blas(1);
  const ch14::ScanInputs& in = bench_scan_inputs();
  const attn::CallSeconds s = attn::time_benchmark_calls(state, [&] {
    const ch14::SelectiveScanOutput out = ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, 1);
    benchmark::DoNotOptimize(out.y.data());
  });
  state.SetLabel(fmt::format("{}, {}", isa, ch14::scan_kernel_exp()));
  ch14::use_scan_kernels("auto");
  state.counters["ms_cpu"] = s.thread_cpu * 1e3;
  state.counters["%triad_cpu"] = 100.0 * ch14::selective_scan_bytes(kScanN, kScanD, kScanState) / s.thread_cpu /
                                 triad_per_s(&attn::CallSeconds::thread_cpu);
}
// [bench_kernels]
BENCHMARK(BM_ScanKernel)->DenseRange(0, 2)->ArgName("isa")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

/// The sizes the convolution and decode benchmarks run at (BENCHMARK below), which their summaries read.
const std::vector<std::size_t> kConvolutionN{256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
const std::vector<std::size_t> kDecodeContexts{1024, 2048, 4096, 8192, 16384, 32768, 65536};

// [bench_conv]
/// Causal convolution of an S4D kernel of length n with an input of length n: direct O(n²) against FFTW's O(n log n)
/// (plans made once per length, outside the timing; both transforms of K and u and the inverse timed).
struct Convolution {
  Vector K, u;  // (n) each
  bool fft;
  explicit Convolution(std::size_t n, bool fft_) : fft(fft_) {
    attn::Rng rng(n);
    K = ch14::ssm_kernel(attn::zoh_discretize(ch14::s4d_lin(16, rng), 0.05f), n);
    u = ch14::random_vector(rng, n);
    if (fft) benchmark::DoNotOptimize(ch14::causal_convolution_fft(K, u).data());  // makes the plans
  }
  void operator()() const {
    const Vector y = fft ? ch14::causal_convolution_fft(K, u) : ch14::causal_convolution_direct(K, u);
    benchmark::DoNotOptimize(y.data());
  }
};

void BM_Convolution(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const bool fft = state.range(1) == 1;
  if (fft && !ch14::fft_available()) {
    state.SkipWithError("built without FFTW3 (libfftw3-dev)");
    return;
  }
  const Convolution convolution(n, fft);
  attn::record(fft ? "fft" : "direct", n, attn::time_benchmark_calls(state, convolution).thread_cpu);
}
// [bench_conv]
BENCHMARK(BM_Convolution)
    ->ArgsProduct({{256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}, {0, 1}})
    ->ArgNames({"n", "fft"})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

/// A series' CPU seconds per call over \p ns: its benchmarks' in this run, or measured here (median of 5 batches
/// of at least 10 ms) when a filter left them out, so a summary reads the same whatever ran before it.
template <class Make>
std::map<std::size_t, double> cpu_seconds_over(const char* series, const std::vector<std::size_t>& ns, Make&& make) {
  std::map<std::size_t, double> t;
  for (std::size_t n : ns)
    t[n] = attn::recorded_or_measured(series, n, [&] {
      const attn::BlasThreads blas(1);
      const auto work = make(n);
      return attn::time_calls(work, {5, 1, 0.01}).thread_cpu;
    });
  return t;
}

void BM_ConvolutionSummary(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
  if (!ch14::fft_available()) {
    state.SkipWithError("built without FFTW3 (libfftw3-dev)");
    return;
  }
  const auto direct = cpu_seconds_over("direct", kConvolutionN, [](std::size_t n) { return Convolution(n, false); });
  const auto fft = cpu_seconds_over("fft", kConvolutionN, [](std::size_t n) { return Convolution(n, true); });
  // The crossover: the smallest n from which the FFT wins at every larger n measured.
  std::size_t crossover = 0;
  for (auto it = direct.rbegin(); it != direct.rend(); ++it) {
    if (fft.at(it->first) >= it->second) break;
    crossover = it->first;
  }
  state.counters["fft_wins_from_n"] = static_cast<double>(crossover);
  state.counters["exp_direct"] = attn::exponent_between(direct, 1024, 65536);
  state.counters["exp_fft"] = attn::exponent_between(fft, 1024, 65536);
  state.counters["speedup_65536"] = direct.at(65536) / fft.at(65536);
}
BENCHMARK(BM_ConvolutionSummary)->Iterations(1);

// [bench_decode]
/// One decode step after n tokens. SSM: the contract's selective_step on a (256, 16) state that has read n tokens.
/// Attention: chapter 09's decode_step over a KV cache of n tokens (h = g = 4, d_k = 64), the same width.
/// The context is made of a block of kBlock random tokens, repeated: a step's time does not depend on the
/// values, and drawing millions of normal numbers would take longer than the benchmark.
constexpr std::size_t kBlock = 1024;

/// The SSM's step at token n: every call starts from the same state (token n − 1's), again and again.
std::function<void()> ssm_step(std::size_t n) {
  attn::Rng rng(n);
  auto A = std::make_shared<Matrix>(xt::zeros<float>({kDecodeD, kDecodeN}));  // (d, N) S4D-Real
  for (std::size_t c = 0; c < kDecodeD; ++c)
    for (std::size_t k = 0; k < kDecodeN; ++k) (*A)(c, k) = -static_cast<float>(k + 1);
  const Matrix X = rng.normal(kBlock, kDecodeD), Bs = rng.normal(kBlock, kDecodeN);  // (block, d), (block, N)
  const Vector delta = xt::ones<float>({kDecodeD}) * 0.01f;                          // (d)
  const Vector C = xt::row(rng.normal(1, kDecodeN), 0);                              // (N)
  Matrix h = xt::zeros<float>({kDecodeD, kDecodeN});                                 // (d, N)
  for (std::size_t t = 0; t + 1 < n; ++t)  // read n − 1 tokens: the state of a context of n − 1
    attn::selective_step(h, xt::row(X, t % kBlock), delta, *A, xt::row(Bs, t % kBlock), C);
  const Vector x = xt::row(X, (n - 1) % kBlock), B = xt::row(Bs, (n - 1) % kBlock);  // (d), (N) token n
  auto state = std::make_shared<Matrix>(h);
  return [=] {
    *state = h;
    const Vector y = attn::selective_step(*state, x, delta, *A, B, C);  // (d)
    benchmark::DoNotOptimize(y.data());
  };
}

/// Attention's step at token n over a KV cache of n − 1 tokens (truncated back before every call).
std::function<void()> kv_step(std::size_t n) {
  attn::Rng rng(n);
  auto cache = std::make_shared<attn::KVCache>(kDecodeH, n, kDecodeDk, kDecodeDk);
  const Matrix Ks = rng.normal(kBlock * kDecodeH, kDecodeDk), Vs = rng.normal(kBlock * kDecodeH, kDecodeDk);
  auto token = [&](const Matrix& M, std::size_t t) {  // (g, d) rows of token t of the block
    const std::size_t row = (t % kBlock) * kDecodeH;
    return Matrix(xt::view(M, xt::range(row, row + kDecodeH), xt::all()));
  };
  for (std::size_t t = 0; t + 1 < n; ++t) cache->append(token(Ks, t), token(Vs, t));
  const Matrix q = rng.normal(kDecodeH, kDecodeDk), k = token(Ks, n - 1), v = token(Vs, n - 1);  // (h, d_k) ...
  return [=] {
    cache->truncate(n - 1);
    const Matrix O = attn::decode_step(*cache, q, k, v);  // (h, d_v)
    benchmark::DoNotOptimize(O.data());
  };
}

void BM_Decode(benchmark::State& state) {
  const attn::BlasThreads blas(1);
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const bool ssm = state.range(1) == 0;
  const double seconds = attn::time_benchmark_calls(state, ssm ? ssm_step(n) : kv_step(n)).thread_cpu;
  attn::record(ssm ? "ssm_step" : "kv_step", n, seconds);
}
// [bench_decode]
BENCHMARK(BM_Decode)
    ->ArgsProduct({{1024, 2048, 4096, 8192, 16384, 32768, 65536}, {0, 1}})
    ->ArgNames({"n", "kv_cache"})
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.1);

void BM_DecodeSummary(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
  const auto ssm = cpu_seconds_over("ssm_step", kDecodeContexts, ssm_step);
  const auto kv = cpu_seconds_over("kv_step", kDecodeContexts, kv_step);
  state.counters["exp_ssm_step"] = attn::exponent_between(ssm, 1024, 65536);
  state.counters["exp_kv_step"] = attn::exponent_between(kv, 1024, 65536);
  // From 16K tokens on the cache (2 KiB per token) no longer fits a 32 MiB L3: the exponent of that range alone.
  state.counters["exp_kv_step_16K_64K"] = attn::exponent_between(kv, 16384, 65536);
  state.counters["kv/ssm_65536"] = kv.at(65536) / ssm.at(65536);
}
BENCHMARK(BM_DecodeSummary)->Iterations(1);

}  // namespace
