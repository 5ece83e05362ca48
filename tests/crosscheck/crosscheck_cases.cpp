// attn_crosscheck_cases DIR: the C++ half of `./course crosscheck`.
//
// What it does: runs the public functions of chapters 02, 03, 05, 07–12, 14 and 16 (the reference solutions and
// the chapters' own code) on small seeded inputs and writes, for every case, the inputs and the course's output as .npy
// files under DIR/<case>/ (xt::dump_npy; masks as uint8, 1 = may attend). tests/crosscheck/crosscheck.py loads them
// with numpy, runs PyTorch on the same inputs, each convention both ways, and prints the errors. What it leaves out:
// timing (bench --vs-torch does that), and any judgement: it only writes numbers. How to run it: ./course crosscheck
// (builds this, creates build/torch-venv once, runs both halves). Book pages: the "In PyTorch" sections of chapters 02,
// 03, 05 and 07–14.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>

#include <xtensor/xnpy.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "03_multi_head/multi_head.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "07_sparse/sparse.hpp"
#include "08_linear/linear.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "10_backward/backward.hpp"
#include "11_positions/flex.hpp"
#include "11_positions/modifiers.hpp"
#include "11_positions/positions.hpp"
#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "12_learning/model_backward.hpp"
#include "14_state_space/lti.hpp"
#include "14_state_space/scan.hpp"
#include "14_state_space/state_space.hpp"
#include "attn/random_heads.hpp"
#include "attn/rng.hpp"
#if ATTN_HAVE_CH16
#include <fstream>

#include "16_real_model/minilm.hpp"
#endif

namespace fs = std::filesystem;
using attn::Mask;
using attn::Matrix;
using attn::Tensor3;

namespace {

/// One case's folder: every array of the case is written into it by name.
class Case {
 public:
  Case(const fs::path& root, const std::string& name) : dir_(root / name) { fs::create_directories(dir_); }
  template <class E>
  Case& put(const std::string& name, const E& array) {
    xt::dump_npy((dir_ / (name + ".npy")).string(), array);
    return *this;
  }
  Case& put_mask(const std::string& name, const Mask& mask) {
    const xt::xtensor<std::uint8_t, 2> bytes = xt::cast<std::uint8_t>(mask);  // (n_q, n_kv), 1 = may attend
    return put(name, bytes);
  }

 private:
  fs::path dir_;
};

void chapter_02(const fs::path& root) {
  attn::Rng rng(2);
  {  // X·W with W (d_in, d_out); square, so that the transposed (nn.Linear) reading runs and is wrong
    const Matrix X = rng.normal(5, 8), W = rng.normal(8, 8);  // (n, d_model), (d_model, d_k)
    Case(root, "02_project").put("X", X).put("W", W).put("out", attn::project(X, W));
  }
  const Matrix Q = rng.normal(7, 4), K = rng.normal(7, 4), V = rng.normal(7, 6);  // (7, 4), (7, 4), (7, 6)
  // no mask; d_v = 6 ≠ d_k = 4 on purpose
  Case(root, "02_sdpa").put("Q", Q).put("K", K).put("V", V).put("out", attn::scaled_dot_product_attention(Q, K, V));
  {  // causal with n_q = 3 < n_kv = 7: the last query is the last key, as in decoding
    const Matrix Qs = xt::view(Q, xt::range(0, 3), xt::all());  // (3, 4)
    const Mask causal = attn::causal_mask(3, 7);                // (3, 7), aligned to the lower right
    Case(root, "02_causal_short_q")
        .put("Q", Qs)
        .put("K", K)
        .put("V", V)
        .put_mask("mask", causal)
        .put("out", attn::scaled_dot_product_attention(Qs, K, V, causal));
  }
  {  // a random mask (every row keeps its diagonal) and one with a fully masked row
    Mask mask = xt::cast<bool>(rng.uniform(7, 7) < 0.5f);  // (7, 7)
    for (std::size_t i = 0; i < 7; ++i) mask(i, i) = true;
    Case(root, "02_mask")
        .put("Q", Q)
        .put("K", K)
        .put("V", V)
        .put_mask("mask", mask)
        .put("out", attn::scaled_dot_product_attention(Q, K, V, mask));
    for (std::size_t j = 0; j < 7; ++j) mask(2, j) = false;
    Case(root, "02_masked_row")
        .put("Q", Q)
        .put("K", K)
        .put("V", V)
        .put_mask("mask", mask)
        .put("out", attn::scaled_dot_product_attention(Q, K, V, mask));
  }
}

void chapter_03(const fs::path& root) {
  attn::Rng rng(3);
  const std::size_t n = 6, d_model = 8, h = 2;
  const Matrix X = rng.normal(n, d_model);  // (n, d_model)
  attn::MultiHeadWeights W{rng.normal(d_model, d_model, 0.0f, 0.35f), rng.normal(d_model, d_model, 0.0f, 0.35f),
                           rng.normal(d_model, d_model, 0.0f, 0.35f), rng.normal(d_model, d_model, 0.0f, 0.35f)};
  const Mask causal = attn::causal_mask(n, n);  // (n, n)
  Case(root, "03_multi_head")
      .put("X", X)
      .put("W_Q", W.W_Q)
      .put("W_K", W.W_K)
      .put("W_V", W.W_V)
      .put("W_O", W.W_O)
      .put_mask("mask", causal)
      .put("out", attn::multi_head_attention(X, W, h, causal));
}

void chapter_05(const fs::path& root) {
  attn::Rng rng(5);
  const Matrix Q = rng.normal(300, 16), K = rng.normal(300, 16), V = rng.normal(300, 16);  // (300, 16) each
  for (const bool causal : {false, true}) {
    const attn::FlashOutput f = attn::flash_attention(Q, K, V, causal, 64, 96);
    Case(root, causal ? "05_flash_causal" : "05_flash")
        .put("Q", Q)
        .put("K", K)
        .put("V", V)
        .put("out", f.O)
        .put("lse", f.lse);
  }
}

void chapter_07(const fs::path& root) {
  attn::Rng rng(7);
  const std::size_t n = 64, w = 4;
  const Matrix Q = rng.normal(n, 16), K = rng.normal(n, 16), V = rng.normal(n, 16);  // (n, 16) each
  Case(root, "07_window")
      .put("Q", Q)
      .put("K", K)
      .put("V", V)
      .put_mask("mask", attn::local_window_mask(n, w))
      .put("out", attn::sliding_window_attention(Q, K, V, w));
}

void chapter_08(const fs::path& root) {
  attn::Rng rng(8);
  const Matrix Q = rng.normal(32, 8), K = rng.normal(32, 8), V = rng.normal(32, 8);  // (32, 8) each
  const Matrix phiQ = attn::elu_plus_one(Q), phiK = attn::elu_plus_one(K);           // (32, 8) each
  Case(root, "08_linear").put("Q", Q).put("K", K).put("V", V).put("out", attn::linear_attention(phiQ, phiK, V));
  Case(root, "08_causal_linear")
      .put("Q", Q)
      .put("K", K)
      .put("V", V)
      .put("out", attn::causal_linear_attention(phiQ, phiK, V));
}

void chapter_09(const fs::path& root) {
  attn::Rng rng(9);
  const std::size_t h = 8, g = 2, n = 10, d = 8;
  const Tensor3 Q = attn::normal_heads(rng, h, n, d);                                        // (h, n, d_k)
  const Tensor3 K = attn::normal_heads(rng, g, n, d), V = attn::normal_heads(rng, g, n, d);  // (g, n, d)
  Case(root, "09_gqa").put("Q", Q).put("K", K).put("V", V).put("out", attn::grouped_attention(Q, K, V, true));
}

void chapter_10(const fs::path& root) {
  attn::Rng rng(10);
  // Ragged n (a multiple of no tile), d_v ≠ d_k; the flash pair with the forward's tiles, as the contract asks.
  const auto gradients = [&](const std::string& name, std::size_t n_q, std::size_t n_kv, bool causal) {
    const Matrix Q = rng.normal(n_q, 16), K = rng.normal(n_kv, 16), V = rng.normal(n_kv, 8);  // d_k 16, d_v 8
    const Matrix dO = rng.normal(n_q, 8);                                                     // (n_q, d_v)
    const attn::FlashOutput f = attn::flash_attention(Q, K, V, causal, 16, 24);
    const attn::AttentionGrads g = attn::flash_backward(Q, K, V, f.O, f.lse, dO, causal, 16, 24);
    Case c(root, name);
    c.put("Q", Q).put("K", K).put("V", V).put("dO", dO).put("dQ", g.dQ).put("dK", g.dK).put("dV", g.dV);
    if (!causal) {  // the textbook backward too, which keeps P
      const attn::AttentionGrads full = attn::attention_backward(Q, K, V, dO);
      c.put("dQ_full", full.dQ).put("dK_full", full.dK).put("dV_full", full.dV);
    }
  };
  gradients("10_grad", 37, 37, false);
  gradients("10_grad_causal", 37, 37, true);
  gradients("10_grad_causal_short_q", 20, 45, true);
  {  // one dominant key per query (60 above the others), integer V and dO: the exact dV is dO
    const std::size_t n = 7, d_k = 64;
    Matrix Q = rng.normal(n, d_k);  // (n, d_k), unit rows
    for (std::size_t i = 0; i < n; ++i) {
      auto q = xt::row(Q, i);
      q /= std::sqrt(static_cast<float>(xt::sum(q * q)()));
    }
    double gap = 1e30;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (i != j)
          gap = std::min(gap, static_cast<double>(xt::sum(xt::row(Q, i) * (xt::row(Q, i) - xt::row(Q, j)))()));
    const Matrix K = static_cast<float>(60.0 * 8.0 / gap) * Q;  // (n, d_k): s_ii − s_ij ≥ 60
    const auto integers = [&] {
      const Matrix m = xt::floor(rng.uniform(n, 8, 1.0f, 5.0f));  // (n, 8)
      return Matrix(xt::where(rng.uniform(n, 8) < 0.5f, -m, m));
    };
    const Matrix V = integers(), dO = integers();
    const attn::FlashOutput f = attn::flash_attention(Q, K, V, false, 4, 4);
    const attn::AttentionGrads g = attn::flash_backward(Q, K, V, f.O, f.lse, dO, false, 4, 4);
    Case(root, "10_dominant")
        .put("Q", Q)
        .put("K", K)
        .put("V", V)
        .put("dO", dO)
        .put("dQ", g.dQ)
        .put("dK", g.dK)
        .put("dV", g.dV);
  }
}

void chapter_11(const fs::path& root) {
  namespace ch11 = attn::ch11;
  attn::Rng rng(11);
  {                                       // RoPE on rows at positions 3 … 12, the course's interleaved pairs
    const Matrix X = rng.normal(10, 16);  // (n, d)
    Matrix out = X;
    attn::apply_rope(out, 3, 10000.0f);
    Case(root, "11_rope").put("X", X).put("out", out);
  }
  // Every modifier with n_q = 20 < n_kv = 45: the queries are the last 20 positions (offset 25).
  const std::size_t n_q = 20, n_kv = 45, d = 16, offset = n_kv - n_q;
  const auto heads = [&](std::size_t h, std::size_t n) {
    Tensor3 t = xt::zeros<float>({h, n, d});  // (h, n, d)
    for (std::size_t k = 0; k < h; ++k) xt::view(t, k) = rng.normal(n, d);
    return t;
  };
  const ch11::FlexConfig config{16, 32, 1};
  {
    const std::size_t h = 6;  // not a power of two: the paper's slopes differ from a plain geometric sequence
    const Tensor3 Q = heads(h, n_q), K = heads(h, n_kv), V = heads(h, n_kv);
    const ch11::Alibi alibi{attn::alibi_slopes(h), offset};
    Case(root, "11_alibi")
        .put("Q", Q)
        .put("K", K)
        .put("V", V)
        .put("slopes", alibi.slopes)
        .put("out", ch11::flex_attention(Q, K, V, alibi, ch11::Causal{offset}, nullptr, config).O);
  }
  const Tensor3 Q = heads(2, n_q), K = heads(2, n_kv), V = heads(2, n_kv);
  const auto put = [&](const std::string& name, const Tensor3& out) {
    Case(root, name).put("Q", Q).put("K", K).put("V", V).put("out", out);
  };
  put("11_causal", ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::Causal{offset}, nullptr, config).O);
  put("11_window",
      ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::SlidingWindow{8, offset}, nullptr, config).O);
  put("11_prefix", ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, ch11::PrefixLM{10, offset}, nullptr, config).O);
  std::vector<std::size_t> document(n_kv);  // (n_kv) documents of 12 tokens
  for (std::size_t t = 0; t < n_kv; ++t) document[t] = t / 12;
  put("11_documents",
      ch11::flex_attention(Q, K, V, ch11::NoScoreMod{}, attn::DocumentMask{document, true, offset}, nullptr, config).O);
  put("11_softcap", ch11::flex_attention(Q, K, V, ch11::SoftCap{1.5f}, ch11::NoMask{}, nullptr, config).O);
}

void chapter_12(const fs::path& root) {
  namespace ch12 = attn::ch12;
  attn::Rng rng(12);
  const ch12::Model model = ch12::init_model(ch12::Config{}, 12);
  const ch12::InductionSequence seq = ch12::make_induction(16, model.config.vocab, rng);
  const ch12::Trace trace = ch12::forward(model, seq.tokens);
  const attn::LossAndGrad lg = attn::cross_entropy(trace.logits, seq.targets);
  ch12::Model grads = ch12::zeros_like(model);
  ch12::backward(model, trace, lg.dlogits, seq.tokens, grads);
  // One AdamW step from zero moments, with the chapter's training settings (β = 0.9, 0.98; no weight decay).
  ch12::Model after = model, m = ch12::zeros_like(model), v = ch12::zeros_like(model);
  const attn::AdamW settings{3e-3f, 0.9, 0.98, 1e-8f, 0.0f};
  const std::vector<Matrix*> P = ch12::parameters(after), G = ch12::parameters(grads), M = ch12::parameters(m),
                             Vs = ch12::parameters(v);
  for (std::size_t i = 0; i < P.size(); ++i) attn::adamw_step(*P[i], *G[i], *M[i], *Vs[i], 1, settings);
  Case c(root, "12_model");
  xt::xtensor<std::int64_t, 1> tokens = xt::zeros<std::int64_t>({seq.tokens.size()}), targets = tokens;  // (n)
  for (std::size_t i = 0; i < seq.tokens.size(); ++i) {
    tokens(i) = static_cast<std::int64_t>(seq.tokens[i]);
    targets(i) = seq.targets[i] == ch12::kIgnore ? -1 : static_cast<std::int64_t>(seq.targets[i]);  // -1: ignored
  }
  c.put("tokens", tokens).put("targets", targets).put("logits", trace.logits);
  c.put("loss", xt::xtensor<double, 1>{lg.loss});
  const std::vector<const Matrix*> P0 = ch12::parameters(model);
  for (std::size_t i = 0; i < P0.size(); ++i) {
    const std::string name = "p" + std::to_string(i);  // embed, each layer's W_Q W_K W_V W_O, unembed
    c.put(name, *P0[i]).put(name + "_grad", *G[i]).put(name + "_after", *P[i]);
  }
  c.put("config",
        xt::xtensor<double, 1>{static_cast<double>(model.config.heads), static_cast<double>(model.config.rope_base)});
}

void chapter_14(const fs::path& root) {
  namespace ch14 = attn::ch14;
  attn::Rng rng(14);
  {  // ZOH of S4D-Lin's A = −1/2 + iπk with a complex B, at Mamba's smallest initial step and a large one
    attn::DiagonalSSM ssm;
    const Matrix b = rng.normal(8, 2);  // (N, 2)
    for (std::size_t k = 0; k < 8; ++k) {
      ssm.A.emplace_back(-0.5f, static_cast<float>(M_PI * static_cast<double>(k)));
      ssm.B.emplace_back(b(k, 0), b(k, 1));
      ssm.C.emplace_back(1.0f, 0.0f);
    }
    for (const float delta : {0.001f, 0.1f}) {
      const attn::DiscreteSSM s = attn::zoh_discretize(ssm, delta);
      xt::xtensor<float, 2> A = xt::zeros<float>({8, 2}), B = A, A_bar = A, B_bar = A;  // (N, 2): real, imaginary
      for (std::size_t k = 0; k < 8; ++k) {
        A(k, 0) = ssm.A[k].real(), A(k, 1) = ssm.A[k].imag(), B(k, 0) = ssm.B[k].real(), B(k, 1) = ssm.B[k].imag();
        A_bar(k, 0) = s.A_bar[k].real(), A_bar(k, 1) = s.A_bar[k].imag();
        B_bar(k, 0) = s.B_bar[k].real(), B_bar(k, 1) = s.B_bar[k].imag();
      }
      Case(root, delta < 0.01f ? "14_zoh_small" : "14_zoh")
          .put("A", A)
          .put("B", B)
          .put("delta", xt::xtensor<float, 1>{delta})
          .put("A_bar", A_bar)
          .put("B_bar", B_bar);
    }
    // The S4D kernel at that small step, n = 4,096, and the causal convolution with it, direct (sums in double)
    const attn::DiscreteSSM s = attn::zoh_discretize(ssm, 0.001f);
    const Matrix u_col = rng.normal(4096, 1);  // (n, 1)
    const attn::Vector u = xt::flatten(u_col), K = ch14::ssm_kernel(s, 4096);
    Case(root, "14_conv").put("K", K).put("u", u).put("out", ch14::causal_convolution_direct(K, u));
  }
  {  // the selective scan, Mamba-like inputs (Δ log-uniform in [0.001, 0.1], A = −(k + 1))
    const ch14::ScanInputs in = ch14::scan_inputs(rng, 64, 4, 8);
    Case(root, "14_scan")
        .put("x", in.x)
        .put("delta", in.delta)
        .put("A", in.A)
        .put("B", in.B)
        .put("C", in.C)
        .put("out", ch14::selective_scan(in.x, in.delta, in.A, in.B, in.C).y);
  }
}

}  // namespace

#if ATTN_HAVE_CH16
/// Chapter 16: the ids and sentence embeddings of the recorded texts, computed now, for transformers to
/// compute live from the same model files (the tests compare against the recording; this is the live check).
void chapter_16(const fs::path& root) {
  const std::string dir = attn::ch16::default_model_dir();
  if (const std::string why = attn::ch16::model_missing_reason(dir); !why.empty()) {
    std::ofstream(root / "16_skipped.txt") << why << "\n";
    return;
  }
  const attn::ch16::MiniLM m = attn::ch16::load_minilm(dir);
  std::size_t k = 0;
  for (const attn::ch16::ReferenceText& r : attn::ch16::read_reference(ATTN_CH16_REFERENCE)) {
    const std::vector<int> ids = attn::ch16::tokenize(r.text, m.vocab, m.config.max_tokens);
    xt::xtensor<float, 1> id_values = xt::zeros<float>({ids.size()});  // (n) exact: ids < 2^24
    std::copy(ids.begin(), ids.end(), id_values.begin());
    const fs::path name = "16_text_" + std::to_string(k++);
    Case(root, name.string()).put("ids", id_values).put("embedding", attn::ch16::sentence_embedding(m, r.text));
    std::ofstream(root / name / "text.txt") << r.text;
    std::ofstream(root / name / "model_dir.txt") << dir;
  }
}
#endif

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: attn_crosscheck_cases DIR\n";
    return 2;
  }
  try {
    const fs::path root = argv[1];
    chapter_02(root);
    chapter_03(root);
    chapter_05(root);
    chapter_07(root);
    chapter_08(root);
    chapter_09(root);
    chapter_10(root);
    chapter_11(root);
    chapter_12(root);
    chapter_14(root);
#if ATTN_HAVE_CH16
    chapter_16(root);
#endif
  } catch (const std::exception& e) {
    std::cerr << "attn_crosscheck_cases: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
