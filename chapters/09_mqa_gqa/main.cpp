// Chapter 09 — Multi-query and grouped-query attention, and the KV cache.
//
// What it shows: one attention with h query heads and g key/value heads (g = h multi-head, g = 1
// multi-query, between them grouped-query) and which K/V head each query head reads; autoregressive
// decoding with a KV cache, step by step equal to full causal attention; why a decode step is bound by
// memory (bytes per FLOP); what the cache weighs for public model shapes at 4K, 32K and 128K tokens in
// bf16; a multi-head layer turned grouped by mean-pooling its K/V heads, with the output's deviation.
// `ch09_mqa_gqa bench` times the decode step for g = h, h/4, 1 (h = 32, d_k = 128, fp32, one core) with two
// kernels: the learner's decode_step() (OpenBLAS: S = Q·Kᵀ, softmax, A·V, three passes) and decode_fast.cpp's
// decode_attend_fast() (one pass, each group's K and V read once for its r = h/g query heads), each against
// its roofline bound: the cache's bytes at this machine's memory bandwidth (a STREAM triad) or the step's
// FLOPs at the in-cache product rate (the same step with its cache in L2), whichever takes longer.
// The benchmarks are in bench.cpp; what a recorded run measured is on the measurements page
// (book/measure_09_mqa_gqa.md, reading book/recorded/ch09_bench.txt), not quoted here, where it would go stale.
// What it leaves out: training or uptraining (the GQA paper's quality numbers are cited in the book,
// not measured), batching many sequences, paged caches, a GPU decode kernel (chapter 06's territory).
// Run it: ./course run 09      Benchmarks: build/default/bin/ch09_mqa_gqa bench
// Your code: ./course run 09 --track exercise      Book page: book/09_mqa_gqa.md
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "03_multi_head/multi_head.hpp"
#include "09_mqa_gqa/decode_fast.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "09_mqa_gqa/step_cost.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/random_heads.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;

using attn::fixed;
using attn::relative_error;
using attn::ch09::step_cost;
using attn::ch09::StepCost;

/// Token t of every head: (heads, d), what one decode step receives.
Matrix token(const Tensor3& T, std::size_t t) { return xt::view(T, xt::all(), t, xt::all()); }

// --- 1. who shares with whom ------------------------------------------------------------------------------

void print_mapping(std::size_t h) {
  attn::heading(fmt::format("Which key/value head each query head reads (h = {})", h));
  const std::vector<std::size_t> groups{h, h / 2, h / 4, 1};
  std::vector<std::string> header{"query head"};
  for (std::size_t g : groups)
    header.push_back(g == h ? fmt::format("MHA, g = {}", g) : g == 1 ? "MQA, g = 1" : fmt::format("GQA, g = {}", g));
  attn::Table t(header);
  for (std::size_t i = 0; i < h; ++i) {
    std::vector<std::string> row{fmt::format("{}", i)};
    for (std::size_t g : groups) row.push_back(fmt::format("KV {}", attn::kv_group_of(i, h, g)));
    t.add_row(row);
  }
  t.print();
  fmt::print(
      "kv_group_of(i, h, g) = i / (h/g): h/g consecutive query heads share one key and one value head.\n"
      "Only K and V are shared; every query head still asks its own question.\n");
}

// --- 2. one function, three attentions ---------------------------------------------------------------------

// [same_as_chapter_03]
/// With g = h, grouped attention is multi-head attention: chapter 03's layer on the same X and weights,
/// against chapter 03's projection and split, this chapter's grouped_attention, then merge and W_O.
void print_same_as_chapter_03(attn::Rng& rng, std::size_t h, std::size_t n, std::size_t d_k) {
  const std::size_t d_model = h * d_k;
  const Matrix X = rng.normal(n, d_model);  // (n, d_model)
  const attn::MultiHeadWeights W{rng.normal(d_model, d_model), rng.normal(d_model, d_model),
                                 rng.normal(d_model, d_model), rng.normal(d_model, d_model)};
  const attn::Mask causal = attn::causal_mask(n, n);
  const Matrix chapter_03 = attn::multi_head_attention(X, W, h, causal);  // (n, d_model)
  const Tensor3 Q = attn::split_heads(attn::project(X, W.W_Q), h);        // (h, n, d_k)
  const Tensor3 K = attn::split_heads(attn::project(X, W.W_K), h);        // (g = h, n, d_k)
  const Tensor3 V = attn::split_heads(attn::project(X, W.W_V), h);        // (g = h, n, d_v)
  const Matrix grouped = attn::project(attn::merge_heads(attn::grouped_attention(Q, K, V, true)), W.W_O);
  const double diff = attn::max_abs_diff(grouped, chapter_03);
  fmt::print(
      "g = h through this function, merged and multiplied by W_O, against chapter 03's multi-head\n"
      "layer on the same X and weights: largest difference {:.1e} (both run chapter 02's attention\n"
      "on the same heads).\n",
      diff);
}
// [same_as_chapter_03]

void print_one_function(std::uint64_t seed) {
  const std::size_t h = 8, n = 6, d_k = 16;
  attn::heading(fmt::format("One function, three attentions (h = {}, n = {}, d_k = d_v = {})", h, n, d_k));
  attn::Rng rng(seed);
  const Tensor3 Q = attn::normal_heads(rng, h, n, d_k);  // (h, n, d_k)
  attn::Table t({"attention", "g", "K and V", "output", "K/V floats cached per token", "vs MHA"});
  t.set_left(0);
  for (std::size_t g : {h, std::size_t{2}, std::size_t{1}}) {
    const Tensor3 K = attn::normal_heads(rng, g, n, d_k), V = attn::normal_heads(rng, g, n, d_k);  // (g, n, d_k)
    const Tensor3 O = attn::grouped_attention(Q, K, V, /*causal=*/true);                           // (h, n, d_v)
    t.add_row({g == h   ? "multi-head"
               : g == 1 ? "multi-query"
                        : "grouped-query",
               fmt::format("{}", g), fmt::format("2 × {}", attn::shape_str(K)), attn::shape_str(O),
               fmt::format("{}", 2 * g * d_k), fmt::format("1/{}", h / g)});
  }
  t.print();
  fmt::print("The output keeps all h heads; only the number of key/value heads, and with it the cache, shrinks.\n");
  print_same_as_chapter_03(rng, h, n, d_k);
}

// --- 3. decoding with a KV cache -----------------------------------------------------------------------------

// [decode_loop]
/// Decodes a sequence token by token with a KV cache and compares every step with the row of full causal
/// grouped attention over the whole sequence.
void print_decode(std::uint64_t seed) {
  const std::size_t h = 4, g = 2, n = 8, d_k = 8, d_v = 8;
  attn::heading(fmt::format("Decoding with a KV cache (h = {}, g = {}, d_k = {}, capacity {} tokens)", h, g, d_k, n));
  attn::Rng rng(seed);
  const Tensor3 Q = attn::normal_heads(rng, h, n, d_k);                                          // (h, n, d_k)
  const Tensor3 K = attn::normal_heads(rng, g, n, d_k), V = attn::normal_heads(rng, g, n, d_v);  // (g, n, d)
  const Tensor3 full = attn::grouped_attention(Q, K, V, /*causal=*/true);                        // (h, n, d_v)
  attn::KVCache cache(g, /*capacity=*/n, d_k, d_v);
  attn::Table t(
      {"step t", "cached tokens", "K/V rows computed", "without a cache", "K/V rows read", "|decode - causal|"});
  double worst = 0.0;
  for (std::size_t step = 0; step < n; ++step) {
    const Matrix O_t = attn::decode_step(cache, token(Q, step), token(K, step), token(V, step));  // (h, d_v)
    const Matrix row = xt::view(full, xt::all(), step, xt::all());                                // (h, d_v)
    const Matrix diff = xt::abs(O_t - row);                                                       // (h, d_v)
    const double d = xt::amax(diff)();
    worst = std::max(worst, d);
    t.add_row({fmt::format("{}", step), fmt::format("{}", cache.length()), fmt::format("{}", 2 * g),
               fmt::format("{}", 2 * g * (step + 1)), fmt::format("{}", 2 * g * cache.length()),
               d < 1e-6 ? "< 1e-6" : fmt::format("{:.1e}", d)});
  }
  t.print();
  fmt::print(
      "Each step computes 2·g = {} new rows (one key and one value per KV head) and reads every cached row\n"
      "once. Without the cache, step t would recompute the keys and values of all t+1 tokens: n(n+1)/2 = {}\n"
      "token projections for the sequence instead of n = {}. Every step equals row t of causal grouped\n"
      "attention over the whole sequence: {}.\n",
      2 * g, n * (n + 1) / 2, n, worst < 1e-5 ? "yes" : "NO");
  try {
    attn::decode_step(cache, token(Q, 0), token(K, 0), token(V, 0));
  } catch (const std::invalid_argument& e) {
    fmt::print("One token more is refused, and the cache is left as it was:\n{}", attn::wrapped(e.what(), 100));
  }
}
// [decode_loop]

// --- 4. why decoding is memory-bound -------------------------------------------------------------------------

void print_memory_bound() {
  const std::size_t h = 32, n = 32768, d_k = 128;
  attn::heading(
      fmt::format("Why a decode step is memory-bound (one layer, h = {}, d_k = {}, n = {}, fp32)", h, d_k, n));
  attn::Table t({"attention", "g", "K/V bytes read", "FLOPs", "FLOP per byte", "≤ 32 MiB (a large L3)?"});
  t.set_left(0);
  for (std::size_t g : {h, h / 4, std::size_t{1}}) {
    const StepCost c = step_cost(h, g, n, d_k, 4);
    t.add_row({g == h   ? "MHA"
               : g == 1 ? "MQA"
                        : "GQA",
               fmt::format("{}", g), attn::human_bytes(c.bytes), fmt::format("{:.0f} M", c.flops / 1e6),
               fixed(c.flops / c.bytes, 1), c.bytes <= 32.0 * 1024 * 1024 ? "yes" : "no"});
  }
  t.print();
  fmt::print(
      "The FLOPs do not depend on g, the bytes do: every cached byte is used for h/(2g) FLOPs (fp32). A\n"
      "CPU core does tens of FLOPs in the time it loads one byte from memory, so with few FLOPs per byte\n"
      "the step waits for memory, and its time follows the bytes: MHA : GQA : MQA should approach 1 : 1/4\n"
      ": 1/32 until the arithmetic (or the cache fitting in the CPU's caches) takes over. `ch09_mqa_gqa\n"
      "bench` measures it.\n");
}

// --- 5. the cache of real models -----------------------------------------------------------------------------

/// A public model configuration (from its paper or released config.json).
struct ModelShape {
  const char* name;
  std::size_t layers, h, g, d_k;
  bool plotted;  // drawn in the figure too (a few lines keep it readable)
};

// [model_shapes]
const std::vector<ModelShape>& model_shapes() {
  static const std::vector<ModelShape> shapes{
      // name, layers, h, g, d_k, drawn in the figure                  source of the configuration
      {"Llama 2 7B (MHA)", 32, 32, 32, 128, true},            // Touvron et al. 2023, Llama 2 paper
      {"Llama 2 13B (MHA)", 40, 40, 40, 128, false},          // same
      {"Mistral 7B (GQA)", 32, 32, 8, 128, false},            // Jiang et al. 2023, Mistral 7B paper
      {"Llama 3 8B (GQA)", 32, 32, 8, 128, true},             // Meta's released config.json
      {"Llama 2 70B (GQA)", 80, 64, 8, 128, true},            // Llama 2 paper (GQA with 8 KV heads)
      {"Llama 2 70B if it were MHA", 80, 64, 64, 128, true},  // the same shape, one KV head per query head
      {"Falcon 7B (MQA)", 32, 71, 1, 64, true},               // TII's released config.json (multi_query)
  };
  return shapes;
}
// [model_shapes]

void print_cache_table(const attn::Chapter& chapter) {
  attn::heading("KV-cache bytes of public model shapes, one sequence, bf16 (2 bytes per number)");
  const std::vector<std::size_t> contexts{4096, 32768, 131072};
  attn::Table t({"model", "layers", "h", "g", "d_k", "per token", "4K tokens", "32K tokens", "128K tokens"});
  t.set_left(0);
  attn::PlotSpec plot{"KV cache of one sequence, bf16", "context length (tokens)", "bytes", true, true, {}};
  for (const ModelShape& m : model_shapes()) {
    std::vector<std::string> row{
        m.name,
        fmt::format("{}", m.layers),
        fmt::format("{}", m.h),
        fmt::format("{}", m.g),
        fmt::format("{}", m.d_k),
        attn::human_bytes(static_cast<double>(attn::kv_cache_bytes(m.layers, m.g, m.d_k, 1, 2)))};
    for (std::size_t n : contexts)
      row.push_back(attn::human_bytes(static_cast<double>(attn::kv_cache_bytes(m.layers, m.g, m.d_k, n, 2))));
    t.add_row(row);
    if (!m.plotted) continue;
    attn::Series s{m.name, {}, {}, true};
    for (std::size_t n = 1024; n <= 131072; n *= 2) {
      s.x.push_back(static_cast<double>(n));
      s.y.push_back(static_cast<double>(attn::kv_cache_bytes(m.layers, m.g, m.d_k, n, 2)));
    }
    plot.series.push_back(s);
  }
  t.print();
  fmt::print(
      "Bytes = 2 · layers · g · d_k · n · 2: the query heads h do not appear. Llama 2 70B keeps g = 8 of\n"
      "its 64 heads' keys and values, an 8× smaller cache than the same model with multi-head attention;\n"
      "at 128K tokens that is the difference between one and several 80 GB accelerators for the cache of\n"
      "ONE sequence.\n");
  if (const auto path = chapter.figure_path("ch09_kv_cache_bytes.svg")) {
    attn::write_svg_plot(*path, plot);
    chapter.announce_figure(*path);
  }
}

// --- 6. multi-head → grouped-query by mean-pooling -----------------------------------------------------------

/// h heads of projection weights (d_model, d_k) whose pairwise correlation is \p rho: √ρ·shared + √(1-ρ)·own,
/// each entry ~ N(0, 1/d_model) so that the projected vectors have entries ~ N(0, 1).
std::vector<Matrix> correlated_heads(attn::Rng& rng, std::size_t h, std::size_t d_model, std::size_t d_k, double rho) {
  const float sd = 1.0f / std::sqrt(static_cast<float>(d_model));
  const Matrix shared = rng.normal(d_model, d_k, 0.0f, sd);  // (d_model, d_k)
  std::vector<Matrix> W;
  for (std::size_t i = 0; i < h; ++i) {
    const Matrix own = rng.normal(d_model, d_k, 0.0f, sd);  // (d_model, d_k)
    W.push_back(static_cast<float>(std::sqrt(rho)) * shared + static_cast<float>(std::sqrt(1.0 - rho)) * own);
  }
  return W;
}

/// X projected by each head's weights, stacked head-major: (h, n, d_k).
Tensor3 project_heads(const Matrix& X, const std::vector<Matrix>& W) {
  Tensor3 T = xt::zeros<float>({W.size(), X.shape(0), W[0].shape(1)});  // (h, n, d_k)
  for (std::size_t i = 0; i < W.size(); ++i) xt::view(T, i, xt::all(), xt::all()) = attn::project(X, W[i]);
  return T;
}

// [mean_pool]
void print_mean_pooling(std::uint64_t seed) {
  const std::size_t h = 8, n = 32, d_model = 64, d_k = 16;
  attn::heading(fmt::format("Multi-head → grouped-query by mean-pooling K/V heads (h = {}, n = {}, d_k = {}, causal)",
                            h, n, d_k));
  const std::vector<double> rhos{1.0, 0.9, 0.5, 0.0};
  const std::vector<std::size_t> groups{8, 4, 2, 1};
  std::vector<std::vector<double>> error(groups.size(), std::vector<double>(rhos.size()));
  for (std::size_t c = 0; c < rhos.size(); ++c) {
    attn::Rng rng(seed);
    const Matrix X = rng.normal(n, d_model);                                              // (n, d_model)
    const Tensor3 Q = project_heads(X, correlated_heads(rng, h, d_model, d_k, 0.0));      // (h, n, d_k)
    const Tensor3 K = project_heads(X, correlated_heads(rng, h, d_model, d_k, rhos[c]));  // (h, n, d_k)
    const Tensor3 V = project_heads(X, correlated_heads(rng, h, d_model, d_k, rhos[c]));  // (h, n, d_v)
    const Tensor3 O_mha = attn::grouped_attention(Q, K, V, true);                         // (h, n, d_v)
    for (std::size_t r = 0; r < groups.size(); ++r) {
      // K = X·W_K is linear in W_K: pooling the K heads is pooling the projections, the GQA paper's recipe.
      const Tensor3 O_gqa = attn::grouped_attention(Q, attn::mean_pool_kv_heads(K, groups[r]),
                                                    attn::mean_pool_kv_heads(V, groups[r]), true);
      error[r][c] = relative_error(O_gqa, O_mha);
    }
  }
  std::vector<std::string> header{"g (pooled from h = 8)"};
  for (double rho : rhos) header.push_back(fmt::format("alike ρ = {:.1f}", rho));
  attn::Table t(header);
  for (std::size_t r = 0; r < groups.size(); ++r) {
    std::vector<std::string> row{fmt::format("{}", groups[r])};
    for (double e : error[r]) row.push_back(fixed(e, 3));
    t.add_row(row);
  }
  t.print();
  fmt::print(
      "Relative deviation ‖O_pooled − O_MHA‖ / ‖O_MHA‖. ρ is how alike the K/V projections of the heads are\n"
      "(1: identical, 0: independent). Pooling is exact when a group's heads agree and costs more the more\n"
      "they differ and the fewer groups remain: the reason the GQA paper uptrains the pooled model briefly\n"
      "instead of using it as is.\n");
}
// [mean_pool]

void tell_the_story(const attn::Chapter& chapter, std::uint64_t seed) {
  print_mapping(8);
  print_one_function(seed);
  print_decode(seed + 1);
  print_memory_bound();
  print_cache_table(chapter);
  print_mean_pooling(seed + 2);
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch09_mqa_gqa", "Chapter 09: multi-query and grouped-query attention, and the KV cache");
  std::uint64_t seed = 9;
  chapter.cli().add_option("--seed", seed, "Seed of the random examples");
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, seed); });
}
