/// \file
/// Chapter 01's tiny, hand-made language: words with named features, and weight matrices whose every
/// entry means something. Not an exercise: the chapter presents it, the learner reads it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::ch01 {

/// The names of the embedding's d_model = 8 dimensions: noun, animate, human, place, action, state,
/// pronoun, function.
const std::vector<std::string>& feature_names();

/// The names of the key space's d_k = 6 dimensions: noun, animate, human, place, action, pronoun.
const std::vector<std::string>& key_names();

/// One example sentence of the chapter, already split into tokens.
struct Sentence {
  std::string name;                 ///< "zh-cat", "en-cat", ...
  std::vector<std::string> tokens;  ///< the article's tokenization, e.g. 猫 坐在 垫子上 它 很累
  std::size_t pronoun;              ///< index of the pronoun (它 / it)
  std::size_t antecedent;           ///< index of what the pronoun refers to (猫 / cat / 书 / book)
};

/// The six sentences of the chapter: the article's three Chinese examples and their English twins.
const std::vector<Sentence>& sentences();

/// Every word the lexicon knows, in a fixed order.
std::vector<std::string> vocabulary();

/// The most words tokenize() accepts: every table and heat map of the chapters prints one row per word.
constexpr std::size_t kMaxWords = 64;

/// Splits \p text at spaces into known words (English is matched in lower case).
/// \throws std::invalid_argument naming the unknown word and listing the vocabulary, or when there are
///         no words or more than kMaxWords.
std::vector<std::string> tokenize(const std::string& text);

/// What tokenize() would refuse in \p text (its message), or "" when it accepts it: a command-line check for
/// --sentence, so a bad sentence is reported as the option's error before the chapter starts.
std::string sentence_problem(const std::string& text);

/// The index of the first pronoun (它 / it) in \p tokens, if there is one (none for no tokens, or none a pronoun).
/// \throws std::invalid_argument naming a token the lexicon does not know.
std::optional<std::size_t> find_pronoun(const std::vector<std::string>& tokens);

/// X: the embedding of \p tokens, one row of named features per token: (n, d_model); no tokens give (0, d_model).
/// \throws std::invalid_argument naming a token the lexicon does not know, listing the vocabulary.
Matrix embed(const std::vector<std::string>& tokens);

/// W_Q: (d_model, d_k). Row f says what a word with feature f looks for; the pronoun's row is
/// \p pronoun_query (d_k), the learner's design (attn::design_pronoun_query()).
/// \throws std::invalid_argument naming the shapes when pronoun_query is not (d_k), or naming its first NaN/Inf.
Matrix query_weights(const Vector& pronoun_query);

/// W_K: (d_model, d_k). Each word advertises its own features (state and function words advertise none).
Matrix key_weights();

/// W_V: (d_model, d_model), the identity: a word's value is its meaning, so the output of attention is a
/// blend of meanings that can be read feature by feature.
Matrix value_weights();

}  // namespace attn::ch01
