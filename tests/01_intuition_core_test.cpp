// Chapter 01's lexicon on bad input (lexicon.hpp), on the solution track only (the exercise suites stay as they are).
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "01_intuition/lexicon.hpp"
#include "support/throws.hpp"

namespace ch01 = attn::ch01;

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("01_intuition: bad input") {
  TEST_CASE("tokenize and embed refuse an unknown word, listing the words they know; tokenize no words and too many") {
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
