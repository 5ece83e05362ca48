// Chapter 15's benchmarks (`./course bench 15`, or `ch15_structured bench`): the CSR graph-attention kernel
// (csr.cpp) on random graphs of 10 senders per node plus a self-loop, 4 heads of 16 (64 features), against
// chapter 02's dense masked attention on the same graphs as far as its (n, n) matrices fit, and the machine's
// memory bandwidth (STREAM's triad on as many threads) measured in the same run. The kernel gathers a key and a
// value row per edge, so its ceiling is memory bandwidth, not FLOPs: it reports the bytes it gathers per second
// as a share of the triad's.
// No figures are quoted in the book from a loaded machine; run it on a quiet one.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/complexity.hpp"
#include "15_structured/csr.hpp"
#include "attn/measure.hpp"
#include "attn/rng.hpp"

namespace {

namespace ch15 = attn::ch15;
using attn::Matrix;

constexpr std::size_t kDegree = 10, kHeads = 4, kWidth = 64;  // 4 heads of d_k = 16
constexpr std::uint64_t kSeed = 15;

std::size_t bench_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

struct GraphInputs {
  ch15::Csr g;
  Matrix Q, K, V;  // (n, 64) each
};
GraphInputs make_graph_inputs(std::size_t n) {
  attn::Rng rng(kSeed);
  return {ch15::random_csr(n, kDegree, kSeed), rng.normal(n, kWidth), rng.normal(n, kWidth), rng.normal(n, kWidth)};
}

/// The triad's bandwidth on the kernel's thread count, in GB/s: measured once per run (3 × 64 MiB arrays).
double triad_gbs() {
  static const double gbs = attn::triad_bandwidth_gbs(std::size_t{16} << 20, bench_threads());
  return gbs;
}

/// Bytes the kernel must move at least: per edge a key and a value row of one head (gathered), per node its
/// query and output rows, and the CSR itself.
double gathered_bytes(const ch15::Csr& g) {
  const double edges = static_cast<double>(g.cols.size()), n = static_cast<double>(g.n);
  return edges * 2.0 * kWidth * sizeof(float) + n * 2.0 * kWidth * sizeof(float) + edges * sizeof(std::uint32_t) +
         (n + 1) * sizeof(std::size_t);
}

void report(benchmark::State& state, const ch15::Csr& g, double seconds) {
  state.counters["n"] = static_cast<double>(g.n);
  state.counters["edges"] = static_cast<double>(g.cols.size());
  state.counters["GB/s"] = gathered_bytes(g) / seconds / 1e9;
  state.counters["%triad"] = 100.0 * gathered_bytes(g) / seconds / 1e9 / triad_gbs();
  state.counters["ns/edge"] = seconds / static_cast<double>(g.cols.size()) * 1e9;
}

/// Seconds per call by n, for the summary: "csr" and "dense".
std::map<std::size_t, double>& seconds_of(const char* kernel) { return attn::bench_record()[kernel]; }

// [bench_csr]
void BM_CsrAttention(benchmark::State& state) {
  const GraphInputs in = make_graph_inputs(static_cast<std::size_t>(state.range(0)));
  const ch15::GatherRows K(in.K), V(in.V);    // laid out once, as a layer would write them
  Matrix O = xt::zeros<float>(in.Q.shape());  // (n, 64): the layer's output buffer, in use already, reused
  attn::set_blas_threads(1);
  const attn::CallSeconds t = attn::time_benchmark_calls(state, [&] {
    ch15::csr_attention_into(in.Q, K, V, in.g, kHeads, bench_threads(), O);
    benchmark::DoNotOptimize(O.data());
  });
  report(state, in.g, t.wall);
  seconds_of("csr")[in.g.n] = t.wall;
}
// [bench_csr]

/// The gathers alone: the kernel's memory traffic (per node its query row read and output row written, per edge
/// the sender's key and value rows, asked for 16 edges ahead into L2 as the kernel does) with one addition per
/// float instead of attention. What the kernel could reach if its arithmetic cost nothing.
void BM_GatherCeiling(benchmark::State& state) {
  const GraphInputs in = make_graph_inputs(static_cast<std::size_t>(state.range(0)));
  const ch15::GatherRows K(in.K), V(in.V);
  Matrix O = xt::zeros<float>(in.Q.shape());  // (n, 64)
  const ch15::Csr& g = in.g;
  const auto gather_all = [&] {
    std::atomic<std::size_t> next{0};
    attn::run_on_threads(bench_threads(), [&] {
      for (std::size_t begin = next.fetch_add(512); begin < g.n; begin = next.fetch_add(512)) {
        const std::size_t end = std::min(g.n, begin + 512), last = g.row_start[end];
        for (std::size_t i = begin; i < end; ++i) {
          float sum[kWidth];  // (64)
          std::copy_n(in.Q.data() + i * kWidth, kWidth, sum);
          for (std::size_t e = g.row_start[i]; e < g.row_start[i + 1]; ++e) {
            if (e + 16 < last)
              for (std::size_t t = 0; t < kWidth; t += 16) {
                __builtin_prefetch(K.row(g.cols[e + 16]) + t, 0, 2);
                __builtin_prefetch(V.row(g.cols[e + 16]) + t, 0, 2);
              }
            const float *k = K.row(g.cols[e]), *v = V.row(g.cols[e]);
            for (std::size_t t = 0; t < kWidth; ++t) sum[t] += k[t] + v[t];
          }
          std::copy_n(sum, kWidth, O.data() + i * kWidth);
        }
      }
    });
  };
  const attn::CallSeconds t = attn::time_benchmark_calls(state, [&] {
    gather_all();
    benchmark::DoNotOptimize(O.data());
  });
  report(state, g, t.wall);
  seconds_of("gather")[g.n] = t.wall;
}

/// The same graph as chapter 02's dense masked attention, one head after another: (n, n) scores per head.
void BM_DenseMasked(benchmark::State& state) {
  const GraphInputs in = make_graph_inputs(static_cast<std::size_t>(state.range(0)));
  const std::size_t n = in.g.n, d_k = kWidth / kHeads;
  attn::Mask mask(attn::Mask::shape_type{n, n}, false);  // (n, n)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = in.g.row_start[i]; e < in.g.row_start[i + 1]; ++e) mask(i, in.g.cols[e]) = true;
  attn::set_blas_threads(static_cast<int>(bench_threads()));
  const attn::CallSeconds t = attn::time_benchmark_calls(state, [&] {
    for (std::size_t c = 0; c < kHeads; ++c) {
      auto cols = xt::range(c * d_k, (c + 1) * d_k);
      const Matrix Q = xt::view(in.Q, xt::all(), cols), K = xt::view(in.K, xt::all(), cols),
                   V = xt::view(in.V, xt::all(), cols);  // (n, d_k) each
      benchmark::DoNotOptimize(attn::scaled_dot_product_attention(Q, K, V, mask));
    }
  });
  report(state, in.g, t.wall);
  seconds_of("dense")[n] = t.wall;
}

/// The ceiling the kernel's GB/s is read against: STREAM's triad on the kernel's threads.
void BM_TriadCeiling(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(triad_gbs());
  state.counters["GB/s"] = triad_gbs();
  state.counters["threads"] = static_cast<double>(bench_threads());
}

/// The kernel's time exponent in the edges (a log-log fit; the edges are 11·n) over the runs with \p n in
/// [lo, hi].
double exponent_between(const std::map<std::size_t, double>& seconds_by_n, std::size_t lo, std::size_t hi) {
  std::vector<double> edges, seconds;
  for (const auto& [n, s] : seconds_by_n)
    if (n >= lo && n <= hi) {
      edges.push_back(static_cast<double>(n * (kDegree + 1)));
      seconds.push_back(s);
    }
  return edges.size() < 2 ? 0.0 : attn::fit_power_law(edges, seconds).exponent;
}

/// What the runs above add up to: the CSR kernel's time exponent in the edges over every n, over the graphs
/// whose keys and values fit in the caches (n ≤ 2¹⁴: 8 MiB) and over those far beyond them (n ≥ 2¹⁸: 128 MiB
/// and more); its time over the gathers alone at 2²⁰; and its speed-up over dense masked attention at the
/// largest n both ran.
void BM_Summary(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
  const auto &csr = seconds_of("csr"), &dense = seconds_of("dense"), &gather = seconds_of("gather");
  if (csr.size() < 2 || dense.empty()) {
    state.SkipWithError("run the CsrAttention and DenseMasked benchmarks first (no --benchmark_filter)");
    return;
  }
  state.counters["exponent_in_edges"] = exponent_between(csr, 0, SIZE_MAX);
  state.counters["exponent_in_cache"] = exponent_between(csr, 0, std::size_t{1} << 14);
  state.counters["exponent_in_dram"] = exponent_between(csr, std::size_t{1} << 18, SIZE_MAX);
  const std::size_t largest = std::size_t{1} << 20;
  if (csr.count(largest) && gather.count(largest))
    state.counters["%gathers_only"] = 100.0 * gather.at(largest) / csr.at(largest);
  for (auto it = dense.rbegin(); it != dense.rend(); ++it)
    if (csr.count(it->first)) {
      state.counters["n_both"] = static_cast<double>(it->first);
      state.counters["csr_speedup"] = it->second / csr.at(it->first);
      break;
    }
}

BENCHMARK(BM_TriadCeiling)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_CsrAttention)->RangeMultiplier(2)->Range(1 << 12, 1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GatherCeiling)->Arg(1 << 14)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DenseMasked)->RangeMultiplier(2)->Range(1 << 10, 1 << 13)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Summary)->Iterations(1);

}  // namespace
