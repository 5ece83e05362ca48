// Chapter 08 — Linear attention: the kernel trick, random features, and attention as an RNN.
//
// What it shows: replacing softmax's weight exp(q·k/√d_k) by a product of features φ(q)·φ(k) lets the
// sum over keys be taken once, φ(K)ᵀV, an (m, d_v) matrix whatever n is; both orders of the product give
// the same numbers. Two feature maps: elu+1 (the Linear Transformer) and the Performer's positive random
// features, whose error against exact softmax attention is measured as the number of features m grows.
// The causal form as a recurrence with a constant-size state (the RNN view), decoded token by token, and
// a decay on that state (RWKV's time decay) as a one-line change. What is lost: on chapter 01's sentence
// the pronoun's weights are much flatter under elu+1 than under softmax (entropy measured). Where it pays:
// FLOP counts against softmax attention (chapter 02), and, outside the book, measured times and the
// crossover n found by bisection; `ch08_linear bench` races both forms against chapter 05's fast
// FlashAttention kernel up to n = 65,536, every contender on one core.
// What it leaves out: training with linear attention, multi-head and chunked-parallel forms of the
// recurrence, the selective (input-dependent) state of Mamba.
// Run it: ./course run 08      Benchmarks: build/default/bin/ch08_linear bench
// Your code: ./course run 08 --track exercise      Book page: book/08_linear.md
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "01_intuition/intuition.hpp"
#include "01_intuition/lexicon.hpp"
#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/complexity.hpp"
#include "08_linear/contenders.hpp"
#include "08_linear/features.hpp"
#include "08_linear/linear.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch08 = attn::ch08;

using attn::cpu_seconds;
using attn::entropy_bits;
using attn::fixed;
using attn::max_abs_diff;
using attn::mean_abs_diff;
using attn::sci;
using attn::ch08::Contenders;
using attn::ch08::linear_flops;
using attn::ch08::measured_crossover;
using attn::ch08::softmax_flops;

// --- 1. associativity ---------------------------------------------------------------------------------

void show_associativity() {
  attn::heading("Two orders of one product: (φ(Q)φ(K)ᵀ)V against φ(Q)(φ(K)ᵀV), φ = elu+1");
  const std::size_t n = 6, d = 4;
  attn::Rng rng(8);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  const Matrix phiQ = attn::elu_plus_one(Q), phiK = attn::elu_plus_one(K);        // (n, m = d)
  fmt::print("The quadratic form first builds the (n, n) weights φ(q_i)·φ(k_j), row-normalised:\n\n");
  attn::print_heatmap(ch08::linear_attention_weights(phiQ, phiK), attn::numbered("", n), attn::numbered("", n));
  // [two_orders]
  const Matrix quadratic = ch08::quadratic_linear_attention(phiQ, phiK, V);  // (n, d_v), via (n, n)
  const Matrix linear = attn::linear_attention(phiQ, phiK, V);               // (n, d_v), via (m, d_v)
  // [two_orders]
  fmt::print("\nlinear_attention (associative order), the output (n, d_v):\n\n");
  attn::print_heatmap(linear, attn::numbered("", n), attn::numbered("", d), 3, xt::amin(linear)(), xt::amax(linear)());
  fmt::print("\nLargest difference from the quadratic order: {} (float32 rounding; the algebra is exact).\n",
             sci(max_abs_diff(quadratic, linear)));

  attn::heading("What the associative order keeps: φ(K)ᵀV is (m, d_v) whatever n is (d_k = d_v = m = 64)");
  attn::Table t({"n", "φ(K)ᵀV", "its bytes", "(n, n) weights' bytes", "ratio"});
  const std::size_t m = 64;
  for (std::size_t len : {16u, 256u, 4096u, 65536u}) {
    attn::Rng data(len);
    const Matrix phiK_t = data.uniform(m, len);      // (m, n): features of n keys, stored transposed
    const Matrix values = data.normal(len, m);       // (n, d_v)
    const Matrix KV = attn::matmul(phiK_t, values);  // (m, d_v): the sum over all n keys at once
    const double kv_bytes = static_cast<double>(KV.size() * sizeof(float));
    const double nn_bytes = static_cast<double>(len * len * sizeof(float));
    t.add_row({std::to_string(len), attn::shape_str(KV), attn::human_bytes(kv_bytes), attn::human_bytes(nn_bytes),
               fmt::format("{:.3g}×", nn_bytes / kv_bytes)});
  }
  t.print();
}

// --- 2. feature maps and random features ----------------------------------------------------------------

/// Mean and standard deviation of \p xs.
std::pair<double, double> mean_sd(const std::vector<double>& xs) {
  const double mean = std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
  double var = 0.0;
  for (double x : xs) var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / static_cast<double>(xs.size() > 1 ? xs.size() - 1 : 1))};
}

// [performer_attention]
/// Performer attention: positive random features for queries and keys with the same Ω, then linear attention.
Matrix performer_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& Omega) {
  return attn::linear_attention(attn::positive_random_features(Q, Omega),  // (n, m)
                                attn::positive_random_features(K, Omega),  // (n, m)
                                V);                                        // (n, d_v)
}
// [performer_attention]

/// The error of Performer attention against exact softmax attention for one input scale σ, every m.
struct ErrorCurve {
  float sigma;  // entries of Q and K ~ N(0, σ²)
  std::vector<double> m, iid, iid_sd, orf, orf_sd;
  double elu = 0.0;  // elu+1 attention's error, for comparison
};

ErrorCurve feature_error(float sigma, std::size_t n, std::size_t d_k, std::uint64_t seeds) {
  ErrorCurve c{sigma, {}, {}, {}, {}, {}};
  attn::Rng data(80);
  const Matrix Q = data.normal(n, d_k, 0.0f, sigma), K = data.normal(n, d_k, 0.0f, sigma);  // (n, d_k) each
  const Matrix V = data.normal(n, d_k);                                                     // (n, d_v)
  const Matrix exact = attn::scaled_dot_product_attention(Q, K, V);  // (n, d_v), chapter 02's softmax attention
  c.elu = mean_abs_diff(attn::linear_attention(attn::elu_plus_one(Q), attn::elu_plus_one(K), V), exact);
  for (std::size_t m = 4; m <= 1024; m *= 2) {
    std::vector<double> iid, orf;
    for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
      attn::Rng a(seed), b(seed);
      iid.push_back(mean_abs_diff(performer_attention(Q, K, V, ch08::gaussian_features(m, d_k, a)), exact));
      orf.push_back(mean_abs_diff(performer_attention(Q, K, V, ch08::orthogonal_features(m, d_k, b)), exact));
    }
    const auto [im, is] = mean_sd(iid);
    const auto [om, os] = mean_sd(orf);
    c.m.push_back(static_cast<double>(m));
    c.iid.push_back(im), c.iid_sd.push_back(is), c.orf.push_back(om), c.orf_sd.push_back(os);
  }
  return c;
}

void plot_feature_error(const attn::Chapter& chapter, const std::vector<ErrorCurve>& curves) {
  const auto path = chapter.figure_path("ch08_feature_error.svg");
  if (!path) return;
  attn::PlotSpec plot{"Performer attention against exact softmax attention",
                      "random features m",
                      "mean |output error|",
                      true,
                      true,
                      {}};
  for (const auto& c : curves) {
    plot.series.push_back({fmt::format("iid ω, σ = {}", c.sigma), c.m, c.iid});
    plot.series.push_back({fmt::format("orthogonal ω, σ = {}", c.sigma), c.m, c.orf});
  }
  // c/√m through the last point of the short vectors' iid curve: the slope the error tends to.
  const ErrorCurve& shortest = curves.front();
  std::vector<double> reference;
  for (double m : shortest.m) reference.push_back(shortest.iid.back() * std::sqrt(shortest.m.back() / m));
  plot.series.push_back({"∝ 1/√m", shortest.m, reference});
  attn::write_svg_plot(*path, plot);
  chapter.announce_figure(*path);
}

void show_feature_maps(const attn::Chapter& chapter) {
  attn::heading("Feature maps: elu(x)+1, and the Performer's exp(ω·x̂ − ‖x̂‖²/2)/√m");
  const Matrix xs = {{-4.0f, -2.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f, 4.0f}};  // (1, 9)
  const Matrix elu = attn::elu_plus_one(xs);                                       // (1, 9)
  attn::Table t({"x", "elu(x)+1", "exp(x)"});
  for (std::size_t i = 0; i < xs.size(); ++i)
    t.add_row({fixed(xs(0, i), 1), fixed(elu(0, i), 3), fixed(std::exp(xs(0, i)), 3)});
  t.print();
  fmt::print(
      "elu+1 is positive and smooth but grows only linearly: it is a different kernel, not an\n"
      "approximation of exp. Positive random features estimate exp(q·k/√d_k) itself, without bias, with\n"
      "variance ∝ 1/m.\n");

  const std::size_t n = 128, d_k = 16, seeds = 8;
  std::vector<ErrorCurve> curves;
  for (float sigma : {0.5f, 1.0f}) curves.push_back(feature_error(sigma, n, d_k, seeds));
  attn::heading(
      fmt::format("Random features against exact softmax attention (n = {}, d_k = {}, {} seeds; "
                  "Q, K ~ N(0, σ²))",
                  n, d_k, seeds));
  attn::Table e({"m", "σ = 0.5: iid", "± sd", "orthogonal", "± sd", "σ = 1: iid", "± sd", "orthogonal", "± sd"});
  for (std::size_t r = 0; r < curves[0].m.size(); ++r) {
    std::vector<std::string> row{fmt::format("{:.0f}", curves[0].m[r])};
    for (const auto& c : curves)
      for (double v : {c.iid[r], c.iid_sd[r], c.orf[r], c.orf_sd[r]}) row.push_back(fixed(v, 4));
    e.add_row(row);
  }
  e.add_row({"elu+1", fixed(curves[0].elu, 4), "", "", "", fixed(curves[1].elu, 4), "", "", ""});
  e.print();
  fmt::print(
      "Entries: the mean |output − softmax output| over {} seeds of Ω, and its spread. The estimate of\n"
      "one weight exp(q̂·k̂) has relative variance about (exp(‖q̂ + k̂‖²) − 1)/m: it falls like 1/m, but\n"
      "from a height that grows exponentially with the norms of q and k. At σ = 0.5 the error soon falls\n"
      "like 1/√m; at σ = 1 it needs many more features for the same error. The elu+1 row is not an\n"
      "estimate of softmax.\n",
      seeds);
  plot_feature_error(chapter, curves);
}

// --- 3. the causal recurrence -------------------------------------------------------------------------

void show_recurrence(float decay) {
  attn::heading("Causal linear attention as an RNN: S ← S + φ(k_t)ᵀv_t, z ← z + φ(k_t), o_t = φ(q_t)S/φ(q_t)·z");
  const std::size_t n = 8, d = 4;
  attn::Rng rng(88);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);                   // (n, d) each
  const Matrix phiQ = attn::elu_plus_one(Q), phiK = attn::elu_plus_one(K);                         // (n, m)
  const Matrix masked = ch08::quadratic_linear_attention(phiQ, phiK, V, attn::causal_mask(n, n));  // (n, d_v)

  // [decode]
  attn::RecurrentState state = attn::RecurrentState::zeros(d, d);  // S (m, d_v), z (m)
  attn::Table t({"token t", "state numbers", "softmax's KV cache numbers", "|o_t − masked quadratic row t|"});
  for (std::size_t step = 0; step < n; ++step) {
    const Vector o = attn::recurrent_step(state, xt::row(phiQ, step), xt::row(phiK, step), xt::row(V, step));  // (d_v)
    const Vector expected = xt::row(masked, step);                                                             // (d_v)
    t.add_row({std::to_string(step), std::to_string(state.S.size() + state.z.size()),
               std::to_string(2 * (step + 1) * d), sci(max_abs_diff(o, expected))});
  }
  // [decode]
  t.print();
  fmt::print(
      "Decoding token by token, the state stays m·d_v + m numbers while softmax attention's cache\n"
      "of keys and values grows by 2·d every token. causal_linear_attention runs the same\n"
      "recurrence over a whole sequence: largest difference from the causally masked quadratic\n"
      "form {}.\n",
      sci(max_abs_diff(attn::causal_linear_attention(phiQ, phiK, V), masked)));

  attn::heading(fmt::format("A decay on the state (RWKV's time decay): S ← λ·S + φ(k_t)ᵀv_t, here λ = {}", decay));
  // With one-hot values (V = I), the output of the last token IS its row of weights over the positions.
  const Matrix one_hot = xt::eye<float>(n);                                          // (n, n)
  const Matrix plain = attn::causal_linear_attention(phiQ, phiK, one_hot);           // (n, n)
  const Matrix decayed = attn::causal_linear_attention(phiQ, phiK, one_hot, decay);  // (n, n)
  attn::Table w({"position j", "weight, λ = 1", "", fmt::format("weight, λ = {}", decay), ""});
  w.set_left(2).set_left(4);
  for (std::size_t j = 0; j < n; ++j)
    w.add_row({std::to_string(j), fixed(plain(n - 1, j), 3), attn::bar(plain(n - 1, j), 16),
               fixed(decayed(n - 1, j), 3), attn::bar(decayed(n - 1, j), 16)});
  w.print();
  fmt::print(
      "The last token's weights: without decay the first token counts as much as the features say;\n"
      "with λ < 1 a token j steps back is multiplied by λ^j, so the state forgets the distant past. That is\n"
      "RWKV's and RetNet's change to the recurrence; state-space models (S4, Mamba) run the same kind of\n"
      "linear recurrence with learned (for Mamba, input-dependent) decays.\n");
}

// --- 4. what linear attention cannot do ---------------------------------------------------------------

void show_sharpness(std::size_t features) {
  const auto& sentence = attn::ch01::sentences()[0];
  const std::size_t n = sentence.tokens.size(), p = sentence.pronoun;
  attn::heading(fmt::format("What linear attention loses: where {} looks in \"{}\"", sentence.tokens[p],
                            fmt::join(sentence.tokens, " ")));
  const Matrix X = attn::ch01::embed(sentence.tokens);                                              // (n, d_model)
  const Matrix Q = attn::matmul(X, attn::ch01::query_weights(attn::design_pronoun_query()));        // (n, d_k)
  const Matrix K = attn::matmul(X, attn::ch01::key_weights());                                      // (n, d_k)
  const Matrix soft = attn::softmax_rows(attn::scaled_scores(Q, K));                                // (n, n)
  const Matrix elu = ch08::linear_attention_weights(attn::elu_plus_one(Q), attn::elu_plus_one(K));  // (n, n)
  // Performer weights with the user's m and with 64 times more features: the estimate of softmax's weights.
  std::vector<Matrix> rf;
  for (std::size_t m : {features, 64 * features}) {
    attn::Rng rng(1);
    const Matrix Omega = ch08::orthogonal_features(m, Q.shape(1), rng);  // (m, d_k)
    rf.push_back(ch08::linear_attention_weights(attn::positive_random_features(Q, Omega),
                                                attn::positive_random_features(K, Omega)));  // (n, n)
  }
  attn::Table t({"key", "softmax", "", "elu+1", "", fmt::format("Performer, m = {}", features),
                 fmt::format("m = {}", 64 * features)});
  t.set_left(2).set_left(4);
  for (std::size_t j = 0; j < n; ++j)
    t.add_row({sentence.tokens[j], fixed(soft(p, j), 3), attn::bar(soft(p, j), 16), fixed(elu(p, j), 3),
               attn::bar(elu(p, j), 16), fixed(rf[0](p, j), 3), fixed(rf[1](p, j), 3)});
  t.add_row({"entropy (bits)", fixed(entropy_bits(soft, p), 2), "", fixed(entropy_bits(elu, p), 2), "",
             fixed(entropy_bits(rf[0], p), 2), fixed(entropy_bits(rf[1], p), 2)});
  t.print();
  fmt::print(
      "Uniform weights over {} keys would have {:.2f} bits. Softmax turns a difference of scores into a\n"
      "ratio of exponentials: it can put most of the weight on {}. elu+1's weights are sums of products\n"
      "of features that grow only linearly, so the same query spreads its attention more evenly (higher\n"
      "entropy). Random features aim at softmax's weights, but sharp weights need large q·k, hence long\n"
      "q and k, exactly where their variance explodes: even many features leave these weights blurred.\n",
      n, std::log2(static_cast<double>(n)), sentence.tokens[sentence.antecedent]);
}

// --- 5. where it pays: counting, and (outside the book) timing ------------------------------------------

void show_flop_crossover(const attn::Chapter& chapter, std::size_t d) {
  attn::heading(fmt::format("Where linear attention pays: FLOPs against softmax attention (d_k = d_v = m = {})", d));
  const double dd = static_cast<double>(d);
  attn::Table t({"n", "softmax FLOPs", "linear FLOPs", "softmax / linear"});
  attn::Series soft{"softmax attention", {}, {}}, lin{"linear attention (elu+1)", {}, {}};
  for (std::size_t n = 16; n <= 65536; n *= 4) {
    const double nn = static_cast<double>(n), s = softmax_flops(nn, dd), l = linear_flops(nn, dd, dd);
    t.add_row({std::to_string(n), sci(s), sci(l), fmt::format("{:.2f}", s / l)});
    soft.x.push_back(nn), soft.y.push_back(s);
    lin.x.push_back(nn), lin.y.push_back(l);
  }
  t.print();
  // Equal when 4n²d + n² = n·m·(4d_v + 6), i.e. n = m(4d_v + 6)/(4d + 1): about m, the number of features.
  const double crossover = dd * (4.0 * dd + 6.0) / (4.0 * dd + 1.0);
  fmt::print(
      "On paper the two cost the same at n = m(4d_v + 6)/(4d_k + 1) ≈ {:.0f}: beyond that softmax grows like n²\n"
      "and linear attention like n. Whether the clock agrees depends on how well each runs on the machine.\n",
      crossover);
  if (const auto path = chapter.figure_path("ch08_crossover.svg")) {
    attn::write_svg_plot(
        *path,
        {fmt::format("Attention FLOPs, d_k = d_v = m = {}", d), "sequence length n", "FLOPs", true, true, {soft, lin}});
    chapter.announce_figure(*path);
  }
}

void show_measured_crossover(std::size_t d) {
  attn::heading(
      fmt::format("Measured on this machine: CPU time on one core (d = {}; median of 3; more: ch08_linear bench)", d));
  attn::Table t({"n", "softmax (ch02)", "linear", "causal recurrence", "softmax / linear"});
  std::vector<double> ns, ts, tl, tc;
  attn::Progress progress(6, true);
  std::size_t done = 0;
  for (std::size_t n = 64; n <= 2048; n *= 2) {
    progress.update(++done, fmt::format("n = {}", n));
    const Contenders c(n, d);
    const double s = cpu_seconds([&] { c.softmax(); });
    const double l = cpu_seconds([&] { c.linear(); });
    const double r = cpu_seconds([&] { c.causal(); });
    ns.push_back(static_cast<double>(n)), ts.push_back(s), tl.push_back(l), tc.push_back(r);
    t.add_row({std::to_string(n), fmt::format("{:.3f} ms", s * 1e3), fmt::format("{:.3f} ms", l * 1e3),
               fmt::format("{:.3f} ms", r * 1e3), fmt::format("{:.1f}", s / l)});
  }
  t.print();
  const std::size_t cross = measured_crossover(16, 2048, d);
  fmt::print("Fitted exponents (t ∝ n^e over n = 256..2048): softmax {:.2f}, linear {:.2f}, causal {:.2f}.\n",
             attn::fit_power_law({ns.begin() + 2, ns.end()}, {ts.begin() + 2, ts.end()}).exponent,
             attn::fit_power_law({ns.begin() + 2, ns.end()}, {tl.begin() + 2, tl.end()}).exponent,
             attn::fit_power_law({ns.begin() + 2, ns.end()}, {tc.begin() + 2, tc.end()}).exponent);
  if (cross == 0)
    fmt::print("Linear attention did not overtake softmax attention below n = 2048 in this run.\n");
  else
    fmt::print("Crossover by bisection: linear attention is faster from n ≈ {} on, in this run.\n", cross);
}

void tell_the_story(const attn::Chapter& chapter, float decay, std::size_t features) {
  attn::require_option(decay > 0.0f && decay <= 1.0f,
                       fmt::format("--decay is {}; the decay λ must be in (0, 1]", decay));
  show_associativity();
  show_feature_maps(chapter);
  show_recurrence(decay);
  show_sharpness(features);
  show_flop_crossover(chapter, 64);
  if (chapter.book_mode()) {
    fmt::print(
        "\n(Timings are left out of the book: run ch08_linear for a quick measurement, ch08_linear bench\n"
        "for the benchmarks.)\n");
  } else {
    show_measured_crossover(64);
  }
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch08_linear", "Chapter 08: linear attention, random features, attention as an RNN");
  float decay = 0.8f;
  std::size_t features = 256;
  chapter.cli().add_option("--decay", decay, "λ of the decay demonstration, in (0, 1]");
  chapter.cli()
      .add_option("--features", features, "Random features m of the Performer on chapter 01's sentence")
      ->check(CLI::Range(1, 4096));
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, decay, features); });
}
