// Chapter 16's own code on bad input: the layers (layers.hpp), the model's files and forward (minilm.hpp), the
// safetensors writer and reader (safetensors.hpp) and the vocabulary (tokenizer.hpp). Chapter code, not an
// exercise, so these run on the solution track only, and none needs the real model: a tiny random one (d = 4,
// h = 2) and files written here stand in for it. A bad input must be an exception naming what was wrong, never
// a NaN passed on, a read past a buffer or a silently broadcast answer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "16_real_model/embedding_backward.hpp"
#include "16_real_model/fast_kernels.hpp"
#include "16_real_model/fast_minilm.hpp"
#include "16_real_model/layers.hpp"
#include "16_real_model/minilm.hpp"
#include "16_real_model/safetensors.hpp"
#include "16_real_model/tokenizer.hpp"
#include "attn/rng.hpp"
#include "attn/vector.hpp"
#include "oracle/oracle.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch16 = attn::ch16;
namespace fs = std::filesystem;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A fresh folder of this test process's own, emptied (ctest runs the program on several vector paths at once).
fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attn_ch16_core_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// A random BERT layer of d = 4, h = 2, d_ff = 8.
ch16::EncoderLayerWeights tiny_layer(attn::Rng& rng) {
  ch16::EncoderLayerWeights W;
  const auto vec = [&](std::size_t n, float mean) { return Vector(xt::view(rng.normal(1, n, mean, 0.1f), 0)); };
  W.W_Q = rng.normal(4, 4, 0.0f, 0.5f);
  W.W_K = rng.normal(4, 4, 0.0f, 0.5f);
  W.W_V = rng.normal(4, 4, 0.0f, 0.5f);
  W.W_O = rng.normal(4, 4, 0.0f, 0.5f);
  W.W_1 = rng.normal(8, 4, 0.0f, 0.5f);
  W.W_2 = rng.normal(4, 8, 0.0f, 0.5f);
  W.b_Q = vec(4, 0.0f);
  W.b_K = vec(4, 0.0f);
  W.b_V = vec(4, 0.0f);
  W.b_O = vec(4, 0.0f);
  W.b_1 = vec(8, 0.0f);
  W.b_2 = vec(4, 0.0f);
  W.ln1_gamma = vec(4, 1.0f);
  W.ln1_beta = vec(4, 0.0f);
  W.ln2_gamma = vec(4, 1.0f);
  W.ln2_beta = vec(4, 0.0f);
  W.heads = 2;
  return W;
}

// A one-layer model of 6 tokens ([PAD] [UNK] [CLS] [SEP] a b), 8 positions, d = 4.
ch16::MiniLM tiny_model(attn::Rng& rng) {
  ch16::MiniLM m;
  m.config.vocab = 6;
  m.config.d = 4;
  m.config.heads = 2;
  m.config.layers = 1;
  m.config.d_ff = 8;
  m.config.max_positions = 8;
  m.config.max_tokens = 8;
  for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b"}) {
    m.vocab.id_of.emplace(t, static_cast<int>(m.vocab.token_of.size()));
    m.vocab.token_of.emplace_back(t);
  }
  m.vocab.pad = 0;
  m.vocab.unk = 1;
  m.vocab.cls = 2;
  m.vocab.sep = 3;
  m.word = rng.normal(6, 4);
  m.position = rng.normal(8, 4);
  m.token_type = rng.normal(2, 4);
  m.ln_gamma = xt::ones<float>({4});
  m.ln_beta = xt::zeros<float>({4});
  m.layers.push_back(tiny_layer(rng));
  return m;
}

const char* kGoodConfig = R"({"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute",
  "vocab_size": 6, "hidden_size": 4, "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 8,
  "max_position_embeddings": 8, "type_vocab_size": 2, "layer_norm_eps": 1e-12})";

}  // namespace

// Bad input, one case per function of chapter 16's own headers that had none (cmake/check_bad_input.py).
TEST_SUITE("16_real_model: bad input") {
  TEST_CASE("linear, layer_norm, gelu and row_vector refuse shapes that do not fit and NaN or infinity, by name") {
    attn::Rng rng(1601);
    const Matrix X = rng.normal(3, 4), W = rng.normal(2, 4);  // (n, in), (out, in)
    const Vector b = xt::zeros<float>({2}), gamma = xt::ones<float>({4}), beta = xt::zeros<float>({4});
    CHECK_THROWS_NAMING(ch16::linear(X, Matrix(rng.normal(2, 3)), b), std::invalid_argument, "(3, 4)", "(2, 3)");
    Matrix bad_X = X, bad_W = W;
    bad_X(2, 1) = kNaN;
    bad_W(1, 3) = kInf;
    CHECK_THROWS_NAMING(ch16::linear(bad_X, W, b), std::invalid_argument, "linear", "X");
    CHECK_THROWS_NAMING(ch16::linear(X, bad_W, b), std::invalid_argument, "linear", "output", "W (2, 4)");
    CHECK_THROWS_NAMING(ch16::linear(X, W, Vector{0.0f, kNaN}), std::invalid_argument, "linear", "b");
    CHECK_THROWS_NAMING(ch16::linear(Matrix(X * 1e20f), Matrix(W * 1e20f), b), std::invalid_argument, "overflows");
    CHECK_THROWS_NAMING(ch16::layer_norm(X, Vector(xt::ones<float>({3})), beta, 1e-5f), std::invalid_argument,
                        "layer_norm", "(3)");
    CHECK_THROWS_NAMING(ch16::layer_norm(bad_X, gamma, beta, 1e-5f), std::invalid_argument, "layer_norm", "X");
    CHECK_THROWS_NAMING(ch16::layer_norm(X, Vector{1.0f, kInf, 1.0f, 1.0f}, beta, 1e-5f), std::invalid_argument, "γ");
    for (const float eps : {0.0f, -1.0f, kNaN, kInf}) {
      CAPTURE(eps);
      CHECK_THROWS_NAMING(ch16::layer_norm(X, gamma, beta, eps), std::invalid_argument, "ε");
    }
    Matrix minus_inf = X;
    minus_inf(0, 0) = -kInf;  // GELU(−∞) = −∞ · ½ · (1 + erf(−∞)) = −∞ · 0 = NaN
    CHECK_THROWS_NAMING(ch16::gelu(minus_inf), std::invalid_argument, "gelu", "X");
    CHECK_THROWS_NAMING(ch16::row_vector(X), std::invalid_argument, "row_vector", "(3, 4)");
  }

  TEST_CASE("embed refuses no tokens, too many, an id outside the vocabulary and tables that do not fit") {
    attn::Rng rng(1602);
    const ch16::MiniLM m = tiny_model(rng);
    const auto call = [&](const std::vector<int>& ids, const Matrix& word) {
      return ch16::embed(ids, word, m.position, m.token_type, m.ln_gamma, m.ln_beta, 1e-12f);
    };
    CHECK_THROWS_NAMING(call({}, m.word), std::invalid_argument, "0 tokens", "1 to 8");
    CHECK_THROWS_NAMING(call(std::vector<int>(9, 4), m.word), std::invalid_argument, "9 tokens");
    CHECK_THROWS_NAMING(ch16::embed({2, 6, 3}, m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta, 1e-12f),
                        std::invalid_argument, "token id 6 at position 1");
    CHECK_THROWS_NAMING(call({2, -1, 3}, m.word), std::invalid_argument, "token id -1");
    CHECK_THROWS_NAMING(call({2, 3}, Matrix(rng.normal(6, 5))), std::invalid_argument, "(6, 5)", "(8, 4)");
    Matrix nan_word = m.word;
    nan_word(4, 2) = kNaN;
    CHECK_THROWS_AS(call({2, 4, 3}, nan_word), std::invalid_argument);  // the LayerNorm names the entry
  }

  TEST_CASE("mean_pool_normalized and head_shares refuse no tokens, NaN, infinity and negative weights") {
    CHECK_THROWS_NAMING(ch16::mean_pool_normalized(Matrix(xt::zeros<float>({0, 4}))), std::invalid_argument,
                        "no tokens");
    CHECK_THROWS_NAMING(ch16::mean_pool_normalized(Matrix{{1.0f, kNaN}}), std::invalid_argument, "H");
    CHECK_THROWS_NAMING(ch16::head_shares(Matrix(xt::zeros<float>({2, 3}))), std::invalid_argument, "(2, 3)");
    CHECK_THROWS_NAMING(ch16::head_shares(Matrix{{1.0f}}), std::invalid_argument, "n ≥ 2");
    CHECK_THROWS_NAMING(ch16::head_shares(Matrix{{0.5f, 0.5f}, {kNaN, 0.5f}}), std::invalid_argument, "A");
    CHECK_THROWS_NAMING(ch16::head_shares(Matrix{{1.5f, -0.5f}, {0.5f, 0.5f}}), std::invalid_argument,
                        "A(0, 1) = -0.5");
  }

  TEST_CASE("attention_maps, head_contributions and encoder_layer_with refuse weights and heads that do not fit") {
    attn::Rng rng(1603);
    const ch16::EncoderLayerWeights W = tiny_layer(rng);
    const Matrix X = rng.normal(3, 4);  // (n, d)
    ch16::EncoderLayerWeights three_heads = W, narrow_W_O = W, wide_W_Q = W;
    three_heads.heads = 3;              // d = 4 is not divisible by 3
    narrow_W_O.W_O = rng.normal(4, 2);  // head 1's columns [2, 4) were read past the end
    wide_W_Q.W_Q = rng.normal(4, 5);
    CHECK_THROWS_AS(ch16::attention_maps(X, three_heads), std::invalid_argument);
    CHECK_THROWS_NAMING(ch16::attention_maps(X, wide_W_Q), std::invalid_argument, "(4, 5)");
    CHECK_THROWS_NAMING(ch16::head_contributions(X, narrow_W_O), std::invalid_argument, "W_O is (4, 2)", "(4, 4)");
    CHECK_THROWS_AS(ch16::head_contributions(X, three_heads), std::invalid_argument);
    const ch16::HeadAttention one_row = [](const Matrix&, const Matrix&, const Matrix& V) {
      return Matrix(xt::view(V, xt::range(0, 1), xt::all()));  // (1, d_k): broadcast to every row before
    };
    CHECK_THROWS_NAMING(ch16::encoder_layer_with(X, W, one_row), std::invalid_argument, "head 0", "(1, 2)", "(3, 2)");
    CHECK_THROWS_NAMING(ch16::encoder_layer_with(X, W, ch16::HeadAttention()), std::invalid_argument,
                        "attend is empty");
    CHECK_THROWS_NAMING(ch16::encoder_layer_with(X, three_heads, one_row), std::invalid_argument, "h = 3");
  }

  TEST_CASE("encode, tokenize and the sentence embeddings refuse a head mask, a cut and ids that do not fit") {
    attn::Rng rng(1604);
    const ch16::MiniLM m = tiny_model(rng);
    CHECK_THROWS_NAMING(ch16::encode(m, {2, 4, 3}, {{true, true}, {true, true}}), std::invalid_argument, "2 layers",
                        "has 1");
    CHECK_THROWS_AS(ch16::encode(m, {2, 40, 3}), std::invalid_argument);
    CHECK_THROWS_AS(ch16::encode(m, {}), std::invalid_argument);
    CHECK_THROWS_NAMING(ch16::tokenize("a b", m.vocab, 1), std::invalid_argument, "max_tokens = 1");
    CHECK_THROWS_AS(ch16::tokenize("a \xff b", m.vocab, 8), std::invalid_argument);  // not UTF-8
    CHECK_THROWS_NAMING(ch16::sentence_embedding(m, "a b", {{true}, {true}}), std::invalid_argument, "2 layers");
    CHECK_THROWS_AS(ch16::sentence_embedding(m, "\xc3", {}), std::invalid_argument);  // a cut code point
    CHECK_THROWS_NAMING(ch16::sentence_embedding_with(m, "a b", ch16::HeadAttention()), std::invalid_argument,
                        "attend is empty");
    ch16::MiniLM nan_model = m;
    nan_model.layers[0].W_1(3, 2) = kNaN;  // the feed-forward's weight: shows in its output
    CHECK_THROWS_NAMING(ch16::sentence_embedding(nan_model, "a b", {}), std::invalid_argument, "output");
    // The packed batch: the same refusals, and the good sentences of a batch change nothing when one is bad.
    CHECK_THROWS_AS(ch16::sentence_embeddings(m, {"a b", "\xc3"}), std::invalid_argument);
    CHECK_THROWS_NAMING(ch16::sentence_embeddings(nan_model, {"a b", "b a"}), std::invalid_argument, "output");
    // The fast forward: a NaN weight refused once, at load, naming the layer and the weight; text as tokenize().
    CHECK_THROWS_NAMING(ch16::FastMiniLM{nan_model}, std::invalid_argument, "layer 0's W_1", "nan");
    const ch16::FastMiniLM fast(m);
    ch16::ForwardScratch scratch;
    CHECK_THROWS_AS(fast.embed_sentences({"a b", "\xc3"}, scratch), std::invalid_argument);
    CHECK_THROWS_NAMING(ch16::step_name(ch16::ForwardStep::count), std::invalid_argument, "not a step");
  }

  TEST_CASE("read_config and load_minilm refuse a missing folder and a config that lies or is not BERT's") {
    const fs::path dir = temp_dir("config");
    CHECK_THROWS_AS(ch16::read_config((dir / "missing").string()), std::runtime_error);
    CHECK_THROWS_AS(ch16::load_minilm((dir / "missing").string()), std::runtime_error);
    const auto refused = [&](const std::string& text, const char* word) {
      write_text(dir / "config.json", text);
      CHECK_THROWS_NAMING(ch16::read_config(dir.string()), std::invalid_argument, word);
    };
    std::string config = kGoodConfig;
    refused("{not json", "not a JSON object");
    refused(std::string(config).replace(config.find("\"gelu\""), 6, "\"relu\""), "hidden_act");
    refused(std::string(config).replace(config.find("\"num_attention_heads\": 2"), 24, "\"num_attention_heads\": 3"),
            "not divisible");
    refused(std::string(config).replace(config.find("\"vocab_size\": 6"), 15, "\"vocab_size\": 0"), "vocab_size");
    refused(std::string(config).replace(config.find("\"vocab_size\": 6"), 15, "\"vocab_size\": -6"), "vocab_size");
    refused(std::string(config).replace(config.find("\"hidden_size\": 4"), 16, "\"hidden_size\": 4000000"),
            "beyond any BERT");
    refused(std::string(config).replace(config.find("1e-12"), 5, "1e300"), "layer_norm_eps");  // inf as a float
    refused(std::string(config).replace(config.find("1e-12"), 5, "0"), "layer_norm_eps");
    // A good config, but a vocabulary that lacks [CLS], then one of 5 tokens for a config of 6.
    write_text(dir / "config.json", config);
    write_text(dir / "vocab.txt", "[PAD]\n[UNK]\n[SEP]\na\nb\nc\n");
    CHECK_THROWS_NAMING(ch16::load_minilm(dir.string()), std::invalid_argument, "[CLS]");
    write_text(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n");
    CHECK_THROWS_NAMING(ch16::load_minilm(dir.string()), std::invalid_argument, "vocab.txt has 5", "says 6");
    write_text(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n");
    CHECK_THROWS_AS(ch16::load_minilm(dir.string()), std::runtime_error);  // no model.safetensors
    fs::remove_all(dir);
  }

  TEST_CASE("model_missing_reason names the missing file, and the readers refuse a missing file and a folder") {
    // bad input answered: model_missing_reason
    const fs::path dir = temp_dir("files");
    CHECK(ch16::model_missing_reason((dir / "nowhere").string()).find("config.json is missing") != std::string::npos);
    write_text(dir / "config.json", kGoodConfig);
    CHECK(ch16::model_missing_reason(dir.string()).find("vocab.txt is missing") != std::string::npos);
    fs::create_directories(dir / "vocab.txt");  // a folder where the file should be
    CHECK(ch16::model_missing_reason(dir.string()).find("vocab.txt is missing") != std::string::npos);
    CHECK_THROWS_NAMING(ch16::read_sentences((dir / "nowhere.txt").string()), std::runtime_error, "nowhere.txt");
    CHECK_THROWS_NAMING(ch16::read_sentences(dir.string()), std::runtime_error, "a folder");
    CHECK_THROWS_NAMING(ch16::read_reference((dir / "nowhere.txt").string()), std::runtime_error, "nowhere.txt");
    CHECK_THROWS_NAMING(ch16::read_reference(dir.string()), std::runtime_error, "a folder");
    write_text(dir / "reference.txt", "ids: 1 2\n");
    CHECK_THROWS_NAMING(ch16::read_reference((dir / "reference.txt").string()), std::invalid_argument,
                        "before any text");
    write_text(dir / "reference.txt", "text: a\nids: 2 4 3\n");
    CHECK_THROWS_NAMING(ch16::read_reference((dir / "reference.txt").string()), std::invalid_argument,
                        "lacks its ids or its embedding");
    fs::remove_all(dir);
  }

  TEST_CASE("load_vocab refuses a missing, empty or repeating file and one without the special tokens") {
    const fs::path dir = temp_dir("vocab");
    CHECK_THROWS_NAMING(ch16::load_vocab((dir / "none.txt").string()), std::runtime_error, "none.txt");
    write_text(dir / "vocab.txt", "");
    CHECK_THROWS_NAMING(ch16::load_vocab((dir / "vocab.txt").string()), std::invalid_argument, "empty");
    write_text(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\na\n");
    CHECK_THROWS_NAMING(ch16::load_vocab((dir / "vocab.txt").string()), std::invalid_argument, "'a' appears twice",
                        "line 6");
    write_text(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\na\n");
    CHECK_THROWS_NAMING(ch16::load_vocab((dir / "vocab.txt").string()), std::invalid_argument, "[SEP]");
    fs::remove_all(dir);
  }

  TEST_CASE("utf8_length refuses text that is not UTF-8, and Vocab::find and dtype_bytes answer unknown names") {
    // bad input answered: find, dtype_bytes
    CHECK_THROWS_AS(ch16::utf8_length("a\xff"), std::invalid_argument);
    CHECK_THROWS_AS(ch16::utf8_length("\xe7\x8c"), std::invalid_argument);  // 猫 cut after two of its bytes
    CHECK_THROWS_AS(ch16::utf8_length("\xc0\xaf"), std::invalid_argument);  // an overlong '/'
    CHECK(ch16::utf8_length("") == 0);
    attn::Rng rng(1605);
    const ch16::MiniLM m = tiny_model(rng);
    CHECK(m.vocab.find("zebra") == -1);
    CHECK(m.vocab.find("") == -1);
    CHECK(ch16::dtype_bytes("F33") == 0);
    CHECK(ch16::dtype_bytes("") == 0);
  }

  TEST_CASE("write_safetensors refuses values that do not fit the shape, a shape past 64 bits and a bad path") {
    // bad input answered: find
    const fs::path dir = temp_dir("safetensors");
    const std::string path = (dir / "t.safetensors").string();
    CHECK_THROWS_NAMING(ch16::write_safetensors(path, {{"w", {{2, 3}, {1.0f, 2.0f}}}}), std::invalid_argument, "'w'",
                        "2 values");
    // 2^32 · 2^32 wrapped to 0 = the number of values given: the writer made a file whose header claimed it.
    const std::size_t big = std::size_t{1} << 32;
    CHECK_THROWS_NAMING(ch16::write_safetensors(path, {{"w", {{big, big}, {}}}}), std::invalid_argument, "'w'",
                        "64 bits");
    CHECK_FALSE(fs::exists(path));  // nothing written for a refused tensor
    CHECK_THROWS_AS(ch16::write_safetensors((dir / "no" / "such" / "t.safetensors").string(), {}), std::runtime_error);
    ch16::write_safetensors(path, {{"w", {{2}, {1.0f, 2.0f}}}});
    const ch16::SafetensorsFile file(path);
    CHECK(file.find("missing") == nullptr);
    CHECK(file.find("") == nullptr);
    fs::remove_all(dir);
  }
}

// The defects hostile calls found in the chapter's own code, each with the call that found it.
TEST_SUITE("16_real_model: hostile input") {
  TEST_CASE("pool_kv_heads refuses key and value weights that do not fit and h = 0, before pooling") {
    attn::Rng rng(1647);
    const ch16::EncoderLayerWeights W = tiny_layer(rng);  // d = 4, h = 2
    ch16::EncoderLayerWeights tall = W, short_K = W, long_b = W, no_heads = W;
    tall.W_K = rng.normal(5, 4);         // overwrote the heap before (glibc abort)
    short_K.W_K = rng.normal(2, 4);      // SIGSEGV before
    long_b.b_K = xt::zeros<float>({6});  // a silent heap overwrite before
    no_heads.heads = 0;                  // SIGFPE before
    CHECK_THROWS_NAMING(ch16::pool_kv_heads(tall, 1), std::invalid_argument, "pool_kv_heads", "W_K", "(5, 4)");
    CHECK_THROWS_NAMING(ch16::pool_kv_heads(short_K, 2), std::invalid_argument, "W_K", "(2, 4)");
    CHECK_THROWS_NAMING(ch16::pool_kv_heads(long_b, 1), std::invalid_argument, "b_K", "(6)");
    CHECK_THROWS_NAMING(ch16::pool_kv_heads(no_heads, 1), std::invalid_argument, "h = 0");
  }

  TEST_CASE("encoder_layer_packed, encoder_layer_with and encoder_layer_traced refuse every weight that does not fit") {
    // bad input answered: check_layer_weights
    attn::Rng rng(1648);
    const ch16::EncoderLayerWeights W = tiny_layer(rng);  // d = 4, h = 2, d_ff = 8
    const Matrix X = rng.normal(3, 4);
    CHECK_NOTHROW(ch16::check_layer_weights("here", W, 4));
    const ch16::HeadAttention exact = [](const Matrix& Q, const Matrix& K, const Matrix& V) {
      return attn::scaled_dot_product_attention(Q, K, V);
    };
    ch16::EncoderLayerWeights half_Q = W, half_K = W, row_O = W, row_W_2 = W, zero_eps = W;
    half_Q.W_Q = rng.normal(2, 4);  // read past the heap (ASan), garbage in release, before
    half_K.W_K = rng.normal(2, 4);
    row_O.W_O = rng.normal(1, 4);  // broadcast over every row, before
    row_O.b_O = xt::zeros<float>({1});
    row_W_2.W_2 = rng.normal(1, 8);
    zero_eps.ln_eps = 0.0f;
    for (const auto* bad : {&half_Q, &half_K, &row_O, &row_W_2, &zero_eps}) {
      CHECK_THROWS_AS(ch16::encoder_layer_packed(X, {0, 2, 3}, *bad, exact), std::invalid_argument);
      CHECK_THROWS_AS(ch16::encoder_layer_with(X, *bad, exact), std::invalid_argument);
      CHECK_THROWS_AS(ch16::encoder_layer_traced(X, *bad), std::invalid_argument);
    }
    CHECK_THROWS_NAMING(ch16::encoder_layer_with(X, half_Q, exact), std::invalid_argument, "W_Q", "(2, 4)", "(4, 4)");
    CHECK_THROWS_NAMING(ch16::encoder_layer_traced(X, row_O), std::invalid_argument, "encoder_layer_traced", "W_O",
                        "(1, 4)");
    CHECK_THROWS_NAMING(ch16::encoder_layer_packed(X, {0, 3}, row_W_2, exact), std::invalid_argument, "W_2", "(1, 8)");
    CHECK_THROWS_NAMING(ch16::check_layer_weights("here", W, 6), std::invalid_argument, "here", "d = 6");
  }

  TEST_CASE("gelu_backward at ±∞ takes GELU's limits instead of ∞ · 0") {
    const Matrix U{{kInf, -kInf, 0.0f}}, dY{{2.0f, 3.0f, 4.0f}};
    const Matrix dU = ch16::gelu_backward(U, dY);  // NaN at +∞ before
    CHECK(dU(0, 0) == 2.0f);                       // gelu'(+∞) = 1
    CHECK(dU(0, 1) == 0.0f);                       // gelu'(−∞) = 0
    CHECK(dU(0, 2) == 2.0f);                       // gelu'(0) = ½
  }

  TEST_CASE("the readers refuse a FIFO and a folder before opening them, naming the path") {
    const fs::path dir = temp_dir("fifo");
    const fs::path fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    // Each of these blocked forever in open() before: a FIFO waits for a writer.
    CHECK_THROWS_NAMING(ch16::require_regular_file("thing", fifo.string()), std::runtime_error, "thing", "pipe",
                        "not a regular file");
    CHECK_THROWS_NAMING(ch16::SafetensorsFile(fifo.string()), std::runtime_error, "pipe", "not a regular file");
    CHECK_THROWS_NAMING(ch16::load_vocab(fifo.string()), std::runtime_error, "pipe", "not a regular file");
    CHECK_THROWS_NAMING(ch16::read_reference(fifo.string()), std::runtime_error, "pipe", "not a regular file");
    CHECK_THROWS_NAMING(ch16::read_sentences(fifo.string()), std::runtime_error, "pipe", "not a regular file");
    fs::create_directories(dir / "model");
    std::filesystem::rename(fifo, dir / "model" / "config.json");
    CHECK_THROWS_NAMING(ch16::read_config((dir / "model").string()), std::runtime_error, "config.json",
                        "not a regular file");
    // A folder given as config.json: the message did not name it.
    fs::remove(dir / "model" / "config.json");
    fs::create_directories(dir / "model" / "config.json");
    CHECK_THROWS_NAMING(ch16::read_config((dir / "model").string()), std::runtime_error, "config.json", "a folder");
    CHECK_THROWS_NAMING(ch16::load_vocab((dir / "model").string()), std::runtime_error, "model", "a folder");
    CHECK_THROWS_NAMING(ch16::SafetensorsFile((dir / "model").string()), std::runtime_error, "a folder");
    fs::remove_all(dir);
  }

  TEST_CASE("read_reference refuses a line whose numbers it cannot read whole, naming the line") {
    const fs::path dir = temp_dir("reference");
    const fs::path path = dir / "reference.txt";
    const auto refused = [&](const std::string& text, const char* word) {
      write_text(path, text);
      CHECK_THROWS_NAMING(ch16::read_reference(path.string()), std::invalid_argument, word);
    };
    refused("text: a\nids: 101 10x37 102\nembedding: 0.5\n", "10x37");  // kept as [101, 10] before
    refused("text: a\nids: 101 99999999999 102\nembedding: 0.5\n", "99999999999");
    refused("text: a\nids: 101 102\nembedding: 0.5 nan\n", "nan");
    refused("text: a\nids: 101 102\nembedding: 0.5 1e999\n", "1e999");
    refused("text: a\nids: 101 102\nids: 7\nembedding: 0.5\n", "second ids");
    write_text(path, "text: a b\nids: 101 102\nembedding: 0.5 -0.25\n");
    const std::vector<ch16::ReferenceText> good = ch16::read_reference(path.string());
    REQUIRE(good.size() == 1);
    CHECK(good[0].ids == std::vector<int>{101, 102});
    CHECK(good[0].embedding == std::vector<double>{0.5, -0.25});
    fs::remove_all(dir);
  }

  TEST_CASE("load_minilm refuses a config of fewer layers than the file holds") {
    attn::Rng rng(1649);
    const fs::path dir = temp_dir("layers");
    const ch16::MiniLM m = tiny_model(rng);
    write_text(dir / "config.json", kGoodConfig);  // one layer
    write_text(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n");
    std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<float>>> tensors;
    const auto put = [&](const std::string& name, const Matrix& M, bool vector) {
      tensors[name] = {vector ? std::vector<std::size_t>{M.size()} : std::vector<std::size_t>{M.shape(0), M.shape(1)},
                       std::vector<float>(M.begin(), M.end())};
    };
    const auto row = [](const Vector& v) { return Matrix(xt::view(v, xt::newaxis(), xt::all())); };
    put("embeddings.word_embeddings.weight", m.word, false);
    put("embeddings.position_embeddings.weight", m.position, false);
    put("embeddings.token_type_embeddings.weight", m.token_type, false);
    put("embeddings.LayerNorm.weight", row(m.ln_gamma), true);
    put("embeddings.LayerNorm.bias", row(m.ln_beta), true);
    for (const std::string l : {"0", "1"}) {  // two layers in the file
      const std::string p = "encoder.layer." + l + ".";
      const ch16::EncoderLayerWeights& W = m.layers[0];
      put(p + "attention.self.query.weight", W.W_Q, false);
      put(p + "attention.self.key.weight", W.W_K, false);
      put(p + "attention.self.value.weight", W.W_V, false);
      put(p + "attention.output.dense.weight", W.W_O, false);
      put(p + "attention.self.query.bias", row(W.b_Q), true);
      put(p + "attention.self.key.bias", row(W.b_K), true);
      put(p + "attention.self.value.bias", row(W.b_V), true);
      put(p + "attention.output.dense.bias", row(W.b_O), true);
      put(p + "attention.output.LayerNorm.weight", row(W.ln1_gamma), true);
      put(p + "attention.output.LayerNorm.bias", row(W.ln1_beta), true);
      put(p + "intermediate.dense.weight", W.W_1, false);
      put(p + "intermediate.dense.bias", row(W.b_1), true);
      put(p + "output.dense.weight", W.W_2, false);
      put(p + "output.dense.bias", row(W.b_2), true);
      put(p + "output.LayerNorm.weight", row(W.ln2_gamma), true);
      put(p + "output.LayerNorm.bias", row(W.ln2_beta), true);
    }
    ch16::write_safetensors((dir / "model.safetensors").string(), tensors);
    // The second layer was ignored before: half the model ran and nothing said so.
    CHECK_THROWS_NAMING(ch16::load_minilm(dir.string()), std::invalid_argument, "encoder.layer.1.", "1 layers");
    std::string two = kGoodConfig;
    two.replace(two.find("\"num_hidden_layers\": 1"), 22, "\"num_hidden_layers\": 2");
    write_text(dir / "config.json", two);
    CHECK(ch16::load_minilm(dir.string()).layers.size() == 2);
    tensors["encoder.layer.x.weight"] = {{1}, {0.0f}};  // a layer that is no number
    ch16::write_safetensors((dir / "model.safetensors").string(), tensors);
    CHECK_THROWS_NAMING(ch16::check_layer_count(ch16::SafetensorsFile((dir / "model.safetensors").string()), 2),
                        std::invalid_argument, "encoder.layer.x.weight");
    fs::remove_all(dir);
  }
}

namespace hostile = attn::test::hostile;

template <>
struct attn::test::hostile::Weights<attn::ch16::EncoderLayerWeights> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::ch16::EncoderLayerWeights& W, F&& f) {
    f("W_Q", W.W_Q);
    f("W_K", W.W_K);
    f("W_V", W.W_V);
    f("W_O", W.W_O);
    f("b_Q", W.b_Q);
    f("b_K", W.b_K);
    f("b_V", W.b_V);
    f("b_O", W.b_O);
    f("ln1_gamma", W.ln1_gamma);
    f("ln1_beta", W.ln1_beta);
    f("W_1", W.W_1);
    f("b_1", W.b_1);
    f("W_2", W.W_2);
    f("b_2", W.b_2);
    f("ln2_gamma", W.ln2_gamma);
    f("ln2_beta", W.ln2_beta);
  }
};

namespace {

// Does W fit a layer of width d (what check_layer_weights() promises to refuse otherwise)?
bool layer_fits(const ch16::EncoderLayerWeights& W, std::size_t d) {
  const std::size_t d_ff = W.W_1.shape(0);
  const auto m = [](const Matrix& M, std::size_t r, std::size_t c) { return M.shape(0) == r && M.shape(1) == c; };
  return W.heads > 0 && d % W.heads == 0 && d_ff > 0 && m(W.W_Q, d, d) && m(W.W_K, d, d) && m(W.W_V, d, d) &&
         m(W.W_O, d, d) && m(W.W_1, d_ff, d) && m(W.W_2, d, d_ff) && W.b_Q.size() == d && W.b_K.size() == d &&
         W.b_V.size() == d && W.b_O.size() == d && W.b_1.size() == d_ff && W.b_2.size() == d &&
         W.ln1_gamma.size() == d && W.ln1_beta.size() == d && W.ln2_gamma.size() == d && W.ln2_beta.size() == d;
}

const ch16::HeadAttention kExact = [](const Matrix& Q, const Matrix& K, const Matrix& V) {
  return attn::scaled_dot_product_attention(Q, K, V);
};

// A model folder of tiny_model()'s files (config, vocabulary, weights), written once.
const fs::path& tiny_model_dir() {
  static const fs::path dir = [] {
    attn::Rng rng(1650);
    const ch16::MiniLM m = tiny_model(rng);
    const fs::path d = temp_dir("tiny_model");
    write_text(d / "config.json", kGoodConfig);
    write_text(d / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n");
    std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<float>>> t;
    const auto put = [&](const std::string& name, const auto& M, std::vector<std::size_t> shape) {
      t[name] = {shape, std::vector<float>(M.begin(), M.end())};
    };
    put("embeddings.word_embeddings.weight", m.word, {6, 4});
    put("embeddings.position_embeddings.weight", m.position, {8, 4});
    put("embeddings.token_type_embeddings.weight", m.token_type, {2, 4});
    put("embeddings.LayerNorm.weight", m.ln_gamma, {4});
    put("embeddings.LayerNorm.bias", m.ln_beta, {4});
    const ch16::EncoderLayerWeights& W = m.layers[0];
    const std::string p = "encoder.layer.0.";
    put(p + "attention.self.query.weight", W.W_Q, {4, 4});
    put(p + "attention.self.key.weight", W.W_K, {4, 4});
    put(p + "attention.self.value.weight", W.W_V, {4, 4});
    put(p + "attention.output.dense.weight", W.W_O, {4, 4});
    put(p + "attention.self.query.bias", W.b_Q, {4});
    put(p + "attention.self.key.bias", W.b_K, {4});
    put(p + "attention.self.value.bias", W.b_V, {4});
    put(p + "attention.output.dense.bias", W.b_O, {4});
    put(p + "attention.output.LayerNorm.weight", W.ln1_gamma, {4});
    put(p + "attention.output.LayerNorm.bias", W.ln1_beta, {4});
    put(p + "intermediate.dense.weight", W.W_1, {8, 4});
    put(p + "intermediate.dense.bias", W.b_1, {8});
    put(p + "output.dense.weight", W.W_2, {4, 8});
    put(p + "output.dense.bias", W.b_2, {4});
    put(p + "output.LayerNorm.weight", W.ln2_gamma, {4});
    put(p + "output.LayerNorm.bias", W.ln2_beta, {4});
    ch16::write_safetensors((d / "model.safetensors").string(), t);
    return d;
  }();
  return dir;
}

// A copy of the tiny model's folder with \p file replaced by the file at \p path (a hostile one).
std::string model_dir_with(const std::string& file, const std::string& path) {
  const fs::path dir =
      fs::temp_directory_path() / ("attn_ch16_core_test_" + std::to_string(::getpid())) / "hostile_model";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "vocab.txt", "model.safetensors"})
    if (f != file) fs::copy_file(tiny_model_dir() / f, dir / f);
  std::error_code ec;
  if (fs::is_directory(path))
    fs::create_directories(dir / file);
  else if (fs::exists(path))
    fs::copy_file(path, dir / file, ec);
  return dir.string();
}

}  // namespace

// Every public function of the chapter under the hostile-input battery (tests/support/hostile.hpp).
TEST_SUITE("16_real_model: hostile battery") {
  TEST_CASE("the layers, the contract's layer and its backward under the battery") {
    // hostile battery: linear, layer_norm, gelu, row_vector, check_layer_weights, encoder_layer, prune_heads
    // hostile battery: layer_norm_backward, gelu_backward, encoder_layer_traced, encoder_layer_backward
    // hostile battery: attention_maps, head_contributions, pool_kv_heads, encoder_layer_with, encoder_layer_packed
    // hostile battery: head_shares, mean_pool_normalized
    attn::Rng rng(1651);
    const ch16::EncoderLayerWeights W = tiny_layer(rng);
    const Matrix X = rng.normal(3, 4);
    hostile::battery(
        "linear", {"X", "W", "b"},
        [](const Matrix& x, const Matrix& w, const Vector& b) { return ch16::linear(x, w, b); }, X,
        Matrix(rng.normal(2, 4)), Vector{0.5f, -0.5f})
        .fits([](const Matrix& x, const Matrix& w, const Vector& b) {
          return x.shape(1) == w.shape(1) && b.size() == w.shape(0);
        })
        .run();
    hostile::battery(
        "layer_norm", {"X", "gamma|γ", "beta|β", "eps|ε"},
        [](const Matrix& x, const Vector& g, const Vector& b, float eps) { return ch16::layer_norm(x, g, b, eps); }, X,
        Vector(xt::ones<float>({4})), Vector(xt::zeros<float>({4})), 1e-12f)
        .fits([](const Matrix& x, const Vector& g, const Vector& b, float eps) {
          return g.size() == x.shape(1) && b.size() == x.shape(1) && eps > 0 && std::isfinite(eps);
        })
        .exempt("X with 3e38", "LayerNorm of finite values is finite: (x − mean)² is summed in double")
        .exempt("X all", "as X with 3e38")
        .run();
    hostile::battery(
        "gelu", {"X"}, [](const Matrix& x) { return ch16::gelu(x); }, X)
        .run();
    hostile::battery(
        "row_vector", {"M"}, [](const Matrix& m) { return ch16::row_vector(m); }, Matrix(rng.normal(1, 4)))
        .fits([](const Matrix& m) { return m.shape(0) == 1; })
        .non_finite_passes("a copy of the row: values are not its concern")
        .run();
    hostile::battery(
        "check_layer_weights", {"W", "d"},
        [](const ch16::EncoderLayerWeights& w, std::size_t d) { ch16::check_layer_weights("here", w, d); }, W,
        std::size_t{4})
        .fits(layer_fits)
        .non_finite_passes("a check of shapes: the values are checked where they are used (linear, layer_norm)")
        .run();
    hostile::battery(
        "encoder_layer", {"X", "W", "keep_head"},
        [](const Matrix& x, const ch16::EncoderLayerWeights& w, const std::vector<bool>& keep) {
          return ch16::encoder_layer(x, w, keep);
        },
        X, W, std::vector<bool>{true, false})
        .fits([](const Matrix& x, const ch16::EncoderLayerWeights& w, const std::vector<bool>& keep) {
          return layer_fits(w, x.shape(1)) && (keep.empty() || keep.size() == w.heads);
        })
        .exempt("X (0, 4)", "no tokens: chapter 05's flash kernel answers an empty (0, d) output")
        .run();
    hostile::battery(
        "prune_heads", {"heads", "keep_head"},
        [](const attn::Tensor3& h, const std::vector<bool>& keep) { return ch16::prune_heads(h, keep); },
        attn::Tensor3(xt::ones<float>({2, 3, 2})), std::vector<bool>{true, false})
        .fits([](const attn::Tensor3& h, const std::vector<bool>& keep) { return keep.size() == h.shape(0); })
        .non_finite_passes("a pruned head is zeros and a kept one is copied: values are not its concern")
        .run();
    hostile::battery(
        "layer_norm_backward", {"Z", "gamma|γ", "eps|ε", "dY"},
        [](const Matrix& z, const Vector& g, float eps, const Matrix& dy) {
          return ch16::layer_norm_backward(z, g, eps, dy);
        },
        X, Vector(xt::ones<float>({4})), 1e-12f, Matrix(rng.normal(3, 4)))
        .fits([](const Matrix& z, const Vector& g, float eps, const Matrix& dy) {
          return g.size() == z.shape(1) && dy.shape() == z.shape() && eps > 0 && std::isfinite(eps);
        })
        .non_finite_passes("the backward of values the forward (layer_norm) already refused when not finite")
        .exempt("with 3e38", "a gradient past float's range: the backward promises no overflow check")
        .exempt("all ±1e20", "as with 3e38")
        .run();
    hostile::battery(
        "gelu_backward", {"U", "dY"}, [](const Matrix& u, const Matrix& dy) { return ch16::gelu_backward(u, dy); }, X,
        Matrix(rng.normal(3, 4)))
        .fits([](const Matrix& u, const Matrix& dy) { return u.shape() == dy.shape(); })
        .non_finite_passes("±∞ in U takes GELU's limits (tested above); a NaN passes through, unchecked by contract")
        .exempt("with 3e38", "dY · gelu'(U) past float's range: no overflow check promised")
        .exempt("all ±1e20", "as with 3e38")
        .run();
    hostile::battery(
        "encoder_layer_traced", {"X", "W"},
        [](const Matrix& x, const ch16::EncoderLayerWeights& w) { return ch16::encoder_layer_traced(x, w).out; }, X, W)
        .fits([](const Matrix& x, const ch16::EncoderLayerWeights& w) {
          return x.shape(0) > 0 && layer_fits(w, x.shape(1));
        })
        .run();
    const ch16::LayerTrace trace = ch16::encoder_layer_traced(X, W);
    hostile::battery(
        "encoder_layer_backward", {"W", "dOut"},
        [&](const ch16::EncoderLayerWeights& w, const Matrix& d) { return ch16::encoder_layer_backward(trace, w, d); },
        W, Matrix(rng.normal(3, 4)))
        .fits([](const ch16::EncoderLayerWeights& w, const Matrix& d) {
          return layer_fits(w, 4) && d.shape(0) == 3 && d.shape(1) == 4 && w.W_1.shape(0) == 8;
        })
        .non_finite_passes("the weights are the forward's, already checked by encoder_layer_traced")
        .exempt("dOut with", "a gradient's values: the backward promises no check of them")
        .exempt("dOut all", "as dOut with")
        .run();
    hostile::battery(
        "attention_maps", {"X", "W"},
        [](const Matrix& x, const ch16::EncoderLayerWeights& w) { return ch16::attention_maps(x, w); }, X, W)
        .fits([](const Matrix& x, const ch16::EncoderLayerWeights& w) { return layer_fits(w, x.shape(1)); })
        .exempt("W.W_V", "attention_maps reads W_Q, W_K and the heads only (and checks the whole layer's shapes)")
        .exempt("W.W_O with", "as W.W_V")
        .exempt("W.W_1 with", "as W.W_V")
        .exempt("W.W_2 with", "as W.W_V")
        .exempt("W.b_V with", "as W.W_V")
        .exempt("W.b_O with", "as W.W_V")
        .exempt("W.b_1 with", "as W.W_V")
        .exempt("W.b_2 with", "as W.W_V")
        .exempt("W.ln", "as W.W_V")
        .run();
    hostile::battery(
        "head_contributions", {"X", "W"},
        [](const Matrix& x, const ch16::EncoderLayerWeights& w) { return ch16::head_contributions(x, w); }, X, W)
        .fits([](const Matrix& x, const ch16::EncoderLayerWeights& w) { return layer_fits(w, x.shape(1)); })
        .exempt("W.W_1 with", "head_contributions reads the attention's weights only")
        .exempt("W.W_2 with", "as W.W_1")
        .exempt("W.b_1 with", "as W.W_1")
        .exempt("W.b_2 with", "as W.W_1")
        .exempt("W.b_O with", "as W.W_1")
        .exempt("W.ln", "as W.W_1")
        .exempt("W.W_O with", "its columns are multiplied, not checked: a NaN there is a NaN contribution")
        .run();
    hostile::battery(
        "pool_kv_heads", {"W", "g"},
        [](const ch16::EncoderLayerWeights& w, std::size_t g) { return ch16::pool_kv_heads(w, g).W_K; }, W,
        std::size_t{1})
        .fits([](const ch16::EncoderLayerWeights& w, std::size_t g) {
          return layer_fits(w, w.W_Q.shape(1)) && g > 0 && w.heads % g == 0;
        })
        .non_finite_passes("a mean of weights: a NaN in them is a NaN in the pooled ones, checked where they are used")
        .run();
    hostile::battery(
        "encoder_layer_with", {"X", "W"},
        [](const Matrix& x, const ch16::EncoderLayerWeights& w) { return ch16::encoder_layer_with(x, w, kExact); }, X,
        W)
        .fits([](const Matrix& x, const ch16::EncoderLayerWeights& w) { return layer_fits(w, x.shape(1)); })
        .run();
    hostile::battery(
        "encoder_layer_packed", {"X", "starts", "W"},
        [](const Matrix& x, const std::vector<std::size_t>& s, const ch16::EncoderLayerWeights& w) {
          return ch16::encoder_layer_packed(x, s, w, kExact);
        },
        X, std::vector<std::size_t>{0, 2, 3}, W)
        .fits([](const Matrix& x, const std::vector<std::size_t>& s, const ch16::EncoderLayerWeights& w) {
          return layer_fits(w, x.shape(1)) && s.size() >= 2 && s.front() == 0 && s.back() == x.shape(0) &&
                 std::is_sorted(s.begin(), s.end());
        })
        .run();
    hostile::battery(
        "head_shares", {"A"}, [](const Matrix& a) { return ch16::head_shares(a).cls; },
        Matrix(xt::full_like(Matrix(xt::zeros<float>({3, 3})), 1.0f / 3.0f)))
        .fits([](const Matrix& a) { return a.shape(0) == a.shape(1) && a.shape(0) >= 2; })
        .exempt("A all", "half the entries are −1e20: negative weights, refused (fits cannot see values)")
        .run();
    hostile::battery(
        "mean_pool_normalized", {"H"}, [](const Matrix& h) { return ch16::mean_pool_normalized(h); }, X)
        .fits([](const Matrix& h) { return h.shape(0) >= 1; })
        .run();
  }

  TEST_CASE("the model's files, tokenizer and forward under the battery") {
    // hostile battery: SafetensorsFile, read_tensor, require_regular_file, dtype_bytes, find, write_safetensors
    // hostile battery: read_safetensors_header, MappedFile
    // hostile battery: load_vocab, utf8_length, basic_tokenize, wordpiece, tokenize, read_config, load_minilm
    // hostile battery: check_layer_count, read_reference, read_sentences, model_missing_reason, embed, encode
    // hostile battery: sentence_embedding, sentence_embedding_with, sentence_embeddings, embedding_projection_gradient
    // hostile battery: gradient_times_input, integrated_gradients
    const fs::path dir = tiny_model_dir();
    const hostile::Path weights{(dir / "model.safetensors").string()}, vocab_file{(dir / "vocab.txt").string()},
        config{(dir / "config.json").string()};
    const auto good_file = [&](const hostile::Path& p) { return p.path == weights.path; };
    hostile::battery(
        "SafetensorsFile", {"path"},
        [](const hostile::Path& p) { return ch16::SafetensorsFile(p.path).entries().size(); }, weights)
        .fits(good_file)
        .run();
    std::string file_bytes;  // the tiny model's file, as read_safetensors_header() reads it
    {
      std::ifstream in(weights.path, std::ios::binary);
      file_bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    hostile::battery(
        "read_safetensors_header", {"bytes|header|file|length|tensor|data_offsets|shape", "path"},
        [](const std::string& bytes, const std::string& path) {
          return ch16::read_safetensors_header(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), path)
              .entries.size();
        },
        file_bytes, std::string("tiny.safetensors"))
        .fits([&](const std::string& bytes, const std::string&) { return bytes == file_bytes; })
        .run();
    hostile::battery(
        "MappedFile", {"what", "path"},
        [](const std::string& what, const hostile::Path& p) { return ch16::MappedFile(what.c_str(), p.path).size(); },
        std::string("weights"), weights)
        .fits([](const std::string&, const hostile::Path& p) { return fs::is_regular_file(p.path); })
        .run();
    hostile::battery(
        "read_tensor", {"path", "name|tensor", "expected_shape|implies"},
        [](const hostile::Path& p, const std::string& name, const std::vector<std::size_t>& shape) {
          return ch16::read_tensor(ch16::SafetensorsFile(p.path), name, shape);
        },
        weights, std::string("encoder.layer.0.intermediate.dense.weight"), std::vector<std::size_t>{8, 4})
        .fits([&](const hostile::Path& p, const std::string& name, const std::vector<std::size_t>& shape) {
          return good_file(p) && name == "encoder.layer.0.intermediate.dense.weight" &&
                 shape == std::vector<std::size_t>{8, 4};
        })
        .run();
    hostile::battery(
        "require_regular_file", {"what", "path"},
        [](const std::string& what, const hostile::Path& p) { ch16::require_regular_file(what.c_str(), p.path); },
        std::string("weights"), weights)
        .fits([](const std::string&, const hostile::Path&) { return true; })  // any file is a regular file here
        .run();
    hostile::battery(
        "dtype_bytes", {"dtype"}, [](const std::string& t) { return ch16::dtype_bytes(t); }, std::string("F32"))
        .run();
    hostile::battery(
        "find", {"name"}, [&](const std::string& n) { return ch16::SafetensorsFile(weights.path).find(n) != nullptr; },
        std::string("embeddings.LayerNorm.bias"))
        .run();
    hostile::battery(
        "write_safetensors", {"name", "shape", "header_patch"},
        [](const std::string& name, const std::vector<std::size_t>& shape, const std::string& patch) {
          const std::string path = (temp_dir("write") / "t.safetensors").string();
          ch16::write_safetensors(path, {{name, {shape, std::vector<float>(6, 1.0f)}}}, patch);
        },
        std::string("w"), std::vector<std::size_t>{2, 3}, std::string())
        .fits([](const std::string& name, const std::vector<std::size_t>& shape, const std::string&) {
          if (name.find('\xff') != std::string::npos) return false;  // a JSON header's text is UTF-8
          std::size_t count = 1;
          for (std::size_t s : shape) count = s != 0 && count > 6 ? 7 : count * s;
          return count == 6;
        })
        .run();
    hostile::battery(
        "load_vocab", {"path"}, [](const hostile::Path& p) { return ch16::load_vocab(p.path).token_of.size(); },
        vocab_file)
        .fits([&](const hostile::Path& p) { return p.path == vocab_file.path; })
        .exempt("path lying",
                "its first line turned into 0x7f bytes: a vocabulary without [PAD], refused, or a valid "
                "one when the line was longer")
        .run();
    hostile::battery(
        "utf8_length", {"text"}, [](const std::string& t) { return ch16::utf8_length(t); }, std::string("猫 cat"))
        .fits([](const std::string& t) { return t.find('\xff') == std::string::npos; })
        .run();
    hostile::battery(
        "basic_tokenize", {"text"}, [](const std::string& t) { return ch16::basic_tokenize(t).size(); },
        std::string("The cat, 猫!"))
        .fits([](const std::string& t) { return t.find('\xff') == std::string::npos; })
        .run();
    attn::Rng rng(1652);
    const ch16::MiniLM m = tiny_model(rng);
    hostile::battery(
        "wordpiece", {"word"}, [&](const std::string& w) { return ch16::wordpiece(w, m.vocab); }, std::string("ab"))
        .fits([](const std::string& w) { return !w.empty() && w.find('\xff') == std::string::npos; })
        .run();
    hostile::battery(
        "tokenize", {"text", "max_tokens"},
        [&](const std::string& t, std::size_t max) { return ch16::tokenize(t, m.vocab, max); }, std::string("a b"),
        std::size_t{8})
        .fits([](const std::string& t, std::size_t max) { return max >= 2 && t.find('\xff') == std::string::npos; })
        .run();
    hostile::battery(
        "read_config", {"config"},
        [](const hostile::Path& p) { return ch16::read_config(model_dir_with("config.json", p.path)).d; }, config)
        .fits([&](const hostile::Path& p) { return p.path == config.path; })
        .exempt("config missing", "the copy of a missing file is no file: refused as missing, naming config.json")
        .exempt("config a FIFO", "the folder's copy of a FIFO is not made: refused as missing, naming config.json")
        .run();
    hostile::battery(
        "load_minilm", {"vocab|vocab.txt", "weights|model.safetensors"},
        [](const hostile::Path& v, const hostile::Path& w) {
          const std::string d = model_dir_with("vocab.txt", v.path);
          if (w.path != (tiny_model_dir() / "model.safetensors").string()) {
            fs::remove(fs::path(d) / "model.safetensors");
            if (fs::is_directory(w.path))
              fs::create_directories(fs::path(d) / "model.safetensors");
            else if (fs::exists(w.path))
              fs::copy_file(w.path, fs::path(d) / "model.safetensors");
          }
          return ch16::load_minilm(d).layers.size();
        },
        vocab_file, weights)
        .fits([&](const hostile::Path& v, const hostile::Path& w) {
          return v.path == vocab_file.path && w.path == weights.path;
        })
        .exempt("missing", "the folder's copy of a missing file is no file: refused as missing, naming it")
        .exempt("a FIFO", "the folder's copy of a FIFO is not made: refused as missing")
        .run();
    hostile::battery(
        "check_layer_count", {"path", "layers"},
        [](const hostile::Path& p, std::size_t layers) {
          ch16::check_layer_count(ch16::SafetensorsFile(p.path), layers);
        },
        weights, std::size_t{1})
        .fits([&](const hostile::Path& p, std::size_t layers) { return good_file(p) && layers >= 1; })
        .run();
    const fs::path text_dir = temp_dir("texts");
    write_text(text_dir / "reference.txt", "text: a b\nids: 2 4 5 3\nembedding: 0.5 -0.25 0.5 0.25\n");
    write_text(text_dir / "sentences.txt", "# a comment\na b\n\nb a\n");
    const hostile::Path reference{(text_dir / "reference.txt").string()},
        sentences{(text_dir / "sentences.txt").string()};
    hostile::battery(
        "read_reference", {"path"}, [](const hostile::Path& p) { return ch16::read_reference(p.path).size(); },
        reference)
        .exempt("path empty", "no texts: an empty list (answered)")
        .exempt("path truncated", "cut inside the ids line: a text without embedding, refused; or a shorter valid file")
        .exempt("path lying", "its first line broken: refused as a line before any text, or answered")
        .run();
    hostile::battery(
        "read_sentences", {"path"}, [](const hostile::Path& p) { return ch16::read_sentences(p.path).size(); },
        sentences)
        .fits([](const hostile::Path& p) {
          return p.path.find("missing") == std::string::npos && p.path.find("folder") == std::string::npos &&
                 p.path.find("fifo") == std::string::npos;
        })
        .run();
    hostile::battery(
        "model_missing_reason", {"dir"}, [](const std::string& d) { return ch16::model_missing_reason(d); },
        dir.string())
        .fits([](const std::string&) { return true; })  // any text: a reason, or none
        .run();
    hostile::battery(
        "embed", {"ids|tokens", "word", "position", "eps|ε"},
        [&](const std::vector<int>& ids, const Matrix& word, const Matrix& position, float eps) {
          return ch16::embed(ids, word, position, m.token_type, m.ln_gamma, m.ln_beta, eps);
        },
        std::vector<int>{2, 4, 3}, m.word, m.position, 1e-12f)
        .fits([](const std::vector<int>& ids, const Matrix& word, const Matrix& position, float eps) {
          bool ok = !ids.empty() && ids.size() <= position.shape(0) && position.shape(1) == word.shape(1) &&
                    word.shape(1) == 4 && eps > 0 && std::isfinite(eps);
          for (int id : ids) ok = ok && id >= 0 && static_cast<std::size_t>(id) < word.shape(0);
          return ok;
        })
        .exempt("position with", "its middle entry lies in a row past the 3 tokens, which embed() never reads")
        .exempt("with 3e38", "a token's embedding past float's range: LayerNorm's sums in double stay finite")
        .exempt("all ±1e20", "as with 3e38")
        .run();
    hostile::battery(
        "encode", {"ids|tokens", "keep|keep_head"},
        [&](const std::vector<int>& ids, const std::vector<bool>& keep) {
          return ch16::encode(m, ids, keep.empty() ? ch16::HeadMask{} : ch16::HeadMask{keep});
        },
        std::vector<int>{2, 4, 3}, std::vector<bool>{true, false})
        .fits([](const std::vector<int>& ids, const std::vector<bool>& keep) {
          bool ok = !ids.empty() && ids.size() <= 8 && (keep.empty() || keep.size() == 2);
          for (int id : ids) ok = ok && id >= 0 && id < 6;
          return ok;
        })
        .run();
    hostile::battery(
        "sentence_embedding", {"text"}, [&](const std::string& t) { return ch16::sentence_embedding(m, t); },
        std::string("a b"))
        .fits([](const std::string& t) { return t.find('\xff') == std::string::npos; })
        .run();
    hostile::battery(
        "sentence_embedding_with", {"text"},
        [&](const std::string& t) { return ch16::sentence_embedding_with(m, t, kExact); }, std::string("a b"))
        .fits([](const std::string& t) { return t.find('\xff') == std::string::npos; })
        .run();
    // hostile battery: FastMiniLM, embed_sentences, step_name
    hostile::battery(
        "FastMiniLM", {"layers|layer"},
        [&](const std::vector<ch16::EncoderLayerWeights>& l) {
          ch16::MiniLM changed = m;
          changed.layers = l;
          ch16::ForwardScratch scratch;
          return ch16::FastMiniLM(changed).embed_sentences({"a b"}, scratch).front();
        },
        m.layers)
        .fits([](const std::vector<ch16::EncoderLayerWeights>& layers) {
          bool ok = true;
          for (const auto& w : layers) ok = ok && layer_fits(w, 4);
          return ok;
        })
        .run();
    const ch16::FastMiniLM fast(m);
    hostile::battery(
        "embed_sentences", {"text"},
        [&](const std::string& t) {
          ch16::ForwardScratch scratch;
          return fast.embed_sentences({"b a", t}, scratch);
        },
        std::string("a b"))
        .fits([](const std::string& t) { return t.find('\xff') == std::string::npos; })
        .run();
    hostile::battery(
        "step_name", {"step"}, [](ch16::ForwardStep step) { return std::string(ch16::step_name(step)); },
        ch16::ForwardStep::qkv)
        .fits([](ch16::ForwardStep step) { return step < ch16::ForwardStep::count; })
        .run();
    hostile::battery(
        "sentence_embeddings", {"text"},
        [&](const std::string& t) {
          return ch16::sentence_embeddings(m, {"b a", t});
        },
        std::string("a b"))
        .fits([](const std::string& t) { return t.find('\xff') == std::string::npos; })
        .run();
    const Matrix X0 = rng.normal(3, 4);
    const Vector u{0.5f, -0.5f, 0.5f, 0.5f};
    const auto fits_gradient = [](const std::vector<ch16::EncoderLayerWeights>& layers, const Matrix& x,
                                  const Vector& v) {
      bool ok = x.shape(0) >= 1 && v.size() == x.shape(1);
      for (const auto& w : layers) ok = ok && layer_fits(w, x.shape(1));
      return ok;
    };
    hostile::battery(
        "embedding_projection_gradient", {"layers", "X0", "u"},
        [](const std::vector<ch16::EncoderLayerWeights>& l, const Matrix& x, const Vector& v) {
          return ch16::embedding_projection_gradient(l, x, v).dX0;
        },
        m.layers, X0, u)
        .fits(fits_gradient)
        .run();
    hostile::battery(
        "gradient_times_input", {"layers", "X0", "u"},
        [](const std::vector<ch16::EncoderLayerWeights>& l, const Matrix& x, const Vector& v) {
          return ch16::gradient_times_input(l, x, v);
        },
        m.layers, X0, u)
        .fits(fits_gradient)
        .run();
    hostile::battery(
        "integrated_gradients", {"X0", "baseline", "steps"},
        [&](const Matrix& x, const Matrix& b, std::size_t steps) {
          return ch16::integrated_gradients(m.layers, x, b, u, steps);
        },
        X0, Matrix(xt::zeros<float>({3, 4})), std::size_t{2})
        .fits([](const Matrix& x, const Matrix& b, std::size_t steps) {
          return x.shape(0) >= 1 && x.shape(1) == 4 && b.shape() == x.shape() && steps >= 1 && steps <= 10000;
        })
        .non_finite_passes("the baseline is not checked by contract: a NaN there is a NaN path (X0 is checked)")
        .exempt("X0 with", "X0 − baseline along the path: checked at each point by embedding_projection_gradient")
        .run();
  }
}

// The fast forward's kernels on the path in use (attn::vector_path()): ctest runs this program again with the other
// paths this machine has forced (ATTN_VECTOR_ISA, chapters/16_real_model/CMakeLists.txt).
TEST_SUITE("16_real_model: the fast forward's kernels on the path in use") {
  TEST_CASE("the packed product equals x·Wᵀ + b in float64, for every row block and a last single panel") {
    MESSAGE("the vector path in use: ", attn::vector_path_description());
    if (!ch16::detail::has_packed_gemm()) {
      CHECK_THROWS_NAMING(ch16::detail::packed_gemm(nullptr, 1, 1, nullptr, 16, nullptr, nullptr), std::logic_error,
                          "packed_gemm", attn::vector_path_name(attn::vector_path()));
      return;  // the fast forward keeps its weights transposed for OpenBLAS on this path
    }
    attn::Rng rng(1661);
    for (const std::size_t out : {16, 48, 64})  // 48: AVX-512's pair of panels and one panel alone
      for (const std::size_t in : {1, 37})
        for (const std::size_t n : {1, 2, 5, 6, 7, 11, 12, 13, 25}) {  // blocks of 6 (AVX2, NEON) and 12 (AVX-512)
          INFO("n = ", n, ", in = ", in, ", out = ", out);
          const Matrix W = rng.normal(out, in), X = rng.normal(n, in), b = rng.normal(1, out);
          // The documented layout, written here from its definition: output o is lane o % 16 of panel o / 16.
          std::vector<float> panels(out * in);
          for (std::size_t o = 0; o < out; ++o)
            for (std::size_t k = 0; k < in; ++k) panels[(o / 16) * in * 16 + k * 16 + o % 16] = W(o, k);
          Matrix Y = Matrix::from_shape({n, out});
          ch16::detail::packed_gemm(X.data(), n, in, panels.data(), out, b.data(), Y.data());
          double worst = 0.0;  // |error| / its bound
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t o = 0; o < out; ++o) {
              double want = b(0, o), size = std::fabs(b(0, o));
              for (std::size_t k = 0; k < in; ++k) {
                want += double(X(t, k)) * W(o, k);
                size += std::fabs(double(X(t, k)) * W(o, k));
              }
              // A sum of in + 1 float terms in any order, each step rounded once: |error| ≤ (in + 1)·2⁻²⁴·Σ|terms|.
              worst = std::max(worst, std::fabs(Y(t, o) - want) / (double(in + 1) * 0x1p-24 * size + 1e-30));
            }
          CHECK(worst <= 1.0);
        }
  }

  TEST_CASE("the vector GELU equals x·½·(1 + erf(x/√2)) in float64, within its erf formula's 1.5e-7") {
    std::vector<float> x;
    for (int i = -400; i <= 400; ++i) x.push_back(static_cast<float>(i) / 40.0f);  // −10 … 10 by 1/40
    for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f}) x.push_back(v);
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{17}, x.size()}) {  // partial vectors
      INFO("n = ", n);
      std::vector<float> y(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
      ch16::detail::gelu_vector(y.data(), n);
      double worst = 0.0;  // |error| / its bound
      for (std::size_t i = 0; i < n; ++i) {
        const double v = x[i], want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        // erf to 1.5e-7 by the formula, and a few float roundings of terms ≤ 1 (2.5e-7 in all); times ½|x|, and the
        // last products' rounding of the result.
        worst =
            std::max(worst, std::fabs(y[i] - want) / (0.5 * std::fabs(v) * 4e-7 + 0x1p-22 * std::fabs(want) + 1e-38));
      }
      CHECK(worst <= 1.0);
    }
  }

  TEST_CASE("the vector attention head equals the float64 oracle's softmax(QKᵀ/√d_k)V, padding keys masked") {
    REQUIRE(ch16::detail::attention_vector_fits(16));  // every path's vectors hold 16 floats or a divisor of 16
    REQUIRE(ch16::detail::attention_vector_fits(32));
    attn::Rng rng(1662);
    for (const std::size_t d_k : {16, 32})
      for (const std::size_t n : {1, 3, 16, 17, 40}) {
        INFO("n = ", n, ", d_k = ", d_k);
        const std::size_t heads = 2, d = heads * d_k, n16 = (n + 15) / 16 * 16;
        const Matrix qkv = rng.normal(n, 3 * d);  // Q | K | V
        Matrix out = Matrix::from_shape({n, d});
        std::vector<float> keys_t(d_k * n16, kNaN), scores(n16, kNaN);  // scratch: NaN, to show any read unwritten
        for (std::size_t h = 0; h < heads; ++h)
          ch16::detail::attend_head_vector(qkv.data(), n, d, d_k, h, out.data(), keys_t.data(), scores.data());
        for (std::size_t h = 0; h < heads; ++h) {
          attn::oracle::Mat Q(n, d_k), K(n, d_k), V(n, d_k);
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t c = 0; c < d_k; ++c) {
              Q(t, c) = qkv(t, h * d_k + c);
              K(t, c) = qkv(t, d + h * d_k + c);
              V(t, c) = qkv(t, 2 * d + h * d_k + c);
            }
          const attn::oracle::Mat want = attn::oracle::attention(Q, K, V);
          double worst = 0.0;
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t c = 0; c < d_k; ++c) worst = std::max(worst, std::fabs(out(t, h * d_k + c) - want(t, c)));
          // A score sums d_k products of normal entries (Σ|q_c·k_c| ≈ 0.64·d_k), rounded d_k times: off by about
          // √d_k·2⁻²⁴·0.64·d_k ≈ 7e-6 at d_k = 32 (4e-5 if every rounding went one way), 1.2e-6 after the 1/√d_k.
          // The weights move by that relatively, the output (a weighted mean of values of size ≤ 5) by ≲ 6e-6,
          // plus its own sum's rounding. Measured: 4.7e-7 at the worst.
          CHECK(worst < 1e-5);
        }
      }
  }
}
