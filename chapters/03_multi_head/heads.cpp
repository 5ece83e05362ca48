// Chapter 03's hand-built heads and the cost arithmetic of several heads. Every number is chosen by hand
// and explained; nothing is learned. Book page: book/03_multi_head.md ("Three kinds of relation").
#include "03_multi_head/heads.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "01_intuition/lexicon.hpp"
#include "attn/rng.hpp"

namespace attn::ch03 {
namespace {

// Chapter 01's word features (columns 0–7 of X).
enum Feature : std::size_t { kNoun, kAnimate, kHuman, kPlace, kAction, kState, kPronoun, kFunction, kFeatures };
// The position code (columns 8–15 of X): (cos ω p, sin ω p) for each frequency, in this order.
constexpr double kPi = 3.14159265358979323846;
// The hand-built heads use the first two. cos ω₁Δ + cos ω₂Δ is 2 at Δ = 0, 1.45 at Δ = ±1, and has a
// second, weaker peak of 1.81 at Δ = ±18: in sentences longer than 19 tokens the positional head also
// gives some weight to the token 19 places back. The code repeats exactly only after 60 positions.
constexpr double kOmega[] = {kPi / 3, kPi / 10, kPi / 25, kPi / 60};
constexpr std::size_t kPosition = kFeatures;  // first position column

std::size_t cos_col(std::size_t f) { return kPosition + 2 * f; }
std::size_t sin_col(std::size_t f) { return kPosition + 2 * f + 1; }

// Writes into W_Q the rotation that turns the position code of p (frequency f, columns of X) into the
// code of p - 1, scaled by s, landing in columns (c, c + 1) of W_Q:
//   cos ω(p-1) = cos ωp cos ω + sin ωp sin ω,   sin ω(p-1) = sin ωp cos ω - cos ωp sin ω.
void one_step_back(Matrix& W_Q, std::size_t f, std::size_t c, float s) {
  const auto cw = static_cast<float>(std::cos(kOmega[f])), sw = static_cast<float>(std::sin(kOmega[f]));
  W_Q(cos_col(f), c) = s * cw;
  W_Q(sin_col(f), c) = s * sw;
  W_Q(cos_col(f), c + 1) = -s * sw;
  W_Q(sin_col(f), c + 1) = s * cw;
}

}  // namespace

Matrix embed(const std::vector<std::string>& tokens) {
  const Matrix features = ch01::embed(tokens);            // (n, 8)
  Matrix X = xt::zeros<float>({tokens.size(), kDModel});  // (n, d_model)
  xt::view(X, xt::all(), xt::range(std::size_t{0}, std::size_t{kFeatures})) = features;
  for (std::size_t p = 0; p < tokens.size(); ++p)
    for (std::size_t f = 0; f < 4; ++f) {
      X(p, cos_col(f)) = static_cast<float>(std::cos(kOmega[f] * static_cast<double>(p)));
      X(p, sin_col(f)) = static_cast<float>(std::sin(kOmega[f] * static_cast<double>(p)));
    }
  return X;
}

const std::vector<HeadInfo>& head_infos() {
  static const std::vector<HeadInfo> infos{
      {"positional", "its query is the position code rotated one step back: it finds the previous token"},
      {"semantic", "its query equals its key (noun-ish, living, predicate, function word): like finds like"},
      {"syntactic", "a verb or state asks for a living thing or pronoun, the nearest one before it first"},
      {"semantic copy", "the semantic head plus small noise: a redundant head"},
  };
  return infos;
}

// [hand_built_weights]
MultiHeadWeights hand_built_weights() {
  Matrix W_Q = xt::zeros<float>({kDModel, kDModel});  // (d_model, h·d_k): head i owns columns 4i..4i+3
  Matrix W_K = xt::zeros<float>({kDModel, kDModel});
  Matrix W_V = xt::zeros<float>({kDModel, kDModel});

  // Head 0, positional. Keys are the position code of two frequencies; the query is the code of the
  // position one step back, scaled by 12. q_i·k_j = 12·(cos ω₁(i-1-j) + cos ω₂(i-1-j)): largest at j = i-1.
  for (std::size_t f = 0; f < 2; ++f) {
    W_K(cos_col(f), 2 * f) = 1;
    W_K(sin_col(f), 2 * f + 1) = 1;
    one_step_back(W_Q, f, 2 * f, 12.0f);
  }
  W_V(kNoun, 0) = W_V(kAnimate, 1) = W_V(kAction, 2) = W_V(kFunction, 3) = 1;  // carries the word before

  // Head 1, semantic. Four coarse kinds of word; query = key, so two words score high when they are of
  // the same kind (a word is always of its own kind: the diagonal is bright too).
  const std::size_t s = 4;
  for (Feature f : {kNoun, kPronoun}) W_Q(f, s) = W_K(f, s) = W_V(f, s) = 1.5f;              // a thing
  W_Q(kAnimate, s + 1) = W_K(kAnimate, s + 1) = W_V(kAnimate, s + 1) = 1.5f;                 // a living thing
  for (Feature f : {kAction, kState}) W_Q(f, s + 2) = W_K(f, s + 2) = W_V(f, s + 2) = 1.5f;  // a predicate
  W_Q(kFunction, s + 3) = W_K(kFunction, s + 3) = W_V(kFunction, s + 3) = 1.5f;              // a function word

  // Head 2, syntactic. A predicate (action or state) asks for a subject (an animate word or a pronoun):
  // score 8 for the match. Every token also prefers the nearest position before it (slow frequency ω₂,
  // scale 5), which breaks the tie between two candidate subjects in favour of the closest preceding one.
  const std::size_t y = 8;
  W_Q(kAction, y) = W_Q(kState, y) = 8;
  W_K(kAnimate, y) = W_K(kPronoun, y) = 1;
  W_K(cos_col(1), y + 1) = 1;
  W_K(sin_col(1), y + 2) = 1;
  one_step_back(W_Q, 1, y + 1, 5.0f);
  W_V(kAnimate, y) = W_V(kHuman, y + 1) = W_V(kPronoun, y + 2) = W_V(kNoun, y + 3) = 1;  // who the subject is

  // Head 3, a near-copy of head 1: the same columns plus noise of size 0.03 (fixed seed).
  Rng rng(3);
  const Matrix noise = rng.normal(kDModel, 3 * kDk, 0.0f, 0.03f);  // (d_model, 3·d_k)
  auto columns = [](std::size_t head) { return xt::range(head * kDk, (head + 1) * kDk); };
  for (auto [W, part] : {std::pair<Matrix*, std::size_t>{&W_Q, 0}, {&W_K, 1}, {&W_V, 2}}) {
    const Matrix semantic = xt::view(*W, xt::all(), columns(1));  // (d_model, d_k)
    xt::view(*W, xt::all(), columns(3)) = semantic + xt::view(noise, xt::all(), columns(part));
  }

  // W_O = I: the output is Concat(head_0, …, head_3) itself, readable column by column.
  return {W_Q, W_K, W_V, xt::eye<float>(kDModel)};
}
// [hand_built_weights]

// [multi_head_cost]
Cost multi_head_cost(std::size_t n_tokens, std::size_t d_model, std::size_t h) {
  require(
      h > 0 && d_model % h == 0,
      fmt::format("multi_head_cost: d_model = {} in h = {} heads; h must be positive and divide d_model", d_model, h));
  const double n = static_cast<double>(n_tokens), d = static_cast<double>(d_model), heads = static_cast<double>(h);
  const double d_k = d / heads;
  Cost c{};
  c.parameters = 4 * d * d;            // h blocks of (d_model, d_k) side by side are one (d_model, d_model)
  c.projection = 3 * 2 * n * d * d;    // three (n, d_model)·(d_model, d_model) products
  c.scores = heads * 2 * n * n * d_k;  // h products (n, d_k)·(d_k, n): h·d_k = d_model
  c.mixing = heads * 2 * n * n * d_k;  // h products (n, n)·(n, d_k)
  c.output = 2 * n * d * d;            // (n, d_model)·(d_model, d_model)
  c.exponentials = heads * n * n;      // the one thing that grows with h: h score matrices, not one
  c.score_entries = heads * n * n;
  return c;
}
// [multi_head_cost]

namespace {

/// A path the operating system can take: not empty, no NUL (which would cut it short), under PATH_MAX's 4096 bytes.
void require_path(const char* where, const char* name, const std::string& path) {
  require(!path.empty() && path.find('\0') == std::string::npos && path.size() < 4096,
          fmt::format("{}: {} is empty, holds a NUL or is {} bytes long; a path is 1 to 4095 bytes without NUL", where,
                      name, path.size()));
}

}  // namespace

void write_attention_dot(const std::string& path, const Matrix& A, const std::vector<std::string>& tokens,
                         const std::string& title, std::size_t per_token, double min_weight) {
  require(A.shape(0) == tokens.size() && A.shape(1) == tokens.size(),
          fmt::format("write_attention_dot: A is {} for {} tokens", shape_str(A), tokens.size()));
  // A weight outside [0, 1] (or NaN, which breaks the sort's ordering) has no edge colour or thickness.
  for (std::size_t e = 0; e < A.size(); ++e)
    require(A.data()[e] >= 0.0f && A.data()[e] <= 1.0f,
            fmt::format("write_attention_dot: A({}, {}) = {}; attention weights are in [0, 1]", e / tokens.size(),
                        e % tokens.size(), A.data()[e]));
  // A double quote or a backslash would end or escape a label of the .dot file; a NUL is no text dot reads.
  const auto plain = [](const std::string& s) {
    return s.find_first_of(std::string("\"\\\0", 3)) == std::string::npos;
  };
  require(plain(title),
          fmt::format("write_attention_dot: the title '{}' holds a double quote, backslash or NUL", title));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    require(plain(tokens[i]),
            fmt::format("write_attention_dot: token {} '{}' holds a double quote, backslash or NUL", i, tokens[i]));
  require_path("write_attention_dot", "path", path);
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "digraph attention {\n"
      << "  label=\"" << title << "\"; labelloc=t; rankdir=LR;\n"
      << "  node [shape=box, style=rounded, fontname=\"Noto Sans CJK SC,sans-serif\"];\n"
      << "  edge [fontname=\"sans-serif\", fontsize=10];\n";
  for (std::size_t i = 0; i < tokens.size(); ++i) out << fmt::format("  t{} [label=\"{}\\n#{}\"];\n", i, tokens[i], i);
  // [write_attention_dot]
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::vector<std::size_t> order(tokens.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return A(i, a) > A(i, b); });
    for (std::size_t r = 0; r < std::min(per_token, order.size()); ++r) {
      const std::size_t j = order[r];
      const double w = A(i, j);
      if (w < min_weight) break;
      // The edge's thickness and darkness come from the computed weight: the picture is the matrix.
      const int grey = static_cast<int>(std::lround(160 * (1.0 - w)));
      out << fmt::format("  t{} -> t{} [label=\"{:.2f}\", penwidth={:.2f}, color=\"#{:02x}{:02x}{:02x}\"];\n", i, j, w,
                         0.5 + 5.0 * w, grey, grey, grey);
    }
  }
  // [write_attention_dot]
  out << "}\n";
}

void render_dot_svg(const std::string& dot_path, const std::string& svg_path) {
  require_path("render_dot_svg", "dot_path", dot_path);
  require_path("render_dot_svg", "svg_path", svg_path);
  // The paths go into a shell command between single quotes: one inside a path would end the quoting there.
  for (const std::string* path : {&dot_path, &svg_path})
    require(path->find('\'') == std::string::npos,
            fmt::format("render_dot_svg: the path {} holds a single quote", *path));
  // Before dot opens it: a FIFO would block dot (and this call) for ever, a folder or a missing file fail in dot.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dot_path, ec))
    throw std::runtime_error(fmt::format("render_dot_svg: dot_path {} is missing or not a regular file", dot_path));
  const std::string command = fmt::format("dot -Tsvg '{}' -o '{}' 2>&1", dot_path, svg_path);
  if (std::system(command.c_str()) != 0)
    throw std::runtime_error("could not render " + dot_path + " with Graphviz's dot (install graphviz)");
}

MultiHeadWeights random_weights(Rng& rng, std::size_t d_model) {
  const float s = 1.0f / std::sqrt(static_cast<float>(d_model));  // keeps X·W of size ~1
  return {rng.normal(d_model, d_model, 0.0f, s), rng.normal(d_model, d_model, 0.0f, s),
          rng.normal(d_model, d_model, 0.0f, s), rng.normal(d_model, d_model, 0.0f, s)};
}

}  // namespace attn::ch03
