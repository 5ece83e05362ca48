// Chapter 01 — Knowing where to look.
//
// What it shows: self-attention on sentences small enough to read every number. Words get eight named
// features; hand-made W_Q and W_K say what each kind of word looks for and what it offers; softmax turns
// the matches into weights; the output of each word is a blend of the others' meanings. The pronoun 它
// ("it") ends up attending to 猫 (the cat), not to 垫子 (the mat) nor to 小明 (a person): the article's
// "word → what it attends to" table, computed.
// What it leaves out: learned weights, the reason for ÷√d_k (chapter 02), several heads (chapter 03).
// Run it: ./course run 01      or: build/default/bin/ch01_intuition --sentence "小明 养了 只 猫 它 很可爱"
// Your code: ./course run 01 --track exercise      Book page: book/01_intuition.md
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "01_intuition/intuition.hpp"
#include "01_intuition/lexicon.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/print.hpp"
#include "attn/stats.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch01 = attn::ch01;

using attn::fixed;
using attn::joined;
using attn::ranked;

/// Everything the chapter computes for one sentence.
struct Attention {
  std::vector<std::string> tokens;
  Matrix X;  // (n, d_model) embeddings
  Matrix Q;  // (n, d_k)     what each word looks for
  Matrix K;  // (n, d_k)     what each word offers
  Matrix V;  // (n, d_model) what each word carries
  Matrix A;  // (n, n)       A(i, j): how much word i attends to word j
  Matrix O;  // (n, d_model) row i: word i's blend of the values
};

// [attend_sentence]
Attention attend_sentence(const std::vector<std::string>& tokens) {
  Attention r;
  r.tokens = tokens;
  const std::size_t n = tokens.size();
  r.X = ch01::embed(tokens);                                                      // (n, d_model)
  r.Q = xt::linalg::dot(r.X, ch01::query_weights(attn::design_pronoun_query()));  // (n, d_k)
  r.K = xt::linalg::dot(r.X, ch01::key_weights());                                // (n, d_k)
  r.V = xt::linalg::dot(r.X, ch01::value_weights());                              // (n, d_model)
  r.A = xt::zeros<float>({n, n});                                                 // (n, n)
  r.O = xt::zeros<float>({n, r.V.shape(1)});                                      // (n, d_model)
  for (std::size_t i = 0; i < n; ++i) {                // every word asks its own question of every word
    const Vector q = xt::row(r.Q, i);                  // (d_k)
    const Vector w = attn::attention_weights(q, r.K);  // (n)
    xt::row(r.A, i) = w;
    xt::row(r.O, i) = attn::blend_values(w, r.V);
  }
  return r;
}
// [attend_sentence]

void print_features(const Attention& r) {
  attn::heading("A language of eight features: X, one row per word (n, d_model)");
  std::vector<std::string> header{"word"};
  for (const auto& f : ch01::feature_names()) header.push_back(f);
  attn::Table t(header);
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    std::vector<std::string> row{r.tokens[i]};
    for (std::size_t f = 0; f < r.X.shape(1); ++f) row.push_back(r.X(i, f) != 0 ? "1" : "·");
    t.add_row(row);
  }
  t.print();
}

void print_queries_and_keys(const Attention& r) {
  attn::heading("What each word looks for (Q = X·W_Q) and offers (K = X·W_K), both (n, d_k)");
  // Two tables, one per matrix: side by side they would not fit in 100 columns.
  const auto print_matrix = [&](const char* title, const attn::Matrix& m) {
    fmt::print("{}\n", title);
    std::vector<std::string> header{"word"};
    for (const auto& k : ch01::key_names()) header.push_back(k);
    attn::Table t(header);
    for (std::size_t i = 0; i < r.tokens.size(); ++i) {
      std::vector<std::string> row{r.tokens[i]};
      for (std::size_t c = 0; c < m.shape(1); ++c) row.push_back(m(i, c) != 0 ? fixed(m(i, c), 0) : "·");
      t.add_row(row);
    }
    t.print();
  };
  print_matrix("Q, what each word looks for:", r.Q);
  print_matrix("K, what each word offers:", r.K);
  fmt::print(
      "A verb looks for an animate doer and a place; \"tired\" looks for a pronoun or a living thing;\n"
      "the pronoun's row is design_pronoun_query(), the exercise.\n");
}

void print_pronoun_decision(const Attention& r, std::size_t p) {
  attn::heading(fmt::format("How {} decides: score = q·k, scaled by 1/√d_k, softmax", r.tokens[p]));
  const double scale = 1.0 / std::sqrt(static_cast<double>(r.K.shape(1)));
  attn::Table t({"key", "q·k", "÷√d_k", "weight", ""});
  t.set_left(4);
  for (std::size_t j = 0; j < r.tokens.size(); ++j) {
    double dot = 0;
    for (std::size_t c = 0; c < r.K.shape(1); ++c) dot += r.Q(p, c) * r.K(j, c);
    t.add_row({r.tokens[j], fixed(dot, 1), fixed(dot * scale, 2), fixed(r.A(p, j)), attn::bar(r.A(p, j), 20)});
  }
  t.print();
}

void print_focus_table(const Attention& r) {
  attn::heading("Word → what it attends to (the article's table, computed)");
  attn::Table t({"word", "attends most to", "weight", "then", "weight"});
  t.set_left(1).set_left(3);
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    const auto order = ranked(r.A, i);
    const std::size_t second = order.size() > 1 ? order[1] : order[0];
    t.add_row({r.tokens[i], r.tokens[order[0]], fixed(r.A(i, order[0])), order.size() > 1 ? r.tokens[second] : "-",
               order.size() > 1 ? fixed(r.A(i, second)) : "-"});
  }
  t.print();
}

void print_meeting(const Attention& r) {
  attn::heading("The meeting: everyone speaks, everyone listens, with different attention (A, n × n)");
  fmt::print("Row i is one listener, column j one speaker; each row's shares add up to 1.\n\n");
  attn::print_heatmap(r.A, r.tokens, r.tokens);
}

void print_output(const Attention& r, std::size_t p) {
  attn::heading(fmt::format("What attention hands back: {} before and after (rows of V and of A·V)", r.tokens[p]));
  std::vector<std::string> header{""};
  for (const auto& f : ch01::feature_names()) header.push_back(f);
  attn::Table t(header);
  std::vector<std::string> before{fmt::format("{} (input)", r.tokens[p])};
  std::vector<std::string> after{fmt::format("{} (output)", r.tokens[p])};
  for (std::size_t f = 0; f < r.V.shape(1); ++f) {
    before.push_back(fixed(r.V(p, f)));
    after.push_back(fixed(r.O(p, f)));
  }
  t.add_row(before).add_row(after).print();
  fmt::print(
      "The bare pronoun carried no meaning of its own; its output now reads mostly \"noun, animate\":\n"
      "the word has pulled in what it refers to.\n");
}

void print_all_sentences() {
  attn::heading("Every sentence of the chapter: where does the pronoun look?");
  attn::Table t({"sentence", "pronoun", "attends most to", "weight", "then", "weight", "right?"});
  t.set_left(1).set_left(2).set_left(4);
  for (const auto& s : ch01::sentences()) {
    const Attention r = attend_sentence(s.tokens);
    const auto order = ranked(r.A, s.pronoun);
    t.add_row({joined(s.tokens), s.tokens[s.pronoun], s.tokens[order[0]], fixed(r.A(s.pronoun, order[0])),
               s.tokens[order[1]], fixed(r.A(s.pronoun, order[1])), order[0] == s.antecedent ? "yes" : "NO"});
  }
  t.print();
}

void write_heatmap(const attn::Chapter& chapter, const Attention& r, const std::string& file) {
  if (const auto path = chapter.figure_path(file)) {
    attn::write_svg_heatmap(*path, r.A, r.tokens, r.tokens,
                            fmt::format("Attention weights A for \"{}\" (row attends to column)", joined(r.tokens)));
    chapter.announce_figure(*path);
  }
}

void tell_the_story(const attn::Chapter& chapter, const std::string& sentence) {
  const bool own_sentence = !sentence.empty();
  const std::vector<std::string> tokens = own_sentence ? ch01::tokenize(sentence) : ch01::sentences()[0].tokens;
  fmt::print("Sentence: {}\n", joined(tokens));

  const Attention r = attend_sentence(tokens);
  print_features(r);
  print_queries_and_keys(r);
  const auto pronoun = ch01::find_pronoun(tokens);
  if (pronoun) print_pronoun_decision(r, *pronoun);
  print_focus_table(r);
  print_meeting(r);
  write_heatmap(chapter, r, own_sentence ? "ch01_heatmap_own.svg" : "ch01_heatmap_zh.svg");
  if (pronoun) {
    print_output(r, *pronoun);
  } else {
    fmt::print("\n(No pronoun in this sentence: add 它 or it to watch one find its referent.)\n");
  }
  if (!own_sentence) {
    print_all_sentences();
    write_heatmap(chapter, attend_sentence(ch01::sentences()[1].tokens), "ch01_heatmap_en.svg");
  }
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch01_intuition", "Chapter 01: knowing where to look (self-attention by hand)");
  std::string sentence;
  chapter.cli()
      .add_option("--sentence", sentence,
                  "Your own sentence: space-separated words from the chapter's vocabulary "
                  "(e.g. \"小明 养了 只 猫 它 很可爱\" or \"the cat sat on the mat it was tired\")")
      ->check(ch01::sentence_problem, "", "known words");
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, sentence); });
}
