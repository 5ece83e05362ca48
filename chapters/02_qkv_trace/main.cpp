// Chapter 02 — Q, K, V and the computation.
//
// What it shows:
//   1. one small example traced through every box of the flowchart X → W_Q, W_K, W_V → Q, K, V → QKᵀ →
//      ÷√d_k → softmax → A → A·V, each box with its shape, its values and what it means (by default
//      chapter 01's sentence 猫 坐在 垫子上 它 很累 with chapter 01's hand-made weights; with --n, --d-model,
//      --d-k or --seed a random example of that size, summarised instead of printed once it passes a screen);
//   2. the same trace with the causal mask of decoder attention (row i sees only j ≤ i);
//   3. cross-attention: English queries over Chinese keys and values (n_q ≠ n_kv), through the same function;
//   4. the library analogy as data: "machine learning" against a shelf of tagged books;
//   5. why the scores are divided by √d_k, measured for d_k = 4 … 1024 (scaling_study.cpp), table and plot;
//   6. the article's design table, each row with a number computed here.
// What it leaves out: several heads (chapter 03), what attention costs as n grows (chapter 04), training.
// Run it: ./course run 02      Bigger: ./course run 02 -- --n 7 --d-model 12 --d-k 3 --seed 5
// Your code: ./course run 02 --track exercise      Speed: ./course bench 02      Book page: book/02_qkv_trace.md
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "01_intuition/intuition.hpp"
#include "01_intuition/lexicon.hpp"
#include "02_qkv_trace/library.hpp"
#include "02_qkv_trace/qkv_trace.hpp"
#include "02_qkv_trace/scaling_study.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

using attn::Mask;
using attn::Matrix;
using attn::Vector;
namespace ch01 = attn::ch01;
namespace ch02 = attn::ch02;

// A matrix with more rows or columns than this is summarised, not printed: past a screenful, numbers
// stop informing and start scrolling.
constexpr std::size_t kMaxRows = 12;
constexpr std::size_t kMaxCols = 12;

using attn::fixed;
using attn::joined;
using attn::numbered;

bool fits_on_screen(const Matrix& m) { return m.shape(0) <= kMaxRows && m.shape(1) <= kMaxCols; }

/// The index of the largest entry of row \p i (the first one on a tie).
std::size_t argmax_row(const Matrix& A, std::size_t i) {
  const float* row = A.data() + i * A.shape(1);
  return static_cast<std::size_t>(std::max_element(row, row + A.shape(1)) - row);
}

// --- the example to trace ------------------------------------------------------------------------------

/// An input and its three projections, with names for the rows and columns.
struct Example {
  std::string description;
  std::string weights_note;           // where W_Q, W_K, W_V come from
  std::vector<std::string> tokens;    // n row labels
  std::vector<std::string> features;  // d_model column labels of X
  std::vector<std::string> keys;      // d_k column labels of Q and K
  std::vector<std::string> values;    // d_v column labels of V
  Matrix X;                           // (n, d_model)
  Matrix W_Q;                         // (d_model, d_k)
  Matrix W_K;                         // (d_model, d_k)
  Matrix W_V;                         // (d_model, d_v)
};

/// Chapter 01's sentence, its embeddings and its hand-made weights: every number has a meaning.
Example sentence_example() {
  Example e;
  e.tokens = ch01::sentences()[0].tokens;  // 猫 坐在 垫子上 它 很累
  e.description = fmt::format("chapter 01's sentence \"{}\" (the cat sat on the mat, it was tired)", joined(e.tokens));
  e.weights_note =
      "Chapter 01's hand-made weights: W_Q says what each feature looks for, W_K what it offers, and\n"
      "W_V is the identity (a token hands over its own meaning).";
  e.features = ch01::feature_names();
  e.keys = ch01::key_names();
  e.values = ch01::feature_names();
  e.X = ch01::embed(e.tokens);                                // (n, d_model)
  e.W_Q = ch01::query_weights(attn::design_pronoun_query());  // (d_model, d_k)
  e.W_K = ch01::key_weights();                                // (d_model, d_k)
  e.W_V = ch01::value_weights();                              // (d_model, d_v)
  return e;
}

/// A random example of the reader's size: X ~ N(0, 1); W ~ N(0, 1/d_model), so that Q, K and V have
/// entries of variance about 1 whatever d_model is (the √d_k study below assumes exactly that).
Example random_example(std::size_t n, std::size_t d_model, std::size_t d_k, std::uint64_t seed) {
  attn::Rng rng(seed);
  const float w_std = 1.0f / std::sqrt(static_cast<float>(d_model));
  Example e;
  e.description = fmt::format("a random example: n = {}, d_model = {}, d_k = d_v = {}, seed {}", n, d_model, d_k, seed);
  e.weights_note = "Random weights, entries ~ N(0, 1/d_model): Q, K and V then have entries of variance about 1.";
  e.tokens = numbered("t", n);
  e.features = numbered("x", d_model);
  e.keys = numbered("c", d_k);
  e.values = numbered("v", d_k);
  e.X = rng.normal(n, d_model);                // (n, d_model)
  e.W_Q = rng.normal(d_model, d_k, 0, w_std);  // (d_model, d_k)
  e.W_K = rng.normal(d_model, d_k, 0, w_std);  // (d_model, d_k)
  e.W_V = rng.normal(d_model, d_k, 0, w_std);  // (d_model, d_v)
  return e;
}

// --- the trace: every box of the flowchart, one contract function each ---------------------------------

/// Every intermediate of the flowchart for one example.
struct Trace {
  Matrix Q;                        // (n, d_k)
  Matrix K;                        // (n, d_k)
  Matrix V;                        // (n, d_v)
  Matrix QKt;                      // (n, n) raw dot products, before the scale
  Matrix S;                        // (n, n) scaled (and masked) scores
  Matrix A;                        // (n, n) attention weights
  Matrix O;                        // (n, d_v) output
  double one_call_difference = 0;  // max |O - scaled_dot_product_attention(Q, K, V, mask)|
};

/// S with -inf wherever \p mask forbids the pair: softmax then gives that pair weight exactly 0.
Matrix apply_mask(Matrix S, const Mask& mask) {
  for (std::size_t i = 0; i < S.size(); ++i)
    if (!mask.data()[i]) S.data()[i] = -std::numeric_limits<float>::infinity();
  return S;
}

// [trace]
Trace run_trace(const Example& e, const Mask& mask = Mask()) {
  Trace t;
  t.Q = attn::project(e.X, e.W_Q);  // (n, d_k) what each token looks for
  t.K = attn::project(e.X, e.W_K);  // (n, d_k) what each token offers
  t.V = attn::project(e.X, e.W_V);  // (n, d_v) what each token hands over
  // (n, n): every query against every key, then the same ÷√d_k, then forbidden pairs set to -inf
  t.QKt = attn::matmul(t.Q, t.K, /*transpose_b=*/true);
  t.S = attn::scaled_scores(t.Q, t.K);
  if (mask.size() > 0) t.S = apply_mask(t.S, mask);
  t.A = attn::softmax_rows(t.S);  // (n, n)   each row: weights summing to 1
  t.O = attn::matmul(t.A, t.V);   // (n, d_v) each row: a weighted average of V's rows
  // The chapter's one function does all of the above in one call: it must agree with the boxes.
  const Matrix O = attn::scaled_dot_product_attention(t.Q, t.K, t.V, mask);  // (n, d_v)
  t.one_call_difference = attn::max_abs_diff(O, t.O);
  return t;
}
// [trace]

/// Smallest and largest finite entry (a masked score of -inf is not a colour).
std::pair<double, double> finite_range(const Matrix& m) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (float v : m)
    if (std::isfinite(v)) lo = std::min(lo, double{v}), hi = std::max(hi, double{v});
  return lo <= hi ? std::pair{lo, hi} : std::pair{0.0, 0.0};
}

/// One line for a matrix too large to print: its range, mean and spread.
void print_summary(const Matrix& m) {
  double sum = 0, sq = 0;
  std::size_t count = 0;
  for (float v : m)
    if (std::isfinite(v)) sum += v, sq += double{v} * v, ++count;
  const auto [lo, hi] = finite_range(m);
  const double mean = count ? sum / static_cast<double>(count) : 0.0;
  const double std_dev = count ? std::sqrt(std::max(0.0, sq / static_cast<double>(count) - mean * mean)) : 0.0;
  fmt::print("(too large to print) min {:.2f}, max {:.2f}, mean {:.2f}, std {:.2f}", lo, hi, mean, std_dev);
  if (count < m.size()) fmt::print(", {} entries masked (-inf)", m.size() - count);
  fmt::print("\n");
}

/// One box of the flowchart: its name and shape, what it means, then its values (or a summary).
void print_box(const std::string& name, const Matrix& m, const std::vector<std::string>& rows,
               const std::vector<std::string>& cols, const std::string& meaning, bool weights = false,
               int decimals = 2) {
  attn::heading(fmt::format("{}  {}", name, attn::shape_str(m)));
  fmt::print("{}\n", meaning);
  if (!fits_on_screen(m)) return print_summary(m);
  const auto [lo, hi] = weights ? std::pair{0.0, 1.0} : finite_range(m);
  attn::print_heatmap(m, rows, cols, decimals, lo, hi);
}

/// Row sums and largest weights of A: what must hold whatever the size.
void print_weight_facts(const Matrix& A) {
  const Vector sums = xt::sum(A, {1});      // (n)
  const Vector largest = xt::amax(A, {1});  // (n)
  fmt::print(
      "Row sums lie in [{:.6f}, {:.6f}]; the largest weight of a row: from {:.2f} to {:.2f}\n"
      "(uniform: 1/{} = {:.2g}).\n",
      xt::amin(sums)(), xt::amax(sums)(), xt::amin(largest)(), xt::amax(largest)(), A.shape(1),
      1.0 / static_cast<double>(A.shape(1)));
}

/// "token → the token it attends to most", for a small example.
void print_focus(const Matrix& A, const std::vector<std::string>& queries, const std::vector<std::string>& keys) {
  if (A.shape(0) > kMaxRows) return;
  attn::Table t({"token", "attends most to", "weight", ""});
  t.set_left(1).set_left(3);
  for (std::size_t i = 0; i < A.shape(0); ++i) {
    const std::size_t j = argmax_row(A, i);
    t.add_row({queries[i], keys[j], fixed(A(i, j)), attn::bar(A(i, j), 20)});
  }
  t.print();
}

void print_trace(const Example& e, const Trace& t) {
  const std::size_t d_k = t.Q.shape(1);
  fmt::print("Traced: {}.\n", e.description);
  print_box("1. X, the input", e.X, e.tokens, e.features, "One row per token, one column per feature of d_model.");
  fmt::print("\n{}\n", e.weights_note);
  print_box("2. W_Q", e.W_Q, e.features, e.keys,
            "Row f: what a token with feature f looks for (its share of the query).");
  print_box("2. W_K", e.W_K, e.features, e.keys, "Row f: what a token with feature f offers (its share of the key).");
  print_box("2. W_V", e.W_V, e.features, e.values, "Row f: what a token with feature f hands over when attended to.");
  print_box("3. Q = X·W_Q", t.Q, e.tokens, e.keys, "Row i: what token i is looking for.");
  print_box("3. K = X·W_K", t.K, e.tokens, e.keys, "Row j: what token j offers to whoever looks.");
  print_box("3. V = X·W_V", t.V, e.tokens, e.values, "Row j: the content token j hands over.");
  print_box("4. QKᵀ", t.QKt, e.tokens, e.tokens,
            fmt::format("(i, j) = q_i·k_j, a dot product of length d_k = {}: how well query i matches key j.", d_k));
  print_box("5. S = QKᵀ ÷ √d_k", t.S, e.tokens, e.tokens,
            fmt::format("The same matches divided by √{} = {:.3f}, so their spread does not grow with d_k.", d_k,
                        std::sqrt(static_cast<double>(d_k))));
  print_box("6. A = softmax(S), row by row", t.A, e.tokens, e.tokens,
            "A(i, j): how much position i attends to position j. Weights are >= 0 and each row sums to 1.", true);
  print_weight_facts(t.A);
  print_focus(t.A, e.tokens, e.tokens);
  print_box("7. O = A·V, the output", t.O, e.tokens, e.values,
            "Row i: the weighted average of V's rows, with row i of A as the weights.");
  fmt::print("One call, scaled_dot_product_attention(Q, K, V), gives the same O: largest difference {:.1e}.\n",
             t.one_call_difference);
}

// --- the causal trace ----------------------------------------------------------------------------------

/// Weights of \p A above the diagonal that are not exactly zero: what the causal mask forbids.
std::size_t weights_from_the_future(const Matrix& A) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < A.shape(0); ++i)
    for (std::size_t j = i + 1; j < A.shape(1); ++j) count += A(i, j) != 0.0f;
  return count;
}

void print_causal(const Example& e, const Trace& full) {
  attn::heading("The causal mask: a decoder may not look ahead");
  const std::size_t n = e.X.shape(0);
  const Mask mask = attn::causal_mask(n, n);  // (n, n)
  const Trace t = run_trace(e, mask);
  fmt::print(
      "A decoder writes token i before it has seen token i + 1, so while it computes row i it may only\n"
      "look at j <= i. The mask (1 = may attend) turns every later score into -inf before the softmax.\n");
  if (fits_on_screen(t.S)) {
    print_box("causal_mask(n, n)", xt::cast<float>(mask), e.tokens, e.tokens,
              "Row i: the keys query i may see (1 = allowed).", true, 0);
  } else {
    attn::heading(fmt::format("causal_mask(n, n)  {}", attn::shape_str(mask)));
    fmt::print("(too large to print) {} of {} pairs allowed: n(n + 1)/2, the lower triangle with its diagonal.\n",
               xt::sum(xt::cast<std::size_t>(mask))(), mask.size());
  }
  print_box("S, masked", t.S, e.tokens, e.tokens, "The scores above, with -inf where the mask says 0.");
  print_box("A = softmax(S), causal", t.A, e.tokens, e.tokens,
            "Row i spreads its weight over j <= i only; the first token can only attend to itself.", true);
  print_weight_facts(t.A);
  fmt::print("Weights above the diagonal that are not exactly 0: {}.\n", weights_from_the_future(t.A));
  print_box("O = A·V, causal", t.O, e.tokens, e.values,
            "The first row is V's first row: it had nothing else to average.");
  const double first_row = attn::max_abs_diff(Vector(xt::row(t.O, 0)), Vector(xt::row(t.V, 0)));
  fmt::print("Largest |O(0, :) - V(0, :)| = {:.1e}; one call with the mask agrees to {:.1e}.\n", first_row,
             t.one_call_difference);
  if (n > kMaxRows) return;
  attn::Table table({"token", "attends most to (full)", "weight", "(causal)", "weight"});
  table.set_left(1).set_left(3);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t f = argmax_row(full.A, i), c = argmax_row(t.A, i);
    table.add_row({e.tokens[i], e.tokens[f], fixed(full.A(i, f)), e.tokens[c], fixed(t.A(i, c))});
  }
  table.print();
}

// --- cross-attention: n_q != n_kv ------------------------------------------------------------------------

// [cross_attention]
void print_cross_attention() {
  attn::heading("Cross-attention: queries from one sequence, keys and values from another");
  const auto& english = ch01::sentences()[1].tokens;  // the cat sat on the mat it was tired
  const auto& chinese = ch01::sentences()[0].tokens;  // 猫 坐在 垫子上 它 很累
  // The English asks (n_q, d_k) ...
  const Matrix W_Q = ch01::query_weights(attn::design_pronoun_query());
  const Matrix Q = attn::project(ch01::embed(english), W_Q);
  // ... the Chinese offers (n_kv, d_k) and carries (n_kv, d_v).
  const Matrix K = attn::project(ch01::embed(chinese), ch01::key_weights());
  const Matrix V = attn::project(ch01::embed(chinese), ch01::value_weights());
  const Matrix A = attn::softmax_rows(attn::scaled_scores(Q, K));  // (n_q, n_kv)
  const Matrix O = attn::scaled_dot_product_attention(Q, K, V);    // (n_q, d_v)
  // [cross_attention]
  fmt::print(
      "A translator's decoder asks about the source sentence: Q from the English words (n_q = {}), K and V\n"
      "from the Chinese ones (n_kv = {}). Nothing changes but the shapes: S and A are (n_q, n_kv), O is\n"
      "(n_q, d_v), through the same scaled_dot_product_attention.\n",
      Q.shape(0), K.shape(0));
  print_box("A, English rows over Chinese columns", A, english, chinese,
            "A(i, j): how much English word i looks at Chinese word j.", true);
  print_focus(A, english, chinese);
  fmt::print("O is {}: one blended Chinese meaning per English word.\n", attn::shape_str(O));
}

// --- the library analogy ----------------------------------------------------------------------------------

void print_library() {
  attn::heading("The library, as data: Q = the search, K = the books' tags, V = their contents");
  const ch02::Shelf& shelf = ch02::library_shelf();
  const Matrix q = ch02::machine_learning_query();   // (1, d_k)
  const Matrix s = attn::scaled_scores(q, shelf.K);  // (1, n_kv) match of the search with each book
  const Matrix w = attn::softmax_rows(s);            // (1, n_kv) how much of each book comes back
  const Matrix blend = attn::scaled_dot_product_attention(q, shelf.K, shelf.V);  // (1, d_v)
  fmt::print("The search box says \"machine learning\": q = ({}),\nwritten over the shelf's tags ({}).\n",
             fmt::join(q, ", "), fmt::join(shelf.tag_names, ", "));
  std::vector<std::size_t> order(shelf.titles.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return w(0, a) > w(0, b); });
  attn::Table t({"rank", "book", "tags k", "q·k/√d_k", "weight", ""});
  t.set_left(1).set_left(2).set_left(5);
  for (std::size_t r = 0; r < order.size(); ++r) {
    const std::size_t j = order[r];
    t.add_row({fmt::format("{}", r + 1), shelf.titles[j], fmt::format("{}", fmt::join(xt::row(shelf.K, j), " ")),
               fixed(s(0, j)), fixed(w(0, j), 3), attn::bar(w(0, j), 20)});
  }
  t.print();
  fmt::print("\nWhat comes back is not one book but a blend of their contents (weights·V):\n");
  std::vector<std::string> header{""};
  for (const auto& c : shelf.content_names) header.push_back(c);
  attn::Table b(header);
  std::vector<std::string> top{fmt::format("the top book alone ({})", shelf.titles[order[0]])};
  std::vector<std::string> blended{"attention's answer"};
  for (std::size_t c = 0; c < shelf.content_names.size(); ++c) {
    top.push_back(fixed(shelf.V(order[0], c)));
    blended.push_back(fixed(blend(0, c), 3));
  }
  b.add_row(top).add_row(blended).print();
  fmt::print(
      "A search engine would hand over the best match; attention hands over every book at once, each\n"
      "in proportion to its match. The cookbook still contributes its share of recipes: softmax never\n"
      "gives an exact 0 unless a mask says so.\n");
}

// --- why ÷√d_k ---------------------------------------------------------------------------------------------

ch02::ScalingStudy run_scaling_study() {
  // Five widths, 16 keys per query, 500 queries each: about 12 million random numbers, a fraction of a second.
  return ch02::measure_scaling({4, 16, 64, 256, 1024}, 16, 500, 2026);
}

void print_scaling(const attn::Chapter& chapter, const ch02::ScalingStudy& study) {
  attn::heading("Why divide by √d_k: measured");
  fmt::print(
      "Random q and k with N(0, 1) entries; each query against {} fresh keys, {} queries per d_k.\n"
      "q·k adds d_k products of variance 1, so its variance should be d_k; ÷√d_k should bring it to 1.\n"
      "Max weight: the mean largest softmax weight of a row ({:.4f} = uniform, 1 = one-hot).\n"
      "‖J‖: the mean Frobenius norm of the softmax Jacobian ∂a/∂s, what lets a gradient reach the scores.\n\n",
      study.n_keys, study.trials, 1.0 / static_cast<double>(study.n_keys));
  attn::Table t({"d_k", "Var(q·k)", "Var(q·k/√d_k)", "max weight", "max weight ÷√d_k", "‖J‖", "‖J‖ ÷√d_k"});
  for (const auto& r : study.rows)
    t.add_row({fmt::format("{}", r.d_k), fixed(r.var_unscaled), fixed(r.var_scaled), fixed(r.max_weight_unscaled, 3),
               fixed(r.max_weight_scaled, 3), fixed(r.jacobian_unscaled, 3), fixed(r.jacobian_scaled, 3)});
  t.print();
  fmt::print(
      "Unscaled, the variance grows like d_k, the largest weight heads for 1 and ‖J‖ for 0: the softmax\n"
      "saturates and its gradient vanishes. Scaled, all three stay where they were at small d_k.\n");

  std::vector<double> d_k, var_raw, var_scaled, max_raw, max_scaled, jac_raw, jac_scaled;
  for (const auto& r : study.rows) {
    d_k.push_back(static_cast<double>(r.d_k));
    var_raw.push_back(r.var_unscaled);
    var_scaled.push_back(r.var_scaled);
    max_raw.push_back(r.max_weight_unscaled);
    max_scaled.push_back(r.max_weight_scaled);
    jac_raw.push_back(r.jacobian_unscaled);
    jac_scaled.push_back(r.jacobian_scaled);
  }
  // Both plots: d_k on a log₂ axis. The variance spans three decades (log y); weights and norms lie in [0, 1].
  attn::PlotSpec variance{"The spread of the scores: variance of q·k against d_k", "d_k", "variance", true, true, {}};
  variance.series = {{"q·k", d_k, var_raw}, {"q·k / √d_k", d_k, var_scaled}};
  attn::PlotSpec saturation{
      "Softmax saturation and its gradient against d_k", "d_k", "mean over queries", true, false, {}};
  saturation.series = {
      {"max a", d_k, max_raw}, {"max a ÷√d_k", d_k, max_scaled}, {"‖J‖", d_k, jac_raw}, {"‖J‖ ÷√d_k", d_k, jac_scaled}};
  for (const auto& [file, spec] :
       {std::pair{"ch02_scaling_variance.svg", &variance}, std::pair{"ch02_scaling_saturation.svg", &saturation}})
    if (const auto path = chapter.figure_path(file)) {
      attn::write_svg_plot(*path, *spec);
      chapter.announce_figure(*path);
    }
}

// --- the article's design table, backed by numbers -------------------------------------------------------------------

/// Largest |S(i, j) - S(j, i)|: zero when queries and keys are the same vectors.
double asymmetry(const Matrix& S) { return attn::max_abs_diff(S, Matrix(xt::transpose(S))); }

double cosine(const Matrix& a, std::size_t i, const Matrix& b, std::size_t j) {
  const Vector x = xt::row(a, i), y = xt::row(b, j);
  return xt::sum(x * y)() / std::sqrt(xt::sum(x * x)() * xt::sum(y * y)());
}

/// One row of the article's design table: the choice, the article's reason, and what this chapter measured.
struct DesignRow {
  std::string design;
  std::string intuition;
  std::vector<std::string> computed;  // one line each
};

// [design_table]
std::vector<DesignRow> design_rows(const ch02::ScalingStudy& study) {
  const Example e = sentence_example();
  const std::size_t it = ch01::sentences()[0].pronoun, cat = ch01::sentences()[0].antecedent, mat = 2;
  const Trace own = run_trace(e);
  Example shared = e;
  shared.W_K = e.W_Q;  // one projection for both roles: a token offers exactly what it looks for
  const Trace same = run_trace(shared);
  const auto word = [&](std::size_t i) { return e.tokens[i]; };
  const std::size_t n = e.tokens.size(), d_k = e.keys.size();
  const Vector row_sums = xt::sum(own.A, {1});  // (n)
  const ch02::ScalingRow& wide = study.rows.back();
  return {
      {"Q/K separation",
       "\"what I look for\" and \"what I have\" are two different representations",
       {fmt::format("own W_Q and W_K: {} → {} gets {:.2f}, but {} → {} only {:.2f} (the relation is one-way)", word(it),
                    word(cat), own.A(it, cat), word(cat), word(it), own.A(cat, it)),
        fmt::format("one W for both (W_K := W_Q): S is symmetric (max |S − Sᵀ| = {:.0f}) and {} → {} gets {:.2f}",
                    asymmetry(same.S), word(it), word(argmax_row(same.A, it)), same.A(it, argmax_row(same.A, it)))}},
      {"dot product",
       "a simple and efficient way to match",
       {fmt::format(
            "q·k = ‖q‖‖k‖cos θ: q_{0}·k_{1} = {2:.0f} (cos θ = {3:.2f}) beats q_{0}·k_{4} = {5:.0f} (cos θ = {6:.2f})",
            word(it), word(cat), own.QKt(it, cat), cosine(own.Q, it, own.K, cat), word(mat), own.QKt(it, mat),
            cosine(own.Q, it, own.K, mat)),
        fmt::format("all n² = {} scores are one matrix product QKᵀ: 2·n²·d_k = {} FLOPs, no loop over pairs", n * n,
                    2 * n * n * d_k)}},
      {"softmax",
       "weights are non-negative and sum to 1 (a probability distribution)",
       {fmt::format("smallest weight in A: {:.3f}; largest |row sum − 1|: {:.1e} (float32 rounding)", xt::amin(own.A)(),
                    xt::amax(xt::abs(row_sums - 1.0f))())}},
      {"÷√d_k",
       "numerical stability",
       {fmt::format("at d_k = {}: Var(q·k) {:.0f} → {:.2f}, largest weight {:.3f} → {:.3f}, ‖J‖ {:.3f} → {:.3f}",
                    wide.d_k, wide.var_unscaled, wide.var_scaled, wide.max_weight_unscaled, wide.max_weight_scaled,
                    wide.jacobian_unscaled, wide.jacobian_scaled)}},
  };
}
// [design_table]

void print_design_table(const ch02::ScalingStudy& study) {
  attn::heading("Why it is built this way: the article's design table, each row computed");
  fmt::print("Chapter 01's sentence and weights for the first three rows, the study above for the last.\n");
  for (const DesignRow& row : design_rows(study)) {
    fmt::print("\n{} — {}\n", row.design, row.intuition);
    for (const std::string& line : row.computed) fmt::print("  {}\n", line);
  }
}

/// Runs \p section; in the book's run, also copies what it printed into DIR/\p file, so that the book can
/// show each part of the output beside the text that explains it. (The book's run sends stdout to
/// DIR/ch02_qkv_trace.txt, see attn::Chapter::run; the excerpt is read back from there.)
void excerpt(const attn::Chapter& chapter, const std::string& file, const std::function<void()>& section) {
  if (!chapter.book_mode()) return section();
  std::fflush(stdout);
  const long start = std::ftell(stdout);
  section();
  std::fflush(stdout);
  const long end = std::ftell(stdout);
  std::ifstream whole(*chapter.figure_path("ch02_qkv_trace.txt"), std::ios::binary);
  std::string text(static_cast<std::size_t>(end - start), '\0');
  whole.seekg(start);
  whole.read(text.data(), static_cast<std::streamsize>(text.size()));
  std::ofstream(*chapter.figure_path(file), std::ios::binary) << text;
}

void tell_the_story(const attn::Chapter& chapter, const Example& example) {
  const Trace full = run_trace(example);
  excerpt(chapter, "ch02_trace.txt", [&] { print_trace(example, full); });
  excerpt(chapter, "ch02_causal.txt", [&] { print_causal(example, full); });
  excerpt(chapter, "ch02_cross.txt", [&] { print_cross_attention(); });
  excerpt(chapter, "ch02_library.txt", [&] { print_library(); });
  const ch02::ScalingStudy study = run_scaling_study();
  excerpt(chapter, "ch02_scaling.txt", [&] { print_scaling(chapter, study); });
  excerpt(chapter, "ch02_design.txt", [&] { print_design_table(study); });
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch02_qkv_trace", "Chapter 02: Q, K, V and the computation, traced box by box");
  std::size_t n = 5, d_model = 8, d_k = 6;
  std::uint64_t seed = 2;
  auto& cli = chapter.cli();
  const std::vector<CLI::Option*> sizes{
      cli.add_option("--n", n, "Tokens of a random example (default: chapter 01's sentence, n = 5)")
          ->check(CLI::Range(1, 4096)),
      cli.add_option("--d-model", d_model, "Width of X in a random example (default 8)")->check(CLI::Range(1, 4096)),
      cli.add_option("--d-k", d_k, "Width of queries, keys and values in a random example (default 6)")
          ->check(CLI::Range(1, 4096)),
      cli.add_option("--seed", seed, "Seed of the random example (default 2)")};
  return chapter.run(argc, argv, [&] {
    // Any size option asks for a random example; without one the chapter traces chapter 01's sentence.
    const bool random = std::any_of(sizes.begin(), sizes.end(), [](const CLI::Option* o) { return o->count() > 0; });
    tell_the_story(chapter, random ? random_example(n, d_model, d_k, seed) : sentence_example());
  });
}
