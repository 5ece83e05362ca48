// Chapter 07 — Sparse attention: local, global, random, dilated, and what they cost.
//
// What it shows: the sparsity patterns of Longformer, BigBird and the Sparse Transformer as masks you can
// build and combine (drawn at n = 64, in the terminal and as SVG), how many pairs each keeps and how that
// grows with n (O(n·w), O(n√n), O(n²)); how far information travels in one and two layers (the receptive
// field: dilation widens it, a global token joins any two positions in two hops); and two kernels that
// compute only the allowed pairs — per-row index lists and block-sparse tiles with the online softmax —
// checked against chapter 02's dense masked attention, with the work each one does.
// What it leaves out: learning which pairs matter (routing, reformer-style hashing), sparse kernels on the
// GPU, and the backward pass. Timings are not printed by the default run: `ch07_sparse bench` measures
// window attention against dense flash attention (chapter 05's fast kernel, same threads) up to n = 65,536
// (fitted exponents, crossover, efficiency) with the machine's sgemm ceiling measured in the same run.
// Run it: ./course run 07      Timings: ./course bench 07 (or build/default/bin/ch07_sparse bench)
// Your code: ./course run 07 --track exercise      Book page: book/07_sparse.md
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "07_sparse/sparse.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/machine.hpp"
#include "attn/panels.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

using attn::Mask;
using attn::Matrix;

constexpr std::uint64_t kSeed = 7;

using attn::fixed;

// --- the patterns, drawn ---------------------------------------------------------------------------------

struct Pattern {
  std::string name;
  std::string grows;  // how the pair count grows with n at fixed parameters
  Mask mask;          // (n, n)
};

// [patterns]
std::vector<Pattern> patterns(std::size_t n) {
  const auto root = static_cast<std::size_t>(std::lround(std::sqrt(static_cast<double>(n))));
  return {
      {"local window, w = 4", "n·(2w+1)", attn::local_window_mask(n, 4)},
      {"causal window, w = 8", "n·(w+1)", attn::local_window_mask(n, 8, /*causal=*/true)},
      {"dilated, w = 4, δ = 3", "n·(2w+1)", attn::dilated_mask(n, 4, 3)},
      {"global tokens {0, 32}", "2·n_g·n", attn::global_mask(n, {0, n / 2})},
      {"random, r = 4 (seeded)", "n·r", attn::random_mask(n, 4, kSeed)},
      {fmt::format("strided, stride √n = {}", root), "n·2√n", attn::strided_mask(n, root)},
      {"Longformer: window 4 + global", "n·(2w+1+2n_g)", attn::longformer_mask(n, 4, {0})},
      {"BigBird: window 3 + global + random 3", "n·(2w+1+2n_g+r)", attn::bigbird_mask(n, 3, {0}, 3, kSeed)},
  };
}
// [patterns]

std::pair<std::size_t, std::size_t> keys_per_row(const Mask& m) {
  std::size_t lo = m.shape(1), hi = 0;
  for (std::size_t i = 0; i < m.shape(0); ++i) {
    std::size_t k = 0;
    for (std::size_t j = 0; j < m.shape(1); ++j) k += m(i, j) ? 1 : 0;
    lo = std::min(lo, k);
    hi = std::max(hi, k);
  }
  return {lo, hi};
}

void show_patterns(const attn::Chapter& chapter) {
  const std::size_t n = 64;
  const std::vector<Pattern> all = patterns(n);
  attn::heading("Eight sparsity patterns at n = 64 (row i = query, column j = key; filled = may attend)");
  std::vector<attn::Panel> panels;
  for (const auto& p : all) panels.push_back(attn::mask_panel(p.name, p.mask));
  attn::print_panels(panels, 2);
  if (const auto path = chapter.figure_path("ch07_patterns.svg")) {
    attn::write_svg_panels(*path, panels, 4,
                           "Sparsity patterns at n = 64 (row = query, column = key; bright = allowed)", 3);
    chapter.announce_figure(*path);
  }

  attn::heading("What each pattern keeps at n = 64 (full attention: 4096 pairs)");
  attn::Table t({"pattern", "allowed pairs", "density", "keys per row", "pairs grow as"});
  for (const auto& p : all) {
    const auto [lo, hi] = keys_per_row(p.mask);
    t.add_row({p.name, fmt::format("{}", attn::allowed_pairs(p.mask)), fixed(attn::mask_density(p.mask), 3),
               lo == hi ? fmt::format("{}", lo) : fmt::format("{}–{}", lo, hi), p.grows});
  }
  t.print();
}

void show_growth() {
  attn::heading("How the work grows: allowed pairs ÷ n, as n doubles");
  fmt::print(
      "Pairs ÷ n is the work per token. Constant: O(n) in all (window, BigBird). Growing like √n: O(n√n)\n"
      "(strided with stride √n). Growing like n: O(n²) (full attention).\n\n");
  attn::Table t({"n", "window w=16", "BigBird w=8,n_g=1,r=4", "strided √n", "full"});
  for (std::size_t n : {256u, 1024u, 4096u}) {
    const auto root = static_cast<std::size_t>(std::lround(std::sqrt(static_cast<double>(n))));
    const auto per_token = [&](const Mask& m) {
      return fixed(static_cast<double>(attn::allowed_pairs(m)) / static_cast<double>(n), 1);
    };
    t.add_row({fmt::format("{}", n), per_token(attn::local_window_mask(n, 16)),
               per_token(attn::bigbird_mask(n, 8, {0}, 4, kSeed)), per_token(attn::strided_mask(n, root)),
               fmt::format("{}", n)});
  }
  t.print();
}

// --- the receptive field ----------------------------------------------------------------------------------

const std::vector<std::string>& sentence() {
  static const std::vector<std::string> tokens{"[CLS]", "the",   "cat", "sat", "on",   "the",    "mat", "and", "it",
                                               "was",   "tired", "so",  "it",  "fell", "asleep", "in",  "the", "sun"};
  return tokens;
}

/// The sentence with the tokens query \p i can hear after the layers of \p reach shown, the others as "·".
std::string heard(const Mask& reach, std::size_t i) {
  std::string out;
  for (std::size_t j = 0; j < sentence().size(); ++j) out += (j ? " " : "") + (reach(i, j) ? sentence()[j] : "·");
  return out;
}

/// Layers until every query hears every key that \p full allows (0 if it never does within \p max_layers).
std::size_t layers_to_connect(const Mask& mask, const Mask& full, std::size_t max_layers) {
  for (std::size_t layers = 1; layers <= max_layers; ++layers) {
    const Mask R = attn::receptive_field(mask, layers);  // (n, n)
    bool all = true;
    for (std::size_t k = 0; k < R.size() && all; ++k) all = !full.data()[k] || R.data()[k];
    if (all) return layers;
  }
  return 0;
}

bool is_causal(const Mask& m) {
  for (std::size_t i = 0; i < m.shape(0); ++i)
    for (std::size_t j = i + 1; j < m.shape(1); ++j)
      if (m(i, j)) return false;
  return true;
}

void show_receptive_field(std::size_t w, const std::vector<std::size_t>& global) {
  const std::size_t n = sentence().size(), it = 8, cat = 2;
  attn::heading(fmt::format("How far \"{}\" (position {}) hears, after one and two layers", sentence()[it], it));
  fmt::print("The pronoun needs \"cat\", {} positions back. A word not yet heard is shown as ·.\n\n", it - cat);
  const std::vector<std::pair<std::string, Mask>> cases{
      {fmt::format("window w = {}", w), attn::local_window_mask(n, w)},
      {fmt::format("dilated w = {}, δ = 3", w), attn::dilated_mask(n, w, 3)},
      {fmt::format("window w = {} + global {}", w, fmt::join(global, ",")), attn::longformer_mask(n, w, global)},
  };
  for (const auto& [name, mask] : cases) {  // one small table per pattern: the sentence needs the width
    fmt::print("{}:\n", name);
    attn::Table t({"layers", "what \"it\" has heard"});
    t.set_left(1);
    for (std::size_t layers : {1u, 2u})
      t.add_row({fmt::format("{}", layers), heard(attn::receptive_field(mask, layers), it)});
    t.print();
  }
  fmt::print(
      "\nOne layer of a window sees 2w+1 words; each further layer adds w on each side. Dilation spaces the\n"
      "same number of keys r apart, so the reach grows r times faster. A global token hears everyone and\n"
      "is heard by everyone: two layers connect any two words through it.\n");

  attn::heading("Layers until every position has heard every other (n = 64)");
  const std::size_t n64 = 64, max_layers = 64;
  const Mask full = xt::ones<bool>({n64, n64});
  const Mask past = attn::causal_mask(n64, n64);
  attn::Table c({"pattern", "pairs", "layers to connect"});
  for (const auto& p : patterns(n64)) {
    const bool causal = is_causal(p.mask);  // a causal pattern can only ever connect the past
    const std::size_t layers = layers_to_connect(p.mask, causal ? past : full, max_layers);
    c.add_row({p.name + (causal ? " (past only)" : ""), fmt::format("{}", attn::allowed_pairs(p.mask)),
               layers ? fmt::format("{}", layers) : "never"});
  }
  c.print();
}

// --- kernels that touch only the allowed pairs -----------------------------------------------------------

using attn::max_abs_diff;

void show_kernels(std::size_t n, std::size_t B) {
  attn::heading(
      fmt::format("Kernels that touch only allowed pairs, against dense masked attention (n = {}, d = 64)", n));
  fmt::print(
      "Reference: chapter 02's scaled_dot_product_attention(Q, K, V, mask), which scores all n² pairs and\n"
      "masks. Row lists score exactly the allowed pairs; block-sparse scores whole {}×{} tiles that hold\n"
      "any. |Δ|: the largest difference from the reference.\n\n",
      B, B);
  attn::Rng rng(kSeed);
  const std::size_t d = 64;
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  const auto root = static_cast<std::size_t>(std::lround(std::sqrt(static_cast<double>(n))));
  const std::vector<std::pair<std::string, Mask>> cases{
      {"window w = 32", attn::local_window_mask(n, 32)},
      {"causal window w = 32", attn::local_window_mask(n, 32, true)},
      {"Longformer w = 32, global {0}", attn::longformer_mask(n, 32, {0})},
      {"BigBird w = 16, global {0}, random 16", attn::bigbird_mask(n, 16, {0}, 16, kSeed)},
      {fmt::format("strided, stride {}", root), attn::strided_mask(n, root)},
  };
  attn::Table t({"pattern", "allowed", "rows |Δ|", "blocks |Δ|", "tiles kept", "computed", "useful"});
  for (const auto& [name, mask] : cases) {
    const Matrix dense = attn::scaled_dot_product_attention(Q, K, V, mask);  // (n, d)
    const Matrix rows = attn::row_sparse_attention(Q, K, V, attn::sparse_rows(mask));
    const attn::BlockLayout layout = attn::block_layout(mask, B, B);
    const Matrix blocks =
        attn::block_sparse_attention(Q, K, V, layout, static_cast<std::size_t>(attn::hardware_threads()));
    const std::size_t T = (n + B - 1) / B;
    t.add_row({name, fmt::format("{}", attn::allowed_pairs(mask)), fmt::format("{:.1e}", max_abs_diff(rows, dense)),
               fmt::format("{:.1e}", max_abs_diff(blocks, dense)), fmt::format("{} of {}", layout.tiles(), T * T),
               fmt::format("{}", layout.computed_pairs()),
               fixed(static_cast<double>(attn::allowed_pairs(mask)) / static_cast<double>(layout.computed_pairs()))});
  }
  t.print();
  const Matrix window = attn::sliding_window_attention(Q, K, V, 32);
  fmt::print("\nsliding_window_attention (your exercise), w = 32: max |Δ| = {:.1e} against the dense masked result.\n",
             max_abs_diff(window, attn::scaled_dot_product_attention(Q, K, V, attn::local_window_mask(n, 32))));
  fmt::print(
      "\"useful\" = allowed ÷ computed pairs. A band fills its tiles, so block-sparse wastes only the\n"
      "corners of the tiles on its edges. Random and strided keys are scattered: nearly every tile holds\n"
      "one, so the block kernel computes almost everything and only row lists profit from the sparsity.\n");
}

void show_tiles(const attn::Chapter& chapter) {
  const std::size_t n = 256, B = 32;
  const std::vector<std::pair<std::string, Mask>> cases{
      {"window w = 40", attn::local_window_mask(n, 40)},
      {"strided, stride 16", attn::strided_mask(n, 16)},
  };
  attn::heading(fmt::format("The block layout: share of each {}×{} tile's pairs that are allowed (n = {})", B, B, n));
  std::vector<attn::Panel> panels;
  for (const auto& [name, mask] : cases) {
    const attn::BlockLayout L = attn::block_layout(mask, B, B);
    const std::size_t T = n / B;
    Matrix share = xt::zeros<float>({T, T});  // (T_r, T_c): 0 = tile skipped
    Matrix pairs = xt::zeros<float>({n, n});  // (n, n): 1 allowed, 0.4 computed but masked, 0 skipped
    for (std::size_t r = 0; r < T; ++r)
      for (std::size_t t = L.row_start[r]; t < L.row_start[r + 1]; ++t) {
        const std::size_t c = L.col_tile[t];
        const bool full = L.tile_mask[t] == attn::BlockLayout::kFull;
        const Mask piece = full ? Mask(xt::ones<bool>({B, B})) : L.masks[L.tile_mask[t]];
        share(r, c) = static_cast<float>(attn::mask_density(piece));
        for (std::size_t a = 0; a < B; ++a)
          for (std::size_t b = 0; b < B; ++b) pairs(r * B + a, c * B + b) = piece(a, b) ? 1.0f : 0.4f;
      }
    fmt::print("\n{}: {} of {} tiles kept, {} partial\n", name, L.tiles(), T * T, L.partial_tiles());
    std::vector<std::string> labels;
    for (std::size_t k = 0; k < T; ++k) labels.push_back(fmt::format("{}", k));
    attn::print_heatmap(share, labels, labels, 2);
    panels.push_back({name + " (green: computed, then masked)", pairs});
  }
  if (const auto path = chapter.figure_path("ch07_tiles.svg")) {
    attn::write_svg_panels(*path, panels, 2,
                           "Block-sparse tiles of 32 x 32 at n = 256: bright = allowed, green = computed but "
                           "masked, dark = skipped",
                           2);
    chapter.announce_figure(*path);
  }
}

void tell_the_story(const attn::Chapter& chapter, std::size_t w, const std::vector<std::size_t>& global,
                    std::size_t n) {
  for (const std::size_t g : global)  // checked before any output: the demo sentence is fixed, --global is not
    attn::require_option(g < sentence().size(),
                         fmt::format("--global {}: the demo sentence has positions 0 … {}", g, sentence().size() - 1));
  const attn::BlasThreads blas(1);  // the block kernel runs its own threads; OpenBLAS must not add more
  fmt::print(
      "Full attention lets every token look at every other: n² pairs.\n"
      "Sparse attention keeps a pattern of pairs that grows like n·w or n√n, and computes only those.\n");
  show_patterns(chapter);
  show_growth();
  show_receptive_field(w, global);
  show_kernels(n, 64);
  show_tiles(chapter);
  if (!chapter.book_mode())
    fmt::print("\nTimings (window vs dense flash attention up to n = 65,536): {} bench\n", "ch07_sparse");
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch07_sparse", "Chapter 07: sparse attention (local, global, random, dilated)");
  std::size_t w = 1, n = 1000;
  std::vector<std::size_t> global{0};
  chapter.cli()
      .add_option("--window", w, "Window w (keys on each side) of the receptive-field demo on the sentence")
      ->check(CLI::Range(0, 64));
  chapter.cli().add_option("--global", global, "Global token positions of the demo sentence (0 = [CLS])");
  chapter.cli()
      .add_option("--n", n, "Sequence length of the kernel check against dense masked attention")
      ->check(CLI::Range(1, 8192));
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, w, global, n); });
}
