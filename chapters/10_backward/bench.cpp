// Chapter 10's benchmarks (`./course bench 10`, or `ch10_backward bench`): 8 heads, d = 64, fp32, 2 threads;
// FLOPs counted as the FlashAttention papers do: 4·n²·d per head forward, 10·n²·d backward (2.5×), half of each
// under a causal mask. Chapter 05's fast forward, this chapter's fast backward (with its ratios to the forward
// and causal against not), and the exercise's backwards on one thread, each against the run's ceilings. Figures
// from a run are on the measurements page (book/measure_10_backward.md), never in these comments.
#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "10_backward/backward.hpp"
#include "10_backward/backward_fast.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch05 = attn::ch05;
namespace ch10 = attn::ch10;

// [bench]
const attn::BenchCeilings ceilings_at{1, 2};  // backward_simple runs on one core, the others on two

constexpr std::size_t kHeads = 8, kD = 64;

/// Q, K, V and dO (h, n, d) at \p n (the run's input cache), and the forward's O and lse on them, without and
/// with the causal mask (made once).
struct Problem {
  const attn::Tensor3 &Q, &K, &V, &dO;  // (h, n, d)
  ch05::FlashHeadsOutput fwd[2];
};

const Problem& problem(std::size_t n) {
  static std::map<std::size_t, std::unique_ptr<Problem>> made;
  std::unique_ptr<Problem>& p = made[n];
  if (!p) {
    const attn::RandomInputs& in = attn::random_inputs(4, kHeads, n, kD, n);
    p.reset(new Problem{in.tensor(0), in.tensor(1), in.tensor(2), in.tensor(3), {}});
    for (const bool causal : {false, true}) p->fwd[causal] = ch05::flash_attention_fast(p->Q, p->K, p->V, causal);
  }
  return *p;
}

/// Figures of this run, by name and n (attn::bench_record()): the ratios are taken between figures of the same
/// run, so the machine's load on the day cancels out as far as it can.
std::string key(const char* what, bool causal, const char* clock) {
  return fmt::format("{} causal={} {}", what, causal, clock);
}

double product_flops(std::size_t n, bool causal) {
  const double per_head = 2.0 * static_cast<double>(n) * static_cast<double>(n) * kD;
  return static_cast<double>(kHeads) * (causal ? per_head / 2 : per_head);
}

/// Times `work`, records its wall and CPU seconds per call under \p what, and reports its rate against the
/// machine's ceilings measured in this run (attn/ceilings.hpp) on \p threads threads.
void time_and_record(benchmark::State& state, const char* what, std::size_t n, bool causal, double flops, int threads,
                     const std::function<void()>& work) {
  const attn::CallSeconds s = attn::time_benchmark_calls(state, work);
  attn::record(key(what, causal, "wall"), n, s.wall);
  attn::record(key(what, causal, "cpu"), n, s.cpu);
  state.counters["GFLOPS"] = flops / s.wall / 1e9;
  state.counters["GFLOPS_per_core"] = flops / s.cpu / 1e9;  // per CPU-second (as chapter 05): the PyTorch side by side
  attn::report_against_ceilings(state, flops / s.wall / 1e9, threads);
}

void forward_call(std::size_t n, bool causal) {
  const Problem& p = problem(n);
  benchmark::DoNotOptimize(ch05::flash_attention_fast(p.Q, p.K, p.V, causal));
}

void backward_call(std::size_t n, bool causal) {
  const Problem& p = problem(n);
  const ch05::FlashHeadsOutput& fwd = p.fwd[causal];
  benchmark::DoNotOptimize(ch10::flash_backward_fast(p.Q, p.K, p.V, fwd.O, fwd.lse, p.dO, causal));
}

/// The seconds of \p what (forward or backward, fast) at n by \p clock: this run's benchmark's, or measured here
/// (median of 3) when a filter left it out, so that a ratio never depends on which benchmark ran first.
double fast_seconds(const char* what, std::size_t n, bool causal, const char* clock) {
  return attn::recorded_or_measured(key(what, causal, clock), n, [&] {
    const bool forward = std::string(what) == "forward";
    const attn::CallSeconds s =
        attn::time_calls([&] { forward ? forward_call(n, causal) : backward_call(n, causal); }, {3, 1});
    attn::record(key(what, causal, "wall"), n, s.wall);
    attn::record(key(what, causal, "cpu"), n, s.cpu);
    return std::string(clock) == "wall" ? s.wall : s.cpu;
  });
}

void forward_fast(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  time_and_record(state, "forward", n, causal, 2 * product_flops(n, causal), 2, [&] { forward_call(n, causal); });
}

void backward_fast(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  time_and_record(state, "backward", n, causal, 5 * product_flops(n, causal), 2, [&] { backward_call(n, causal); });
  for (const char* clock : {"wall", "cpu"}) {
    const std::string suffix = std::string(clock) == "cpu" ? "_cpu" : "";
    state.counters["x_forward" + suffix] =
        fast_seconds("backward", n, causal, clock) / fast_seconds("forward", n, causal, clock);
    if (causal)
      state.counters["causal_speedup" + suffix] =
          fast_seconds("backward", n, false, clock) / fast_seconds("backward", n, true, clock);
  }
}

/// The exercise's flash_backward and the full backward, head by head on one thread, for scale.
void backward_simple(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool flash = state.range(1) != 0;
  const Problem& p = problem(n);
  const attn::BlasThreads blas(1);
  std::vector<Matrix> q, k, v, o, dO;
  std::vector<Vector> lse;
  for (std::size_t h = 0; h < kHeads; ++h) {
    q.emplace_back(xt::view(p.Q, h));
    k.emplace_back(xt::view(p.K, h));
    v.emplace_back(xt::view(p.V, h));
    o.emplace_back(xt::view(p.fwd[0].O, h));
    dO.emplace_back(xt::view(p.dO, h));
    lse.emplace_back(xt::view(p.fwd[0].lse, h));
  }
  time_and_record(
      state, flash ? "flash_backward" : "attention_backward", n, false, 5 * product_flops(n, false), 1, [&] {
        for (std::size_t h = 0; h < kHeads; ++h)
          benchmark::DoNotOptimize(flash ? attn::flash_backward(q[h], k[h], v[h], o[h], lse[h], dO[h], false, 64, 256)
                                         : attn::attention_backward(q[h], k[h], v[h], dO[h]));
      });
}

// Each at least 3 s (several calls): the ratios compare averages taken in one run, not single calls.
BENCHMARK(forward_fast)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(backward_fast)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(backward_simple)
    ->ArgNames({"n", "flash"})
    ->ArgsProduct({{1024}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// [bench]

}  // namespace
