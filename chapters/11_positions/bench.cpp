// Chapter 11's benchmarks (`./course bench 11`, or `ch11_positions bench`): 8 heads, d = 64, fp32, 2 threads, as
// chapter 05's. The modifier kernel against chapter 05's flash_fast at n = 4096 (no modifier, ALiBi inlined, ALiBi
// behind a std::function), then with a sliding window of 256 for n = 4096 … 65,536 and the exponent of its time in
// n. Figures from a run are on the measurements page (book/measure_11_positions.md), never in these comments.
#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "04_complexity/exponent.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "11_positions/flex.hpp"
#include "11_positions/modifiers.hpp"
#include "11_positions/positions.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"

namespace {

namespace ch05 = attn::ch05;
namespace ch11 = attn::ch11;
using attn::Tensor3;

// [bench]
constexpr std::size_t kHeads = 8, kD = 64;
const attn::BenchCeilings ceilings_at{ch05::FastConfig{}.threads};  // every kernel here runs on flash_fast's threads

/// Q, K, V (h, n, d) at \p n, from the run's input cache (tensors 0, 1, 2).
const attn::RandomInputs& inputs(std::size_t n) { return attn::random_inputs(3, kHeads, n, kD, n); }

/// The baseline's work: chapter 05's fast kernel at n = 4096, no modifiers possible.
void flash_fast_at_4096() {
  const attn::RandomInputs& in = inputs(4096);
  benchmark::DoNotOptimize(ch05::flash_attention_fast(in.tensor(0), in.tensor(1), in.tensor(2), false));
}

/// flash_fast's seconds per call at n = 4096 by \p clock ("wall" or "cpu"): chapter05_flash_fast's in this run, or
/// measured here (median of 3) when a filter left it out, so no percentage depends on which benchmark ran first.
double flash_fast_seconds(const char* clock) {
  return attn::recorded_or_measured(fmt::format("flash_fast {}", clock), 4096, [clock] {
    const attn::CallSeconds s = attn::time_calls(flash_fast_at_4096, {3, 1});
    attn::record("flash_fast wall", 4096, s.wall);
    attn::record("flash_fast cpu", 4096, s.cpu);
    return std::string(clock) == "wall" ? s.wall : s.cpu;
  });
}

/// Times `work` and records its seconds per call under \p name at \p n (attn::bench_record()); a variant at
/// n = 4096 reports its speed as a percentage of chapter 05's flash_fast: by wall clock, and by the process's CPU
/// time, which the other jobs on the machine disturb less.
void time_variant(benchmark::State& state, const std::string& name, std::size_t n, const std::function<void()>& work,
                  bool against_flash_fast = true) {
  const attn::CallSeconds s = attn::time_benchmark_calls(state, work);
  attn::record(name + " wall", n, s.wall);
  attn::record(name + " cpu", n, s.cpu);
  if (!against_flash_fast) return;
  state.counters["pct_of_flash_fast"] = 100.0 * flash_fast_seconds("wall") / s.wall;
  state.counters["pct_of_flash_fast_cpu"] = 100.0 * flash_fast_seconds("cpu") / s.cpu;
}

/// The baseline: chapter 05's fast kernel, no modifiers possible.
void chapter05_flash_fast(benchmark::State& state) {
  time_variant(state, "flash_fast", 4096, flash_fast_at_4096, false);
}

void flex_identity(benchmark::State& state) {
  const attn::RandomInputs& in = inputs(4096);
  time_variant(state, "identity", 4096,
               [&] { benchmark::DoNotOptimize(ch11::flex_attention(in.tensor(0), in.tensor(1), in.tensor(2))); });
}

void flex_alibi(benchmark::State& state) {
  const attn::RandomInputs& in = inputs(4096);
  const ch11::Alibi alibi{attn::alibi_slopes(kHeads)};
  time_variant(state, "alibi", 4096, [&] {
    benchmark::DoNotOptimize(ch11::flex_attention(in.tensor(0), in.tensor(1), in.tensor(2), alibi));
  });
}

/// The same ALiBi behind std::function: one indirect call per score, nothing inlined.
void flex_alibi_std_function(benchmark::State& state) {
  const attn::RandomInputs& in = inputs(4096);
  const std::function<float(float, std::size_t, std::size_t, std::size_t)> alibi =
      ch11::Alibi{attn::alibi_slopes(kHeads)};
  time_variant(state, "alibi std::function", 4096, [&] {
    benchmark::DoNotOptimize(ch11::flex_attention(in.tensor(0), in.tensor(1), in.tensor(2), alibi));
  });
}

/// The sliding window's work at \p n, with its block mask made once, untimed (as FlexAttention makes it once per
/// model).
std::function<void()> window_call(std::size_t n) {
  const ch11::SlidingWindow window{256};
  const ch11::FlexConfig config;
  const auto bm = std::make_shared<ch11::BlockMask>(ch11::make_block_mask(window, 1, n, n, config.B_r, config.B_c));
  return [n, window, config, bm] {
    const attn::RandomInputs& in = inputs(n);
    benchmark::DoNotOptimize(
        ch11::flex_attention(in.tensor(0), in.tensor(1), in.tensor(2), ch11::NoScoreMod{}, window, bm.get(), config));
  };
}

void flex_window(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  time_variant(state, "window", n, window_call(n), false);
  const ch11::FlexConfig config;
  const ch11::BlockMask bm = ch11::make_block_mask(ch11::SlidingWindow{256}, 1, n, n, config.B_r, config.B_c);
  state.counters["tiles_kept"] = static_cast<double>(bm.count(ch11::Tile::full) + bm.count(ch11::Tile::partial));
  // The exponent of the time in n over n = 4096 … this n (chapter 04's fit; ≤ 1.1 is linear): every size's time
  // is this run's benchmark's, or measured here when a filter left it out.
  std::map<std::size_t, double> seconds;
  for (std::size_t m = 4096; m <= n; m *= 2)
    seconds[m] = attn::recorded_or_measured("window wall", m, [m] {
      return attn::time_calls(window_call(m), {3, 1}).wall;
    });
  if (seconds.size() >= 2) state.counters["exponent_so_far"] = attn::exponent_between(seconds);
}

// Each at least 3 s (several calls): the percentages compare averages taken in one run, not single calls.
BENCHMARK(chapter05_flash_fast)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(flex_identity)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(flex_alibi)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(flex_alibi_std_function)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(flex_window)
    ->ArgName("n")
    ->RangeMultiplier(2)
    ->Range(4096, 65536)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// [bench]

}  // namespace
