// attn_crosscheck_cases DIR: the C++ half of `./course crosscheck`.
//
// What it does: runs the public functions of chapters 02, 03, 05, 07, 08 and 09 (the reference solutions)
// on small seeded inputs and writes, for every case, the inputs and the course's output as .npy files
// under DIR/<case>/ (xt::dump_npy; masks as uint8, 1 = may attend). tests/crosscheck/crosscheck.py loads
// them with numpy, runs PyTorch on the same inputs, each convention both ways, and prints the errors.
// What it leaves out: timing (bench --vs-torch does that), and any judgement: it only writes numbers.
// How to run it: ./course crosscheck (builds this, creates build/torch-venv once, runs both halves).
// Book pages: the "In PyTorch" sections of chapters 02, 03, 05, 07, 08 and 09.
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
#include "attn/rng.hpp"

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

Tensor3 random_heads(attn::Rng& rng, std::size_t heads, std::size_t n, std::size_t d) {
  Tensor3 t = xt::zeros<float>({heads, n, d});  // (heads, n, d)
  for (std::size_t i = 0; i < heads; ++i) xt::view(t, i, xt::all(), xt::all()) = rng.normal(n, d);
  return t;
}

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
  const Tensor3 Q = random_heads(rng, h, n, d);                                  // (h, n, d_k)
  const Tensor3 K = random_heads(rng, g, n, d), V = random_heads(rng, g, n, d);  // (g, n, d)
  Case(root, "09_gqa").put("Q", Q).put("K", K).put("V", V).put("out", attn::grouped_attention(Q, K, V, true));
}

}  // namespace

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
  } catch (const std::exception& e) {
    std::cerr << "attn_crosscheck_cases: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
