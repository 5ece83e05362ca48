// Chapter 14 — State-space models, the other road to long context, and their duality with attention.
//
// What it shows: chapter 08's decayed recurrence grown into a state-space model, x' = Ax + Bu, y = Cx, made
// discrete by a zero-order hold (Ā = exp(ΔA), B̄ = (Ā − 1)/A · B); a diagonal S4D layer computed as a recurrence
// (a fixed state per step) and as a convolution with its kernel (CB̄, CĀB̄, CĀ²B̄, …), directly in O(n²) and
// through FFTW3's FFT in O(n log n), all equal to float32 rounding; Mamba's selective scan, whose Δ, B, C depend
// on the token so that no single kernel exists, run sequentially and in parallel (the associative scan operator,
// and the channels split between threads); the duality of Mamba-2: the selective SSM is masked attention,
// (L ∘ C Bᵀ) X with a 1-semiseparable decay mask L, drawn and checked against the recurrence, with chapter 08's
// causal linear attention as the case of a constant decay; "attention vs memory": m key → value pairs written
// into a fixed state and read back, exact up to m = d_k with orthogonal keys and degrading after, while softmax
// attention over the m pairs stays exact; the memory of a decode step, constant for the SSM, growing with n for
// chapter 09's KV cache.
// `ch14_state_space bench` measures, in one run with this machine's triad bandwidth: the selective scan at d = 64,
// N = 16, n = 65,536 (sequential, time-parallel and channel-parallel on 2 threads), FFT against direct convolution
// from n = 256 to 65,536 with fitted exponents, and the decode step of the SSM against chapter 09's KV cache from
// n = 1K to 64K with fitted exponents.
// What it leaves out: training (the SSM's parameters here are initialisations, S4D-Lin and S4D-Real), the
// projections, gating and short convolution around Mamba's scan, Mamba-2's chunked matmul algorithm, complex
// parameters in the selective scan, and GPU kernels.
// Run it: ./course run 14      Benchmarks: build/default/bin/ch14_state_space bench
// Your code: ./course run 14 --track exercise      Book page: book/14_state_space.md
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "08_linear/linear.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "14_state_space/lti.hpp"
#include "14_state_space/memory.hpp"
#include "14_state_space/scan.hpp"
#include "14_state_space/state_space.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Complex;
using attn::Matrix;
using attn::Vector;
namespace ch14 = attn::ch14;
using ch14::kDecodeD;
using ch14::kDecodeDk;
using ch14::kDecodeH;
using ch14::kDecodeN;
using ch14::random_vector;
using ch14::s4d_lin;
using ch14::scan_inputs;  // chapters/14_state_space/scan.hpp
using ch14::ScanInputs;

std::string complex_str(Complex z) { return fmt::format("{:+.4f} {:+.4f}i", z.real(), z.imag()); }

/// A vector as a (1, n) matrix, for the common/ helpers that compare matrices.
Matrix as_row(const Vector& v) { return xt::reshape_view(v, {std::size_t{1}, v.size()}); }

// --- 1. from chapter 08's decay to a state-space model ---------------------------------------------------------

void print_discretisation(attn::Rng& rng) {
  attn::heading("From chapter 08's decay to a state-space model: the zero-order hold (S4D-Lin, N = 4, Δ = 0.1)");
  const float delta = 0.1f;
  const attn::DiagonalSSM ssm = s4d_lin(4, rng);
  const attn::DiscreteSSM s = attn::zoh_discretize(ssm, delta);
  attn::Table t({"k", "A_k (continuous)", "Ā_k = exp(ΔA_k)", "|Ā_k|", "B̄_k = (Ā_k − 1)/A_k · B_k", "Euler's Δ·B_k"});
  for (std::size_t k = 0; k < 4; ++k)
    t.add_row({fmt::format("{}", k), complex_str(ssm.A[k]), complex_str(s.A_bar[k]),
               fmt::format("{:.4f}", std::abs(s.A_bar[k])), complex_str(s.B_bar[k]), complex_str(delta * ssm.B[k])});
  t.print();
  fmt::print(
      "{}", attn::wrapped(
                fmt::format(
                    "Chapter 08's recurrence kept S ← λS + φ(k)ᵀv with one real decay λ. A state-space model keeps x ← "
                    "Āx + B̄u with a decay per state entry, here complex: |Ā_k| = e^(Δ·Re A_k) = {:.4f} is how much "
                    "survives a step, the angle Δ·Im A_k how far the entry turns. Re(A) < 0 is what keeps |Ā| < 1; "
                    "zoh_discretize refuses anything else:",
                    std::exp(-0.5 * delta)),
                100, ""));
  try {
    attn::zoh_discretize({{{0.1f, 1.0f}}, {{1.0f, 0.0f}}, {{1.0f, 0.0f}}}, delta);
  } catch (const std::invalid_argument& e) {
    fmt::print("  {}\n", e.what());
  }
  fmt::print("{}",
             attn::wrapped(
                 "B̄ differs from Euler's Δ·B in the third digit at this Δ: the hold integrates the input over the "
                 "step (and stays exact for any Δ), Euler takes its first-order guess (Mamba uses that guess for B).",
                 100, ""));
}

// --- 2. one SSM, two computations --------------------------------------------------------------------------------

void print_two_computations(const attn::Chapter& chapter, attn::Rng& rng, std::size_t n) {
  const std::size_t N = 16;
  attn::heading(fmt::format("One S4D layer, two computations (N = {}, Δ = 0.05, n = {})", N, n));
  // [two_computations]
  const attn::DiscreteSSM s = attn::zoh_discretize(s4d_lin(N, rng), 0.05f);
  const Vector u = random_vector(rng, n);                       // (n)
  const Vector recurrent = ch14::ssm_recurrence(s, u);          // (n) a state of N numbers per step
  const Vector K = ch14::ssm_kernel(s, n);                      // (n) CB̄, CĀB̄, CĀ²B̄, …
  const Vector direct = ch14::causal_convolution_direct(K, u);  // (n) O(n²)
  // [two_computations]
  attn::Table t({"computation", "work", "extra memory", "max |y − y_rec.|"});
  t.set_left(0).set_left(1).set_left(2);
  t.add_row({"recurrence x_t = Āx_{t−1} + B̄u_t", "O(n·N)", fmt::format("state: {} complex", N), "0"});
  t.add_row({"kernel K, Σ_j K_j u_{t−j}", "O(n·N + n²)", "kernel: n numbers",
             attn::sci(attn::max_abs_diff(as_row(direct), as_row(recurrent)), 1)});
  if (ch14::fft_available()) {
    const Vector fft = ch14::causal_convolution_fft(K, u);  // (n) O(n log n)
    t.add_row({"kernel K, FFT (FFTW3)", "O(n·N + n log n)", "spectra: ≥ 2n",
               attn::sci(attn::max_abs_diff(as_row(fft), as_row(recurrent)), 1)});
  }
  t.print();
  if (!ch14::fft_available())
    fmt::print("(FFT convolution skipped: built without FFTW3; `./course setup` installs libfftw3-dev.)\n");
  fmt::print(
      "{}",
      attn::wrapped(
          fmt::format(
              "With Δ, B and C fixed, the layer is linear and time-invariant: its answer to an impulse, the kernel "
              "K, says everything, and y = K * u. Training wants the convolution (all tokens at once, by FFT); "
              "generation wants the recurrence (one token, a fixed state). The first taps: K_0 = {:.4f}, K_1 = "
              "{:.4f}, K_2 = {:.4f}.",
              K(0), n > 1 ? K(1) : 0.0f, n > 2 ? K(2) : 0.0f),
          100, ""));
  if (const auto path = chapter.figure_path("ch14_kernel.svg")) {
    attn::Series series{"K_l = Re(C Ā^l B̄)", {}, {}, true};
    for (std::size_t l = 0; l < std::min<std::size_t>(n, 200); ++l) {
      series.x.push_back(static_cast<double>(l));
      series.y.push_back(K(l));
    }
    attn::write_svg_plot(*path, {"The S4D-Lin kernel: damped oscillations (N = 16, Δ = 0.05)",
                                 "lag l (tokens)",
                                 "K_l",
                                 false,
                                 false,
                                 {series}});
    chapter.announce_figure(*path);
  }
}

// --- 3. the selective scan ---------------------------------------------------------------------------------------

// [no_kernel]
/// The response of a selective SSM (one channel) to an impulse at token \p at: with Δ depending on the token,
/// the response depends on WHEN the impulse came, so no single kernel describes the layer.
Vector impulse_response(const ScanInputs& in, std::size_t at, std::size_t length) {
  Matrix h = xt::zeros<float>({std::size_t{1}, in.A.shape(1)});  // (1, N)
  Vector y = xt::zeros<float>({length});                         // (length)
  for (std::size_t t = at; t < at + length; ++t) {
    const Vector x{t == at ? 1.0f : 0.0f};
    const Vector delta{in.delta(t, 0)};
    const Matrix A = xt::view(in.A, xt::range(0, 1), xt::all());  // (1, N)
    y(t - at) = attn::selective_step(h, x, delta, A, xt::row(in.B, t), xt::row(in.C, t))(0);
  }
  return y;
}
// [no_kernel]

void print_selective_scan(attn::Rng& rng) {
  const std::size_t n = 1000, d = 8, N = 16;
  attn::heading(fmt::format("Mamba's selective scan: Δ, B, C chosen by each token (n = {}, d = {}, N = {})", n, d, N));
  ScanInputs in = scan_inputs(rng, n, d, N);
  // Make token 3 "important": a large Δ resets the state and takes the token in (Mamba's selection mechanism).
  for (std::size_t c = 0; c < d; ++c) in.delta(3, c) = 2.0f;
  const Vector early = impulse_response(in, 3, 6), late = impulse_response(in, 10, 6);  // (6) each
  attn::Table t({"lag", "impulse at token 3 (Δ = 2)", "impulse at token 10 (Δ small)"});
  for (std::size_t l = 0; l < 6; ++l)
    t.add_row({fmt::format("{}", l), fmt::format("{:+.4f}", early(l)), fmt::format("{:+.4f}", late(l))});
  t.print();
  fmt::print("{}",
             attn::wrapped(
                 "The same layer answers an impulse differently depending on when it comes: there is no one kernel, "
                 "so no convolution and no FFT. What remains is the recurrence, and the fact that makes it parallel: "
                 "each step is a map h ↦ a·h + b, and composing two such maps is again one (scan_combine), an "
                 "associative operation.",
                 100, ""));

  // [scan_equal]
  const ch14::SelectiveScanOutput sequential = ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, 1);
  attn::Table s({"scan", "threads", "max |y − y_sequential|", "max |h_n − h_n,sequential|"});
  s.set_left(0);
  for (const auto split : {ch14::ScanSplit::time, ch14::ScanSplit::channels})
    for (const int threads : {2, 3}) {
      const ch14::SelectiveScanOutput out = ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, threads, split);
      s.add_row({split == ch14::ScanSplit::time ? "chunks in time, carries combined" : "channels split",
                 fmt::format("{}", threads), attn::sci(attn::max_abs_diff(out.y, sequential.y), 1),
                 attn::sci(attn::max_abs_diff(out.h, sequential.h), 1)});
    }
  Matrix h = xt::zeros<float>({d, N});  // (d, N) selective_step, token by token: the contract's version
  Matrix y = xt::zeros<float>({n, d});  // (n, d)
  for (std::size_t tok = 0; tok < n; ++tok)
    xt::row(y, tok) = attn::selective_step(h, xt::row(in.x, tok), xt::row(in.delta, tok), in.A, xt::row(in.B, tok),
                                           xt::row(in.C, tok));
  s.add_row({"selective_step, token by token", "1", attn::sci(attn::max_abs_diff(y, sequential.y), 1),
             attn::sci(attn::max_abs_diff(h, sequential.h), 1)});
  s.print();
  // [scan_equal]
  ch14::ScanStats stats;  // the fix-up of the 2-thread time-parallel scan
  ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C, 2, ch14::ScanSplit::time, &stats);
  // The carry is gone once e^{A·ΣΔ} < 2^−150 for A's slowest entry, −1 here: after about 104 / mean(Δ) tokens, with
  // Δ log-uniform in [0.001, 0.1] as scan_inputs draws it.
  const double mean_delta = (0.1 - 0.001) / std::log(100.0);
  fmt::print(
      "{}",
      attn::wrapped(
          fmt::format(
              "Chunks in time: each thread scans its chunk from a zero state; the chunk-end states are combined in "
              "order (scan_combine on whole chunks: the chunk's total decay and its end state); then the tokens after "
              "the first chunk add their carry, C·(e^(A·ΣΔ) ∘ H), that extra work r capping 2 threads at 2/(1+r). "
              "The carry fades: once A·ΣΔ < −104 for every state entry, e^(A·ΣΔ) is 0 in float32 and the fix-up "
              "stops. With Mamba's initial steps (mean Δ = {:.4f}) and A's slowest entry −1 that is about {:.0f} "
              "tokens, however long the chunk; here the second chunk has only {} tokens, and the fix-up corrected {}. "
              "Channels never interact, so splitting them needs no carry at all. `ch14_state_space bench` measures "
              "both at n = 65,536.",
              mean_delta, 104.0 / mean_delta, n - n / 2, stats.fixup_tokens),
          100, ""));
}

// --- 4. the duality ------------------------------------------------------------------------------------------------

void print_duality(const attn::Chapter& chapter, attn::Rng& rng) {
  const std::size_t n = 10, N = 4, p = 2;
  const float A = -1.0f;
  attn::heading(
      fmt::format("The duality: a selective SSM is masked attention, Y = (L ∘ C Bᵀ) X (n = {}, N = {})", n, N));
  // [duality_mask]
  const Vector delta = xt::exp(xt::flatten(Matrix(rng.uniform(n, 1, -3.0f, 0.5f))));  // (n) Δ_t
  const Vector a = xt::exp(A * delta);                                                // (n) a_t = exp(Δ_t A)
  const Matrix L = attn::semiseparable_mask(a);                                       // (n, n)
  // [duality_mask]
  std::vector<std::string> labels;
  for (std::size_t t = 0; t < n; ++t) labels.push_back(fmt::format("t{}", t));
  attn::print_heatmap(L, labels, labels, 2);
  fmt::print("{}", attn::wrapped(fmt::format("L(i, j) = a_(j+1) ⋯ a_i: what is left at token i of what token j "
                                             "wrote. a = ({:.2f}).",
                                             fmt::join(a, ", ")),
                                 100, ""));
  // [duality]
  const Matrix B = rng.normal(n, N), C = rng.normal(n, N), X = rng.normal(n, p);  // (n, N), (n, N), (n, p)
  Matrix B_bar = B;  // (n, N) Δ_t B_t: the step folded into the keys
  for (std::size_t t = 0; t < n; ++t) xt::row(B_bar, t) *= delta(t);
  const Matrix Y = attn::masked_attention_form(L, C, B_bar, X);  // (n, p) the attention form, n² work
  // The recurrence: p channels sharing Δ, every state entry with the same A (Mamba-2's scalar A).
  const Matrix A_all = Matrix(xt::ones<float>({p, N})) * A;  // (p, N)
  Matrix D = xt::zeros<float>({n, p});                       // (n, p) Δ, the same for every channel
  for (std::size_t c = 0; c < p; ++c) xt::col(D, c) = delta;
  const Matrix recurrence = ch14::selective_scan(X, D, A_all, B, C).y;  // (n, p) the scan, n work
  // [duality]
  fmt::print("max |(L ∘ C Bᵀ) X − selective scan| = {}: the same numbers, as attention and as an RNN.\n",
             attn::sci(attn::max_abs_diff(Y, recurrence), 1));

  // Chapter 08's causal linear attention: a constant decay λ, φ(Q) as C, φ(K) as B, normalised by the row sums.
  const Matrix phiQ = attn::elu_plus_one(rng.normal(n, N)), phiK = attn::elu_plus_one(rng.normal(n, N));
  const Matrix V = rng.normal(n, p);
  attn::Table t({"decay λ", "mask", "max |masked form ÷ row sums − chapter 08's causal_linear_attention|"});
  for (const float lambda : {1.0f, 0.9f}) {
    const Matrix Lc = attn::semiseparable_mask(Vector(xt::ones<float>({n}) * lambda));  // (n, n)
    Matrix O = attn::masked_attention_form(Lc, phiQ, phiK, V);                          // (n, p)
    const Matrix sums = attn::masked_attention_form(Lc, phiQ, phiK, Matrix(xt::ones<float>({n, std::size_t{1}})));
    for (std::size_t i = 0; i < n; ++i) xt::row(O, i) /= sums(i, 0);
    t.add_row({fmt::format("{}", lambda), lambda == 1.0f ? "causal ones" : "λ^(i−j)",
               attn::sci(attn::max_abs_diff(O, attn::causal_linear_attention(phiQ, phiK, V, lambda)), 1)});
  }
  t.print();
  fmt::print("{}",
             attn::wrapped(
                 "Chapter 08's causal linear attention is this form with the decay held constant (λ = 1: no decay at "
                 "all, the plain causal mask) and a normaliser. Mamba makes the decay depend on the token; softmax "
                 "attention replaces L ∘ C Bᵀ by softmax(Q Kᵀ/√d_k), which has no such low-rank structure and so no "
                 "recurrence.",
                 100, ""));
  if (const auto path = chapter.figure_path("ch14_semiseparable_mask.svg")) {
    attn::write_svg_heatmap(*path, L, labels, labels, "The 1-semiseparable mask L(i, j) = a_(j+1)⋯a_i");
    chapter.announce_figure(*path);
  }
}

// --- 5. attention vs memory ------------------------------------------------------------------------------------------

// [recall]
/// Relative errors of recalling m pairs with keys \p K (m, d_k): through the SSM's fixed state (the masked form with
/// no decay) and through softmax attention over the m pairs (chapter 02's scaled_dot_product_attention, queries
/// sharpened so that the matching logit is 64).
struct RecallErrors {
  double state, softmax;
};
RecallErrors recall(attn::Rng& rng, const Matrix& K, std::size_t d_v) {
  const std::size_t m = K.shape(0), d_k = K.shape(1);
  const Matrix V = rng.normal(m, d_v);  // (m, d_v)
  const ch14::RecallTask task = ch14::recall_task(K, V);
  const Matrix Y = attn::masked_attention_form(attn::semiseparable_mask(xt::ones<float>({2 * m})), task.C, task.B,
                                               task.X);                     // (2m, d_v)
  const Matrix from_state = xt::view(Y, xt::range(m, 2 * m), xt::all());    // (m, d_v)
  const Matrix Q = K * (64.0f * std::sqrt(static_cast<float>(d_k)));        // (m, d_k)
  const Matrix from_softmax = attn::scaled_dot_product_attention(Q, K, V);  // (m, d_v)
  return {ch14::relative_error(from_state, V), ch14::relative_error(from_softmax, V)};
}

/// m random keys of unit length: (m, d_k).
Matrix random_unit_keys(attn::Rng& rng, std::size_t m, std::size_t d_k) {
  Matrix K = rng.normal(m, d_k);  // (m, d_k)
  for (std::size_t i = 0; i < m; ++i) {
    const float norm = std::sqrt(static_cast<float>(xt::sum(xt::square(xt::row(K, i)))()));
    xt::row(K, i) /= norm;
  }
  return K;
}
// [recall]

std::string error_cell(double e) { return e < 1e-5 ? "< 1e-5" : fmt::format("{:.3f}", e); }

void print_recall(const attn::Chapter& chapter, attn::Rng& rng) {
  const std::size_t d_k = 32, d_v = 32;
  attn::heading(fmt::format("Attention vs memory: store m key → value pairs, read them back (d_k = d_v = {})", d_k));
  attn::Table t({"m", "m/d_k", "state, orthogonal keys", "state, random keys", "softmax, random keys", "√((m−1)/d_k)"});
  attn::Series orthogonal{"fixed d_k × d_v state, orthogonal keys", {}, {}, true};
  attn::Series random{"fixed d_k × d_v state, random unit keys", {}, {}, true};
  attn::Series soft{"softmax over the m pairs (KV cache), random unit keys", {}, {}, true};
  for (const std::size_t m : {4, 8, 16, 24, 32, 40, 48, 64, 96, 128}) {
    const double ratio = static_cast<double>(m) / static_cast<double>(d_k);
    const RecallErrors r = recall(rng, random_unit_keys(rng, m, d_k), d_v);
    std::string orthogonal_cell = "impossible";
    if (m <= d_k) {
      const RecallErrors o = recall(rng, ch14::orthonormal_rows(rng, m, d_k), d_v);
      orthogonal_cell = error_cell(o.state);
      orthogonal.x.push_back(ratio);
      orthogonal.y.push_back(o.state);
    }
    t.add_row({fmt::format("{}", m), fmt::format("{:.2f}", ratio), orthogonal_cell, error_cell(r.state),
               error_cell(r.softmax),
               fmt::format("{:.3f}", std::sqrt(static_cast<double>(m - 1) / static_cast<double>(d_k)))});
    random.x.push_back(ratio);
    random.y.push_back(r.state);
    soft.x.push_back(ratio);
    soft.y.push_back(r.softmax);
  }
  t.print();
  fmt::print(
      "{}",
      attn::wrapped("A state of d_k × d_v numbers is Σ_j k_jᵀ v_j. Reading it with k_i returns v_i plus Σ_(j≠i) "
                    "(k_i·k_j) v_j: nothing more while the keys are orthogonal, which at most d_k keys can be. Random "
                    "unit keys interfere from the start, with a relative error near √((m − 1)/d_k) (each of the m − 1 "
                    "other keys leaks k_i·k_j ~ 1/√d_k of its value). Softmax attention keeps all m pairs (memory "
                    "growing with m) and a sharp query picks its own, for any m. That is the price of O(1) memory per "
                    "token.",
                    100, ""));
  if (const auto path = chapter.figure_path("ch14_recall.svg")) {
    attn::write_svg_plot(*path, {"Recall error against the number of stored pairs",
                                 "m / d_k (pairs per key dimension)",
                                 "relative error",
                                 false,
                                 false,
                                 {orthogonal, random, soft}});
    chapter.announce_figure(*path);
  }
}

// --- 6. decode cost ------------------------------------------------------------------------------------------------

void print_decode_memory() {
  attn::heading(fmt::format("What a decode step reads: the SSM's state against a KV cache (width {})", kDecodeD));
  attn::Table t({"context n", fmt::format("SSM state (d = {}, N = {})", kDecodeD, kDecodeN),
                 fmt::format("KV cache (h = g = {}, d_k = {})", kDecodeH, kDecodeDk), "ratio"});
  const double state = static_cast<double>(kDecodeD * kDecodeN * sizeof(float));
  for (const std::size_t n : {1024, 4096, 16384, 65536}) {
    const double cache = static_cast<double>(attn::kv_cache_bytes(1, kDecodeH, kDecodeDk, n, sizeof(float)));
    t.add_row({fmt::format("{}", n), attn::human_bytes(state), attn::human_bytes(cache),
               fmt::format("{:.0f}×", cache / state)});
  }
  t.print();
  fmt::print(
      "{}",
      attn::wrapped(
          fmt::format(
              "Per layer, fp32. The SSM reads and writes the same {} per token at any n; attention reads its whole "
              "cache, so its step grows linearly with n. `ch14_state_space bench` times both steps from n = 1K to "
              "64K.",
              attn::human_bytes(state)),
          100, ""));
}

void tell_the_story(const attn::Chapter& chapter, std::uint64_t seed, std::size_t n) {
  attn::Rng rng(seed);
  print_discretisation(rng);
  print_two_computations(chapter, rng, n);
  print_selective_scan(rng);
  print_duality(chapter, rng);
  print_recall(chapter, rng);
  print_decode_memory();
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch14_state_space", "Chapter 14: state-space models and their duality with attention");
  std::uint64_t seed = 14;
  std::size_t n = 2048;
  chapter.cli().add_option("--seed", seed, "Seed of the random examples");
  chapter.cli()
      .add_option("--n", n, "Sequence length of the recurrence-vs-convolution comparison (default 2048)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{65536}));
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, seed, n); });
}
