// Chapter 16's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/16_real_model_oracle.hpp), closed forms, or the reference recorded from sentence-transformers
// (tests/data/16_real_model_reference.txt, with the command that produced it on its first line).
// The cases that need the model skip themselves without it (attn::test::skip): ctest and ./course check report
// them as skipped, with the reason.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "02_qkv_trace/qkv_trace.hpp"
#include "16_real_model/backward.hpp"
#include "16_real_model/minilm.hpp"
#include "16_real_model/real_model.hpp"
#include "attn/rng.hpp"
#include "oracle/16_real_model_oracle.hpp"
#include "support/allclose.hpp"
#include "support/results.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;
using attn::Vector;
namespace ch16 = attn::ch16;
namespace fs = std::filesystem;

// A vocabulary of hand-picked pieces: "aff" and "##aff" differ, so a forgotten "##" shows; "##a" and "##ab"
// are shorter matches than "##able", so a shortest-first search shows.
ch16::Vocab tiny_vocab() {
  ch16::Vocab v;
  for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "aff", "##aff", "able", "##able", "##a", "##ab",
                        "caf", "##é", "##e", "u"}) {
    v.id_of.emplace(t, static_cast<int>(v.token_of.size()));
    v.token_of.emplace_back(t);
  }
  v.pad = 0;
  v.unk = 1;
  v.cls = 2;
  v.sep = 3;
  return v;
}

// A fresh file path in a temporary folder of this test program's own.
std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "attn_ch16_test";
  fs::create_directories(dir);
  return (dir / name).string();
}

// The model's folder; without the model, "" and the running case is skipped (the caller returns).
std::string model_dir_or_skip() {
  static const std::string why = ch16::model_missing_reason(ch16::default_model_dir());
  if (!why.empty()) {
    attn::test::skip("no model: ./course setup fetches it");
    return "";
  }
  return ch16::default_model_dir();
}

// The model, loaded once for all the cases that need it (read_tensor reads its weights); nullptr, and the
// running case skipped, without it.
const ch16::MiniLM* model_or_skip() {
  if (model_dir_or_skip().empty()) return nullptr;
  static const ch16::MiniLM model = ch16::load_minilm(ch16::default_model_dir());
  return &model;
}

// A small random BERT layer (d = 8, h = 2, d_ff = 16) in both precisions: the track's floats and the
// oracle's doubles hold the same values.
struct SmallLayer {
  ch16::EncoderLayerWeights W;
  attn::oracle::BertLayer O;
};

SmallLayer small_layer(attn::Rng& rng) {
  const std::size_t d = 8, d_ff = 16;
  SmallLayer s;
  auto mat = [&](std::size_t r, std::size_t c, Matrix& w, attn::oracle::Mat& o) {
    w = rng.normal(r, c, 0.0f, 0.5f);
    o = attn::test::to_oracle(w);
  };
  auto vec = [&](std::size_t n, float mean, Vector& w, std::vector<double>& o) {
    const Matrix m = rng.normal(1, n, mean, 0.1f);
    w = xt::view(m, 0, xt::all());
    o.assign(w.begin(), w.end());
  };
  mat(d, d, s.W.W_Q, s.O.W_Q);
  mat(d, d, s.W.W_K, s.O.W_K);
  mat(d, d, s.W.W_V, s.O.W_V);
  mat(d, d, s.W.W_O, s.O.W_O);
  mat(d_ff, d, s.W.W_1, s.O.W_1);
  mat(d, d_ff, s.W.W_2, s.O.W_2);
  vec(d, 0.0f, s.W.b_Q, s.O.b_Q);
  vec(d, 0.0f, s.W.b_K, s.O.b_K);
  vec(d, 0.0f, s.W.b_V, s.O.b_V);
  vec(d, 0.0f, s.W.b_O, s.O.b_O);
  vec(d_ff, 0.0f, s.W.b_1, s.O.b_1);
  vec(d, 0.0f, s.W.b_2, s.O.b_2);
  vec(d, 1.0f, s.W.ln1_gamma, s.O.ln1_gamma);
  vec(d, 0.0f, s.W.ln1_beta, s.O.ln1_beta);
  vec(d, 1.0f, s.W.ln2_gamma, s.O.ln2_gamma);
  vec(d, 0.0f, s.W.ln2_beta, s.O.ln2_beta);
  s.W.heads = s.O.heads = 2;
  s.W.ln_eps = 1e-12f;
  s.O.eps = static_cast<double>(s.W.ln_eps);
  return s;
}

// A float32 layer against float64 with d = 8: each dot product of ≤ 16 terms of size ~1 carries ~16·2^-24 ≈
// 1e-6; two LayerNorms divide by a standard deviation of order 1 and GELU's slope is ≤ 1.13, so the output
// (values of size ~1) is off by a few 1e-6. atol = rtol = 1e-4 leaves a margin of ten and more.
constexpr double kLayerTol = 1e-4;

// The C++ forward against sentence-transformers (both float32, different summation orders): each of the six
// layers rounds dot products of up to 1536 terms, a relative error of order √1536·2^-24 ≈ 2e-6 on hidden states
// that LayerNorm keeps of size ~1; pooling over n tokens and normalising to unit length leaves components of
// size ≤ 0.2 off by ~1e-7 (measured: largest |Δ| 1.45e-7 over the ten recorded texts). atol = 1e-6.
constexpr double kEmbeddingTol = 1e-6;

}  // namespace

TEST_SUITE("16_real_model/wordpiece") {
  TEST_CASE("wordpiece takes the longest known piece first and marks continuations with ##") {
    const ch16::Vocab v = tiny_vocab();
    CHECK(ch16::wordpiece("unaffable", v) == std::vector<int>{v.find("un"), v.find("##aff"), v.find("##able")});
    CHECK(ch16::wordpiece("aff", v) == std::vector<int>{v.find("aff")});
  }
  TEST_CASE("wordpiece makes the whole word [UNK] when a part matches no piece") {
    const ch16::Vocab v = tiny_vocab();
    CHECK(ch16::wordpiece("unaffz", v) == std::vector<int>{v.unk});
    CHECK(ch16::wordpiece("zzz", v) == std::vector<int>{v.unk});
  }
  TEST_CASE("wordpiece cuts between code points, never inside one, and refuses an empty word") {
    ch16::Vocab v = tiny_vocab();
    CHECK(ch16::wordpiece("café", v) == std::vector<int>{v.find("caf"), v.find("##é")});
    v.max_word_chars = 4;  // "café" is 4 code points (5 bytes): still allowed; "unaff" is 5
    CHECK(ch16::wordpiece("café", v) == std::vector<int>{v.find("caf"), v.find("##é")});
    CHECK(ch16::wordpiece("unaff", v) == std::vector<int>{v.unk});
    CHECK_THROWS_AS(ch16::wordpiece("", v), std::invalid_argument);
  }
  TEST_CASE("wordpiece with basic tokenization gives the reference tokenizer's ids") {
    const std::string dir = model_dir_or_skip();
    if (dir.empty()) return;
    // The vocabulary and the token limit only: the weights need read_tensor, an exercise after this one.
    const ch16::Vocab vocab = ch16::load_vocab(dir + "/vocab.txt");
    const std::size_t max_tokens = ch16::read_config(dir).max_tokens;
    for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
      INFO("text: ", r.text);
      CHECK(ch16::tokenize(r.text, vocab, max_tokens) == r.ids);
    }
  }
}

TEST_SUITE("16_real_model/read_tensor") {
  TEST_CASE("read_tensor returns a tensor's values in its shape, a vector as one row") {
    const std::string path = temp_path("read.safetensors");
    ch16::write_safetensors(path, {{"w", {{2, 3}, {1, 2, 3, 4, 5, 6}}}, {"b", {{3}, {-1, 0.5f, 7}}}});
    const ch16::SafetensorsFile file(path);
    const Matrix w = ch16::read_tensor(file, "w", {2, 3});
    REQUIRE(w.shape(0) == 2);
    REQUIRE(w.shape(1) == 3);
    CHECK(std::vector<float>(w.begin(), w.end()) == std::vector<float>{1, 2, 3, 4, 5, 6});
    const Matrix b = ch16::read_tensor(file, "b", {3});
    REQUIRE(b.shape(0) == 1);
    REQUIRE(b.shape(1) == 3);
    CHECK(std::vector<float>(b.begin(), b.end()) == std::vector<float>{-1, 0.5f, 7});
  }
  TEST_CASE("read_tensor refuses a missing tensor and a wrong shape, naming the tensor and both shapes") {
    const std::string path = temp_path("shape.safetensors");
    ch16::write_safetensors(path, {{"w", {{2, 3}, {1, 2, 3, 4, 5, 6}}}});
    const ch16::SafetensorsFile file(path);
    CHECK_THROWS_NAMING(ch16::read_tensor(file, "v", {2, 3}), std::invalid_argument, "v");
    CHECK_THROWS_NAMING(ch16::read_tensor(file, "w", {3, 2}), std::invalid_argument, "w", "2", "3");
    CHECK_THROWS_NAMING(ch16::read_tensor(file, "w", {6}), std::invalid_argument, "w", "2", "3", "6");
  }
  TEST_CASE("read_tensor refuses a tensor that is not float32, naming the tensor") {
    const std::string path = temp_path("dtype.safetensors");
    // Eight bytes of data declared as two int32: a well-formed file whose tensor is not F32.
    ch16::write_safetensors(path, {{"i", {{2}, {0, 0}}}},
                            R"({"i": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})");
    const ch16::SafetensorsFile file(path);
    CHECK_THROWS_NAMING(ch16::read_tensor(file, "i", {2}), std::invalid_argument, "i");
  }
}

TEST_SUITE("16_real_model: chapter code") {
  TEST_CASE("the safetensors reader refuses missing, truncated and lying files with a message") {
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile(temp_path("none.safetensors")), doctest::Contains("cannot open"),
                         std::runtime_error);
    const std::string good = temp_path("good.safetensors");
    ch16::write_safetensors(good, {{"w", {{2, 2}, {1, 2, 3, 4}}}});
    CHECK_NOTHROW(ch16::SafetensorsFile{good});
    // Truncated: the last float cut off, so the data is shorter than the header says.
    const std::string cut = temp_path("cut.safetensors");
    fs::copy_file(good, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, fs::file_size(good) - 4);
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{cut}, doctest::Contains("outside"), std::invalid_argument);
    // Cut inside the header's length, and inside the header itself.
    fs::resize_file(cut, 5);
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{cut}, doctest::Contains("truncated"), std::invalid_argument);
    fs::copy_file(good, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, 20);
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{cut}, doctest::Contains("header claims"), std::invalid_argument);
    // Lying headers: a shape that needs more bytes than its offsets give, overlapping tensors, not JSON.
    const std::string lie = temp_path("lie.safetensors");
    ch16::write_safetensors(lie, {{"w", {{2, 2}, {1, 2, 3, 4}}}},
                            R"({"w": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 16]}})");
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{lie}, doctest::Contains("needs 24 bytes"), std::invalid_argument);
    ch16::write_safetensors(lie, {{"w", {{2, 2}, {1, 2, 3, 4}}}},
                            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                            R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})");
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{lie}, doctest::Contains("overlap"), std::invalid_argument);
    ch16::write_safetensors(lie, {{"w", {{2, 2}, {1, 2, 3, 4}}}}, "[1, 2");
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{lie}, doctest::Contains("not a JSON object"), std::invalid_argument);
    ch16::write_safetensors(lie, {{"w", {{2, 2}, {1, 2, 3, 4}}}},
                            R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}})");
    CHECK_THROWS_WITH_AS(ch16::SafetensorsFile{lie}, doctest::Contains("overflows"), std::invalid_argument);
  }
  TEST_CASE("basic tokenization lower-cases, strips accents, splits punctuation and CJK characters") {
    CHECK(ch16::basic_tokenize("Café DÉJÀ-vu!") == std::vector<std::string>{"cafe", "deja", "-", "vu", "!"});
    CHECK(ch16::basic_tokenize("猫坐 on\tmat") == std::vector<std::string>{"猫", "坐", "on", "mat"});
    CHECK(ch16::basic_tokenize("  ") == std::vector<std::string>{});
    CHECK_THROWS_AS(ch16::basic_tokenize("bad \xff byte"), std::invalid_argument);
  }
}

TEST_SUITE("16_real_model: chapter code") {
  TEST_CASE("pooling key and value heads gives every head of a group its group's mean projection") {
    attn::Rng rng(20);
    const SmallLayer L = small_layer(rng);  // h = 2, d_k = 4
    const ch16::EncoderLayerWeights one = ch16::pool_kv_heads(L.W, 1);
    for (std::size_t r = 0; r < 4; ++r) {
      for (std::size_t c = 0; c < 8; ++c) {
        const double mean_k = (static_cast<double>(L.W.W_K(r, c)) + L.W.W_K(r + 4, c)) / 2;
        CHECK(one.W_K(r, c) == doctest::Approx(mean_k).epsilon(1e-6));
        CHECK(one.W_K(r + 4, c) == doctest::Approx(mean_k).epsilon(1e-6));
        const double mean_v = (static_cast<double>(L.W.W_V(r, c)) + L.W.W_V(r + 4, c)) / 2;
        CHECK(one.W_V(r + 4, c) == doctest::Approx(mean_v).epsilon(1e-6));
      }
      CHECK(one.b_K(r) == doctest::Approx((static_cast<double>(L.W.b_K(r)) + L.W.b_K(r + 4)) / 2).epsilon(1e-6));
    }
    CHECK(one.W_Q == L.W.W_Q);                                           // queries keep their own heads
    const ch16::EncoderLayerWeights same = ch16::pool_kv_heads(L.W, 2);  // g = h: nothing pooled
    CHECK(same.W_K == L.W.W_K);
    CHECK_THROWS_WITH_AS(ch16::pool_kv_heads(L.W, 3), doctest::Contains("g = 3"), std::invalid_argument);
  }
}

TEST_SUITE("16_real_model: chapter code") {
  TEST_CASE("the chapter's layer with a pluggable attention equals the float64 oracle when the attention is exact") {
    attn::Rng rng(21);
    const SmallLayer L = small_layer(rng);
    const Matrix X = rng.normal(5, 8);  // (n, d)
    std::size_t calls = 0;
    const Matrix out = ch16::encoder_layer_with(X, L.W, [&](const Matrix& Q, const Matrix& K, const Matrix& V) {
      ++calls;
      CHECK(Q.shape(0) == 5);
      CHECK(Q.shape(1) == 4);                              // d_k = d / h = 8 / 2
      return attn::scaled_dot_product_attention(Q, K, V);  // chapter 02, exact
    });
    CHECK(calls == 2);  // once per head
    CHECK_ALLCLOSE(out, attn::oracle::bert_layer(attn::test::to_oracle(X), L.O, {}), kLayerTol, kLayerTol);
  }

  TEST_CASE("the packed layer equals the oracle sentence by sentence: no token attends across a boundary") {
    attn::Rng rng(22);
    const SmallLayer L = small_layer(rng);
    const Matrix A = rng.normal(3, 8), B = rng.normal(5, 8);  // two sentences, (n_s, d) each
    Matrix X = xt::concatenate(xt::xtuple(A, B), 0);          // (8, d) packed
    const auto exact = [](const Matrix& Q, const Matrix& K, const Matrix& V) {
      return attn::scaled_dot_product_attention(Q, K, V);
    };
    const Matrix out = ch16::encoder_layer_packed(X, {0, 3, 3, 8}, L.W, exact);  // with an empty sentence
    const Matrix out_A = xt::view(out, xt::range(0, 3), xt::all()), out_B = xt::view(out, xt::range(3, 8), xt::all());
    CHECK_ALLCLOSE(out_A, attn::oracle::bert_layer(attn::test::to_oracle(A), L.O, {}), kLayerTol, kLayerTol);
    CHECK_ALLCLOSE(out_B, attn::oracle::bert_layer(attn::test::to_oracle(B), L.O, {}), kLayerTol, kLayerTol);
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_packed(X, {0, 5, 3, 8}, L.W, exact), doctest::Contains("starts"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_packed(X, {0, 3, 7}, L.W, exact), doctest::Contains("starts"),
                         std::invalid_argument);
  }

  TEST_CASE("sentence_embeddings of a packed batch gives sentence-transformers' embeddings of the real model") {
    const ch16::MiniLM* model = model_or_skip();
    if (model == nullptr) return;
    std::vector<std::string> texts;
    std::vector<std::vector<double>> want;  // (d) per text, as recorded
    for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
      texts.push_back(r.text);
      want.push_back(r.embedding);
    }
    const std::vector<Vector> got = ch16::sentence_embeddings(*model, texts);
    REQUIRE(got.size() == texts.size());
    for (std::size_t s = 0; s < texts.size(); ++s) {
      INFO("text: ", texts[s]);
      CHECK_ALLCLOSE(got[s], want[s], kEmbeddingTol, 0.0);
    }
    CHECK(ch16::sentence_embeddings(*model, {}).empty());
  }
}

TEST_SUITE("16_real_model/prune_heads") {
  TEST_CASE("prune_heads zeros exactly the heads it removes and leaves the others as they were") {
    attn::Rng rng(16);
    const Matrix flat = rng.normal(3 * 4, 2);  // (h·n, d_k)
    Tensor3 heads = xt::zeros<float>({3, 4, 2});
    std::copy(flat.begin(), flat.end(), heads.begin());
    const Tensor3 out = ch16::prune_heads(heads, {true, false, true});
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t t = 0; t < 4; ++t)
        for (std::size_t c = 0; c < 2; ++c) CHECK(out(i, t, c) == (i == 1 ? 0.0f : heads(i, t, c)));
    CHECK_THROWS_NAMING(ch16::prune_heads(heads, {true, false}), std::invalid_argument, "3", "2");
  }
}

TEST_SUITE("16_real_model/encoder_layer") {
  // Credited to encoder_layer, the last exercise it needs (it checks prune_heads through the layer).
  TEST_CASE("encoder_layer with every head pruned leaves the layer its residual path alone") {
    // With no head the attention sublayer adds only W_O's bias: out = FFN-block(LayerNorm(X + b_O)).
    attn::Rng rng(17);
    const SmallLayer L = small_layer(rng);
    const Matrix X = rng.normal(5, 8);  // (n, d)
    const Matrix out = ch16::encoder_layer(X, L.W, {false, false});
    CHECK_ALLCLOSE(out, attn::oracle::bert_layer(attn::test::to_oracle(X), L.O, {false, false}), kLayerTol, kLayerTol);
    // The closed form: the same as a layer whose value projection outputs zeros (W_V = 0, b_V = 0).
    ch16::EncoderLayerWeights no_values = L.W;
    no_values.W_V.fill(0.0f);
    no_values.b_V.fill(0.0f);
    const Matrix residual_only = ch16::encoder_layer(X, no_values);
    CHECK(xt::amax(xt::abs(out - residual_only))() <= 1e-6f);
  }
  TEST_CASE("encoder_layer equals the float64 oracle's BERT layer, with all heads and with one removed") {
    attn::Rng rng(18);
    const SmallLayer L = small_layer(rng);
    const Matrix X = rng.normal(5, 8);  // (n, d)
    CHECK_ALLCLOSE(ch16::encoder_layer(X, L.W), attn::oracle::bert_layer(attn::test::to_oracle(X), L.O, {}), kLayerTol,
                   kLayerTol);
    CHECK_ALLCLOSE(ch16::encoder_layer(X, L.W, {true, false}),
                   attn::oracle::bert_layer(attn::test::to_oracle(X), L.O, {true, false}), kLayerTol, kLayerTol);
    const Matrix one = rng.normal(1, 8);  // n = 1: the token attends to itself only
    CHECK_ALLCLOSE(ch16::encoder_layer(one, L.W), attn::oracle::bert_layer(attn::test::to_oracle(one), L.O, {}),
                   kLayerTol, kLayerTol);
  }
  TEST_CASE("encoder_layer refuses weights that do not fit, naming the shapes") {
    attn::Rng rng(19);
    SmallLayer L = small_layer(rng);
    CHECK_THROWS_AS(ch16::encoder_layer(rng.normal(4, 6), L.W), std::invalid_argument);
    CHECK_THROWS_AS(ch16::encoder_layer(rng.normal(4, 8), L.W, {true}), std::invalid_argument);
    L.W.heads = 3;
    CHECK_THROWS_NAMING(ch16::encoder_layer(rng.normal(4, 8), L.W), std::invalid_argument, "8", "3");
  }
  TEST_CASE("encoder_layer run six times gives sentence-transformers' embeddings of the real model") {
    const ch16::MiniLM* model = model_or_skip();
    if (model == nullptr) return;
    for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
      INFO("text: ", r.text);
      const Vector e = ch16::sentence_embedding(*model, r.text);
      CHECK_ALLCLOSE(e, r.embedding, kEmbeddingTol, 0.0);
    }
  }
}

// The backward pass against central differences of the float64 oracle's layer (tests/oracle/): the oracle's
// derivatives are numerical, so they share nothing with the chain rule under test.
namespace {

using attn::oracle::Mat;

// f(X) = (1/n) Σ_i (layers(X))_i · u in float64: the oracle's layers, then the mean-pooled projection.
double oracle_projection(const Mat& X, const std::vector<const attn::oracle::BertLayer*>& layers,
                         const std::vector<double>& u) {
  Mat Y = X;
  for (const attn::oracle::BertLayer* L : layers) Y = attn::oracle::bert_layer(Y, *L, {});
  double f = 0.0;
  for (std::size_t i = 0; i < Y.rows; ++i)
    for (std::size_t c = 0; c < Y.cols; ++c) f += Y(i, c) * u[c];
  return f / static_cast<double>(Y.rows);
}

// ∂f/∂X (X's shape) by central differences, (f(X + h·e) − f(X − h·e)) / 2h in float64. With h = 1e-6 the
// truncation error (h²/6 times the third derivative) is ~1e-12 and the rounding error (ε_64·|f|/h) ~1e-9 for
// |f| ~ 10: both far below the float32 backward's own error.
template <class F>
Mat central_differences(const Mat& X, F&& f) {
  constexpr double h = 1e-6;
  Mat grad(X.rows, X.cols);
  for (std::size_t k = 0; k < X.v.size(); ++k) {
    Mat plus = X, minus = X;
    plus.v[k] += h;
    minus.v[k] -= h;
    grad.v[k] = (f(plus) - f(minus)) / (2 * h);
  }
  return grad;
}

// The float32 backward against the float64 numerical gradient (d = 8): each step's products have ≤ 16 terms
// (~16·2^-24 ≈ 1e-6 relative), two LayerNorms per layer divide by standard deviations of order 1, and the
// gradients are of order 1, so the backward is off by a few 1e-6 (measured: worst 2.7e-6 for one layer, 5.2e-7 for
// two). atol = rtol = 1e-4 leaves a margin of thirty; a wrong term of the chain rule is off by 1e-2 and more.
constexpr double kGradTol = 1e-4;

// Two small random layers (SmallLayer), an input X0 (4, 8) and a direction u (8) for f.
struct TwoLayers {
  SmallLayer A, B;
  Matrix X0;
  Vector u;
  std::vector<double> u64;  ///< u in float64, for the oracle
};

TwoLayers two_layers(attn::Rng& rng) {
  TwoLayers t{small_layer(rng), small_layer(rng), Matrix(), Vector(), {}};
  t.X0 = rng.normal(4, 8);
  t.u = xt::view(rng.normal(1, 8), 0, xt::all());
  t.u64 = attn::test::to_oracle(t.u);
  return t;
}

}  // namespace

TEST_SUITE("16_real_model: chapter code") {
  TEST_CASE("one BERT layer's backward equals central differences of the float64 oracle's layer") {
    attn::Rng rng(30);
    const SmallLayer L = small_layer(rng);
    const Matrix X = rng.normal(5, 8);  // (n, d)
    const Matrix R = rng.normal(5, 8);  // (n, d): the loss Σ R ∘ layer(X), so ∂loss/∂out = R
    const Mat R64 = attn::test::to_oracle(R);
    const Mat want = central_differences(attn::test::to_oracle(X), [&](const Mat& x) {
      const Mat Y = attn::oracle::bert_layer(x, L.O, {});
      double s = 0.0;
      for (std::size_t k = 0; k < Y.v.size(); ++k) s += R64.v[k] * Y.v[k];
      return s;
    });
    const ch16::LayerTrace trace = ch16::encoder_layer_traced(X, L.W);
    CHECK_ALLCLOSE(trace.out, attn::oracle::bert_layer(attn::test::to_oracle(X), L.O, {}), kLayerTol, kLayerTol);
    CHECK_ALLCLOSE(ch16::encoder_layer_backward(trace, L.W, R), want, kGradTol, kGradTol);
  }

  TEST_CASE("two layers end to end: the projection's gradient at X0 equals central differences of the oracle") {
    attn::Rng rng(31);
    const TwoLayers t = two_layers(rng);
    const auto f = [&](const Mat& x) { return oracle_projection(x, {&t.A.O, &t.B.O}, t.u64); };
    const Mat X64 = attn::test::to_oracle(t.X0);
    const Mat want = central_differences(X64, f);
    const ch16::ProjectionGradient got = ch16::embedding_projection_gradient({t.A.W, t.B.W}, t.X0, t.u);
    CHECK(got.value == doctest::Approx(f(X64)).epsilon(kLayerTol));
    CHECK_ALLCLOSE(got.dX0, want, kGradTol, kGradTol);
    // Gradient × input is that gradient read against the input, token by token.
    std::vector<double> gxi(4, 0.0);
    for (std::size_t k = 0; k < X64.v.size(); ++k) gxi[k / 8] += X64.v[k] * want.v[k];
    CHECK_ALLCLOSE(ch16::gradient_times_input({t.A.W, t.B.W}, t.X0, t.u), gxi, kGradTol, kGradTol);
  }

  TEST_CASE("integrated gradients are complete: the relevances sum to f(X0) − f(B), within the midpoint rule") {
    attn::Rng rng(32);
    const TwoLayers t = two_layers(rng);
    const auto f = [&](const Matrix& X) {
      return oracle_projection(attn::test::to_oracle(X), {&t.A.O, &t.B.O}, t.u64);
    };
    // Chapter 12's all-zero baseline, and another input (as the chapter's [MASK]ed sentence is).
    for (const Matrix& baseline : {Matrix(xt::zeros<float>({4, 8})), rng.normal(4, 8)}) {
      const double delta = f(t.X0) - f(baseline);  // f(X0) − f(B), float64
      const double sum_64 = xt::sum(ch16::integrated_gradients({t.A.W, t.B.W}, t.X0, baseline, t.u, 64))();
      const double sum_128 = xt::sum(ch16::integrated_gradients({t.A.W, t.B.W}, t.X0, baseline, t.u, 128))();
      // The midpoint rule's error is C/N² + O(1/N⁴) on a smooth path (erf, exp and the LayerNorms' 1/σ are smooth
      // where σ > 0), so E(128) ≈ (sum_64 − sum_128)/3 (Richardson). The bound allows 1.5 times that estimate, plus
      // float32's rounding of 128 × 32 products X0·gradient of order 1 (~1e-5; 1e-4 with a margin). A first-order
      // rule (α at the left end of each interval, error C/N) has E(128) ≈ |sum_64 − sum_128| and fails it. The
      // 1/N² regime needs enough steps: from the zero baseline the sums at 4, 16, 32, 64, 256 and 1024 steps were
      // −13.71, −7.504, −7.514, −7.4711, −7.4616, −7.46105 against Δf = −7.46101, so 16 and 32 would not do.
      const double bound = std::abs(sum_64 - sum_128) / 2 + 1e-4;
      INFO("f(X0) − f(B) = ", delta, ", Σ IG with 64 steps = ", sum_64, ", with 128 = ", sum_128);
      CHECK(std::abs(sum_128 - delta) <= bound);
      CHECK(std::abs(delta) > 10 * bound);  // the check above is not vacuous: Δf is far from 0
    }
  }

  TEST_CASE("the backward's functions refuse bad input, naming what was wrong") {
    attn::Rng rng(33);
    const SmallLayer L = small_layer(rng);
    const Matrix X = rng.normal(3, 8);
    const Vector u = xt::ones<float>({8});
    CHECK_THROWS_WITH_AS(ch16::layer_norm_backward(X, L.W.ln1_gamma, 1e-12f, rng.normal(3, 7)),
                         doctest::Contains("dY (3, 7)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::layer_norm_backward(X, L.W.ln1_gamma, 0.0f, X), doctest::Contains("ε"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::gelu_backward(X, rng.normal(8, 3)), doctest::Contains("dY (8, 3)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_traced(rng.normal(3, 6), L.W), doctest::Contains("X (3, 6)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_traced(Matrix(xt::zeros<float>({0, 8})), L.W),
                         doctest::Contains("no rows"), std::invalid_argument);
    ch16::EncoderLayerWeights three_heads = L.W;
    three_heads.heads = 3;
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_traced(X, three_heads), doctest::Contains("h = 3"), std::invalid_argument);
    const ch16::LayerTrace trace = ch16::encoder_layer_traced(X, L.W);
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_backward(trace, L.W, rng.normal(4, 8)), doctest::Contains("dOut (4, 8)"),
                         std::invalid_argument);
    ch16::LayerTrace cut = trace;
    cut.U = rng.normal(3, 5);
    CHECK_THROWS_WITH_AS(ch16::encoder_layer_backward(cut, L.W, X), doctest::Contains("U (3, 5)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::embedding_projection_gradient({L.W}, X, xt::ones<float>({7})),
                         doctest::Contains("u (7)"), std::invalid_argument);
    Matrix with_nan = X;
    with_nan(1, 2) = std::nanf("");
    CHECK_THROWS_WITH_AS(ch16::embedding_projection_gradient({L.W}, with_nan, u), doctest::Contains("X0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::gradient_times_input({L.W}, Matrix(xt::zeros<float>({0, 8})), u),
                         doctest::Contains("X0 (0, 8)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::integrated_gradients({L.W}, X, 0 * X, u, 0), doctest::Contains("steps = 0"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::integrated_gradients({L.W}, X, 0 * X, u, 10001), doctest::Contains("steps = 10001"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch16::integrated_gradients({L.W}, X, rng.normal(2, 8), u, 8),
                         doctest::Contains("baseline (2, 8)"), std::invalid_argument);
  }
}

// The defects hostile calls found in the contract's reference answers, one case per exercise they belong to.
TEST_SUITE("16_real_model/read_tensor") {
  TEST_CASE("read_tensor of a tensor with no elements returns its empty shape") {
    // It memcpy'd zero bytes into the null pointer an empty matrix holds (the ASan preset aborted).
    const std::string path = temp_path("empty.safetensors");
    ch16::write_safetensors(path, {{"none", {{0, 3}, {}}}, {"w", {{2}, {1, 2}}}});
    const ch16::SafetensorsFile file(path);
    const Matrix none = ch16::read_tensor(file, "none", {0, 3});
    CHECK(none.shape(0) == 0);
    CHECK(none.shape(1) == 3);
  }
}

TEST_SUITE("16_real_model/encoder_layer") {
  TEST_CASE("encoder_layer refuses each weight of a shape that does not fit d, naming it, instead of broadcasting") {
    // Half-width W_Q and W_K were read past their end per head; a (1, d) W_O with a (1) b_O and a (1, d_ff) W_2
    // were broadcast over every row.
    attn::Rng rng(20);
    const SmallLayer L = small_layer(rng);
    const Matrix X = rng.normal(3, 8);  // (n, d)
    ch16::EncoderLayerWeights W = L.W;
    W.W_Q = rng.normal(4, 8);
    CHECK_THROWS_NAMING(ch16::encoder_layer(X, W), std::invalid_argument, "W_Q", "4", "8");
    W = L.W;
    W.W_K = rng.normal(2, 8);
    CHECK_THROWS_NAMING(ch16::encoder_layer(X, W), std::invalid_argument, "W_K", "2", "8");
    W = L.W;
    W.W_O = rng.normal(1, 8);
    W.b_O = xt::zeros<float>({1});
    CHECK_THROWS_NAMING(ch16::encoder_layer(X, W), std::invalid_argument, "W_O", "1", "8");
    W = L.W;
    W.W_2 = rng.normal(1, 16);
    CHECK_THROWS_NAMING(ch16::encoder_layer(X, W), std::invalid_argument, "W_2", "1", "16", "8");
  }
}
