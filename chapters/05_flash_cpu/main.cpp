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
#include <algorithm>
#include <cmath>
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
      max_abs_diff(row, full_row));
}
// [recompute_row]

/// The memory run holds Q, K, V and O, (n, d) floats each: refused, with the estimate, when that is more
/// than half of the memory available now.
void refuse_a_memory_run_that_cannot_fit(std::size_t n, std::size_t d) {
  const double need = 16.0 * static_cast<double>(n) * static_cast<double>(d);
  const double available = static_cast<double>(attn::available_memory_bytes());
  if (available > 0 && need > 0.5 * available)
    throw attn::UsageError(
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
  attn::FlashOutput flash;  // O (n, d), lse (n)
  const double seconds =
      attn::time_calls([&] { flash = ch05::flash_attention_fast(Q, K, V, causal, config); }, {1, 0}).wall;
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

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch05_flash_cpu", "Chapter 05: FlashAttention on the CPU");
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
