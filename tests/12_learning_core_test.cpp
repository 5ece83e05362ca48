// Chapter 12's own code (no exercise in it), tested on the solution track only: the pronoun task's generator
// (its invariants, stated independently of it: which words are animals and things is written out here), a short
// training run on it, and attention flow (Boost.Graph's max-flow on hand-built layered graphs whose flow is known
// in closed form).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xnpy.hpp>

#include "12_learning/flow.hpp"
#include "12_learning/model.hpp"
#include "12_learning/model_backward.hpp"
#include "12_learning/pronoun.hpp"
#include "12_learning/train.hpp"
#include "attn/rng.hpp"
#include "support/allclose.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
namespace ch12 = attn::ch12;

/// What 它 ("it") can refer to: the animals and things, and nothing else (people and places cannot).
const std::set<std::string> kItCanBe{"猫", "狗", "鸟", "兔子", "鱼", "书", "杂志", "小说"};

/// Ã = ½·A + ½·I in float64, the capacity of the edge from j to i in the flow graph.
double mixed(const Matrix& A, std::size_t i, std::size_t j) {
  return 0.5 * static_cast<double>(A(i, j)) + (i == j ? 0.5 : 0.0);
}

/// A small model for the bad-input tests: vocabulary 10, d_model 8, 2 heads, context 8.
// vocab 10, d_model 8, 2 heads, context 8.
ch12::Config small_config(std::size_t layers) {
  ch12::Config c;
  c.vocab = 10;
  c.d_model = 8;
  c.heads = 2;
  c.layers = layers;
  c.context = 8;
  return c;
}

ch12::Model small_model(std::size_t layers, std::uint64_t seed) { return ch12::init_model(small_config(layers), seed); }

/// True when every parameter of \p m is zero (a backward that threw must leave the gradients so).
bool all_zero(const ch12::Model& m) {
  for (const Matrix* p : ch12::parameters(m))
    if (!xt::all(xt::equal(*p, 0.0f))) return false;
  return true;
}

/// Writes a version 1.0 .npy file by hand: \p header (the Python dict), padded as NumPy pads it, then \p data_bytes
/// zero bytes. For files whose header lies.
void write_npy(const std::filesystem::path& path, const std::string& header, std::size_t data_bytes) {
  std::string dict = header;
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write("\x93NUMPY\x01\x00", 8);
  const char length[2] = {static_cast<char>(dict.size() & 0xff), static_cast<char>(dict.size() >> 8)};
  out.write(length, 2);
  out << dict << std::string(data_bytes, '\0');
}

/// Causal (3, 3) attention with rows summing to 1, from the given lower-triangular entries.
Matrix causal3(float a10, float a20, float a21) {
  Matrix A = xt::zeros<float>({3, 3});
  A(0, 0) = 1.0f;
  A(1, 0) = a10;
  A(1, 1) = 1.0f - a10;
  A(2, 0) = a20;
  A(2, 1) = a21;
  A(2, 2) = 1.0f - a20 - a21;
  return A;
}

}  // namespace

TEST_SUITE("12_learning") {
  TEST_CASE("the pronoun task's answer is the sentence's only animal or thing, and follows 它 是 at the end") {
    attn::Rng rng(1203);
    const std::vector<std::string>& words = ch12::pronoun_vocabulary();
    for (int trial = 0; trial < 2000; ++trial) {
      const ch12::PronounSequence s = ch12::make_pronoun(rng);
      const std::size_t n = s.tokens.size();
      REQUIRE(n >= 9);
      REQUIRE(n <= ch12::kPronounMaxLength);
      REQUIRE(s.targets.size() == n);
      for (std::size_t t : s.tokens) REQUIRE(t < words.size());
      INFO("sentence: ", ch12::pronoun_words(s.tokens));
      CHECK(words[s.tokens[n - 3]] == "，");
      CHECK(words[s.tokens[n - 2]] == "它");
      CHECK(words[s.tokens[n - 1]] == "是");
      std::size_t referents = 0;  // tokens 它 could refer to
      for (std::size_t i = 0; i < n; ++i) referents += kItCanBe.count(words[s.tokens[i]]);
      CHECK(referents == 1);  // one answer, and nothing else it could be
      REQUIRE(s.antecedent + 3 < n);
      CHECK(kItCanBe.count(words[s.tokens[s.antecedent]]) == 1);
      for (std::size_t i = 0; i + 1 < n; ++i) CHECK(s.targets[i] == ch12::kIgnore);  // only the last row counts
      CHECK(s.targets[n - 1] == s.tokens[s.antecedent]);
    }
  }

  TEST_CASE("the pronoun task cannot be solved by position or by a fixed token: answers and their places vary") {
    attn::Rng rng(1204);
    const std::vector<std::string>& words = ch12::pronoun_vocabulary();
    const int trials = 4000;
    std::map<std::size_t, int> from_start, from_end;  // how often the answer stands at each offset
    std::map<std::string, int> answers, people;
    std::set<std::size_t> lengths;
    for (int trial = 0; trial < trials; ++trial) {
      const ch12::PronounSequence s = ch12::make_pronoun(rng);
      ++from_start[s.antecedent];
      ++from_end[s.tokens.size() - s.antecedent];
      ++answers[words[s.tokens[s.antecedent]]];
      lengths.insert(s.tokens.size());
      for (std::size_t t : s.tokens)
        if (words[t] == "小明" || words[t] == "我" || words[t] == "小红" || words[t] == "老王" || words[t] == "妈妈")
          ++people[words[t]];
    }
    auto largest = [](const auto& counts) {
      int most = 0;
      for (const auto& kv : counts) most = std::max(most, kv.second);
      return most;
    };
    // A rule "copy the token at offset k" is right at most as often as the commonest offset: under half.
    INFO("commonest offset from the start: ", largest(from_start), " of ", trials);
    CHECK(largest(from_start) < trials / 2);
    INFO("commonest offset from the end: ", largest(from_end), " of ", trials);
    CHECK(largest(from_end) < trials / 2);
    // Always answering one word is right at most as often as the commonest answer: 8 answers, none above 1/4.
    CHECK(answers.size() == kItCanBe.size());
    CHECK(largest(answers) < trials / 4);
    CHECK(people.size() == 5);           // every owner occurs
    CHECK(lengths.size() == 7);          // 9 … 15 tokens
    attn::Rng again(1204), twice(1204);  // and a seed fixes the sentences
    CHECK(ch12::make_pronoun(again).tokens == ch12::make_pronoun(twice).tokens);
  }

  TEST_CASE("the pronoun task's words print, and a token outside them is refused by name") {
    const std::vector<std::string>& words = ch12::pronoun_vocabulary();
    std::vector<std::size_t> seed_sentence;  // the seed's 小明 养了 只 猫 ， 它 是
    for (const char* w : {"小明", "养了", "只", "猫", "，", "它", "是"})
      seed_sentence.push_back(static_cast<std::size_t>(std::find(words.begin(), words.end(), w) - words.begin()));
    CHECK(ch12::pronoun_words(seed_sentence) == "小明 养了 只 猫 ， 它 是");
    CHECK_THROWS_WITH_AS(ch12::pronoun_words({0, words.size()}),
                         doctest::Contains(std::to_string(words.size()).c_str()), std::invalid_argument);
  }

  TEST_CASE("the model learns the pronoun task in 60 steps: from chance to at least 95 % of held-out sentences") {
    // The chapter's model and schedule, shortened: with this seed 60 steps of batch 16 already answer every
    // held-out sentence (`ch12_learning --pronoun-steps 60` prints the loss); 95 % leaves room for another
    // libm's rounding to change a few answers, and is far above what a model that has not learned scores.
    ch12::TrainSettings s;
    s.steps = 60;
    const ch12::Config c = ch12::pronoun_config();
    const double before = ch12::pronoun_accuracy(ch12::init_model(c, s.seed), 200, 99);
    INFO("untrained: ", before);
    CHECK(before < 0.3);  // about 1 in 26 words, at best 1 in 8 candidates
    const ch12::TrainResult r = ch12::train_pronoun(c, s);
    const double after = ch12::pronoun_accuracy(r.model, 200, 99);
    INFO("trained 60 steps: ", after, ", loss at the last step ", r.loss.back());
    CHECK(after >= 0.95);
  }

  TEST_CASE("attention flow through one layer is the edge itself: ½·A(i, j) + ½ on the diagonal") {
    if (!ch12::attention_flow_available()) {
      MESSAGE("skipped: this build has no Boost.Graph");
      return;
    }
    const Matrix A = causal3(0.25f, 0.5f, 0.125f);
    for (std::size_t i = 0; i < 3; ++i) {
      std::vector<double> expected(3, 0.0);
      for (std::size_t j = 0; j <= i; ++j) expected[j] = mixed(A, i, j);
      // Halves, quarters and eighths: exact in float32 and float64, and the max-flow adds nothing to them.
      CHECK_ALLCLOSE(ch12::attention_flow({A}, i), expected, 0.0, 0.0);
    }
  }

  TEST_CASE("attention flow through two layers is Σ_k min(Ã1(k, j), Ã2(i, k)), not rollout's Σ_k Ã2(i, k)·Ã1(k, j)") {
    if (!ch12::attention_flow_available()) {
      MESSAGE("skipped: this build has no Boost.Graph");
      return;
    }
    // With one middle layer, every path from input j to output i is j → k → i through its own middle node k,
    // and the paths share no edge: the max-flow is the sum of the paths' narrowest edges.
    const Matrix A1 = causal3(0.9f, 0.7f, 0.2f), A2 = causal3(0.3f, 0.05f, 0.6f);  // (3, 3) each
    for (std::size_t i = 0; i < 3; ++i) {
      std::vector<double> flow(3, 0.0), rollout(3, 0.0);
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < 3; ++k) {
          flow[j] += std::min(mixed(A1, k, j), mixed(A2, i, k));
          rollout[j] += mixed(A2, i, k) * mixed(A1, k, j);
        }
      INFO("position ", i);
      // Capacities are float32 weights halved (exact in float64); Edmonds–Karp adds and subtracts them in
      // float64 (error ~1e-16), and the result is rounded once to float32: 2^-24 relative, 1e-7 absolute.
      const attn::Vector got = ch12::attention_flow({A1, A2}, i);
      CHECK_ALLCLOSE(got, flow, 1e-7, 1e-7);
      if (i == 2) {
        // Here the two readings disagree: flow counts each path's narrowest edge, rollout its product.
        INFO("rollout ", rollout[0], " ", rollout[1], " ", rollout[2]);
        CHECK(std::abs(static_cast<double>(got(1)) - rollout[1]) > 0.05);
      }
    }
  }

  TEST_CASE("attention flow refuses no layers, mismatched shapes, negative weights and a position past the end") {
    const Matrix A = causal3(0.5f, 0.25f, 0.25f);
    CHECK_THROWS_AS(ch12::attention_flow({}, 0), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch12::attention_flow({A, Matrix(xt::zeros<float>({2, 2}))}, 0), doctest::Contains("(2, 2)"),
                         std::invalid_argument);
    Matrix negative = A;
    negative(2, 1) = -0.25f;
    CHECK_THROWS_AS(ch12::attention_flow({A, negative}, 0), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch12::attention_flow({A}, 3), doctest::Contains("position 3"), std::invalid_argument);
  }

  TEST_CASE("a checkpoint saved as .npy files loads back bit for bit, and a missing or misshapen file is named") {
    ch12::Config c;
    c.vocab = 11;
    c.d_model = 8;
    c.heads = 2;
    c.layers = 2;
    c.context = 9;
    c.rope_base = 500.0f;
    const ch12::Model model = ch12::init_model(c, 29);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("attn_ch12_checkpoint_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    ch12::save_checkpoint(model, dir.string());
    const ch12::Model loaded = ch12::load_checkpoint(dir.string());
    CHECK(loaded.config.vocab == 11);
    CHECK(loaded.config.d_model == 8);
    CHECK(loaded.config.heads == 2);
    CHECK(loaded.config.layers == 2);
    CHECK(loaded.config.context == 9);
    CHECK(loaded.config.rope_base == 500.0f);
    const auto before = ch12::parameters(model), after = ch12::parameters(loaded);
    REQUIRE(before.size() == after.size());
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(*before[i] == *after[i]);  // bit for bit
    const std::vector<std::size_t> tokens{3, 1, 4, 1, 5, 9, 2, 6};
    CHECK(ch12::forward(loaded, tokens).logits == ch12::forward(model, tokens).logits);
    // A file whose shape does not fit the configuration, then a missing one: each named.
    xt::dump_npy((dir / "layer2_W_V.npy").string(), Matrix(xt::zeros<float>({8, 7})));
    CHECK_THROWS_WITH_AS(ch12::load_checkpoint(dir.string()), doctest::Contains("layer2_W_V.npy is (8, 7)"),
                         std::invalid_argument);
    std::filesystem::remove(dir / "unembed.npy");
    xt::dump_npy((dir / "layer2_W_V.npy").string(), model.layers[1].W_V);
    CHECK_THROWS_WITH_AS(ch12::load_checkpoint(dir.string()), doctest::Contains("unembed.npy is missing"),
                         std::invalid_argument);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE(
      "backward refuses token ids outside the vocabulary and a token count other than the trace's rows, "
      "leaving the gradients untouched") {
    const ch12::Model model = small_model(2, 31);
    const std::vector<std::size_t> tokens{1, 2, 3};
    const ch12::Trace tr = ch12::forward(model, tokens);
    const Matrix dlogits = xt::ones<float>({3, 10});  // (n, vocab)
    ch12::Model grads = ch12::zeros_like(model);
    CHECK_THROWS_WITH_AS(ch12::backward(model, tr, dlogits, {1, 2, 1000000}, grads),
                         doctest::Contains("token 1000000 at position 2"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch12::backward(model, tr, dlogits, std::vector<std::size_t>(5000, 1), grads),
                         doctest::Contains("5000 tokens for a trace of 3 positions"), std::invalid_argument);
    Matrix nan = dlogits;
    nan(1, 4) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(ch12::backward(model, tr, nan, tokens, grads), doctest::Contains("dlogits[14]"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch12::backward(model, tr, dlogits, tokens, grads, {{true, true}}),
                         doctest::Contains("head mask has 1 layers"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch12::backward(model, tr, dlogits, tokens, grads, {{true, true}, {true}}),
                         doctest::Contains("1 heads in layer 2"), std::invalid_argument);
    CHECK(all_zero(grads));
  }

  TEST_CASE("backward refuses gradients or a trace of a 1-layer model for a 2-layer model") {
    const ch12::Model two = small_model(2, 32), one = small_model(1, 33);
    const std::vector<std::size_t> tokens{4, 5, 6, 7};
    const Matrix dlogits = xt::ones<float>({4, 10});  // (n, vocab)
    ch12::Model small_grads = ch12::zeros_like(one);
    CHECK_THROWS_WITH_AS(ch12::backward(two, ch12::forward(two, tokens), dlogits, tokens, small_grads),
                         doctest::Contains("the gradients have 1 layers"), std::invalid_argument);
    CHECK(all_zero(small_grads));
    ch12::Model grads = ch12::zeros_like(two);
    CHECK_THROWS_WITH_AS(ch12::backward(two, ch12::forward(one, tokens), dlogits, tokens, grads),
                         doctest::Contains("the trace is not one of this model"), std::invalid_argument);
    CHECK(all_zero(grads));
  }

  TEST_CASE(
      "the backward's own checks, called alone: a trace of another model, NaN dlogits, gradients of the "
      "wrong shapes") {
    // bad input answered: same_shapes
    const ch12::Model two = small_model(2, 36), one = small_model(1, 37);
    CHECK(ch12::same_shapes(two, ch12::zeros_like(two)));
    CHECK_FALSE(ch12::same_shapes(two, one));
    const std::vector<std::size_t> tokens{4, 5, 6};
    const ch12::Trace tr = ch12::forward(two, tokens);
    CHECK_THROWS_WITH_AS(ch12::require_trace("here", two, ch12::forward(one, tokens)), doctest::Contains("here"),
                         std::invalid_argument);
    CHECK_NOTHROW(ch12::require_trace("here", two, tr));
    Matrix dlogits = xt::ones<float>({3, 10});  // (n, vocab)
    CHECK_NOTHROW(ch12::require_backward_inputs(two, tr, dlogits, tokens, ch12::zeros_like(two), {}));
    CHECK_THROWS_AS(ch12::require_backward_inputs(two, tr, dlogits, tokens, ch12::zeros_like(one), {}),
                    std::invalid_argument);
    dlogits(2, 3) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(ch12::require_backward_inputs(two, tr, dlogits, tokens, ch12::zeros_like(two), {}),
                    std::invalid_argument);
  }

  TEST_CASE("the model refuses sizes that overflow or cannot fit, a NaN input, a bad head mask and endless steps") {
    ch12::Config c;
    c.vocab = c.d_model = std::size_t{1} << 32;  // 2^32 × 2^32 floats wrap 64 bits
    c.heads = 2;
    CHECK_THROWS_WITH_AS(ch12::init_model(c, 1), doctest::Contains("init_model"), std::invalid_argument);
    c.vocab = std::size_t{1} << 40;  // 2^41 · 8 floats: 64 TiB
    c.d_model = 8;
    CHECK_THROWS_WITH_AS(ch12::init_model(c, 1), doctest::Contains("available"), std::invalid_argument);
    c.vocab = 10;
    c.rope_base = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(ch12::init_model(c, 1), doctest::Contains("rope_base"), std::invalid_argument);
    attn::Rng rng(34);
    CHECK_THROWS_WITH_AS(ch12::make_induction(8, std::size_t{1} << 40, rng), doctest::Contains("available"),
                         std::invalid_argument);
    const ch12::Model model = small_model(2, 35);
    const std::vector<std::size_t> tokens{1, 2, 3, 1};
    CHECK_THROWS_WITH_AS(ch12::integrated_gradients(model, tokens, 3, 2, std::numeric_limits<std::size_t>::max()),
                         doctest::Contains("steps = 18446744073709551615"), std::invalid_argument);
    Matrix X0 = ch12::embed_tokens(model, tokens);
    X0(2, 3) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH_AS(ch12::forward_embedded(model, X0), doctest::Contains("X0[19]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch12::forward(model, tokens, {{true, true}, {true, true, false}}),
                         doctest::Contains("3 heads in layer 2"), std::invalid_argument);
    CHECK_THROWS_AS(ch12::previous_token_score(Matrix(xt::zeros<float>({4, 1}))), std::invalid_argument);
    CHECK_THROWS_AS(ch12::accuracy(Matrix(xt::zeros<float>({3, 10})), {1, 2}), std::invalid_argument);
  }

  TEST_CASE("load_checkpoint refuses truncated, header-only, padded, misshapen and lying .npy files, naming each") {
    const ch12::Model model = small_model(2, 36);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("attn_ch12_bad_npy_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const auto fresh = [&] {
      std::filesystem::remove_all(dir);
      ch12::save_checkpoint(model, dir.string());
      REQUIRE(ch12::load_checkpoint(dir.string()).embed == model.embed);
    };
    const std::filesystem::path embed = dir / "embed.npy";
    const auto refused = [&](const char* what) {
      CAPTURE(what);
      CHECK_THROWS_WITH_AS(ch12::load_checkpoint(dir.string()), doctest::Contains(what), std::invalid_argument);
    };
    fresh();
    std::filesystem::resize_file(embed, std::filesystem::file_size(embed) - 10);  // truncated in the data
    refused("embed.npy holds 310 bytes of data where its header's shape (10, 8) needs 320");
    std::filesystem::resize_file(embed, 128);  // the header alone (xtensor pads it to 128 bytes)
    refused("embed.npy holds 0 bytes of data");
    std::filesystem::resize_file(embed, 20);  // cut inside the header
    refused("embed.npy ends inside its header");
    fresh();
    std::filesystem::resize_file(embed, std::filesystem::file_size(embed) + 4);  // something appended
    refused("embed.npy holds 324 bytes of data");
    // Headers that lie: a trillion rows, a negative size, sizes whose product wraps 64 bits; the data is 320 bytes.
    const std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': ";
    write_npy(embed, f4 + "(1000000000000, 8), }", 320);
    refused("embed.npy holds 320 bytes of data where its header's shape (1000000000000, 8) needs 32000000000000");
    write_npy(embed, f4 + "(-10, 8), }", 320);
    refused("embed.npy declares a shape entry of -10");
    write_npy(embed, f4 + "(4294967296, 4294967296), }", 320);
    refused("does not fit in 64 bits");
    write_npy(embed, "{'descr': '<f8', 'fortran_order': False, 'shape': (10, 8), }", 640);
    refused("embed.npy does not hold <f4 values");
    write_npy(embed, "{'descr': '<f4', 'fortran_order': True, 'shape': (10, 8), }", 320);
    refused("embed.npy is in Fortran order");
    write_npy(embed, f4 + "(10, 8), }", 320);  // an honest hand-written file loads
    CHECK(xt::all(xt::equal(ch12::load_checkpoint(dir.string()).embed, 0.0f)));
    // config.npy: a header claiming (2^32, 2^32), then sizes whose parameters cannot fit in memory.
    const std::filesystem::path config = dir / "config.npy";
    write_npy(config, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 48);
    refused("config.npy");
    const xt::xtensor<double, 1> huge{1e9, 1e9, 2.0, 2.0, 8.0, 10000.0};  // 2·10^18 floats of embedding alone
    xt::dump_npy(config.string(), huge);
    refused("the configuration in");
    const xt::xtensor<double, 1> five{10.0, 8.0, 2.0, 2.0, 8.0};
    xt::dump_npy(config.string(), five);
    refused("config.npy is (5,); the configuration in config.npy needs (6,)");
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("save_checkpoint never replaces a file it did not write: a folder of the user's is refused untouched") {
    const ch12::Model model = small_model(1, 37);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("attn_ch12_users_folder_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
      std::ofstream users(dir / "embed.npy");
      users << "the user's own file";
    }
    CHECK_THROWS_WITH_AS(ch12::save_checkpoint(model, dir.string()),
                         doctest::Contains("holds files this chapter did not write"), std::invalid_argument);
    std::ifstream back(dir / "embed.npy");
    std::string text;
    std::getline(back, text);
    CHECK(text == "the user's own file");
    CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
    // A file where the folder should be, and empty text, are refused too.
    CHECK_THROWS_WITH_AS(ch12::save_checkpoint(model, (dir / "embed.npy").string()),
                         doctest::Contains("is not a folder"), std::invalid_argument);
    CHECK_THROWS_AS(ch12::save_checkpoint(model, ""), std::invalid_argument);
    // A folder a checkpoint was written into is the chapter's: saving again replaces its files.
    std::filesystem::remove_all(dir);
    ch12::save_checkpoint(model, dir.string());
    const ch12::Model other = small_model(1, 38);
    ch12::save_checkpoint(other, dir.string());
    CHECK(ch12::load_checkpoint(dir.string()).embed == other.embed);
    std::filesystem::remove_all(dir);
  }
}

// Bad input, one case per function of model.hpp, pronoun.hpp and train.hpp that had none
// (cmake/check_bad_input.py). backward, rope_backward and train_step are left to issue 32's exercises.
TEST_SUITE("12_learning: bad input") {
  TEST_CASE("embed_tokens refuses no tokens, more than the context, a token past the vocabulary and an edited embed") {
    ch12::Model model = small_model(1, 1201);
    CHECK_THROWS_NAMING(ch12::embed_tokens(model, {}), std::invalid_argument, "0 tokens", "1 to 8");
    CHECK_THROWS_NAMING(ch12::embed_tokens(model, std::vector<std::size_t>(9, 1)), std::invalid_argument, "9 tokens");
    CHECK_THROWS_NAMING(ch12::embed_tokens(model, {1, 10}), std::invalid_argument, "token 10 at position 1");
    CHECK_THROWS_NAMING(ch12::embed_tokens(model, {1, ch12::kIgnore}), std::invalid_argument, "position 1");
    model.embed = xt::zeros<float>({3, 8});  // fewer rows than vocab = 10: token 5 was read past the end
    CHECK_THROWS_NAMING(ch12::embed_tokens(model, {5}), std::invalid_argument, "(3, 8)", "(10, 8)");
  }

  TEST_CASE("prepare_checkpoint_dir refuses empty text, a file, and a folder holding a file it did not write") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("attn_ch12_prepare_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    CHECK_THROWS_NAMING(ch12::prepare_checkpoint_dir(""), std::invalid_argument, "empty text");
    const fs::path file = dir / "notes.txt";
    std::ofstream(file) << "the user's";
    CHECK_THROWS_NAMING(ch12::prepare_checkpoint_dir(file.string()), std::invalid_argument, "not a folder");
    CHECK_THROWS_NAMING(ch12::prepare_checkpoint_dir(dir.string()), std::invalid_argument, "notes.txt");
    CHECK_FALSE(fs::exists(dir / ch12::kCheckpointMarker));  // nothing written into a refused folder
    std::ifstream in(file);
    std::string text;
    std::getline(in, text);
    CHECK(text == "the user's");
    fs::remove_all(dir);
  }

  TEST_CASE("training refuses a batch of no sequences and a bad config or length, before any step") {
    ch12::Config c = small_config(1);
    ch12::TrainSettings s;
    s.length = 8;
    s.steps = 2;
    s.batch = 0;  // a step of no sequences: cross_entropy of no rows, a zero gradient, a loss of 0 that means nothing
    CHECK_THROWS_NAMING(ch12::train_induction(c, s), std::invalid_argument, "batch = 0");
    CHECK_THROWS_NAMING(ch12::train_pronoun(ch12::pronoun_config(), s), std::invalid_argument, "batch = 0");
    CHECK_THROWS_NAMING(ch12::train(
                            c, s, [](attn::Rng& rng) { return ch12::make_induction(8, 10, rng); },
                            [](std::size_t, const ch12::Model&) {}),
                        std::invalid_argument, "batch = 0");
    s.batch = 1;
    s.length = 3;  // make_induction needs n ≥ 4
    CHECK_THROWS_AS(ch12::train_induction(c, s), std::invalid_argument);
    c.heads = 3;  // d_model = 8 is not a multiple of 3
    CHECK_THROWS_AS(ch12::train_induction(c, s), std::invalid_argument);
    ch12::TrainSettings zero_steps;
    zero_steps.steps = 0;
    zero_steps.length = 8;
    c.heads = 2;
    CHECK(ch12::train_induction(c, zero_steps).loss.empty());  // no steps: the fresh model, no losses
  }

  TEST_CASE("the accuracies refuse a count of 0 sequences (the mean of none was NaN) and a bad length") {
    const ch12::Model model = small_model(1, 1202);
    CHECK_THROWS_NAMING(ch12::induction_accuracy(model, 8, 0, 1), std::invalid_argument, "count = 0");
    CHECK_THROWS_NAMING(ch12::pronoun_accuracy(model, 0, 1), std::invalid_argument, "count = 0");
    CHECK_THROWS_NAMING(
        ch12::mean_accuracy(model, 0, 1, [](attn::Rng& rng) { return ch12::make_induction(8, 10, rng); }),
        std::invalid_argument, "count = 0");
    CHECK_THROWS_AS(ch12::induction_accuracy(model, 2, 1, 1), std::invalid_argument);  // n < 4
    CHECK_THROWS_AS(ch12::induction_accuracy(model, 9, 1, 1), std::invalid_argument);  // past the context of 8
    // The pronoun task's sentences need its vocabulary; this model's 10 tokens are too few.
    CHECK_THROWS_AS(ch12::pronoun_accuracy(model, 1, 1), std::invalid_argument);
  }
}

// What fuzzing found in chapter 12's checkpoint reader (tests/fuzz/fuzz_npy.cpp; the input is kept in
// tests/fuzz/regressions/npy/ and replayed by tests/fuzz/run.sh).
TEST_SUITE("12_learning: fuzzing regressions") {
  TEST_CASE("load_checkpoint refuses a .npy header that ends in spaces after 'descr':, naming the file") {
    // The value's position was npos, and std::string::compare threw std::out_of_range (an uncaught type).
    attn::ch12::Config c;
    c.vocab = 4;
    c.d_model = 2;
    c.heads = 1;
    c.layers = 1;
    c.context = 4;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("attn_ch12_fuzzed_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    attn::ch12::save_checkpoint(attn::ch12::init_model(c, 12), dir.string());
    std::string header = "{'descr':";
    header += std::string(64 - 10 - header.size(), ' ');  // 64 bytes with the prefix's 10; only spaces after the key
    std::ofstream(dir / "embed.npy", std::ios::binary)
        << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size()) << '\0' << header
        << std::string(32, '\0');
    CHECK_THROWS_WITH_AS(attn::ch12::load_checkpoint(dir.string()), doctest::Contains("embed.npy"),
                         std::invalid_argument);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("load_checkpoint refuses a .npy header that says 'shape' twice, which xtensor's reader reads otherwise") {
    // The header checked as (2, 4) read through xt::load_npy as more dimensions; assigned to a Matrix, they were
    // written past its two-entry shape and the model's destructor crashed (UBSan: a misaligned shared_ptr).
    attn::ch12::Config c;
    c.vocab = 4;
    c.d_model = 2;
    c.heads = 1;
    c.layers = 1;
    c.context = 4;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("attn_ch12_fuzzed_twice_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    attn::ch12::save_checkpoint(attn::ch12::init_model(c, 12), dir.string());
    const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }" + std::string(19, ' ') +
                               "alse, 'shape': (2, 4), }" + std::string(15, ' ') + "\n";  // 118 bytes, version 2.0
    REQUIRE(header.size() == 118);
    std::ofstream(dir / "unembed.npy", std::ios::binary)
        << std::string("\x93NUMPY\x02\x00", 8) << static_cast<char>(header.size()) << std::string(3, '\0') << header
        << std::string(32, '\0');
    CHECK_THROWS_WITH_AS(attn::ch12::load_checkpoint(dir.string()), doctest::Contains("unembed.npy"),
                         std::invalid_argument);
    std::filesystem::remove_all(dir);
  }
}
