// Chapter 11 — where is a word? Positions, and score/mask modifiers inside the flash kernel.
//
// What it shows: attention without positions is permutation-equivariant (measured); sinusoidal encodings,
// whose dot products depend only on distance; RoPE, whose q_mᵀk_n depends only on m − n, with the RoFormer
// long-range decay; ALiBi's per-head recency bias; and one kernel (flex.hpp: chapter 05's tiled forward with a
// score_mod and a mask_mod, and a block mask that skips empty tiles) running causal, sliding-window, ALiBi,
// soft-capping, prefix-LM and document masks, each equal to dense attention with the same bias and mask.
// What it leaves out: learned absolute embeddings, T5's bucketed relative bias, RoPE scaling for long
// contexts (NTK, YaRN), and the backward through the modifiers (chapter 10 has the unmodified one).
// Run it: ./course run 11     Benchmarks: build/default/bin/ch11_positions bench
// Your code: ./course run 11 --track exercise     Book page: book/11_positions.md
#include <cmath>
#include <complex>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "01_intuition/intuition.hpp"
#include "01_intuition/lexicon.hpp"
#include "02_qkv_trace/qkv_trace.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "11_positions/flex.hpp"
#include "11_positions/modifiers.hpp"
#include "11_positions/positions.hpp"
#include "attn/chapter.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;
using attn::Vector;
namespace ch05 = attn::ch05;
namespace ch11 = attn::ch11;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

using attn::max_abs_diff;

/// Rows of \p X in the order \p order: row r of the result is row order[r] of X.
Matrix permute_rows(const Matrix& X, const std::vector<std::size_t>& order) {
  Matrix out = Matrix::from_shape({order.size(), X.shape(1)});  // (n, d)
  for (std::size_t r = 0; r < order.size(); ++r) xt::row(out, r) = xt::row(X, order[r]);
  return out;
}

/// Chapter 01's attention weights A (n, n) for the embeddings X (n, d_model = 8): its hand-made W_Q (with the
/// pronoun query of its exercise) and W_K.
Matrix chapter01_weights(const Matrix& X) {
  const Matrix Q = attn::project(X, attn::ch01::query_weights(attn::design_pronoun_query()));  // (n, d_k)
  const Matrix K = attn::project(X, attn::ch01::key_weights());                                // (n, d_k)
  return attn::softmax_rows(attn::scaled_scores(Q, K));
}

/// The weights token \p from gives every token of \p tokens, as "word 0.31".
std::string weights_row(const Matrix& A, std::size_t from, const std::vector<std::string>& tokens) {
  std::string out;
  for (std::size_t t = 0; t < tokens.size(); ++t)
    out += fmt::format("{}{} {:.2f}", t ? "  " : "", tokens[t], A(from, t));
  return out;
}

// [permutation]
void permutation_equivariance() {
  attn::heading("Attention cannot see order: permute the tokens, the weights and outputs permute with them");
  const attn::ch01::Sentence& cat = attn::ch01::sentences()[1];  // the cat sat on the mat it was tired
  std::vector<std::size_t> swap(cat.tokens.size());              // the mat sat on the cat it was tired
  for (std::size_t t = 0; t < swap.size(); ++t) swap[t] = t == 1 ? 5 : t == 5 ? 1 : t;
  std::vector<std::string> swapped;
  for (std::size_t t : swap) swapped.push_back(cat.tokens[t]);
  const Matrix X = attn::ch01::embed(cat.tokens), X_swapped = permute_rows(X, swap);  // (n, 8) each
  const Matrix A = chapter01_weights(X), A_swapped = chapter01_weights(X_swapped);    // (n, n) each
  fmt::print("Chapter 01's sentence, its hand-made embeddings and weights; what \"it\" (token {}) attends to:\n",
             cat.pronoun);
  fmt::print("  {}\n  {}\n", weights_row(A, cat.pronoun, cat.tokens), weights_row(A_swapped, cat.pronoun, swapped));
  double weights_diff = 0.0;  // A_swapped is A with rows and columns permuted, entry for entry
  for (std::size_t i = 0; i < swap.size(); ++i)
    for (std::size_t j = 0; j < swap.size(); ++j)
      weights_diff = std::max(weights_diff, static_cast<double>(std::fabs(A_swapped(i, j) - A(swap[i], swap[j]))));
  fmt::print("max |A of the second sentence − A of the first, permuted| = {:.1e}\n", weights_diff);
  const Matrix V = attn::project(X, attn::ch01::value_weights());                                   // (n, 8)
  const Matrix O = attn::matmul(A, V), O_swapped = attn::matmul(A_swapped, permute_rows(V, swap));  // (n, 8) each
  fmt::print("max |outputs of the second sentence − outputs of the first, permuted| = {:.1e}\n",
             max_abs_diff(O_swapped, permute_rows(O, swap)));
  const Matrix PE = attn::sinusoidal_encoding(X.shape(0), X.shape(1));  // (n, 8)
  const Matrix P = chapter01_weights(X + PE), P_swapped = chapter01_weights(X_swapped + PE);
  double with_positions = 0.0;
  for (std::size_t i = 0; i < swap.size(); ++i)
    for (std::size_t j = 0; j < swap.size(); ++j)
      with_positions = std::max(with_positions, static_cast<double>(std::fabs(P_swapped(i, j) - P(swap[i], swap[j]))));
  fmt::print("the same difference of A with sinusoidal position encodings added to X = {:.1e}\n", with_positions);
  fmt::print(
      "\"it\" gives the cat the same weight wherever the cat stands: without positions the two sentences\n"
      "are the same bag of words to attention. With positions added, the weights depend on where each\n"
      "word is.\n\n");
}
// [permutation]

void sinusoidal(const attn::Chapter& chapter) {
  attn::heading("Sinusoidal encodings: PE_p · PE_q depends only on the distance p − q");
  const std::size_t n = 64, d = 32;
  const Matrix PE = attn::sinusoidal_encoding(n, d);        // (n, d)
  const Matrix G = xt::linalg::dot(PE, xt::transpose(PE));  // (n, n) every PE_p · PE_q
  attn::Table table({"distance k", "PE_p · PE_{p+k}, p = 0", "largest − smallest over p = 0 … 63 − k"});
  for (std::size_t k : {0, 1, 2, 4, 8, 16, 32}) {
    float lo = G(0, k), hi = G(0, k);
    for (std::size_t p = 0; p + k < n; ++p) {
      lo = std::min(lo, G(p, p + k));
      hi = std::max(hi, G(p, p + k));
    }
    table.add_row(
        {std::to_string(k), fmt::format("{:.4f}", G(0, k)), fmt::format("{:.1e}", static_cast<double>(hi - lo))});
  }
  table.print();
  fmt::print(
      "Each diagonal of PE·PEᵀ is constant (to float32 rounding): Σ_i cos(k·ω_i), a function of k alone,\n"
      "falling (not monotonically) with distance. The first 16 positions of the (64, 64) map, d = {}:\n",
      d);
  const Matrix corner = xt::view(G, xt::range(0, 16), xt::range(0, 16));  // (16, 16)
  std::vector<std::string> labels;
  for (std::size_t p = 0; p < 16; ++p) labels.push_back(std::to_string(p));
  attn::print_heatmap(corner / static_cast<float>(d / 2), labels, labels, 1, -1.0, 1.0);
  fmt::print("(divided by d/2 = {}, its value at distance 0)\n\n", d / 2);
  if (const auto path = chapter.figure_path("ch11_sinusoidal_gram.svg")) {
    std::vector<std::string> all;
    for (std::size_t p = 0; p < n; ++p) all.push_back(p % 8 == 0 ? std::to_string(p) : "");
    attn::write_svg_heatmap(*path, G / static_cast<float>(d / 2), all, all, "PE·PEᵀ / (d/2), n = 64, d = 32");
    chapter.announce_figure(*path);
  }
}

void rope(const attn::Chapter& chapter) {
  attn::heading("RoPE: rotate q and k by their positions, and q_m · k_n depends only on m − n");
  const std::size_t d = 64;
  attn::Rng rng(12);
  const Matrix q = rng.normal(1, d), k = rng.normal(1, d);  // (1, d) each
  attn::Table table({"m − n", "q_m · k_n at n = 0", "largest |change| for n = 1 … 4096", "‖q_m‖ − ‖q‖"});
  for (std::size_t gap : {0, 1, 4, 16, 64, 256}) {
    // [rope_relative]
    Matrix q0 = q, k0 = k;
    attn::apply_rope(q0, gap);
    attn::apply_rope(k0, 0);
    const double reference = static_cast<double>(xt::sum(q0 * k0)());
    double worst = 0.0;
    for (std::size_t n = 1; n <= 4096; n *= 2) {
      Matrix qs = q, ks = k;
      attn::apply_rope(qs, n + gap);
      attn::apply_rope(ks, n);
      worst = std::max(worst, std::fabs(static_cast<double>(xt::sum(qs * ks)()) - reference));
    }
    // [rope_relative]
    const double norm_change =
        std::sqrt(static_cast<double>(xt::sum(q0 * q0)())) - std::sqrt(static_cast<double>(xt::sum(q * q)()));
    table.add_row({std::to_string(gap), fmt::format("{:.4f}", reference), fmt::format("{:.1e}", worst),
                   fmt::format("{:.1e}", norm_change)});
  }
  table.print();
  fmt::print(
      "The changes are float32 rounding of the rotation angles (positions up to 4352): the score depends\n"
      "on where the two tokens are relative to each other, not where they are.\n\n");
  // The RoFormer paper's long-term decay: |Σ_i h_i e^{i(m−n)θ_i}| ≤ max|h| · (1/(d/2)) Σ_j |S_j|, with
  // S_j = Σ_{i<j} e^{i(m−n)θ_i}. The bound's relative size against the distance:
  const auto roformer_bound = [d](double distance) {
    std::complex<double> S = 0.0;
    double total = 0.0;
    for (std::size_t i = 0; i < d / 2; ++i) {
      S += std::polar(1.0, distance * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d)));
      total += std::abs(S);
    }
    return total / static_cast<double>(d / 2);
  };
  attn::Series bound{"RoFormer bound, d = 64, base 10000", {}, {}};
  for (double distance = 1.0; distance <= 4096.0; distance *= 1.1) {
    bound.x.push_back(distance);
    bound.y.push_back(roformer_bound(distance) / roformer_bound(1.0));
  }
  fmt::print(
      "The RoFormer bound on |q_mᵀk_n|, relative to its value at m − n = 1:\n"
      "{:.2f} at distance 16, {:.2f} at 256, {:.2f} at 4096 (plotted).\n\n",
      roformer_bound(16.0) / roformer_bound(1.0), roformer_bound(256.0) / roformer_bound(1.0),
      roformer_bound(4096.0) / roformer_bound(1.0));
  if (const auto path = chapter.figure_path("ch11_rope_decay.svg")) {
    attn::write_svg_plot(
        *path, {"RoPE's long-range decay (upper bound)", "distance m − n", "relative bound", true, false, {bound}});
    chapter.announce_figure(*path);
  }
}

void alibi() {
  attn::heading("ALiBi: a per-head penalty for distance");
  const std::size_t h = 8, n = 12;
  const Vector slopes = attn::alibi_slopes(h);  // (h)
  Matrix weights = Matrix::from_shape({h, n});  // (h, n): what the last token gives each position, equal scores
  for (std::size_t k = 0; k < h; ++k) {
    const Matrix bias = attn::alibi_bias(1, n, slopes(k));  // (1, n): the last query's row
    xt::row(weights, k) = xt::row(attn::softmax_rows(bias), 0);
  }
  std::vector<std::string> heads, positions;
  for (std::size_t k = 0; k < h; ++k)
    heads.push_back(fmt::format("m = 1/{}", static_cast<int>(std::lround(1.0 / slopes(k)))));
  for (std::size_t p = 0; p < n; ++p) positions.push_back(std::to_string(p));
  fmt::print("The last of {} tokens, with all raw scores equal, so only the bias speaks (weights per head):\n", n);
  attn::print_heatmap(weights, heads, positions, 2);
  fmt::print(
      "Steep heads look at the last few tokens; gentle heads almost uniformly: a recency bias of a\n"
      "different range in every head, with no parameter learned and no limit on the length.\n\n");
}

/// Dense attention from given scores, with a mask: chapter 02's softmax over the whole (n_q, n_kv) matrix.
Matrix dense(const Matrix& S, const Matrix& V, const attn::Mask& mask) {
  const Matrix masked = xt::where(mask, S, kMinusInf);  // (n_q, n_kv)
  return attn::matmul(attn::softmax_rows(masked), V);   // (n_q, d_v)
}

template <class ScoreMod, class MaskMod>
void add_check(attn::Table& table, const char* name, const Tensor3& Q, const Tensor3& K, const Tensor3& V,
               const ScoreMod& score_mod, const MaskMod& mask_mod, const Vector& bias_slopes,
               const std::function<float(float)>& cap) {
  const std::size_t h = Q.shape(0), n = Q.shape(1);
  const ch11::FlexConfig config{64, 96, 2};
  const ch11::BlockMask bm = ch11::make_block_mask(mask_mod, 1, n, n, config.B_r, config.B_c);
  const ch05::FlashHeadsOutput out = ch11::flex_attention(Q, K, V, score_mod, mask_mod, &bm, config);
  double worst = 0.0;
  for (std::size_t k = 0; k < h; ++k) {
    attn::Mask mask = attn::Mask::from_shape({n, n});
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) mask(i, j) = mask_mod(k, i, j);
    const Matrix Qk = xt::view(Q, k), Kk = xt::view(K, k), Vk = xt::view(V, k);  // (n, d) each
    Matrix S = attn::scaled_scores(Qk, Kk);                                      // (n, n)
    if (cap)
      for (float& s : S) s = cap(s);
    if (bias_slopes.size() > 0) S += attn::alibi_bias(n, n, bias_slopes(k));  // your ALiBi bias
    const Matrix expected = dense(S, Vk, mask);                               // (n, d)
    worst = std::max(worst, max_abs_diff(Matrix(xt::view(out.O, k)), expected));
  }
  table.add_row({name, std::to_string(bm.count(ch11::Tile::full)), std::to_string(bm.count(ch11::Tile::partial)),
                 std::to_string(bm.count(ch11::Tile::empty)), fmt::format("{:.1e}", worst)});
}

void one_kernel() {
  attn::heading("One kernel, many variants: score_mod and mask_mod inside the tiled forward");
  const std::size_t h = 4, n = 600, d = 32;  // 600 is a multiple of neither tile (64 × 96)
  attn::Rng rng(13);
  Tensor3 Q = xt::zeros<float>({h, n, d}), K = Q, V = Q;  // (h, n, d) each
  for (std::size_t k = 0; k < h; ++k) {
    xt::view(Q, k) = rng.normal(n, d);
    xt::view(K, k) = rng.normal(n, d);
    xt::view(V, k) = rng.normal(n, d);
  }
  std::vector<std::size_t> doc(n);
  for (std::size_t t = 0; t < n; ++t) doc[t] = t < 100 ? 0 : t < 350 ? 1 : t < 420 ? 2 : 3;  // four packed documents
  const Vector slopes = attn::alibi_slopes(h);
  attn::Table table({"variant", "full tiles", "partial", "skipped", "max |flex − dense|"});
  // [kernel_check]
  add_check(table, "none", Q, K, V, ch11::NoScoreMod{}, ch11::NoMask{}, Vector(), nullptr);
  add_check(table, "causal", Q, K, V, ch11::NoScoreMod{}, ch11::Causal{}, Vector(), nullptr);
  add_check(table, "sliding window, w = 128", Q, K, V, ch11::NoScoreMod{}, ch11::SlidingWindow{128}, Vector(), nullptr);
  add_check(table, "ALiBi, causal", Q, K, V, ch11::Alibi{slopes}, ch11::Causal{}, slopes, nullptr);
  add_check(table, "soft-capping at 2", Q, K, V, ch11::SoftCap{2.0f}, ch11::NoMask{}, Vector(),
            [](float s) { return 2.0f * std::tanh(s / 2.0f); });
  add_check(table, "prefix-LM, prefix 150", Q, K, V, ch11::NoScoreMod{}, ch11::PrefixLM{150}, Vector(), nullptr);
  add_check(table, "documents (100, 250, 70, 180), causal", Q, K, V, ch11::NoScoreMod{}, attn::DocumentMask{doc, true},
            Vector(), nullptr);
  // [kernel_check]
  table.print();
  fmt::print(
      "n = {}, {} heads, d = {}, tiles of 64 × 96 ({} per head). Dense = chapter 02's scores, plus the\n"
      "bias, -inf where the mask says no, softmax, times V: the whole (n, n) matrix. The kernel never\n"
      "builds it and never loads a skipped tile.\n\n",
      n, h, d, ((n + 63) / 64) * ((n + 95) / 96));
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch11_positions", "Chapter 11: where is a word? Positions");
  return chapter.run(argc, argv, [&] {
    permutation_equivariance();
    sinusoidal(chapter);
    rope(chapter);
    alibi();
    one_kernel();
  });
}
