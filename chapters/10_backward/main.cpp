// Chapter 10 — the backward pass.
//
// What it shows: the softmax's Jacobian diag(p) − ppᵀ and its product with a vector without forming it;
// full attention's backward box by box with every shape, checked by central differences; FlashAttention-2's
// backward (P recomputed from the forward's log-sum-exp, D = rowsum(dO ∘ O)) equal to it, with the heap each
// one holds measured by chapter 04's counting allocator; the article's claim that ÷√d_k keeps gradients alive,
// measured on real gradients for d_k = 4 … 1024; and the FLOPs of the backward against the forward's.
// What it leaves out: dropout, the GPU backward, a model that learns from these gradients (chapter 12).
// Run it: ./course run 10     Long run: build/default/bin/ch10_backward --n 65536 (peak RSS, forward + backward)
// Benchmarks: build/default/bin/ch10_backward bench     Your code: ./course run 10 --track exercise
// Book page: book/10_backward.md
#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/heap_counter.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "10_backward/backward.hpp"
#include "10_backward/backward_fast.hpp"
#include "attn/chapter.hpp"
#include "attn/checks.hpp"
#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

using attn::AttentionGrads;
using attn::Matrix;
using attn::Vector;
namespace ch05 = attn::ch05;
namespace ch10 = attn::ch10;

using attn::max_abs_diff;
double max_abs(const Matrix& a) { return static_cast<double>(xt::amax(xt::abs(a))()); }

// [jacobian_demo]
/// One row: the softmax's Jacobian written out, and its product with a gradient taken without it.
void softmax_jacobian() {
  attn::heading("The softmax's Jacobian, and its product without it");
  const Matrix s = {{2.0f, 1.0f, 0.1f, -1.0f}};  // (1, 4) one row of scores
  const Matrix p = attn::softmax_rows(s);        // (1, 4)
  const Matrix g = {{1.0f, 0.0f, -1.0f, 0.5f}};  // (1, 4) ∂L/∂p, arriving from above
  Matrix J = xt::zeros<float>({4, 4});           // (4, 4): J_jk = ∂p_j/∂s_k = p_j (δ_jk − p_k)
  for (std::size_t j = 0; j < 4; ++j)
    for (std::size_t k = 0; k < 4; ++k) J(j, k) = p(0, j) * ((j == k ? 1.0f : 0.0f) - p(0, k));
  fmt::print("scores s = (2, 1, 0.1, -1), p = softmax(s) = ({:.4f}, {:.4f}, {:.4f}, {:.4f})\n", p(0, 0), p(0, 1),
             p(0, 2), p(0, 3));
  fmt::print("J = diag(p) − p pᵀ (4 × 4; symmetric, every row sums to 0):\n");
  const std::vector<std::string> labels{"s0", "s1", "s2", "s3"};
  attn::print_heatmap(J, {"p0", "p1", "p2", "p3"}, labels, 4, -0.25, 0.25);
  const Matrix with_J = xt::transpose(xt::linalg::dot(J, xt::transpose(g)));  // (1, 4): J g, O(n²) work
  const Matrix without_J = attn::softmax_backward(p, g);                      // (1, 4): p ∘ (g − pᵀg), O(n)
  fmt::print("J g        = ({:+.5f}, {:+.5f}, {:+.5f}, {:+.5f})\n", with_J(0, 0), with_J(0, 1), with_J(0, 2),
             with_J(0, 3));
  fmt::print("p∘(g − pᵀg) = ({:+.5f}, {:+.5f}, {:+.5f}, {:+.5f})   (softmax_backward)\n", without_J(0, 0),
             without_J(0, 1), without_J(0, 2), without_J(0, 3));
  fmt::print("The entries of ∂L/∂s sum to {:.1e}: adding a constant to every score changes nothing.\n\n",
             static_cast<double>(xt::sum(without_J)()));
}
// [jacobian_demo]

/// The loss of the chapter: L = Σ dO ∘ O, so that ∂L/∂O = dO. Summed in double.
double loss(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO, const attn::Mask& mask) {
  const Matrix O = attn::scaled_dot_product_attention(Q, K, V, mask);  // (n_q, d_v)
  double L = 0.0;
  for (std::size_t e = 0; e < O.size(); ++e) L += static_cast<double>(O.data()[e]) * dO.data()[e];
  return L;
}

// [gradient_check]
/// ∂L/∂x for every entry of \p X (one of Q, K, V, nudged in place) by central differences: no calculus.
Matrix numeric_gradient(Matrix& X, const std::function<double()>& L, float h) {
  Matrix grad = xt::zeros<float>(X.shape());  // X's shape
  for (std::size_t e = 0; e < X.size(); ++e) {
    const float x = X.data()[e];
    X.data()[e] = x + h;
    const double up = L();
    X.data()[e] = x - h;
    const double down = L();
    X.data()[e] = x;
    grad.data()[e] = static_cast<float>((up - down) / (2.0 * static_cast<double>(h)));
  }
  return grad;
}
// [gradient_check]

void full_backward_traced() {
  attn::heading("Full attention's backward, box by box");
  const std::size_t n_q = 5, n_kv = 7, d_k = 4, d_v = 3;
  attn::Rng rng(10);
  Matrix Q = rng.normal(n_q, d_k), K = rng.normal(n_kv, d_k), V = rng.normal(n_kv, d_v);  // (5, 4) (7, 4) (7, 3)
  const Matrix dO = rng.normal(n_q, d_v);                                                 // (5, 3) ∂L/∂O
  attn::Table shapes({"step", "forward", "shape", "backward", "shape"});
  shapes.set_left(1).set_left(3);
  shapes.add_row(
      {"1", "S = Q Kᵀ / √d_k", "(n_q, n_kv) = (5, 7)", "dQ = dS K / √d_k,  dK = dSᵀ Q / √d_k", "(5, 4), (7, 4)"});
  shapes.add_row({"2", "P = softmax(S)", "(5, 7)", "dS = P ∘ (dP − rowsum(dP ∘ P))", "(5, 7)"});
  shapes.add_row({"3", "O = P V", "(n_q, d_v) = (5, 3)", "dP = dO Vᵀ,  dV = Pᵀ dO", "(5, 7), (7, 3)"});
  shapes.print();
  fmt::print("Read the backward column from the bottom up: it walks the forward's graph in reverse.\n\n");

  attn::Table check({"mask", "gradient", "max |analytic|", "max |analytic − numeric|"});
  for (const bool causal : {false, true}) {
    const attn::Mask mask = causal ? attn::causal_mask(n_q, n_kv) : attn::Mask();  // (5, 7) or none
    const AttentionGrads g = attn::attention_backward(Q, K, V, dO, mask);
    const auto L = [&] { return loss(Q, K, V, dO, mask); };
    const float h = 1e-2f;  // float32 inputs: h² truncation ~1e-4 against rounding 2^-24·|L|/h ~1e-5
    const Matrix nQ = numeric_gradient(Q, L, h), nK = numeric_gradient(K, L, h), nV = numeric_gradient(V, L, h);
    const std::string m = causal ? "causal" : "none";
    check.add_row(
        {m, "dQ (5, 4)", fmt::format("{:.4f}", max_abs(g.dQ)), fmt::format("{:.1e}", max_abs_diff(g.dQ, nQ))});
    check.add_row(
        {m, "dK (7, 4)", fmt::format("{:.4f}", max_abs(g.dK)), fmt::format("{:.1e}", max_abs_diff(g.dK, nK))});
    check.add_row(
        {m, "dV (7, 3)", fmt::format("{:.4f}", max_abs(g.dV)), fmt::format("{:.1e}", max_abs_diff(g.dV, nV))});
  }
  fmt::print("The gradient check: L = Σ dO ∘ O, every input nudged by ±h = ±0.01, (L(x+h) − L(x−h)) / 2h.\n");
  check.print();
  fmt::print(
      "Agreement to about 1e-5 is what float32 differences can give (the tests repeat this in float64,\n"
      "to 1e-7).\n\n");
}

// [flash_vs_full]
void flash_equals_full() {
  attn::heading("FlashAttention-2's backward equals the full backward, and holds nothing n×n");
  attn::Table table({"n", "mask", "max |dQ_flash − dQ_full|", "dK", "dV", "heap: full", "heap: flash", "heap: fast"});
  for (const std::size_t n : {300, 1024}) {
    const std::size_t d = 64, B_r = 64, B_c = 96;  // 300 is a multiple of neither tile
    attn::Rng rng(n);
    const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d), dO = rng.normal(n, d);  // (n, d)
    for (const bool causal : {false, true}) {
      const attn::FlashOutput fwd = attn::flash_attention(Q, K, V, causal, B_r, B_c);  // O (n, d), lse (n)
      AttentionGrads full, flash;
      const std::size_t heap_full = attn::ch04::measure_heap_peak(
          [&] { full = attn::attention_backward(Q, K, V, dO, causal ? attn::causal_mask(n, n) : attn::Mask()); });
      const std::size_t heap_flash = attn::ch04::measure_heap_peak(
          [&] { flash = attn::flash_backward(Q, K, V, fwd.O, fwd.lse, dO, causal, B_r, B_c); });
      const attn::Tensor3 Q3 = xt::expand_dims(Q, 0), K3 = xt::expand_dims(K, 0), V3 = xt::expand_dims(V, 0),
                          O3 = xt::expand_dims(fwd.O, 0), dO3 = xt::expand_dims(dO, 0);  // (1, n, d) each
      const Matrix lse = xt::expand_dims(fwd.lse, 0);                                    // (1, n)
      const std::size_t heap_fast =
          attn::ch04::measure_heap_peak([&] { (void)ch10::flash_backward_fast(Q3, K3, V3, O3, lse, dO3, causal); });
      table.add_row(
          {std::to_string(n), causal ? "causal" : "none", fmt::format("{:.1e}", max_abs_diff(flash.dQ, full.dQ)),
           fmt::format("{:.1e}", max_abs_diff(flash.dK, full.dK)),
           fmt::format("{:.1e}", max_abs_diff(flash.dV, full.dV)), attn::human_bytes(static_cast<double>(heap_full)),
           attn::human_bytes(static_cast<double>(heap_flash)), attn::human_bytes(static_cast<double>(heap_fast))});
    }
  }
  table.print();
  fmt::print(
      "Heap measured by chapter 04's counting allocator. The full backward holds S, P, dP and dS, n×n\n"
      "floats each (4 MiB apiece at n = 1024); the flash backward holds its three gradients (3·n·d floats),\n"
      "D (n) and a few tiles: it grows like n, not n². The fast kernel adds one more dQ (its second lane),\n"
      "K and V packed for its micro-kernels, and two tiles per thread.\n\n");
}
// [flash_vs_full]

/// The median over rows of each row's Euclidean norm: what a typical query (or key) receives.
double median_row_norm(const Matrix& g) {
  std::vector<double> norms;
  for (std::size_t r = 0; r < g.shape(0); ++r) {
    double sum = 0.0;
    for (std::size_t c = 0; c < g.shape(1); ++c) sum += static_cast<double>(g(r, c)) * g(r, c);
    norms.push_back(std::sqrt(sum));
  }
  std::nth_element(norms.begin(), norms.begin() + static_cast<std::ptrdiff_t>(norms.size() / 2), norms.end());
  return norms[norms.size() / 2];
}

double largest_row_norm(const Matrix& g) {
  const Vector norms = xt::sqrt(xt::sum(g * g, {1}));  // (rows)
  return static_cast<double>(xt::amax(norms)());
}

/// The article's claim, on real gradients: what reaches each query and key for the same kind of loss as
/// d_k grows, with ÷√d_k and without it. Without it the scores grow like √d_k, most rows of P turn one-hot,
/// and P ∘ (dP − D), the only way a gradient reaches Q and K, vanishes in those rows.
void gradient_norms(const attn::Chapter& chapter) {
  attn::heading("Why ÷√d_k: the gradients that reach Q and K, with and without it");
  const std::size_t n = 64, d_v = 16;
  attn::Table table(
      {"d_k", "‖dq‖ ÷√d_k", "max/median", "‖dq‖ no ÷", "max/median", "‖dk‖ ÷√d_k", "‖dk‖ no ÷", "saturated"});
  attn::Series q_with{"median ‖∂L/∂q_i‖ with ÷√d_k", {}, {}}, q_without{"median ‖∂L/∂q_i‖ without", {}, {}},
      k_with{"median ‖∂L/∂k_j‖ with ÷√d_k", {}, {}}, k_without{"median ‖∂L/∂k_j‖ without", {}, {}};
  for (std::size_t d_k = 4; d_k <= 1024; d_k *= 2) {
    // [gradient_norms]
    attn::Rng rng(d_k);
    const Matrix Q = rng.normal(n, d_k), K = rng.normal(n, d_k), V = rng.normal(n, d_v), dO = rng.normal(n, d_v);
    const float root = std::sqrt(static_cast<float>(d_k));
    const AttentionGrads with = attn::attention_backward(Q, K, V, dO);
    // Without the scaling: softmax(Q Kᵀ) = softmax((√d_k·Q) Kᵀ / √d_k). Run the same function on Q' = √d_k·Q;
    // by the chain rule ∂L/∂Q = √d_k·∂L/∂Q', and ∂L/∂K is unchanged.
    const Matrix Q_unscaled = root * Q;  // (n, d_k)
    const AttentionGrads without = attn::attention_backward(Q_unscaled, K, V, dO);
    const Matrix dQ_without = root * without.dQ;                    // (n, d_k)
    const Matrix P = attn::softmax_rows(attn::matmul(Q, K, true));  // (n, n) the unscaled weights
    const Vector p_max = xt::amax(P, {1});                          // (n)
    const auto saturated = static_cast<std::size_t>(xt::sum(xt::greater(p_max, 0.99f))());
    // [gradient_norms]
    const double qw = median_row_norm(with.dQ), qo = median_row_norm(dQ_without), kw = median_row_norm(with.dK),
                 ko = median_row_norm(without.dK);
    table.add_row({std::to_string(d_k), fmt::format("{:.3g}", qw),
                   fmt::format("{:.1f}", largest_row_norm(with.dQ) / qw), fmt::format("{:.3g}", qo),
                   fmt::format("{:.1f}", largest_row_norm(dQ_without) / qo), fmt::format("{:.3g}", kw),
                   fmt::format("{:.3g}", ko), fmt::format("{} of {}", saturated, n)});
    const double x = static_cast<double>(d_k);
    for (auto [series, y] : {std::pair{&q_with, qw}, {&q_without, qo}, {&k_with, kw}, {&k_without, ko}}) {
      series->x.push_back(x);
      series->y.push_back(std::max(y, 1e-12));  // a log axis cannot show an exact 0
    }
  }
  table.print();
  fmt::print(
      "Q, K, V and dO have N(0, 1) entries; n = {}, d_v = {}. ‖dq‖ and ‖dk‖ are the median over rows of\n"
      "the row norms of ∂L/∂Q and ∂L/∂K; max/median is the largest row's norm over the median; saturated\n"
      "counts the rows whose largest weight exceeds 0.99 without ÷√d_k.\n"
      "With ÷√d_k every query receives a gradient of about the same size at every d_k, and the spread\n"
      "stays small. Without it the spread grows with d_k: the rows of P turn one-hot, a saturated row\n"
      "passes almost nothing back to its query, and the rows that did not saturate receive gradients made\n"
      "√d_k times steeper. The keys still receive gradient, from those few rows. The gradient does not\n"
      "shrink evenly: it vanishes for most queries and grows for a few.\n\n",
      n, d_v);
  if (const auto path = chapter.figure_path("ch10_gradient_norms.svg")) {
    attn::write_svg_plot(*path, {"What a typical query and key receive, against d_k",
                                 "d_k",
                                 "median row norm",
                                 true,
                                 true,
                                 {q_with, k_with, q_without, k_without}});
    chapter.announce_figure(*path);
  }
}

void flop_count() {
  attn::heading("What the backward costs: five products against the forward's two");
  attn::Table table({"pass", "products (each 2·n²·d FLOPs)", "n = 4096, d = 64, 8 heads", "causal"});
  table.set_left(1);
  const double product = 2.0 * 4096.0 * 4096.0 * 64.0 * 8.0;
  table.add_row({"forward", "QKᵀ, PV", fmt::format("{:.1f} GFLOP", 2 * product / 1e9),
                 fmt::format("{:.1f} GFLOP", product / 1e9)});
  table.add_row({"backward", "QKᵀ again, dO Vᵀ, Pᵀ dO, dS K, dSᵀ Q", fmt::format("{:.1f} GFLOP", 5 * product / 1e9),
                 fmt::format("{:.1f} GFLOP", 2.5 * product / 1e9)});
  table.print();
  fmt::print(
      "The backward is 2.5× the forward's arithmetic; recomputing S is the price of not storing P. The\n"
      "measured ratio is in `ch10_backward bench` and on the book page (this output has no timings).\n\n");
}

// [long_run]
void long_run(const attn::Chapter& chapter, std::size_t n, std::size_t d) {
  attn::heading(fmt::format("Forward and backward at n = {}, d = {}, causal", n, d));
  attn::Rng rng(65);
  attn::Tensor3 Q = xt::zeros<float>({std::size_t{1}, n, d}), K = Q, V = Q, dO = Q;  // (1, n, d) each
  xt::view(Q, 0) = rng.normal(n, d);
  xt::view(K, 0) = rng.normal(n, d);
  xt::view(V, 0) = rng.normal(n, d);
  xt::view(dO, 0) = rng.normal(n, d);
  ch10::HeadsGrads g;  // dQ, dK, dV (1, n, d) each
  const double seconds = attn::time_calls(
                             [&] {
                               const ch05::FlashHeadsOutput fwd = ch05::flash_attention_fast(Q, K, V, true);  // O, lse
                               g = ch10::flash_backward_fast(Q, K, V, fwd.O, fwd.lse, dO, true);
                             },
                             {1, 0})
                             .wall;
  const double n_n = 4.0 * static_cast<double>(n) * static_cast<double>(n);
  fmt::print("one n×n float matrix would be {}; the full backward holds four of them ({}).\n", attn::human_bytes(n_n),
             attn::human_bytes(4 * n_n));
  fmt::print("Q, K, V, O, dO, dQ, dK, dV: {} together; finite gradients: {}\n",
             attn::human_bytes(8.0 * 4.0 * static_cast<double>(n * d)),
             xt::all(xt::isfinite(g.dQ)) && xt::all(xt::isfinite(g.dK)) && xt::all(xt::isfinite(g.dV)) ? "yes" : "NO");
  if (!chapter.book_mode())
    fmt::print("forward + backward: {:.2f} s; peak resident memory of this process: {}\n", seconds,
               attn::human_bytes(static_cast<double>(attn::peak_rss_bytes())));
  fmt::print("\n");
}
// [long_run]

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch10_backward", "Chapter 10: the backward pass");
  std::size_t n = 2048, d = 64;
  chapter.cli()
      .add_option("--n", n, "Sequence length of the long run (65536 for the memory target)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  chapter.cli().add_option("--d", d, "Head dimension d_k = d_v of the long run")->check(CLI::Range(1, 1024));
  return chapter.run(argc, argv, [&] {
    // The long run holds about twelve (n, d) float matrices (Q, K, V, dO, O, dQ, dK, dV, K and V packed, a lane's dQ
    // and the data's draw): refused with the estimate before the chapter starts, not in std::bad_alloc at its end.
    try {
      attn::checked_allocation("--n and --d: the long run's 12 × n × d floats", {12, n, d, sizeof(float)});
    } catch (const std::invalid_argument& e) {
      throw attn::UsageError(e.what());  // the options asked for it: a command-line refusal, status 2
    }
    softmax_jacobian();
    full_backward_traced();
    flash_equals_full();
    gradient_norms(chapter);
    flop_count();
    long_run(chapter, n, d);
  });
}
