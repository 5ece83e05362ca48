// Chapter 15's benchmarks (`./course bench 15`, or `ch15_structured bench`): the CSR graph-attention kernel
// (csr.cpp) on random graphs of 10 senders per node plus a self-loop, 4 heads of 16 (64 features), against
// chapter 02's dense masked attention on the same graphs as far as its (n, n) matrices fit, and the machine's
// memory bandwidth (STREAM's triad on as many threads, one of the run's ceilings). The kernel gathers a key and a
// value row per edge, so its ceiling is memory bandwidth, not FLOPs: it reports the bytes it gathers per second
// as a share of the triad's. Figures from a run are on the measurements page (book/measure_15_structured.md).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/exponent.hpp"
#include "15_structured/csr.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"

namespace {

namespace ch15 = attn::ch15;
using attn::Matrix;

constexpr std::size_t kDegree = 10, kHeads = 4, kWidth = 64;  // 4 heads of d_k = 16
constexpr std::uint64_t kSeed = 15;

/// The kernels run on the machine's hardware threads; the ceilings (the triad among them) are measured with as many.
const attn::BenchCeilings ceilings_at{attn::hardware_threads()};
std::size_t bench_threads() { return static_cast<std::size_t>(attn::hardware_threads()); }

/// A random graph of n nodes (made once per n) and its Q, K, V (n, 64) from the run's input cache.
struct GraphInputs {
  ch15::Csr g;
  const Matrix &Q, &K, &V;  // (n, 64) each
};
const GraphInputs& graph_inputs(std::size_t n) {
  static std::map<std::size_t, std::unique_ptr<GraphInputs>> made;
  std::unique_ptr<GraphInputs>& in = made[n];
  if (!in) {
    const attn::RandomInputs& qkv = attn::random_inputs(3, 1, n, kWidth, kSeed);
    in.reset(new GraphInputs{ch15::random_csr(n, kDegree, kSeed), qkv.head(0, 0), qkv.head(1, 0), qkv.head(2, 0)});
  }
  return *in;
}

/// The triad's bandwidth on the kernel's thread count, in GB/s: the run's ceiling (attn::ceilings).
double triad_gbs() { return attn::ceilings(attn::hardware_threads()).triad_gbs(); }

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

// [bench_csr]
/// The CSR kernel's work on a graph of n nodes: K and V laid out once, as a layer would write them, and the
/// layer's output buffer, in use already, reused.
std::function<void()> csr_call(std::size_t n) {
  const GraphInputs* in = &graph_inputs(n);
  auto K = std::make_shared<ch15::GatherRows>(in->K), V = std::make_shared<ch15::GatherRows>(in->V);
  auto O = std::make_shared<Matrix>(xt::zeros<float>(in->Q.shape()));  // (n, 64)
  return [in, K, V, O] {
    ch15::csr_attention_into(in->Q, *K, *V, in->g, kHeads, bench_threads(), *O);
    benchmark::DoNotOptimize(O->data());
  };
}

void BM_CsrAttention(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const attn::BlasThreads blas(1);
  const double seconds = attn::time_benchmark_calls(state, csr_call(n)).wall;
  report(state, graph_inputs(n).g, seconds);
  attn::record("csr", n, seconds);
}
// [bench_csr]

/// The gathers alone: the kernel's memory traffic (per node its query row read and output row written, per edge
/// the sender's key and value rows, asked for 16 edges ahead into L2 as the kernel does) with one addition per
/// float instead of attention. What the kernel could reach if its arithmetic cost nothing.
std::function<void()> gather_call(std::size_t n) {
  const GraphInputs* in = &graph_inputs(n);
  auto K = std::make_shared<ch15::GatherRows>(in->K), V = std::make_shared<ch15::GatherRows>(in->V);
  auto O = std::make_shared<Matrix>(xt::zeros<float>(in->Q.shape()));  // (n, 64)
  return [in, K, V, O] {
    const ch15::Csr& g = in->g;
    std::atomic<std::size_t> next{0};
    attn::run_on_threads(bench_threads(), [&] {
      for (std::size_t begin = next.fetch_add(512); begin < g.n; begin = next.fetch_add(512)) {
        const std::size_t end = std::min(g.n, begin + 512), last = g.row_start[end];
        for (std::size_t i = begin; i < end; ++i) {
          float sum[kWidth];  // (64)
          std::copy_n(in->Q.data() + i * kWidth, kWidth, sum);
          for (std::size_t e = g.row_start[i]; e < g.row_start[i + 1]; ++e) {
            if (e + 16 < last)
              for (std::size_t t = 0; t < kWidth; t += 16) {
                __builtin_prefetch(K->row(g.cols[e + 16]) + t, 0, 2);
                __builtin_prefetch(V->row(g.cols[e + 16]) + t, 0, 2);
              }
            const float *k = K->row(g.cols[e]), *v = V->row(g.cols[e]);
            for (std::size_t t = 0; t < kWidth; ++t) sum[t] += k[t] + v[t];
          }
          std::copy_n(sum, kWidth, O->data() + i * kWidth);
        }
      }
    });
    benchmark::DoNotOptimize(O->data());
  };
}

void BM_GatherCeiling(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const double seconds = attn::time_benchmark_calls(state, gather_call(n)).wall;
  report(state, graph_inputs(n).g, seconds);
  attn::record("gather", n, seconds);
}

/// The same graph as chapter 02's dense masked attention, one head after another: (n, n) scores per head.
std::function<void()> dense_call(std::size_t n) {
  const GraphInputs* in = &graph_inputs(n);
  auto mask = std::make_shared<attn::Mask>(attn::Mask::shape_type{n, n}, false);  // (n, n)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = in->g.row_start[i]; e < in->g.row_start[i + 1]; ++e) (*mask)(i, in->g.cols[e]) = true;
  return [in, mask] {
    const std::size_t d_k = kWidth / kHeads;
    for (std::size_t c = 0; c < kHeads; ++c) {
      auto cols = xt::range(c * d_k, (c + 1) * d_k);
      const Matrix Q = xt::view(in->Q, xt::all(), cols), K = xt::view(in->K, xt::all(), cols),
                   V = xt::view(in->V, xt::all(), cols);  // (n, d_k) each
      benchmark::DoNotOptimize(attn::scaled_dot_product_attention(Q, K, V, *mask));
    }
  };
}

void BM_DenseMasked(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const attn::BlasThreads blas(attn::hardware_threads());
  const double seconds = attn::time_benchmark_calls(state, dense_call(n)).wall;
  report(state, graph_inputs(n).g, seconds);
  attn::record("dense", n, seconds);
}

/// The ceiling the kernel's GB/s is read against: STREAM's triad on the kernel's threads.
void BM_TriadCeiling(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(triad_gbs());
  state.counters["GB/s"] = triad_gbs();
  state.counters["threads"] = static_cast<double>(bench_threads());
}

/// Seconds per call of \p kernel ("csr", "gather" or "dense") over \p ns: this run's benchmarks', or measured
/// here (median of 3) when a filter left them out, so the summary reads the same whatever ran before it.
std::map<std::size_t, double> seconds_over(const std::string& kernel, const std::vector<std::size_t>& ns) {
  std::map<std::size_t, double> t;
  for (std::size_t n : ns)
    t[n] = attn::recorded_or_measured(kernel, n, [&] {
      const attn::BlasThreads blas(kernel == "dense" ? attn::hardware_threads() : 1);
      return attn::time_calls(kernel == "csr"      ? csr_call(n)
                              : kernel == "gather" ? gather_call(n)
                                                   : dense_call(n),
                              {3, 1})
          .wall;
    });
  return t;
}

/// What the runs above add up to: the CSR kernel's time exponent in the edges (a log-log fit; the edges are 11·n)
/// over every n, over the graphs whose keys and values fit in the caches (n ≤ 2¹⁴: 8 MiB) and over those far
/// beyond them (n ≥ 2¹⁸: 128 MiB and more); its time over the gathers alone at 2²⁰; and its speed-up over dense
/// masked attention at the largest n both ran.
void BM_Summary(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(state.iterations());
  const std::size_t largest = std::size_t{1} << 20, largest_dense = std::size_t{1} << 13;
  const auto csr = seconds_over("csr", attn::doublings(std::size_t{1} << 12, largest));
  const auto gather = seconds_over("gather", {std::size_t{1} << 14, largest});
  const auto dense = seconds_over("dense", {largest_dense});
  const double edges_per_node = kDegree + 1;
  state.counters["exponent_in_edges"] = attn::exponent_between(csr, 0, SIZE_MAX, edges_per_node);
  state.counters["exponent_in_cache"] = attn::exponent_between(csr, 0, std::size_t{1} << 14, edges_per_node);
  state.counters["exponent_in_dram"] = attn::exponent_between(csr, std::size_t{1} << 18, SIZE_MAX, edges_per_node);
  state.counters["%gathers_only"] = 100.0 * gather.at(largest) / csr.at(largest);
  state.counters["n_both"] = static_cast<double>(largest_dense);
  state.counters["csr_speedup"] = dense.at(largest_dense) / csr.at(largest_dense);
}

BENCHMARK(BM_TriadCeiling)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_CsrAttention)->RangeMultiplier(2)->Range(1 << 12, 1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GatherCeiling)->Arg(1 << 14)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DenseMasked)->RangeMultiplier(2)->Range(1 << 10, 1 << 13)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Summary)->Iterations(1);

}  // namespace
