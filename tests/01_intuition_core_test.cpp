// Chapter 01's lexicon on bad input (lexicon.hpp), on the solution track only (the exercise suites stay as they are).
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "01_intuition/lexicon.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace ch01 = attn::ch01;
namespace hostile = attn::test::hostile;

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("01_intuition: bad input") {
  TEST_CASE(
      "tokenize and embed refuse an unknown word, listing the words they know, and tokenize refuses no words and too "
      "many") {
    CHECK_THROWS_NAMING(ch01::tokenize("the dog sat"), std::invalid_argument, "unknown word 'dog'", "猫");
    CHECK_THROWS_NAMING(ch01::tokenize(""), std::invalid_argument, "empty");
    CHECK_THROWS_NAMING(ch01::tokenize("   "), std::invalid_argument, "empty");
    std::string long_text;
    for (std::size_t i = 0; i <= ch01::kMaxWords; ++i) long_text += "the ";
    CHECK_THROWS_NAMING(ch01::tokenize(long_text), std::invalid_argument, "more than 64 words");
    CHECK_THROWS_NAMING(ch01::embed({"猫", "dog"}), std::invalid_argument, "unknown word 'dog'");
    CHECK(ch01::embed({}).shape(0) == 0);  // no tokens: (0, d_model)
  }

  TEST_CASE("sentence_problem and find_pronoun answer bad sentences as their contract says") {
    // bad input answered: sentence_problem, find_pronoun
    CHECK(ch01::sentence_problem("the dog sat").find("unknown word 'dog'") != std::string::npos);
    CHECK(ch01::sentence_problem("").find("empty") != std::string::npos);
    CHECK(ch01::sentence_problem("the cat sat").empty());
    CHECK_FALSE(ch01::find_pronoun({}).has_value());
    CHECK_FALSE(ch01::find_pronoun({"the", "cat", "sat"}).has_value());
    CHECK_THROWS_AS(ch01::find_pronoun({"the", "dog"}), std::invalid_argument);
  }

  TEST_CASE("query_weights refuses a pronoun query of the wrong width, and a NaN or infinity in it") {
    const std::size_t d_k = ch01::key_names().size();
    CHECK_THROWS_NAMING(ch01::query_weights(attn::Vector(xt::zeros<float>({d_k + 1}))), std::invalid_argument,
                        "query_weights", "d_k");
    attn::Vector q = xt::zeros<float>({d_k});
    q(0) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(ch01::query_weights(q), std::invalid_argument, "query_weights", "pronoun_query");
    q(0) = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(ch01::query_weights(q), std::invalid_argument, "pronoun_query");
  }
}

// Every public function of the lexicon under the hostile-input battery (tests/support/hostile.hpp): each argument
// replaced in turn by its type's hostile values, each call refused naming what was wrong, or answered as the
// contract says.
TEST_SUITE("01_intuition: hostile battery") {
  TEST_CASE("the lexicon's functions under the battery") {
    // hostile battery: tokenize, sentence_problem, find_pronoun, embed, query_weights
    const auto known = [](const std::vector<std::string>& tokens) {
      const std::vector<std::string> vocabulary = ch01::vocabulary();
      for (const std::string& t : tokens)
        if (std::find(vocabulary.begin(), vocabulary.end(), t) == vocabulary.end()) return false;
      return true;
    };
    // A sentence's words, and every hostile string as a word: unknown, refused naming the word.
    hostile::battery(
        "tokenize", {"text|word|sentence"}, [](const std::string& t) { return ch01::tokenize(t); },
        std::string("the cat sat on the mat"))
        .fits([](const std::string& t) { return t == "the cat sat on the mat" || t == "cat"; })
        .answer([](const std::vector<std::string>& tokens, const std::string&) { return !tokens.empty(); })
        .run();
    hostile::battery(
        "sentence_problem", {"text"}, [](const std::string& t) { return ch01::sentence_problem(t); },
        std::string("the cat sat"))
        .answer([](const std::string& problem, const std::string& t) {
          // Every hostile string is a sentence tokenize() refuses: its problem is named, never "".
          return !problem.empty() && t != "the cat sat";
        })
        .run();
    hostile::battery(
        "find_pronoun", {"tokens|word"},
        [](const std::vector<std::string>& t) { return ch01::find_pronoun(t).value_or(99); },
        std::vector<std::string>{"the", "cat", "it"})
        .fits(known)
        .answer([](std::size_t at, const std::vector<std::string>& t) { return at == 99 || t[at] == "it"; })
        .run();
    hostile::battery(
        "embed", {"tokens|word"}, [](const std::vector<std::string>& t) { return ch01::embed(t); },
        std::vector<std::string>{"the", "cat", "it"})
        .fits(known)
        .answer([](const attn::Matrix& X, const std::vector<std::string>& t) {
          return X.shape(0) == t.size() && X.shape(1) == ch01::feature_names().size();
        })
        .run();
    hostile::battery(
        "query_weights", {"pronoun_query"}, [](const attn::Vector& q) { return ch01::query_weights(q); },
        attn::Vector{3.0f, 3.0f, -6.0f, 0.0f, 0.0f, -3.0f})
        .fits([](const attn::Vector& q) { return q.size() == ch01::key_names().size(); })
        .answer([](const attn::Matrix& W, const attn::Vector&) {
          return W.shape(0) == ch01::feature_names().size() && W.shape(1) == ch01::key_names().size();
        })
        .run();
  }
}
