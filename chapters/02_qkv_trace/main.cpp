// Chapter 02 — Q, K, V and the computation.
//
// What it shows: one small example traced through every box of the flowchart X → Q, K, V → QKᵀ → ÷√d_k →
// softmax → A → A·V, each step with its shape and values.
// What it leaves out: several heads (chapter 03), cost (chapter 04).
// Run it: ./course run 02      Your code: ./course run 02 --track exercise      Book page: book/02_qkv_trace.md
#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/chapter.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"

namespace {

using attn::Matrix;

std::vector<std::string> labels(const char* prefix, std::size_t n) {
  std::vector<std::string> l;
  for (std::size_t i = 0; i < n; ++i) l.push_back(fmt::format("{}{}", prefix, i));
  return l;
}

void show(const char* name, const Matrix& m, const char* meaning) {
  attn::heading(fmt::format("{} {}", name, attn::shape_str(m)));
  fmt::print("{}\n", meaning);
  attn::print_heatmap(m, labels("", m.shape(0)), labels("", m.shape(1)), 2, xt::amin(m)(), xt::amax(m)());
}

void trace(std::size_t n, std::size_t d_model, std::size_t d_k, std::uint64_t seed) {
  attn::Rng rng(seed);
  const Matrix X = rng.normal(n, d_model);  // (n, d_model)
  const Matrix W_Q = rng.normal(d_model, d_k), W_K = rng.normal(d_model, d_k), W_V = rng.normal(d_model, d_k);
  const Matrix Q = attn::project(X, W_Q);                        // (n, d_k)
  const Matrix K = attn::project(X, W_K);                        // (n, d_k)
  const Matrix V = attn::project(X, W_V);                        // (n, d_v)
  const Matrix S = attn::scaled_scores(Q, K);                    // (n, n)
  const Matrix A = attn::softmax_rows(S);                        // (n, n)
  const Matrix O = attn::scaled_dot_product_attention(Q, K, V);  // (n, d_v)
  show("X", X, "the input, one token per row");
  show("Q = X·W_Q", Q, "what each token looks for");
  show("K = X·W_K", K, "what each token offers");
  show("V = X·W_V", V, "what each token carries");
  show("S = QKᵀ/√d_k", S, "S(i, j): how well query i matches key j");
  show("A = softmax(S)", A, "A(i, j): how much position i attends to position j; each row sums to 1");
  show("O = A·V", O, "each output row is a weighted average of V's rows");
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch02_qkv_trace", "Chapter 02: Q, K, V and the computation, traced");
  std::size_t n = 4, d_model = 6, d_k = 4;
  std::uint64_t seed = 2;
  chapter.cli().add_option("--n", n, "Tokens in the traced sequence")->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--d-model", d_model, "Width of the input X")->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--d-k", d_k, "Width of queries, keys and values")->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--seed", seed, "Seed of the random example");
  return chapter.run(argc, argv, [&] { trace(n, d_model, d_k, seed); });
}
