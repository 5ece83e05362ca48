// Chapter 07's benchmarks (`./course bench 07`, or `ch07_sparse bench [--plot=FILE.svg]`): window attention
// (w = 256, block-sparse tiles) against dense flash attention (chapter 05's fast kernel, same threads) up to
// n = 65,536, the window's kernel with every tile kept, strided row lists, and the machine's sgemm rate, then a
// summary: fitted exponents, the crossover and the efficiency. Figures from a run are on the measurements page
// (book/measure_07_sparse.md), never in these comments.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "04_complexity/exponent.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "07_sparse/sparse.hpp"
#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"

namespace {

using attn::Matrix;

constexpr std::size_t kD = 64, kW = 256, kTile = 64;
constexpr std::uint64_t kSeed = 7;

/// Every kernel runs on the machine's hardware threads; the ceilings are measured with as many.
const attn::BenchCeilings ceilings_at{attn::hardware_threads()};
std::size_t threads() { return static_cast<std::size_t>(attn::hardware_threads()); }

/// Where BM_Summary draws the measured times (`ch07_sparse bench --plot=FILE.svg`); empty = no plot.
std::string plot_file;
const attn::BenchFlag plot_flag{"--plot", [](const std::string& file) { plot_file = file; }};

/// Q, K, V (n, 64) of the run at \p n, drawn once.
const Matrix& input(std::size_t i, std::size_t n) { return attn::random_inputs(3, 1, n, kD, kSeed).head(i, 0); }

double window_pairs(std::size_t n, std::size_t w) {
  const double dn = static_cast<double>(n), dw = static_cast<double>(std::min(w, n - 1));
  return dn * (2 * dw + 1) - dw * (dw + 1);
}

/// One series of the run: its kernel at \p n (set up once, outside the timing) and the pairs it computes.
struct Contender {
  std::function<Matrix()> run;
  double useful_pairs;
};

Contender window_contender(std::size_t n) {
  const auto layout = std::make_shared<attn::BlockLayout>(attn::window_block_layout(n, kW, false, kTile, kTile));
  return {
      [n, layout] { return attn::block_sparse_attention(input(0, n), input(1, n), input(2, n), *layout, threads()); },
      window_pairs(n, kW)};
}

// The dense baseline is the course's fastest dense attention, chapter 05's FlashAttention kernel, on the same
// threads as the window: the efficiency below is then what the sparsity buys against the best dense code.
Contender dense_contender(std::size_t n) {
  attn::ch05::FastConfig config;
  config.threads = static_cast<int>(threads());
  return {[n, config] {
            return attn::ch05::flash_attention_fast(input(0, n), input(1, n), input(2, n), /*causal=*/false, config).O;
          },
          static_cast<double>(n) * static_cast<double>(n)};
}

// The window's own kernel with every tile kept (a window wider than the sequence): the same loop as the window,
// dense. Against dense flash it shows how much slower this chapter's 64×64 tiles run than chapter 05's tuned
// kernel, the part of the efficiency lost to the kernel rather than to the band's partial tiles.
Contender all_tiles_contender(std::size_t n) {
  const auto layout = std::make_shared<attn::BlockLayout>(attn::window_block_layout(n, n, false, kTile, kTile));
  return {
      [n, layout] { return attn::block_sparse_attention(input(0, n), input(1, n), input(2, n), *layout, threads()); },
      static_cast<double>(n) * static_cast<double>(n)};
}

Contender strided_contender(std::size_t n) {
  const auto root = static_cast<std::size_t>(std::lround(std::sqrt(static_cast<double>(n))));
  const auto rows = std::make_shared<attn::SparseRows>(attn::sparse_rows(attn::strided_mask(n, root)));
  return {[n, rows] { return attn::row_sparse_attention(input(0, n), input(1, n), input(2, n), *rows); },
          static_cast<double>(rows->cols.size())};
}

/// The series by name, as bench_record() keeps them.
Contender contender(const std::string& name, std::size_t n) {
  if (name == "window") return window_contender(n);
  if (name == "dense") return dense_contender(n);
  return name == "dense, all tiles" ? all_tiles_contender(n) : strided_contender(n);
}

/// Times the series \p name at \p n in the benchmark loop, records its seconds per call and reports its rate.
void timed_loop(benchmark::State& state, const std::string& name, std::size_t n) {
  const attn::BlasThreads blas(1);  // the kernels run their own threads; OpenBLAS must not add more
  const Contender c = contender(name, n);
  const double per_call = attn::time_benchmark_calls(state, [&] { benchmark::DoNotOptimize(c.run().data()); }).wall;
  attn::record(name, n, per_call);
  state.counters["n"] = static_cast<double>(n);
  state.counters["density"] = c.useful_pairs / (static_cast<double>(n) * static_cast<double>(n));
  // Useful FLOPs: 2·d for q·k and 2·d for p·v, per allowed pair.
  state.counters["GFLOP/s"] = 4.0 * c.useful_pairs * kD / per_call / 1e9;
  attn::report_against_ceilings(state, 4.0 * c.useful_pairs * kD / per_call / 1e9, attn::hardware_threads());
}

/// Seconds per call of the series \p name at \p n: this run's benchmark's, or measured now (3 calls, median).
double seconds_of(const std::string& name, std::size_t n) {
  return attn::recorded_or_measured(name, n, [&] {
    const attn::BlasThreads blas(1);
    const Contender c = contender(name, n);
    return attn::time_calls([&] { benchmark::DoNotOptimize(c.run().data()); }, {3, 1}).wall;
  });
}

// [bench_window]
void BM_WindowAttention(benchmark::State& state) {
  timed_loop(state, "window", static_cast<std::size_t>(state.range(0)));
  const auto n = static_cast<std::size_t>(state.range(0));
  const attn::BlockLayout layout = attn::window_block_layout(n, kW, false, kTile, kTile);
  state.counters["useful"] = window_pairs(n, kW) / static_cast<double>(layout.computed_pairs());
}

void BM_DenseFlash(benchmark::State& state) { timed_loop(state, "dense", static_cast<std::size_t>(state.range(0))); }
// [bench_window]

void BM_DenseAllTiles(benchmark::State& state) {
  timed_loop(state, "dense, all tiles", static_cast<std::size_t>(state.range(0)));
}

void BM_StridedRows(benchmark::State& state) {
  timed_loop(state, "strided rows", static_cast<std::size_t>(state.range(0)));
}

double sgemm_ceiling_gflops() {
  const attn::BlasThreads blas(attn::hardware_threads());
  return attn::sgemm_gflops(1024, 1024, 1024, 3);
}

void BM_SgemmCeiling(benchmark::State& state) {
  double gflops = 0;
  for (auto _ : state) gflops = sgemm_ceiling_gflops();
  state.counters["GFLOP/s"] = gflops;
  attn::record("sgemm", 0, gflops);
}

constexpr std::size_t kLargest = 65536;

/// Seconds per call of the series \p name over \p ns (recorded, or measured now).
std::map<std::size_t, double> series(const std::string& name, const std::vector<std::size_t>& ns) {
  std::map<std::size_t, double> t;
  for (std::size_t n : ns) t[n] = seconds_of(name, n);
  return t;
}

void plot_times(const std::string& path, const std::map<std::string, std::map<std::size_t, double>>& times) {
  attn::PlotSpec spec{"Time per forward pass (d = 64): window w = 256 vs dense, measured",
                      "n (tokens)",
                      "milliseconds",
                      true,
                      true,
                      {}};
  for (const auto& [name, label] : {std::pair<std::string, std::string>{"window", "window w = 256 (block-sparse)"},
                                    {"dense", "dense flash (chapter 05's fast kernel)"},
                                    {"dense, all tiles", "block-sparse kernel, every tile"},
                                    {"strided rows", "strided, stride sqrt(n) (row lists)"}}) {
    attn::Series s{label, {}, {}, true};
    for (const auto& [n, seconds] : times.at(name)) {
      s.x.push_back(static_cast<double>(n));
      s.y.push_back(seconds * 1e3);
    }
    if (!s.x.empty()) spec.series.push_back(s);
  }
  attn::write_svg_plot(path, spec);
  fmt::print("(plot written: {})\n", path);
}

/// What the runs above add up to. Every figure is this run's benchmark's, or measured here when a filter left it
/// out, so the summary reads the same whatever ran before it.
void BM_Summary(benchmark::State& state) {
  for (auto _ : state) {
  }
  std::map<std::string, std::map<std::size_t, double>> times;
  // The sizes each series is benchmarked at (BENCHMARK below).
  times["window"] = series("window", attn::doublings(256, kLargest));
  times["dense"] = series("dense", attn::doublings(256, kLargest));
  times["dense, all tiles"] = series("dense, all tiles", attn::doublings(256, 16384));
  times["strided rows"] = series("strided rows", attn::doublings(1024, 8192));
  const auto &window_t = times["window"], &dense_t = times["dense"], &all_tiles_t = times["dense, all tiles"];
  // The crossover: the smallest n from which the window is at least 10% faster at every larger n measured.
  std::size_t crossover = 0;
  for (const auto& [n, s] : window_t) {
    const bool wins = s * 1.1 < dense_t.at(n);
    if (!wins) crossover = 0;
    if (wins && crossover == 0) crossover = n;
  }
  const double density = window_pairs(kLargest, kW) / (static_cast<double>(kLargest) * static_cast<double>(kLargest));
  const double efficiency = dense_t.at(kLargest) / window_t.at(kLargest) * density;
  const double exp_window = attn::exponent_between(window_t, 4096), exp_dense = attn::exponent_between(dense_t, 4096),
               exp_strided = attn::exponent_between(times["strided rows"], 1024);
  state.counters["exp_window"] = exp_window;
  state.counters["exp_dense"] = exp_dense;
  state.counters["exp_strided"] = exp_strided;
  state.counters["crossover_n"] = static_cast<double>(crossover);
  state.counters["efficiency"] = efficiency;
  const std::size_t shared_n = all_tiles_t.rbegin()->first;
  fmt::print(
      "\nSummary (w = {}, d = {}, tiles {}×{}, {} threads each): time ~ n^{:.2f} for the window, n^{:.2f} for dense "
      "flash,\n"
      "n^{:.2f} for strided row lists; the window is at least 10% faster from n = {} on; at n = {} the window runs "
      "{:.1f}× faster\n"
      "than dense flash, and efficiency = (dense ÷ window) × density = {:.2f} (1 = all the sparsity turned into "
      "speed).\n"
      "sgemm ceiling in this run: {:.1f} GFLOP/s.\n",
      kW, kD, kTile, kTile, threads(), exp_window, exp_dense, exp_strided,
      crossover ? fmt::format("{}", crossover) : "(never)", kLargest, dense_t.at(kLargest) / window_t.at(kLargest),
      efficiency, attn::recorded_or_measured("sgemm", 0, sgemm_ceiling_gflops));
  fmt::print("At n = {}, this chapter's kernel with every tile kept takes {:.2f}× the time of dense flash.\n", shared_n,
             all_tiles_t.at(shared_n) / dense_t.at(shared_n));
  fmt::print("\n");
  if (!plot_file.empty()) plot_times(plot_file, times);
}

BENCHMARK(BM_SgemmCeiling)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_WindowAttention)->RangeMultiplier(2)->Range(256, kLargest)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DenseFlash)->RangeMultiplier(2)->Range(256, kLargest)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DenseAllTiles)->RangeMultiplier(2)->Range(256, 16384)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StridedRows)->RangeMultiplier(2)->Range(1024, 8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Summary)->Iterations(1);

}  // namespace
