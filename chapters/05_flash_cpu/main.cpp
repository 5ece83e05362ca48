// Chapter 05 — FlashAttention on the CPU.
//
// What it shows: the online softmax on one row, step by step; the tiled forward (FlashAttention-2 order)
// equal to chapter 02's full attention, with and without the causal mask, and which tiles a causal run
// skips; any row of A recomputed from the log-sum-exp; the memory of a long run (the n×n matrix refused,
// FlashAttention done in O(n) extra memory); and the slow/fast memory model counting the floats each
// algorithm moves, against the FlashAttention paper's Θ(N·d + N²) and Θ(N²·d²/M).
// What it leaves out: the GPU (chapter 06), the backward pass, dropout.
// Run it: ./course run 05     Long run: build/default/bin/ch05_flash_cpu --n 131072 --d 64
// Benchmarks: build/default/bin/ch05_flash_cpu bench     Your code: ./course run 05 --track exercise
// Book page: book/05_flash_cpu.md
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/io_model.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "attn/ceilings.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch05 = attn::ch05;

using attn::max_abs_diff;
using attn::significant;

// [online_softmax_demo]
/// One query row meets its 12 keys four at a time: the running max m moves, the old sums shrink by
/// e^{m_old - m_new}, and after the last block acc / ℓ is the attention output.
void online_softmax_one_row() {
  attn::heading("The online softmax: one row, four keys at a time");
  attn::Rng rng(5);
  const Matrix q = rng.normal(1, 8), K = rng.normal(12, 8, 0.0f, 1.5f),
               V = rng.normal(12, 2);  // (1, 8) (12, 8) (12, 2)
  attn::OnlineState state = attn::empty_state(1, 2);
  attn::Table table({"keys seen", "block max", "m", "rescale e^(m_old-m)", "ℓ", "acc / ℓ"});
  for (std::size_t c0 = 0; c0 < 12; c0 += 4) {
    const Matrix K_j = xt::view(K, xt::range(c0, c0 + 4), xt::all());  // (4, 8)
    const Matrix V_j = xt::view(V, xt::range(c0, c0 + 4), xt::all());  // (4, 2)
    const float block_max = xt::amax(attn::scaled_scores(q, K_j))();
    const float m_old = state.m(0);
    attn::tile_step(state, q, K_j, V_j);
    const double rescale = std::isinf(m_old) ? 0.0 : std::exp(static_cast<double>(m_old - state.m(0)));
    table.add_row(
        {fmt::format("{}..{}", c0, c0 + 3), fmt::format("{:.3f}", block_max), fmt::format("{:.3f}", state.m(0)),
         std::isinf(m_old) ? "(first block)" : fmt::format("{:.4f}", rescale), fmt::format("{:.4f}", state.l(0)),
         fmt::format("({:.4f}, {:.4f})", state.acc(0, 0) / state.l(0), state.acc(0, 1) / state.l(0))});
  }
  table.print();
  const Matrix full = attn::scaled_dot_product_attention(q, K, V);  // (1, 2)
  fmt::print("chapter 02's full attention for this row: ({:.4f}, {:.4f}); the n×n matrix was never needed.\n\n",
             full(0, 0), full(0, 1));
}
// [online_softmax_demo]

/// Which tiles a causal run computes: 1 = whole tile, 0.5 = the diagonal crosses it (masked), 0 = skipped.
Matrix causal_tile_map(std::size_t n, std::size_t B_r, std::size_t B_c) {
  const std::size_t T_r = (n + B_r - 1) / B_r, T_c = (n + B_c - 1) / B_c;
  Matrix map = xt::zeros<float>({T_r, T_c});  // (T_r, T_c)
  for (std::size_t i = 0; i < T_r; ++i)
    for (std::size_t j = 0; j < T_c; ++j) {
      const std::size_t r0 = i * B_r, r_last = std::min(n, r0 + B_r) - 1, c0 = j * B_c,
                        c_last = std::min(n, c0 + B_c) - 1;
      map(i, j) = c0 > r_last ? 0.0f : c_last > r0 ? 0.5f : 1.0f;
    }
  return map;
}

void tiled_equals_full(const attn::Chapter& chapter) {
  attn::heading("The tiled forward equals full attention");
  const std::size_t n = 300, d = 64, B_r = 64, B_c = 96;  // n is a multiple of neither tile
  attn::Rng rng(50);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  attn::Table table({"mask", "B_r", "B_c", "max |O_flash - O_full|", "max |lse - log Σ exp S|"});
  for (const bool causal : {false, true}) {
    const attn::Mask mask = causal ? attn::causal_mask(n, n) : attn::Mask();           // (n, n) or none
    const Matrix O_full = attn::scaled_dot_product_attention(Q, K, V, mask);           // (n, d)
    const attn::FlashOutput flash = attn::flash_attention(Q, K, V, causal, B_r, B_c);  // O (n, d), lse (n)
    const Matrix S = attn::scaled_scores(Q, K);  // (n, n), only to check the log-sum-exp here
    double lse_err = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      double sum = 0.0;
      for (std::size_t j = 0; j < n; ++j)
        if (!causal || j <= i) sum += std::exp(static_cast<double>(S(i, j)));
      lse_err = std::max(lse_err, std::fabs(std::log(sum) - static_cast<double>(flash.lse(i))));
    }
    table.add_row({causal ? "causal" : "none", std::to_string(B_r), std::to_string(B_c),
                   fmt::format("{:.1e}", max_abs_diff(flash.O, O_full)), fmt::format("{:.1e}", lse_err)});
  }
  table.print();
  fmt::print("Both are float32; the differences are rounding (the sums are added in another order).\n\n");

  const Matrix map = causal_tile_map(n, B_r, B_c);  // (T_r, T_c)
  std::size_t full = 0, masked = 0, skipped = 0;
  for (float v : map) (v == 1.0f ? full : v == 0.5f ? masked : skipped)++;
  fmt::print("Causal tiles of the n = {} run (rows: query blocks of {}, columns: key blocks of {}):\n", n, B_r, B_c);
  fmt::print("1 = computed whole, 0.5 = the diagonal crosses it (masked), 0 = skipped, never loaded.\n");
  std::vector<std::string> rows, cols;
  for (std::size_t i = 0; i < map.shape(0); ++i) rows.push_back(fmt::format("Q{}", i));
  for (std::size_t j = 0; j < map.shape(1); ++j) cols.push_back(fmt::format("K{}", j));
  attn::print_heatmap(map, rows, cols, 1);
  fmt::print("{} tiles whole, {} masked, {} skipped of {}.\n\n", full, masked, skipped, map.size());
  if (const auto path = chapter.figure_path("ch05_causal_tiles.svg")) {
    attn::write_svg_heatmap(*path, map, rows, cols, "Causal tiles");
    chapter.announce_figure(*path);
  }
}

// [recompute_row]
void row_from_lse() {
  attn::heading("Any row of A, recomputed from the log-sum-exp");
  const std::size_t n = 300, d = 64, i = 123;
  attn::Rng rng(50);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // the same (n, d) inputs
  const attn::FlashOutput flash = attn::flash_attention(Q, K, V, true, 64, 96);
  const Vector row = attn::attention_row(Q, K, flash.lse, i, true);  // (n): O(n·d) work, no n×n matrix
  const Matrix A = attn::softmax_rows(
      attn::scaled_scores(Q, K) + xt::where(attn::causal_mask(n, n), 0.0f, -std::numeric_limits<float>::infinity()));
  const Vector full_row = xt::row(A, i);  // (n), from the whole (n, n) matrix
  fmt::print(
      "row {} of the causal A: Σ_j A(i, j) = {:.6f}, nonzero entries {} (keys 0..{}),\n"
      "max |difference| with chapter 02's softmax {:.1e}\n\n",
      i, static_cast<double>(xt::sum(row)()), static_cast<std::size_t>(xt::sum(xt::not_equal(row, 0.0f))()), i,
      static_cast<double>(xt::amax(xt::abs(row - full_row))()));
}
// [recompute_row]

/// The memory run holds Q, K, V and O, (n, d) floats each: refused, with the estimate, when that is more
/// than half of the memory available now.
void refuse_a_memory_run_that_cannot_fit(std::size_t n, std::size_t d) {
  const double need = 16.0 * static_cast<double>(n) * static_cast<double>(d);
  const double available = static_cast<double>(attn::available_memory_bytes());
  if (available > 0 && need > 0.5 * available)
    throw std::invalid_argument(
        fmt::format("--n {} --d {}: the memory run would hold {} (Q, K, V and O, n·d floats "
                    "each), more than half of the {} available now; choose a smaller --n or --d",
                    n, d, attn::human_bytes(need), attn::human_bytes(available)));
}

// [long_run]
void long_sequence(const attn::Chapter& chapter, std::size_t n, std::size_t d, bool causal) {
  attn::heading(fmt::format("Memory at n = {}, d = {}", n, d));
  attn::Rng rng(131);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  const ch05::FastConfig config;
  const double score_bytes = 4.0 * static_cast<double>(n) * static_cast<double>(n);
  const double tile_bytes = 4.0 * static_cast<double>(config.B_r * config.B_c + 2 * config.B_r) * config.threads;
  attn::Table table({"", "bytes"});
  table.add_row({"Q, K, V and O (n·d floats each)", attn::human_bytes(16.0 * static_cast<double>(n * d))});
  table.add_row({"full attention's score matrix S (n·n floats)", attn::human_bytes(score_bytes)});
  table.add_row({fmt::format("FlashAttention's extra memory ({} threads × B_r·B_c tile + m, ℓ)", config.threads),
                 attn::human_bytes(tile_bytes)});
  table.print();
  const auto start = std::chrono::steady_clock::now();
  const attn::FlashOutput flash = ch05::flash_attention_fast(Q, K, V, causal, config);  // O (n, d), lse (n)
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!chapter.book_mode())
    fmt::print("flash_attention_fast ({}): {:.3f} s; peak resident memory so far {}\n", causal ? "causal" : "no mask",
               seconds, attn::human_bytes(static_cast<double>(attn::peak_rss_bytes())));
  // Full attention needs S (and softmax's copy of it): refuse when that would take more than half of what
  // the machine has free, or more than 1 GiB in a default run.
  const double need = 2.0 * score_bytes,
               limit = std::min(0.5 * static_cast<double>(attn::available_memory_bytes()), 1024.0 * 1024 * 1024);
  if (need > limit) {
    fmt::print(
        "full attention refused: its score matrix alone is {} ({} with softmax's copy), more than this run allows "
        "({}).\n\n",
        attn::human_bytes(score_bytes), attn::human_bytes(need),
        chapter.book_mode() ? "1 GiB" : attn::human_bytes(limit));
    return;
  }
  const Matrix O_full = attn::scaled_dot_product_attention(Q, K, V, causal ? attn::causal_mask(n, n) : attn::Mask());
  fmt::print("full attention ran too: max |O_flash - O_full| = {:.1e}\n\n", max_abs_diff(flash.O, O_full));
}
// [long_run]

void io_model(const attn::Chapter& chapter) {
  attn::heading("Counting what moves: the slow/fast memory model");
  fmt::print(
      "Floats moved between slow memory and a fast memory of M floats, n_q = n_kv = N, d_k = d_v = d.\n"
      "std = standard attention (S and P written out); tiled = FlashAttention-2 order, B_r from the plan.\n");
  const std::vector<std::size_t> Ns{256, 512, 1024, 2048, 4096, 8192}, ds{32, 64, 128}, Ms{8192, 32768, 131072};
  std::map<std::size_t, attn::Series> tiled_series;
  attn::Series standard_series{"standard, M = 32K", {}, {}}, ref_std{"N·d + N²", {}, {}, false},
      ref_tiled{"N²·d²/M, M = 32K", {}, {}, false};
  bool formula_agrees = true;
  for (std::size_t M : Ms) {
    attn::Table table(
        {"M", "d", "N", "B_r", "std floats", "std/(Nd+N²)", "tiled floats", "tiled/(N²d²/M)", "std/tiled"});
    for (std::size_t d : ds) {
      const ch05::TilePlan plan = ch05::plan_tiles(d, M);
      for (std::size_t N : Ns) {
        const double n = static_cast<double>(N), dd = static_cast<double>(d), m = static_cast<double>(M);
        const ch05::IoCount standard = ch05::simulate_standard(N, d, M), tiled = ch05::simulate_tiled(N, d, M, plan);
        formula_agrees = formula_agrees && tiled.total() == attn::tiled_io_floats(N, d, plan.B_r);
        const double s = static_cast<double>(standard.total()), t = static_cast<double>(tiled.total());
        table.add_row({std::to_string(M), std::to_string(d), std::to_string(N), std::to_string(plan.B_r),
                       significant(s), fmt::format("{:.2f}", s / (n * dd + n * n)), significant(t),
                       fmt::format("{:.2f}", t / (n * n * dd * dd / m)), fmt::format("{:.1f}", s / t)});
        if (d == 64) {
          tiled_series[M].x.push_back(n);
          tiled_series[M].y.push_back(t);
          if (M == 32768) {
            standard_series.x.push_back(n);
            standard_series.y.push_back(s);
            ref_std.x.push_back(n);
            ref_std.y.push_back(n * dd + n * n);
            ref_tiled.x.push_back(n);
            ref_tiled.y.push_back(n * n * dd * dd / m);
          }
        }
      }
    }
    table.print();
    fmt::print("\n");
  }
  fmt::print("tiled_io_floats (your formula) equals the simulator's count in every row: {}\n",
             formula_agrees ? "yes" : "NO");
  fmt::print(
      "Read the ratio columns: where they stay flat as N doubles, the count grows like the Θ beside it.\n"
      "(When M ≥ N·d the whole of K and V fits, there is one query block, and tiled is just 4·N·d + N.)\n\n");
  if (const auto path = chapter.figure_path("ch05_io_model.svg")) {
    attn::PlotSpec spec{"Floats moved, d = 64", "N (sequence length)", "floats moved", true, true, {}};
    spec.series.push_back(standard_series);
    for (auto& [M, series] : tiled_series) {
      series.label = fmt::format("tiled, M = {}K", M / 1024);
      spec.series.push_back(series);
    }
    spec.series.push_back(ref_std);
    spec.series.push_back(ref_tiled);
    attn::write_svg_plot(*path, spec);
    chapter.announce_figure(*path);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Benchmarks: `ch05_flash_cpu bench`. 8 heads, d = 64, FLOPs counted as the FlashAttention papers do:
// 4·n²·d per head (two products), half of it under a causal mask.
constexpr std::size_t kHeads = 8, kD = 64;

struct Inputs {
  attn::Tensor3 Q, K, V;        // (h, n, d)
  std::vector<Matrix> q, k, v;  // the same, head by head (n, d)
};

const Inputs& inputs(std::size_t n) {
  static std::map<std::size_t, Inputs> cache;
  auto it = cache.find(n);
  if (it != cache.end()) return it->second;
  attn::Rng rng(n);
  Inputs in;
  in.Q = xt::zeros<float>({kHeads, n, kD});
  in.K = in.Q;
  in.V = in.Q;
  for (std::size_t h = 0; h < kHeads; ++h) {
    in.q.push_back(rng.normal(n, kD));
    in.k.push_back(rng.normal(n, kD));
    in.v.push_back(rng.normal(n, kD));
    xt::view(in.Q, h) = in.q.back();
    xt::view(in.K, h) = in.k.back();
    xt::view(in.V, h) = in.v.back();
  }
  return cache.emplace(n, std::move(in)).first->second;
}

std::map<std::size_t, double>& ceiling_gflops() {
  static std::map<std::size_t, double> rates;  // n → GFLOP/s of the attention-shaped sgemm, this run
  return rates;
}

/// One attention-shaped sgemm per head, S = Q_h K_hᵀ (n, n) with k = d, into a buffer allocated once:
/// the ceiling is the product, not page faults.
void sgemm_heads(const Inputs& in, std::size_t n, Matrix& S) {
  const int ni = static_cast<int>(n), di = static_cast<int>(kD);
  for (std::size_t h = 0; h < kHeads; ++h)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, ni, di, 1.0f, in.q[h].data(), di, in.k[h].data(), di, 0.0f,
                S.data(), ni);
}

double sgemm_flops(std::size_t n) { return 2.0 * kHeads * static_cast<double>(n * n * kD); }

/// Runs `work` in the benchmark loop and returns its GFLOP/s (wall clock). Also reports GFLOPS and
/// GFLOPS_per_core: FLOPs per second of CPU time summed over all the process's threads, which stays
/// meaningful when other processes share the cores (the wall-clock rate does not).
template <class Work>
double time_gflops(benchmark::State& state, double flops, Work work) {
  const attn::CallSeconds s = attn::time_benchmark_calls(state, work);
  state.counters["GFLOPS"] = flops / s.wall / 1e9;
  state.counters["GFLOPS_per_core"] = flops / s.cpu / 1e9;
  return flops / s.wall / 1e9;
}

/// The attention-shaped sgemm rate at \p n on 2 threads, measured by sgemm_ceiling earlier in this run (or
/// here when a filter left it out).
double attention_sgemm_gflops(std::size_t n) {
  auto& ceiling = ceiling_gflops();
  if (!ceiling.count(n)) {
    attn::set_blas_threads(2);
    Matrix S = xt::zeros<float>({n, n});  // (n, n)
    ceiling[n] = sgemm_flops(n) / attn::median_seconds([&] { sgemm_heads(inputs(n), n, S); }, 3) / 1e9;
  }
  return ceiling[n];
}

/// Times `work` (which runs on \p threads cores) and reports its rate as a percentage of the machine's
/// ceilings at that thread count, measured in this run (attn/ceilings.hpp), and of the attention-shaped
/// sgemm when it ran on as many threads (2).
template <class Work>
void measure(benchmark::State& state, double flops, std::size_t n, int threads, Work work) {
  const double gflops = time_gflops(state, flops, work);
  attn::report_against_ceilings(state, gflops, threads, threads == 2 ? attention_sgemm_gflops(n) : 0.0);
  // Per CPU-second against the core's own peak: what other jobs on a shared machine disturb least.
  state.counters["pct_core_peak"] =
      100.0 * state.counters["GFLOPS_per_core"] / attn::ceilings(threads).fma_peak_per_core;
}

double bench_flops(std::size_t n, bool causal) {
  const double per_head = 4.0 * static_cast<double>(n) * static_cast<double>(n) * kD;
  return static_cast<double>(kHeads) * (causal ? per_head / 2 : per_head);
}

void sgemm_ceiling(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const Inputs& in = inputs(n);
  attn::set_blas_threads(2);
  Matrix S = xt::zeros<float>({n, n});  // (n, n)
  ceiling_gflops()[n] = time_gflops(state, sgemm_flops(n), [&] {
    sgemm_heads(in, n, S);
    benchmark::DoNotOptimize(S.data());
  });
  attn::report_against_ceilings(state, ceiling_gflops()[n], 2);
}

void full(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const Inputs& in = inputs(n);
  const attn::Mask mask = causal ? attn::causal_mask(n, n) : attn::Mask();
  attn::set_blas_threads(2);
  measure(state, bench_flops(n, causal), n, 2, [&] {
    for (std::size_t h = 0; h < kHeads; ++h)
      benchmark::DoNotOptimize(attn::scaled_dot_product_attention(in.q[h], in.k[h], in.v[h], mask));
  });
}

void flash_simple(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const Inputs& in = inputs(n);
  attn::set_blas_threads(1);  // the exercise is single-threaded code; its (64, 256) tiles are too small to split
  measure(state, bench_flops(n, causal), n, 1, [&] {
    for (std::size_t h = 0; h < kHeads; ++h)
      benchmark::DoNotOptimize(attn::flash_attention(in.q[h], in.k[h], in.v[h], causal, 64, 256));
  });
}

/// CPU-seconds of one flash_fast call at n = 4096 without the mask, measured in this run (0 when a filter left
/// it out): what tile_phases sets its tiles against.
double& flash_fast_cpu_seconds() {
  static double seconds = 0.0;
  return seconds;
}

void flash_fast(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const Inputs& in = inputs(n);
  measure(state, bench_flops(n, causal), n, ch05::FastConfig{}.threads,
          [&] { benchmark::DoNotOptimize(ch05::flash_attention_fast(in.Q, in.K, in.V, causal)); });
  if (n == 4096 && !causal) flash_fast_cpu_seconds() = bench_flops(n, causal) / state.counters["GFLOPS_per_core"] / 1e9;
}

// [tile_phases]
// The profile summary, measured the same way on any CPU: one tile of flash_fast (B_r × B_c = 128 × 512 at
// d = 64, in cache, one core) in its three phases — the score kernel with the row maxima, exp and sum row by
// row, the P·V kernel — each timed on its own. Counters: each product's rate against one core's FMA peak
// (`scores_pct_core_peak`, `pv_pct_core_peak`), exp's nanoseconds per score, each phase's share of the tile
// (`pct_tile_…`), and `pct_call_in_tiles`: the 2048 tiles of a flash_fast call at n = 4096 (8 heads) over that
// call's CPU time measured above. The rest of a call is the work between the tiles: the running max and sum,
// O's rescaling, packing K, the input check, the output's first touches and the threads.
void tile_phases(benchmark::State& state) {
  const ch05::FastConfig cfg;
  const std::size_t rows = cfg.B_r, cols = cfg.B_c, panels = ch05::key_panels(cols);
  if (panels == 0 || cols % ch05::key_panel_width() != 0) {
    state.SkipWithError("no micro-kernels on this CPU: flash_fast's products are OpenBLAS calls");
    return;
  }
  attn::Rng rng(5);
  const Matrix Q = rng.normal(rows, kD), K = rng.normal(cols, kD), V = rng.normal(cols, kD);  // (rows|cols, d)
  std::vector<float> packed(panels * kD * ch05::key_panel_width()), S(rows * cols), O(rows * kD, 0.0f), m(rows);
  ch05::pack_keys(K.data(), cols, kD, packed.data());
  const std::vector<std::size_t> visible(rows, cols);
  using Clock = std::chrono::steady_clock;
  double scores_s = 0.0, exp_s = 0.0, pv_s = 0.0, sum = 0.0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
    ch05::scores_tile(Q.data(), rows, kD, kD, packed.data(), panels, 0.125f, S.data(), cols, visible.data(), m.data());
    const auto t1 = Clock::now();
    for (std::size_t r = 0; r < rows; ++r) sum += ch05::exp_shift_sum(S.data() + r * cols, cols, m[r]);
    const auto t2 = Clock::now();
    ch05::accumulate_pv(S.data(), rows, cols, cols, V.data(), kD, kD, O.data(), kD);
    const auto t3 = Clock::now();
    scores_s += std::chrono::duration<double>(t1 - t0).count();
    exp_s += std::chrono::duration<double>(t2 - t1).count();
    pv_s += std::chrono::duration<double>(t3 - t2).count();
  }
  benchmark::DoNotOptimize(sum + O[0]);
  const double calls = static_cast<double>(state.iterations()), tile_s = scores_s + exp_s + pv_s;
  const double product_flops = 2.0 * static_cast<double>(rows * cols * kD) * calls;
  const double core_peak = attn::ceilings(1).fma_peak_per_core;
  state.counters["scores_pct_core_peak"] = 100.0 * product_flops / scores_s / 1e9 / core_peak;
  state.counters["pv_pct_core_peak"] = 100.0 * product_flops / pv_s / 1e9 / core_peak;
  state.counters["exp_ns_per_score"] = 1e9 * exp_s / (calls * static_cast<double>(rows * cols));
  state.counters["pct_tile_scores"] = 100.0 * scores_s / tile_s;
  state.counters["pct_tile_exp"] = 100.0 * exp_s / tile_s;
  state.counters["pct_tile_pv"] = 100.0 * pv_s / tile_s;
  const double tiles_per_call = static_cast<double>(kHeads * (4096 / rows) * (4096 / cols));
  if (flash_fast_cpu_seconds() > 0.0)
    state.counters["pct_call_in_tiles"] = 100.0 * tiles_per_call * tile_s / calls / flash_fast_cpu_seconds();
}
// [tile_phases]

// The previous rung: the same kernel with OpenBLAS doing both products of every tile (it packs K_j and V_j
// again for every query block and zeroes S before writing it), instead of the micro-kernels.
void flash_fast_openblas(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const Inputs& in = inputs(n);
  ch05::use_tile_kernels("none");
  measure(state, bench_flops(n, causal), n, ch05::FastConfig{}.threads,
          [&] { benchmark::DoNotOptimize(ch05::flash_attention_fast(in.Q, in.K, in.V, causal)); });
  ch05::use_tile_kernels("auto");
}

BENCHMARK(sgemm_ceiling)->ArgName("n")->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(full)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(flash_simple)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(flash_fast_openblas)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(flash_fast)
    ->ArgNames({"n", "causal"})
    ->ArgsProduct({{1024, 4096}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(tile_phases)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch05_flash_cpu", "Chapter 05: FlashAttention on the CPU");
  chapter.bench_ceilings({1, 2});  // flash_simple runs on one core, the others on two
  std::size_t n = 4096, d = 64;
  bool causal = false;
  chapter.cli()
      .add_option("--n", n, "Sequence length of the memory run (131072 is the article's n = 100,000 case)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  chapter.cli().add_option("--d", d, "Head dimension d_k = d_v of the memory run")->check(CLI::Range(1, 1024));
  chapter.cli().add_flag("--causal", causal, "Use the causal mask in the memory run");
  return chapter.run(argc, argv, [&] {
    refuse_a_memory_run_that_cannot_fit(n, d);  // before anything runs: not after half a minute
    online_softmax_one_row();
    tiled_equals_full(chapter);
    row_from_lse();
    long_sequence(chapter, n, d, causal);
    io_model(chapter);
  });
}
