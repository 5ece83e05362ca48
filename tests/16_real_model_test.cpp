// Chapter 16's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/16_real_model_oracle.hpp), closed forms, or the reference recorded from sentence-transformers
// (tests/data/16_real_model_reference.txt, with the command that produced it on its first line).
// The cases that need the model skip themselves without it (attn::test::skip): ctest and ./course check report
// them as skipped, with the reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "16_real_model/embedding_backward.hpp"
#include "16_real_model/fast_minilm.hpp"
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

// A fresh file path in a temporary folder of this test process's own (ctest runs the program on several vector
// paths at once).
std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attn_ch16_test_" + std::to_string(::getpid()));
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
    // The vocabulary and the token limit only: the weights need the safetensors header, an exercise after this one.
    const ch16::Vocab vocab = ch16::load_vocab(dir + "/vocab.txt");
    const std::size_t max_tokens = ch16::read_config(dir).max_tokens;
    for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
      INFO("text: ", r.text);
      CHECK(ch16::tokenize(r.text, vocab, max_tokens) == r.ids);
    }
  }
  TEST_CASE("wordpiece with basic tokenization gives the model's own tokenizer's ids on each class of hard text") {
    // tests/data/16_tokenizer_reference.jsonl, recorded from the model's tokenizer.json by Hugging Face's tokenizers
    // (chapters/16_real_model/record_tokenizer.py): Unicode's whitespace (U+2028, U+2029), a final sigma, code
    // points unassigned in Unicode 8.0, punctuation and marks added since, characters whose category changed, and
    // the CJK range's edge at U+2B920.
    const std::string dir = model_dir_or_skip();
    if (dir.empty()) return;
    const ch16::Vocab vocab = ch16::load_vocab(dir + "/vocab.txt");
    std::ifstream in(ATTN_CH16_TOKENIZER_REFERENCE);
    REQUIRE_MESSAGE(in, "cannot read " ATTN_CH16_TOKENIZER_REFERENCE);
    std::string line;
    std::size_t cases = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::string text = j.at("text").get<std::string>();
      INFO("class: ", j.at("class").get<std::string>(), ", text: ", text);
      CHECK(ch16::tokenize(text, vocab, 256) == j.at("ids").get<std::vector<int>>());
      ++cases;
    }
    CHECK(cases >= 20);
  }
}

TEST_SUITE("16_real_model: chapter code") {
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
  TEST_CASE("a safetensors file that is missing is refused, naming it, before its header is read") {
    CHECK_THROWS_NAMING(ch16::SafetensorsFile(temp_path("none.safetensors")), std::runtime_error, "none.safetensors");
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

  TEST_CASE("the fast forward gives sentence-transformers' embeddings one at a time and packed, arena reused") {
    const ch16::MiniLM* model = model_or_skip();
    if (model == nullptr) return;
    const ch16::FastMiniLM fast(*model);
    std::vector<std::string> texts;
    std::vector<std::vector<double>> want;  // (d) per text, as recorded
    for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
      texts.push_back(r.text);
      want.push_back(r.embedding);
    }
    ch16::ForwardScratch scratch;  // one arena for every call below: a larger batch after smaller ones, then smaller
    ch16::ForwardProfile profile;
    for (std::size_t s = 0; s < texts.size(); ++s) {
      INFO("alone: ", texts[s]);
      CHECK_ALLCLOSE(fast.embed_sentences({texts[s]}, scratch, &profile).front(), want[s], kEmbeddingTol, 0.0);
    }
    const std::vector<Vector> packed = fast.embed_sentences(texts, scratch);
    REQUIRE(packed.size() == texts.size());
    for (std::size_t s = 0; s < texts.size(); ++s) {
      INFO("packed: ", texts[s]);
      CHECK_ALLCLOSE(packed[s], want[s], kEmbeddingTol, 0.0);
      CHECK_ALLCLOSE(fast.embed_sentences({texts[s]}, scratch).front(), want[s], kEmbeddingTol, 0.0);
    }
    CHECK(fast.embed_sentences({}, scratch).empty());
    // Longer than 16 tokens (attention's vectors of 16 keys, several and a partial one) and up to the 256-token cut:
    // against the chapter's own forward.
    for (const std::string& text :
         {std::string("The cat sat on the mat; it was tired, and so was the dog beside it."), [] {
            std::string s;
            for (int i = 0; i < 60; ++i) s += "the cat sat on the mat. ";
            return s;
          }()}) {
      INFO("long: ", text.substr(0, 40));
      const Vector want_long = ch16::sentence_embedding(*model, text);
      CHECK_ALLCLOSE(fast.embed_sentences({text}, scratch).front(),
                     std::vector<double>(want_long.begin(), want_long.end()), kEmbeddingTol, 0.0);
    }
    // The profile covers every call it was given, and every step but the arena's growth took time.
    CHECK(profile.calls == texts.size());
    CHECK(profile.sentences == texts.size());
    for (std::size_t i = 0; i < profile.seconds.size(); ++i)
      if (static_cast<ch16::ForwardStep>(i) != ch16::ForwardStep::buffers) CHECK(profile.seconds[i] > 0.0);
  }

  TEST_CASE("the packed-weight product equals x·Wᵀ + b for every row count and a last single panel") {
    attn::Rng rng(1660);
    const Matrix W = rng.normal(48, 40);  // out = 48: a pair of 16-column panels and one panel alone
    const Vector b = xt::view(rng.normal(1, 48), 0, xt::all());
    const ch16::detail::PackedLinear L = ch16::detail::pack_linear("W", W, b);
    for (std::size_t n : {1, 2, 7, 8, 9, 12, 17, 33}) {
      INFO("n = ", n);
      const Matrix X = rng.normal(n, 40);
      Matrix Y = Matrix::from_shape({n, 48});
      ch16::detail::apply_linear(L, X.data(), n, Y.data());
      const Matrix want = ch16::linear(X, W, b);  // (n, 48)
      double worst = 0.0;
      for (std::size_t i = 0; i < Y.size(); ++i)
        worst = std::max(worst, std::fabs(double(Y.data()[i]) - want.data()[i]));
      CHECK(worst < 1e-4);  // sums of 40 products of normal entries: float rounding, far below one entry's size
    }
  }
}

TEST_SUITE("16_real_model: chapter code") {
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
  TEST_CASE("encoder_layer uses the model's ε: a row of tiny variance through both LayerNorms") {
    // X's rows vary by 1e-4 around a constant (variance 1e-8), the attention and feed-forward outputs are zero
    // (W_O, b_O, W_1, b_1, W_2, b_2 = 0), and ln1's γ = 1e-3: both LayerNorms then see rows of variance ≤ 1e-6,
    // where ε = 1e-12 and PyTorch's default 1e-5 give rows 1 and 0.3 apart.
    attn::Rng rng(23);
    SmallLayer L = small_layer(rng);
    for (Matrix* M : {&L.W.W_O, &L.W.W_1, &L.W.W_2}) M->fill(0.0f);
    for (Vector* v : {&L.W.b_O, &L.W.b_1, &L.W.b_2, &L.W.ln1_beta}) v->fill(0.0f);
    L.W.ln1_gamma.fill(1e-3f);
    for (attn::oracle::Mat* o : {&L.O.W_O, &L.O.W_1, &L.O.W_2}) std::fill(o->v.begin(), o->v.end(), 0.0);
    for (std::vector<double>* o : {&L.O.b_O, &L.O.b_1, &L.O.b_2, &L.O.ln1_beta}) std::fill(o->begin(), o->end(), 0.0);
    std::fill(L.O.ln1_gamma.begin(), L.O.ln1_gamma.end(), static_cast<double>(1e-3f));
    Matrix X = xt::full_like(rng.normal(3, 8), 0.5f);  // (n, d)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t c = 0; c < 8; ++c) X(i, c) += (c % 2 == 0 ? 1e-4f : -1e-4f) * static_cast<float>(i + 1);
    CHECK_ALLCLOSE(ch16::encoder_layer(X, L.W), attn::oracle::bert_layer(attn::test::to_oracle(X), L.O, {}), kLayerTol,
                   kLayerTol);
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

// The defects hostile calls found in the chapter's readers and the contract's reference answers.
TEST_SUITE("16_real_model: chapter code") {
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

// --- the exercises the chapter's forward is made of, besides encoder_layer ---------------------------------------
namespace {

/// A safetensors file's bytes, in memory: the 8-byte little-endian length of \p json (or \p claimed when given),
/// the JSON, then \p data_bytes bytes of data.
std::vector<unsigned char> safetensors_bytes(const std::string& json, std::size_t data_bytes,
                                             std::uint64_t claimed = std::numeric_limits<std::uint64_t>::max()) {
  const std::uint64_t n = claimed == std::numeric_limits<std::uint64_t>::max() ? json.size() : claimed;
  std::vector<unsigned char> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>((n >> (8 * i)) & 0xffu));
  out.insert(out.end(), json.begin(), json.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

/// read_safetensors_header() of those bytes, under the name "memfile".
ch16::SafetensorsHeader header_of(const std::vector<unsigned char>& bytes) {
  return ch16::read_safetensors_header(bytes.data(), bytes.size(), "memfile");
}

/// An F32 entry's JSON: "name": {...}.
std::string f32(const std::string& name, const std::string& shape, std::size_t begin, std::size_t end) {
  return "\"" + name + "\": {\"dtype\": \"F32\", \"shape\": " + shape + ", \"data_offsets\": [" +
         std::to_string(begin) + ", " + std::to_string(end) + "]}";
}

}  // namespace

TEST_SUITE("16_real_model/read_safetensors_header") {
  TEST_CASE("read_safetensors_header reads every entry and where the data start, leaving out the metadata") {
    const std::string json = "{" + f32("w", "[2, 3]", 0, 24) + ", " + f32("b", "[3]", 24, 36) +
                             ", \"e\": {\"dtype\": \"I32\", \"shape\": [0], \"data_offsets\": [24, 24]}" +
                             ", \"__metadata__\": {\"format\": \"pt\"}}";
    const std::vector<unsigned char> bytes = safetensors_bytes(json, 36);
    const ch16::SafetensorsHeader h = header_of(bytes);
    CHECK(h.data_begin == 8 + json.size());
    REQUIRE(h.entries.size() == 3);  // w, b and the empty e; no "__metadata__"
    const ch16::TensorEntry& w = h.entries.at("w");
    CHECK(w.dtype == "F32");
    CHECK(w.shape == std::vector<std::size_t>{2, 3});
    CHECK(w.begin == 0);
    CHECK(w.end == 24);
    CHECK(h.entries.at("b").shape == std::vector<std::size_t>{3});
    CHECK(h.entries.at("b").begin == 24);
    CHECK(h.entries.at("e").dtype == "I32");
    // The length is little-endian: a header of 257 bytes (0x0101) tells the byte order apart.
    std::string padded = "{" + f32("w", "[2, 3]", 0, 24) + "}";
    padded.resize(257, ' ');  // JSON allows trailing spaces
    CHECK(header_of(safetensors_bytes(padded, 24)).data_begin == 8 + 257);
  }

  TEST_CASE("read_safetensors_header refuses a file shorter than its length and a length past the file") {
    const std::vector<unsigned char> five{1, 0, 0, 0, 0};
    CHECK_THROWS_NAMING(ch16::read_safetensors_header(five.data(), 5, "memfile"), std::invalid_argument, "memfile", "5",
                        "8");
    CHECK_THROWS_NAMING(ch16::read_safetensors_header(nullptr, 0, "memfile"), std::invalid_argument, "memfile", "0");
    const std::string json = "{" + f32("w", "[2]", 0, 8) + "}";
    CHECK_THROWS_NAMING(header_of(safetensors_bytes(json, 8, json.size() + 9)), std::invalid_argument, "memfile",
                        std::to_string(json.size() + 9).c_str(), std::to_string(json.size() + 8).c_str());
    // A length whose top byte is set: read big-endian it would be small; little-endian it is past any file.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes(json, 8, std::uint64_t{1} << 56)), std::invalid_argument,
                        "memfile");
  }

  TEST_CASE("read_safetensors_header refuses a header that is not a JSON object and entries that lack a field") {
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("[1, 2]", 0)), std::invalid_argument, "memfile");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{\"w\": ", 0)), std::invalid_argument, "memfile");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2]}})", 8)),
                        std::invalid_argument, "memfile", "w");
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes(R"({"w": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", 8)),
        std::invalid_argument, "w", "F33");
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8)),
        std::invalid_argument, "w");
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8]}})", 8)),
        std::invalid_argument, "w");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4294967296, 4294967296]", 0, 16) + "}", 16)),
                        std::invalid_argument, "w");
  }

  TEST_CASE("read_safetensors_header refuses offsets outside the data and a shape whose bytes differ from them") {
    // The data hold 16 bytes; [0, 24) runs past them (a truncated file).
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[2, 3]", 0, 24) + "}", 16)), std::invalid_argument,
                        "memfile", "w", "24", "16");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[2]", 8, 0) + "}", 16)), std::invalid_argument, "w",
                        "8", "0");
    // A shape of 3 × 2 floats needs 24 bytes; the offsets give 16.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[3, 2]", 0, 16) + "}", 16)), std::invalid_argument,
                        "w", "24", "16");
    // Offsets count from the data, not from the file: [0, 16) is the whole data, whatever the header's length.
    CHECK_NOTHROW(header_of(safetensors_bytes("{" + f32("w", "[4]", 0, 16) + "}", 16)));
  }

  TEST_CASE(
      "read_safetensors_header refuses tensors that share bytes, naming both, and passes touching and empty ones") {
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes("{" + f32("a", "[2]", 0, 8) + ", " + f32("b", "[2]", 4, 12) + "}", 12)),
        std::invalid_argument, "memfile", "a", "b");
    // c lies inside a, past b: a covers both.
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes(
            "{" + f32("a", "[8]", 0, 32) + ", " + f32("b", "[1]", 32, 36) + ", " + f32("c", "[1]", 16, 20) + "}", 36)),
        std::invalid_argument, "a", "c");
    // Touching is not sharing: [0, 8) and [8, 16).
    CHECK_NOTHROW(header_of(safetensors_bytes("{" + f32("a", "[2]", 0, 8) + ", " + f32("b", "[2]", 8, 16) + "}", 16)));
    // A tensor of no bytes shares none, even at an offset inside another.
    CHECK_NOTHROW(header_of(safetensors_bytes("{" + f32("a", "[2]", 0, 8) + ", " + f32("e", "[0]", 4, 4) + "}", 8)));
  }

  TEST_CASE("read_safetensors_header reads all 8 bytes of the length: the JSON's size plus 2^32 and more is a lie") {
    // Each of the length's top four bytes set in turn, above the JSON's own size: a length read from bytes 0 … 3
    // only (or built from an int shifted past 31 bits) is the JSON's size, and the file would be read as honest.
    const std::string json = "{" + f32("w", "[2]", 0, 8) + "}";
    for (int byte = 4; byte < 8; ++byte) {
      const std::uint64_t claimed = json.size() + (std::uint64_t{1} << (8 * byte));
      CAPTURE(byte);
      CHECK_THROWS_NAMING(header_of(safetensors_bytes(json, 8, claimed)), std::invalid_argument, "memfile",
                          std::to_string(claimed).c_str(), std::to_string(json.size() + 8).c_str());
    }
  }

  TEST_CASE("read_safetensors_header takes a length up to the file's end and up to 10^8, and refuses one byte more") {
    // 7 bytes: one short of the length itself. 8 bytes claiming 1: past the file by one, a lie about what follows.
    const std::vector<unsigned char> seven{0, 0, 0, 0, 0, 0, 0};
    CHECK_THROWS_NAMING(ch16::read_safetensors_header(seven.data(), 7, "memfile"), std::invalid_argument, "memfile",
                        "7", "8");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("", 0, 1)), std::invalid_argument, "memfile", "1", "0");
    // N = every byte after the first 8: a header with no data after it (its one tensor holds no bytes).
    const std::string no_data = "{" + f32("e", "[0]", 0, 0) + "}";
    const ch16::SafetensorsHeader h = header_of(safetensors_bytes(no_data, 0));
    CHECK(h.data_begin == 8 + no_data.size());
    CHECK(h.entries.size() == 1);
    // Safetensors' own limit: a header of exactly 10^8 bytes is read; one of 10^8 + 1 is refused, naming the limit,
    // though the file holds every byte of it.
    std::string big = "{}";
    big.resize(100'000'000, ' ');  // JSON allows trailing spaces
    CHECK(header_of(safetensors_bytes(big, 0)).data_begin == 8 + 100'000'000);
    big.push_back(' ');
    CHECK_THROWS_NAMING(header_of(safetensors_bytes(big, 0)), std::invalid_argument, "memfile", "100000001",
                        "100000000");
  }

  TEST_CASE("read_safetensors_header refuses a shape whose bytes wrap past 64 bits to 0, whatever the offsets say") {
    // 2^32 · 2^32 elements, and 2^62 floats of 4 bytes: 2^66 and 2^64 bytes, both 0 in 64-bit arithmetic, which the
    // offsets [0, 0] match. Only a check of the product itself refuses them.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4294967296, 4294967296]", 0, 0) + "}", 0)),
                        std::invalid_argument, "memfile", "w", "4294967296");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4611686018427387904]", 0, 0) + "}", 0)),
                        std::invalid_argument, "memfile", "w", "4611686018427387904");
    // Just inside 64 bits: 2^62 − 1 floats need 2^64 − 4 bytes, and 3 × 6148914691236517205 bytes of U8 need 2^64 − 1.
    // Neither overflows; each is refused because its offsets give 16 bytes, naming both counts.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4611686018427387903]", 0, 16) + "}", 16)),
                        std::invalid_argument, "memfile", "w", "18446744073709551612", "16");
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes(
            R"({"w": {"dtype": "U8", "shape": [3, 6148914691236517205], "data_offsets": [0, 16]}})", 16)),
        std::invalid_argument, "memfile", "w", "18446744073709551615", "16");
  }

  TEST_CASE("read_safetensors_header reads every dimension and offset in 64 bits, not 32") {
    // 2^32 + 4 floats need 17179869200 bytes; read into 32 bits the shape would be [4], the 16 bytes the offsets give.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4294967300]", 0, 16) + "}", 16)),
                        std::invalid_argument, "memfile", "w", "17179869200", "16");
    // An end of 2^32 + 16, and a range [2^32, 2^32 + 16): in 32 bits both would be [0, 16), the whole data.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4]", 0, 4294967312) + "}", 16)),
                        std::invalid_argument, "memfile", "w", "4294967312", "16");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[4]", 4294967296, 4294967312) + "}", 16)),
                        std::invalid_argument, "memfile", "w", "4294967296", "4294967312", "16");
    // One byte past the data's end, beside the whole data (read in the case above): [0, 20) of 16 bytes.
    CHECK_THROWS_NAMING(header_of(safetensors_bytes("{" + f32("w", "[5]", 0, 20) + "}", 16)), std::invalid_argument,
                        "memfile", "w", "20", "16");
    // 2^64 is no 64-bit size: JSON reads it as a float, neither a dimension nor an offset.
    CHECK_THROWS_NAMING(
        header_of(safetensors_bytes(
            R"({"w": {"dtype": "F32", "shape": [18446744073709551616], "data_offsets": [0, 16]}})", 16)),
        std::invalid_argument, "memfile", "w");
    CHECK_THROWS_NAMING(header_of(safetensors_bytes(
                            R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 18446744073709551616]}})", 16)),
                        std::invalid_argument, "memfile", "w");
  }

  TEST_CASE("a safetensors file written to disk is read back through read_safetensors_header") {
    const std::string path = temp_path("header.safetensors");
    ch16::write_safetensors(path, {{"w", {{2, 2}, {1, 2, 3, 4}}}});
    const ch16::SafetensorsFile file(path);
    REQUIRE(file.find("w") != nullptr);
    float first = 0.0f;
    std::memcpy(&first, file.data() + file.find("w")->begin, sizeof(float));
    CHECK(first == 1.0f);
  }
}

TEST_SUITE("16_real_model/layer_norm") {
  TEST_CASE("layer_norm equals the float64 oracle: every row to mean 0, variance 1 (÷ d), then γ and β") {
    attn::Rng rng(24);
    const Matrix X = rng.normal(5, 4, 2.0f, 3.0f);  // (n, d): d = 4, where ÷ d and ÷ (d − 1) differ by 15%
    const Matrix g = rng.normal(1, 4, 1.0f, 0.5f), b = rng.normal(1, 4, 0.0f, 0.5f);
    const Vector gamma = xt::view(g, 0, xt::all()), beta = xt::view(b, 0, xt::all());
    for (float eps : {1e-12f, 0.25f}) {  // 0.25: ε inside the root, not added to σ
      CAPTURE(eps);
      CHECK_ALLCLOSE(ch16::layer_norm(X, gamma, beta, eps),
                     attn::oracle::layer_norm(attn::test::to_oracle(X), attn::test::to_oracle(gamma),
                                              attn::test::to_oracle(beta), static_cast<double>(eps)),
                     1e-5, 1e-5);
    }
  }

  TEST_CASE("layer_norm uses the ε it is given: a row of tiny variance, where 1e-12 and 1e-5 disagree") {
    // Variance 1e-8: with ε = 1e-12 the row normalises to ±1.0000; with PyTorch's default 1e-5 to ±0.03.
    Matrix X = xt::full_like(Matrix(xt::zeros<float>({2, 6})), 0.5f);
    for (std::size_t c = 0; c < 6; ++c) X(0, c) += c % 2 == 0 ? 1e-4f : -1e-4f;
    X(1, 0) = 3.0f;  // and a row of ordinary variance beside it
    const Vector ones = xt::ones<float>({6}), zeros = xt::zeros<float>({6});
    const Matrix Y = ch16::layer_norm(X, ones, zeros, 1e-12f);
    CHECK_ALLCLOSE(Y,
                   attn::oracle::layer_norm(attn::test::to_oracle(X), attn::test::to_oracle(ones),
                                            attn::test::to_oracle(zeros), static_cast<double>(1e-12f)),
                   1e-5, 1e-5);
    CHECK(std::abs(Y(0, 0)) > 0.99f);
  }

  TEST_CASE("layer_norm refuses γ or β of another size, ε ≤ 0, and NaN or infinity, naming them") {
    const Matrix X = xt::ones<float>({2, 3});
    const Vector three = xt::ones<float>({3}), two = xt::ones<float>({2});
    CHECK_THROWS_NAMING(ch16::layer_norm(X, two, three, 1e-12f), std::invalid_argument, "2", "3");
    CHECK_THROWS_NAMING(ch16::layer_norm(X, three, two, 1e-12f), std::invalid_argument, "2", "3");
    CHECK_THROWS_NAMING(ch16::layer_norm(X, three, three, 0.0f), std::invalid_argument, "ε", "0");
    CHECK_THROWS_AS(ch16::layer_norm(X, three, three, -1.0f), std::invalid_argument);
    Matrix bad = X;
    bad(1, 2) = std::nanf("");
    CHECK_THROWS_NAMING(ch16::layer_norm(bad, three, three, 1e-12f), std::invalid_argument, "X");
    CHECK(ch16::layer_norm(Matrix(xt::zeros<float>({0, 3})), three, three, 1e-12f).shape(0) == 0);
  }

  TEST_CASE("layer_norm adds the model's ε to σ²: rows of variance 1e-14, 1e-12 and 1e-10 beside ε = 1e-12") {
    // Rows ±s about 0, σ² = s²: each entry becomes ±s / √(s² + 1e-12), ±0.0995, ±0.7071 and ±0.995; ε taken as a
    // floor max(σ², ε) gives ±1 at σ² = ε, ε added to σ gives ±1 for the two larger rows.
    Matrix X = xt::zeros<float>({3, 4});  // (n, d)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t c = 0; c < 4; ++c) X(i, c) = (c % 2 == 0 ? 1.0f : -1.0f) * std::pow(10.0f, -7.0f + float(i));
    const Vector ones = xt::ones<float>({4}), zeros = xt::zeros<float>({4});
    // The oracle in float64; the track rounds a square, a sum, a root and a quotient to float (≤ 4 · 2^-24 ≈ 2.4e-7
    // relative, where it computes in float): rtol = 5e-7.
    INFO("each row ±s / √(s² + ε): at σ² = ε = 1e-12 that is ±0.7071, where max(σ², ε) gives ±1 and σ + ε ±1");
    CHECK_ALLCLOSE(ch16::layer_norm(X, ones, zeros, 1e-12f),
                   attn::oracle::layer_norm(attn::test::to_oracle(X), attn::test::to_oracle(ones),
                                            attn::test::to_oracle(zeros), static_cast<double>(1e-12f)),
                   0.0, 5e-7);
  }

  TEST_CASE("layer_norm normalises rows at float's range: μ, x − μ and σ² past float's largest, the result not") {
    // (3e38, −3e38, 3e38, −3e38): μ = 0, σ² = 9e76 → ±1. (3e38, 3e38, 3e38, −3e38): μ = 1.5e38, x − μ = −4.5e38
    // and σ² = 6.75e76 → (0.577, 0.577, 0.577, −1.732). A float sum overflows to ∞ on both, and the rows become
    // NaN or 0; μ, x − μ and σ² in double hold them.
    const Matrix X = {{3e38f, -3e38f, 3e38f, -3e38f}, {3e38f, 3e38f, 3e38f, -3e38f}};
    const Vector ones = xt::ones<float>({4}), zeros = xt::zeros<float>({4});
    // Computed in double and rounded once to float: rtol = 2^-24 ≈ 6e-8, 1e-7 with the quotient's own rounding.
    INFO(
        "rows of ±3e38: a float sum, x − μ or σ² overflows to ∞ (NaN or 0 after); μ, x − μ and σ² in double hold them");
    CHECK_ALLCLOSE(ch16::layer_norm(X, ones, zeros, 1e-12f),
                   attn::oracle::layer_norm(attn::test::to_oracle(X), attn::test::to_oracle(ones),
                                            attn::test::to_oracle(zeros), static_cast<double>(1e-12f)),
                   0.0, 1e-7);
  }

  TEST_CASE("layer_norm takes every positive finite ε, from the smallest float to the largest, and refuses NaN and ∞") {
    const Matrix X = {{1.0f, 3.0f}};  // μ = 2, σ² = 1
    const Vector ones = xt::ones<float>({2}), zeros = xt::zeros<float>({2});
    for (float eps : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
      CAPTURE(eps);
      // ±1/√(1 + ε): ±1, and ±1/√(3.4e38) ≈ ±5.4e-20. A root and a quotient rounded to float: rtol = 2e-7.
      CHECK_ALLCLOSE(ch16::layer_norm(X, ones, zeros, eps),
                     attn::oracle::layer_norm(attn::test::to_oracle(X), attn::test::to_oracle(ones),
                                              attn::test::to_oracle(zeros), static_cast<double>(eps)),
                     0.0, 2e-7);
    }
    // NaN passes a check "ε ≤ 0 is refused" (NaN ≤ 0 is false), and ∞ passes it too: both need isfinite.
    CHECK_THROWS_NAMING(ch16::layer_norm(X, ones, zeros, std::numeric_limits<float>::quiet_NaN()),
                        std::invalid_argument, "ε");
    CHECK_THROWS_NAMING(ch16::layer_norm(X, ones, zeros, std::numeric_limits<float>::infinity()), std::invalid_argument,
                        "ε");
  }
}

TEST_SUITE("16_real_model/embed") {
  TEST_CASE("embed adds the word's, the position's and token type 0's rows, then LayerNorm, as the oracle does") {
    attn::Rng rng(25);
    const Matrix word = rng.normal(7, 6), position = rng.normal(5, 6), type = rng.normal(2, 6);  // (rows, d)
    const Matrix g = rng.normal(1, 6, 1.0f, 0.3f), b = rng.normal(1, 6, 0.0f, 0.3f);
    const Vector gamma = xt::view(g, 0, xt::all()), beta = xt::view(b, 0, xt::all());
    for (const std::vector<int>& ids : {std::vector<int>{2, 0, 6, 3}, std::vector<int>{6, 6, 1, 1, 5}}) {
      for (float eps : {1e-12f, 0.5f}) {
        CAPTURE(eps);
        CHECK_ALLCLOSE(ch16::embed(ids, word, position, type, gamma, beta, eps),
                       attn::oracle::embed(ids, attn::test::to_oracle(word), attn::test::to_oracle(position),
                                           attn::test::to_oracle(type), attn::test::to_oracle(gamma),
                                           attn::test::to_oracle(beta), static_cast<double>(eps)),
                       1e-5, 1e-5);
      }
    }
  }

  TEST_CASE("embed refuses no ids, more ids than positions, an id outside the vocabulary and tables of another d") {
    attn::Rng rng(26);
    const Matrix word = rng.normal(7, 6), position = rng.normal(5, 6), type = rng.normal(2, 6);
    const Vector ones = xt::ones<float>({6}), zeros = xt::zeros<float>({6});
    CHECK_THROWS_NAMING(ch16::embed({}, word, position, type, ones, zeros, 1e-12f), std::invalid_argument, "0", "5");
    CHECK_THROWS_NAMING(ch16::embed({1, 1, 1, 1, 1, 1}, word, position, type, ones, zeros, 1e-12f),
                        std::invalid_argument, "6", "5");
    CHECK_THROWS_NAMING(ch16::embed({1, 7, 2}, word, position, type, ones, zeros, 1e-12f), std::invalid_argument, "7",
                        "1");  // id 7 at position 1: one past the vocabulary of 7
    CHECK_THROWS_NAMING(ch16::embed({1, 2, -1}, word, position, type, ones, zeros, 1e-12f), std::invalid_argument, "-1",
                        "2");
    CHECK_THROWS_NAMING(ch16::embed({1}, word, rng.normal(5, 4), type, ones, zeros, 1e-12f), std::invalid_argument, "7",
                        "6", "5", "4");
  }

  TEST_CASE("embed refuses a token-type table with no row or of another d, naming its shape, and takes a single row") {
    attn::Rng rng(28);
    const Matrix word = rng.normal(7, 6), position = rng.normal(5, 6);  // (rows, d)
    const Vector ones = xt::ones<float>({6}), zeros = xt::zeros<float>({6});
    CHECK_THROWS_NAMING(ch16::embed({1, 2}, word, position, rng.normal(2, 4), ones, zeros, 1e-12f),
                        std::invalid_argument, "2", "4", "6");
    const Matrix one_type = rng.normal(1, 6);  // (1, d): a model of a single token type
    CHECK_ALLCLOSE(ch16::embed({1, 2}, word, position, one_type, ones, zeros, 1e-12f),
                   attn::oracle::embed({1, 2}, attn::test::to_oracle(word), attn::test::to_oracle(position),
                                       attn::test::to_oracle(one_type), attn::test::to_oracle(ones),
                                       attn::test::to_oracle(zeros), static_cast<double>(1e-12f)),
                   1e-5, 1e-5);
    // Last: without the check, row 0 of a table of no rows is read past its end (a crash, or garbage).
    CHECK_THROWS_NAMING(ch16::embed({1, 2}, word, position, Matrix(xt::zeros<float>({0, 6})), ones, zeros, 1e-12f),
                        std::invalid_argument, "0", "6");
  }
}

TEST_SUITE("16_real_model/mean_pool_normalized") {
  TEST_CASE("mean_pool_normalized is the mean of every row, [CLS] and [SEP] included, scaled to length 1") {
    // Rows (1, 2), (3, 4), (5, 0), (−1, 2): mean (2, 2), length 2√2: (1/√2, 1/√2). Without the first and last
    // rows it would be (4, 2)/… and with the first alone (1, 2)/√5.
    const Matrix H = {{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 0.0f}, {-1.0f, 2.0f}};
    const Vector e = ch16::mean_pool_normalized(H);
    REQUIRE(e.size() == 2);
    CHECK(e(0) == doctest::Approx(1.0 / std::sqrt(2.0)).epsilon(1e-6));
    CHECK(e(1) == doctest::Approx(1.0 / std::sqrt(2.0)).epsilon(1e-6));
    attn::Rng rng(27);
    const Matrix R = rng.normal(9, 16);
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(R), attn::oracle::mean_pool_normalized(attn::test::to_oracle(R)), 1e-6,
                   1e-6);
  }

  TEST_CASE("mean_pool_normalized keeps a mean of length 0 at 0 and refuses no rows and NaN") {
    const Vector zero = ch16::mean_pool_normalized(Matrix{{1.0f, -2.0f}, {-1.0f, 2.0f}});
    CHECK(zero(0) == 0.0f);
    CHECK(zero(1) == 0.0f);
    CHECK_THROWS_NAMING(ch16::mean_pool_normalized(Matrix(xt::zeros<float>({0, 3}))), std::invalid_argument, "0", "3");
    CHECK_THROWS_NAMING(ch16::mean_pool_normalized(Matrix{{1.0f, std::nanf("")}}), std::invalid_argument, "H");
  }

  TEST_CASE("mean_pool_normalized divides by n, not n − 1: a single row is its own mean") {
    // Normalising cancels any factor of the mean, except 1/0: with n = 1, ÷ (n − 1) is ∞ · 0 and NaN.
    const Vector e = ch16::mean_pool_normalized(Matrix{{3.0f, 4.0f}});
    INFO("one row (3, 4): its mean is itself, e = (0.6, 0.8); NaN is a division by n − 1 = 0");
    CHECK_ALLCLOSE(e, (std::vector<double>{0.6, 0.8}), 0.0, 1e-7);  // one float rounding per entry: 6e-8
  }

  TEST_CASE("mean_pool_normalized pools rows at float's range: their mean and its length do not overflow") {
    // Two rows of (3e38, 0): the mean (3e38, 0) is a float, their sum 6e38 is not (∞, then ∞/∞ = NaN), and neither
    // is ‖h̄‖² = 9e76 (in float ∞, and e = 0). In double both are held: e = (1, 0).
    INFO("NaN: the rows summed, not averaged, or summed in float; 0: ‖h̄‖² squared in float; both overflow to ∞");
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(Matrix{{3e38f, 0.0f}, {3e38f, 0.0f}}), (std::vector<double>{1.0, 0.0}),
                   0.0, 1e-7);
    // One row of (3e38, 3e38): no sum to overflow, but ‖h̄‖² = 1.8e77 does in float: e = (1/√2, 1/√2).
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(Matrix{{3e38f, 3e38f}}),
                   (std::vector<double>{1.0 / std::sqrt(2.0), 1.0 / std::sqrt(2.0)}), 0.0, 1e-7);
  }

  TEST_CASE("mean_pool_normalized floors the mean's length at 1e-12, not the length's square, and not the sum's") {
    // Two rows of (1e-8, 0): ‖h̄‖ = 1e-8 is above 1e-12, so e = (1, 0). A floor on ‖h̄‖² (1e-12 on the square is
    // 1e-6 on the length) gives (0.01, 0).
    INFO("0.01 for a mean of length 1e-8: the floor 1e-12 put on ‖h̄‖² (1e-6 on ‖h̄‖) instead of on ‖h̄‖");
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(Matrix{{1e-8f, 0.0f}, {1e-8f, 0.0f}}), (std::vector<double>{1.0, 0.0}),
                   0.0, 1e-7);
    // Just above and just below the floor: a mean of length 1.01e-12 gives (1, 0), one of 0.99e-12 gives (0.99, 0):
    // below it e = h̄ · 10^12.
    INFO("below the floor e = h̄ / 1e-12, of length < 1: not scaled up to length 1, nor set to 0");
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(Matrix{{1.01e-12f, 0.0f}}), (std::vector<double>{1.0, 0.0}), 0.0, 1e-7);
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(Matrix{{0.99e-12f, 0.0f}}),
                   (std::vector<double>{static_cast<double>(0.99e-12f) * 1e12, 0.0}), 0.0, 1.5e-7);
    // Four rows of (2^-42 ≈ 2.27e-13, 0), exact in float whatever the order of the sum: the mean 2^-42 is below the
    // floor, e = (2^-42 · 10^12, 0) = (0.227, 0). The sum, 2^-40, gives 0.909; a floor on ‖h̄‖² gives 2.3e-7.
    INFO("0.909: the four rows summed, not averaged (under the floor the 1/n does not cancel)");
    const float tiny = std::ldexp(1.0f, -42);
    CHECK_ALLCLOSE(ch16::mean_pool_normalized(Matrix{{tiny, 0.0f}, {tiny, 0.0f}, {tiny, 0.0f}, {tiny, 0.0f}}),
                   (std::vector<double>{std::ldexp(1.0, -42) * 1e12, 0.0}), 0.0, 1.5e-7);
  }

  // Credited to mean_pool_normalized, the last exercise it needs (every exercise of the chapter computes it).
  TEST_CASE(
      "the six layers, embedded, pooled and normalised, give sentence-transformers' embeddings of the real model") {
    const ch16::MiniLM* model = model_or_skip();
    if (model == nullptr) return;
    for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
      INFO("text: ", r.text);
      const Vector e = ch16::sentence_embedding(*model, r.text);
      CHECK_ALLCLOSE(e, r.embedding, kEmbeddingTol, 0.0);
    }
  }
}
