// Chapter 03 — Several heads.
//
// What it shows: multi-head attention done plainly (project, split into h heads, attend per head, merge,
// ·W_O) with the shape of every step; that h heads of width d_model/h cost what one wide head costs;
// four hand-built heads on one sentence — positional, semantic, syntactic, and a near-copy — with their
// maps; one head's attention as a weighted graph; every score split into ‖q‖, ‖k‖ and cos θ; and head
// ablation: which heads can be removed with little change.
// What it leaves out: learned weights (every weight here is written by hand), MQA/GQA (chapter 09).
// Run it: ./course run 03    or: build/default/bin/ch03_multi_head --heads 8 --d-model 64 --sentence "..."
// Your code: ./course run 03 --track exercise      Benchmarks: ./course bench 03      Book: book/03_multi_head.md
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "01_intuition/lexicon.hpp"
#include "02_qkv_trace/qkv_trace.hpp"
#include "03_multi_head/heads.hpp"
#include "03_multi_head/multi_head.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Matrix;
using attn::MultiHeadWeights;
using attn::Tensor3;
using attn::Vector;
namespace ch03 = attn::ch03;

using attn::fixed;
using attn::joined;
using attn::ranked;
double frobenius(const Matrix& M) { return std::sqrt(static_cast<double>(xt::sum(M * M)())); }

// ---------------------------------------------------------------------------------------------------------
// 1. The layer, step by step

void show_the_steps(std::size_t n, std::size_t d_model, std::size_t h, std::uint64_t seed) {
  attn::heading(
      fmt::format("Multi-head attention step by step: n = {}, d_model = {}, h = {} (random weights)", n, d_model, h));
  attn::Rng rng(seed);
  const Matrix X = rng.normal(n, d_model);  // (n, d_model)
  const MultiHeadWeights W = ch03::random_weights(rng, d_model);
  const MultiHeadWeights no_mix{W.W_Q, W.W_K, W.W_V, xt::eye<float>(d_model)};  // W_O = I: O is the Concat
  // [the_steps]
  const Matrix Q = attn::project(X, W.W_Q);  // (n, d_model): every head's queries side by side
  const Matrix K = attn::project(X, W.W_K);  // (n, d_model)
  const Matrix V = attn::project(X, W.W_V);  // (n, d_model)

  const Tensor3 Q_heads = attn::split_heads(Q, h);  // (h, n, d_k)
  const Tensor3 K_heads = attn::split_heads(K, h);  // (h, n, d_k)
  const Tensor3 V_heads = attn::split_heads(V, h);  // (h, n, d_k)

  const Matrix Q_0 = xt::view(Q_heads, 0);                                  // (n, d_k): head 0's slice
  const Matrix K_0 = xt::view(K_heads, 0);                                  // (n, d_k)
  const Matrix V_0 = xt::view(V_heads, 0);                                  // (n, d_k)
  const Matrix A_0 = attn::softmax_rows(attn::scaled_scores(Q_0, K_0));     // (n, n): head 0's weights
  const Matrix head_0 = attn::scaled_dot_product_attention(Q_0, K_0, V_0);  // (n, d_k)

  const Matrix concat = attn::multi_head_attention(X, no_mix, h);  // (n, d_model): all heads, side by side
  const Matrix O = attn::multi_head_attention(X, W, h);            // (n, d_model): Concat · W_O
  // [the_steps]
  attn::Table t({"step", "what", "shape"});
  t.set_left(1);
  t.add_row({"X", "the input, one token per row", attn::shape_str(X)});
  t.add_row({"Q = X·W_Q", "all heads' queries at once (K and V alike)", attn::shape_str(Q)});
  t.add_row({"split_heads(Q, h)", "head i = columns [i·d_k, (i+1)·d_k)", attn::shape_str(Q_heads)});
  t.add_row({"Q_i, K_i, V_i", "one head's slice", attn::shape_str(Q_0)});
  t.add_row(
      {"A_i = softmax(Q_i K_iᵀ/√d_k)", fmt::format("one n×n map per head, ÷√{}", d_model / h), attn::shape_str(A_0)});
  t.add_row({"head_i = A_i V_i", "chapter 02's attention, per head", attn::shape_str(head_0)});
  t.add_row({"Concat(head_1…head_h)", "merge_heads: the heads side by side", attn::shape_str(concat)});
  t.add_row({"O = Concat·W_O", "W_O mixes what the heads found", attn::shape_str(O)});
  t.print();

  // Two identities the tests also check, here on this run's numbers.
  const bool round_trip = attn::merge_heads(Q_heads) == Q;
  const Matrix wide = attn::scaled_dot_product_attention(Q, K, V);  // (n, d_model): chapter 02, one wide head
  const double diff = attn::max_abs_diff(attn::multi_head_attention(X, no_mix, 1), wide);
  fmt::print("merge_heads(split_heads(Q)) == Q exactly: {}\n", round_trip ? "yes" : "NO");
  fmt::print("h = 1 with W_O = I against chapter 02's attention on the full width: max |difference| = {:.1e}\n", diff);
}

// ---------------------------------------------------------------------------------------------------------
// 2. What h heads cost

void print_cost_table(std::size_t n, std::size_t d_model, std::size_t h) {
  const ch03::Cost many = ch03::multi_head_cost(n, d_model, h), one = ch03::multi_head_cost(n, d_model, 1);
  attn::Table t(
      {"", fmt::format("{} heads of d_k = {}", h, d_model / h), fmt::format("1 head of d_k = {}", d_model), "ratio"});
  auto row = [&](const char* what, double a, double b) {
    t.add_row({what, fmt::format("{:.0f}", a), fmt::format("{:.0f}", b), fmt::format("{:.2f}", a / b)});
  };
  row("parameters (W_Q, W_K, W_V, W_O)", many.parameters, one.parameters);
  row("FLOPs  X·W_Q, X·W_K, X·W_V", many.projection, one.projection);
  row("FLOPs  Q_i K_iᵀ, all heads", many.scores, one.scores);
  row("FLOPs  A_i V_i, all heads", many.mixing, one.mixing);
  row("FLOPs  Concat·W_O", many.output, one.output);
  row("FLOPs  total", many.total_flops(), one.total_flops());
  row("exp() calls of the softmax", many.exponentials, one.exponentials);
  row("score entries held (h·n·n)", many.score_entries, one.score_entries);
  t.print();
}

void show_the_cost(std::size_t n, std::size_t d_model, std::size_t h) {
  attn::heading("What h heads cost, next to one head of the full width");
  fmt::print("This run's shape, n = {}, d_model = {}:\n", n, d_model);
  print_cost_table(n, d_model, h);
  fmt::print("\nA BERT-base-sized layer, n = 512, d_model = 768:\n");
  print_cost_table(512, 768, 12);
  fmt::print(
      "Each head works in d_k = d_model/h dimensions, so h heads together use d_model columns of every\n"
      "projection and h·d_k = d_model in every product: parameters and matrix-product FLOPs are equal.\n"
      "What grows with h is the number of n×n score matrices: h times the softmax work and score memory.\n");
}

// ---------------------------------------------------------------------------------------------------------
// 3. Four hand-built heads on one sentence

/// Everything the chapter computes for the hand-built layer on one sentence.
struct HandBuilt {
  std::vector<std::string> tokens;
  Matrix X;               // (n, d_model = 16)
  MultiHeadWeights W;     // each (16, 16)
  Tensor3 Q, K, V;        // (h, n, d_k) each
  std::vector<Matrix> A;  // h maps of (n, n)
};

// [hand_built_maps]
HandBuilt run_hand_built(const std::vector<std::string>& tokens) {
  HandBuilt r;
  r.tokens = tokens;
  r.X = ch03::embed(tokens);                                           // (n, 16)
  r.W = ch03::hand_built_weights();                                    // (16, 16) each
  r.Q = attn::split_heads(attn::project(r.X, r.W.W_Q), ch03::kHeads);  // (4, n, 4)
  r.K = attn::split_heads(attn::project(r.X, r.W.W_K), ch03::kHeads);  // (4, n, 4)
  r.V = attn::split_heads(attn::project(r.X, r.W.W_V), ch03::kHeads);  // (4, n, 4)
  for (std::size_t i = 0; i < ch03::kHeads; ++i) {
    const Matrix Q_i = xt::view(r.Q, i), K_i = xt::view(r.K, i);       // (n, d_k)
    r.A.push_back(attn::softmax_rows(attn::scaled_scores(Q_i, K_i)));  // (n, n)
  }
  return r;
}
// [hand_built_maps]

void show_heads(const attn::Chapter& chapter, const HandBuilt& r) {
  attn::heading(fmt::format("Three kinds of relation, built by hand: \"{}\"", joined(r.tokens)));
  fmt::print(
      "d_model = {} (8 word features from chapter 01 + 8 position features), h = {}, d_k = {}.\n"
      "Rows attend to columns; each row sums to 1.\n",
      ch03::kDModel, ch03::kHeads, ch03::kDk);
  const auto& infos = ch03::head_infos();
  for (std::size_t i = 0; i < 3; ++i) {
    fmt::print("\nHead {}, {}:\n{}.\n", i, infos[i].name, infos[i].why);
    attn::print_heatmap(r.A[i], r.tokens, r.tokens);
    if (const auto path = chapter.figure_path(fmt::format("ch03_head_{}.svg", i))) {
      attn::write_svg_heatmap(*path, r.A[i], r.tokens, r.tokens, fmt::format("Head {}: {}", i, infos[i].name));
      chapter.announce_figure(*path);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// 4. One head as a graph

void show_graph(const attn::Chapter& chapter, const HandBuilt& r, std::size_t head) {
  const Matrix& A = r.A[head];
  const std::string name = ch03::head_infos()[head].name;
  attn::heading(fmt::format("Attention as a graph: head {} ({}), the two strongest edges of every token", head, name));
  fmt::print("A is the weighted adjacency matrix of a complete directed graph; the content decides the weights.\n");
  attn::Table t({"token", "strongest edge", "weight", "second", "weight"});
  t.set_left(1).set_left(3);
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    const auto order = ranked(A, i);
    const std::size_t second = order.size() > 1 ? order[1] : order[0];
    t.add_row({fmt::format("{} #{}", r.tokens[i], i), fmt::format("→ {} #{}", r.tokens[order[0]], order[0]),
               fixed(A(i, order[0])), fmt::format("→ {} #{}", r.tokens[second], second), fixed(A(i, second))});
  }
  t.print();
  if (const auto svg = chapter.figure_path("ch03_graph.svg")) {
    const std::string dot = svg->substr(0, svg->size() - 4) + ".dot";
    ch03::write_attention_dot(dot, A, r.tokens, fmt::format("head {} ({}): edges of weight >= 0.10", head, name));
    ch03::render_dot_svg(dot, *svg);
    chapter.announce_figure(*svg);
  }
}

// ---------------------------------------------------------------------------------------------------------
// 5. q·k = ‖q‖ ‖k‖ cos θ

double norm(const Vector& v) { return std::sqrt(static_cast<double>(xt::sum(v * v)())); }

/// The query that puts the largest weight on some *other* token (a word attending to itself says little).
std::size_t most_decided_query(const Matrix& A) {
  std::size_t best = 0;
  double best_weight = -1.0;
  for (std::size_t i = 0; i < A.shape(0); ++i)
    for (std::size_t j = 0; j < A.shape(1); ++j)
      if (j != i && A(i, j) > best_weight + 1e-6) {
        best = i;
        best_weight = A(i, j);
      }
  return best;
}

/// One score taken apart: q·k/√d_k = ‖q‖ ‖k‖ cos θ / √d_k.
struct Geometry {
  double q_norm, k_norm, cos, score;
};

// [geometry]
Geometry take_apart(const Vector& q, const Vector& k) {
  const double dot = static_cast<double>(xt::sum(q * k)());
  const double q_norm = norm(q), k_norm = norm(k);
  const double cos = q_norm > 0 && k_norm > 0 ? dot / (q_norm * k_norm) : 0.0;  // the angle between them
  return {q_norm, k_norm, cos, dot / std::sqrt(static_cast<double>(q.size()))};
}
// [geometry]

/// Which factor made key \p win score above key \p next for the same query.
std::string verdict(const Geometry& win, const Geometry& next) {
  const bool same_length = std::fabs(win.k_norm - next.k_norm) < 1e-4;
  if (std::fabs(win.score - next.score) < 1e-4)
    return same_length ? "a tie: same length, same angle"
                       : "a tie: the longer key makes up exactly for the wider angle";
  const bool by_angle = win.cos > next.cos + 1e-4, by_length = win.k_norm > next.k_norm + 1e-4;
  if (by_angle && by_length) return "won on both the angle and the key's length";
  if (by_angle)
    return same_length ? "won on the angle alone (equal key lengths)" : "won on the angle, despite a shorter key";
  return "won on the key's length, despite a wider angle";
}

/// The first query of head \p h whose best key is another token and whose three best keys differ in
/// length (or nothing).
std::optional<std::size_t> query_with_unequal_keys(const HandBuilt& r, std::size_t h) {
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    const auto order = ranked(r.A[h], i);
    if (order[0] == i) continue;
    const Vector k0 = xt::view(r.K, h, order[0], xt::all());
    for (std::size_t rank = 1; rank < std::min<std::size_t>(3, order.size()); ++rank) {
      const Vector k = xt::view(r.K, h, order[rank], xt::all());
      if (std::fabs(norm(k) - norm(k0)) > 0.1) return i;
    }
  }
  return std::nullopt;
}

void show_geometry(const HandBuilt& r) {
  attn::heading("The geometry of a score: q·k = ‖q‖ ‖k‖ cos θ");
  fmt::print(
      "For each hand-built head, the query that gives another token the largest weight (and, for the\n"
      "semantic head, one whose best keys differ in length), against its three best keys. Against one\n"
      "query ‖q‖ is shared, so which key wins is decided by ‖k‖ and cos θ.\n");
  std::vector<std::pair<std::size_t, std::size_t>> queries;  // (head, query)
  for (std::size_t h = 0; h < 3; ++h) {
    queries.emplace_back(h, most_decided_query(r.A[h]));
    if (h == 1)
      if (const auto i = query_with_unequal_keys(r, h); i && *i != queries.back().second) queries.emplace_back(h, *i);
  }
  attn::Table t({"head", "query → key", "‖q‖", "‖k‖", "cos θ", "q·k/√d_k", "weight"});
  t.set_left(1);
  std::vector<std::string> verdicts;
  for (const auto& [h, i] : queries) {
    const Vector q = xt::view(r.Q, h, i, xt::all());  // (d_k)
    const auto order = ranked(r.A[h], i);
    std::vector<Geometry> parts;
    for (std::size_t rank = 0; rank < std::min<std::size_t>(3, order.size()); ++rank) {
      const std::size_t j = order[rank];
      const Geometry g = take_apart(q, xt::view(r.K, h, j, xt::all()));
      parts.push_back(g);
      t.add_row({rank == 0 ? ch03::head_infos()[h].name : "", fmt::format("{} → {} #{}", r.tokens[i], r.tokens[j], j),
                 fixed(g.q_norm), fixed(g.k_norm), fixed(g.cos), fixed(g.score), fixed(r.A[h](i, j))});
    }
    if (parts.size() > 1)
      verdicts.push_back(fmt::format("{}, {} #{}: {} against {}: {}.", ch03::head_infos()[h].name, r.tokens[i], i,
                                     r.tokens[order[0]], r.tokens[order[1]], verdict(parts[0], parts[1])));
  }
  t.print();
  for (const auto& v : verdicts) fmt::print("{}\n", v);
  fmt::print(
      "‖q‖ scales every score of its row alike, like a temperature: the positional head's query is 12\n"
      "times longer than its keys, which is what makes its rows nearly one-hot.\n");
}

// ---------------------------------------------------------------------------------------------------------
// 6. Removing heads

/// Index of the largest entry of row t of the kept heads' average map: where token t looks, all told.
std::size_t top_choice(const std::vector<Matrix>& A, const std::vector<bool>& keep, std::size_t t) {
  Vector total = xt::zeros<float>({A[0].shape(1)});  // (n)
  for (std::size_t i = 0; i < A.size(); ++i)
    if (keep[i]) total += xt::row(A[i], t);
  return static_cast<std::size_t>(std::distance(total.begin(), std::max_element(total.begin(), total.end())));
}

// [ablation]
void show_ablation(const HandBuilt& r) {
  attn::heading("Head ablation: remove one head, measure what changes");
  const std::size_t h = ch03::kHeads, d_k = ch03::kDk, n = r.tokens.size();
  const Matrix O = attn::multi_head_attention(r.X, r.W, h);  // (n, d_model), all heads
  // W_O is the identity here, so O is Concat(head_0 … head_3) and head i is its column block i.
  auto head_block = [&](std::size_t i) -> Matrix { return xt::view(O, xt::all(), xt::range(i * d_k, (i + 1) * d_k)); };
  const std::vector<bool> all(h, true);
  attn::Table t({"removed head", "‖ΔO‖/‖O‖", "top choices changed", "most similar head", "folded: ‖ΔO‖/‖O‖"});
  t.set_left(3);
  for (std::size_t r_head = 0; r_head < h; ++r_head) {
    std::vector<bool> keep(h, true);
    keep[r_head] = false;
    const Matrix O_removed = attn::multi_head_attention_ablated(r.X, r.W, keep);  // (n, d_model)
    std::size_t changed = 0;
    for (std::size_t tok = 0; tok < n; ++tok) changed += top_choice(r.A, keep, tok) != top_choice(r.A, all, tok);

    // The head whose output is closest to the removed one's: if it says the same, it can say it for both.
    std::size_t twin = r_head == 0 ? 1 : 0;
    for (std::size_t j = 0; j < h; ++j)
      if (j != r_head &&
          frobenius(head_block(j) - head_block(r_head)) < frobenius(head_block(twin) - head_block(r_head)))
        twin = j;
    // Fold: the twin's output also goes through the removed head's rows of W_O (rows twin += rows removed).
    MultiHeadWeights folded = r.W;
    xt::view(folded.W_O, xt::range(twin * d_k, (twin + 1) * d_k), xt::all()) +=
        xt::view(r.W.W_O, xt::range(r_head * d_k, (r_head + 1) * d_k), xt::all());
    const Matrix O_folded = attn::multi_head_attention_ablated(r.X, folded, keep);  // (n, d_model)

    t.add_row({fmt::format("{} {}", r_head, ch03::head_infos()[r_head].name),
               fixed(frobenius(O - O_removed) / frobenius(O)), fmt::format("{} of {}", changed, n),
               fmt::format("{} {}", twin, ch03::head_infos()[twin].name),
               fixed(frobenius(O - O_folded) / frobenius(O))});
  }
  t.print();
  // [ablation]
  fmt::print(
      "Removing any head takes its block of the output away (W_O = I here), so every removal changes O.\n"
      "\"Top choice\": where a token looks most, averaged over the heads still present. \"Folded\": the\n"
      "removed head's rows of W_O now read its most similar head instead. For the near-copy and the\n"
      "head it copies that costs almost nothing — one of the two can go; for a distinct head no other\n"
      "head says the same thing, and folding does not bring the output back.\n");
}

void tell_the_story(const attn::Chapter& chapter, std::size_t h, std::size_t d_model, std::uint64_t seed,
                    const std::string& sentence) {
  attn::require_option(d_model % h == 0,
                       fmt::format("d_model = {} cannot be cut into h = {} heads of equal width ({} % {} = {}); choose "
                                   "--heads that divides --d-model",
                                   d_model, h, d_model, h, d_model % h));
  const std::vector<std::string> tokens =
      sentence.empty() ? attn::ch01::sentences()[1].tokens : attn::ch01::tokenize(sentence);
  fmt::print("Sentence: {}\n", joined(tokens));
  show_the_steps(tokens.size(), d_model, h, seed);
  show_the_cost(tokens.size(), d_model, h);
  const HandBuilt r = run_hand_built(tokens);
  show_heads(chapter, r);
  show_graph(chapter, r, 1);
  show_geometry(r);
  show_ablation(r);
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch03_multi_head", "Chapter 03: several heads (multi-head attention)");
  std::size_t heads = 4, d_model = 16;
  std::uint64_t seed = 3;
  std::string sentence;
  chapter.cli().add_option("--heads", heads, "Heads h of the step-by-step layer")->check(CLI::Range(1, 1024));
  chapter.cli()
      .add_option("--d-model", d_model, "Width d_model of the step-by-step layer (a multiple of --heads)")
      ->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--seed", seed, "Seed of the step-by-step layer's random weights");
  chapter.cli()
      .add_option("--sentence", sentence,
                  "Your own sentence, from chapter 01's words (e.g. \"小明 养了 只 猫 它 很可爱\")")
      ->check(attn::ch01::sentence_problem, "", "known words");
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, heads, d_model, seed, sentence); });
}
