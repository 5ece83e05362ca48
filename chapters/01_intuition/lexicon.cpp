// Chapter 01's hand-made language. Every number here is chosen by hand and explained; nothing is learned.
// Book page: book/01_intuition.md ("A language of eight features").
#include "01_intuition/lexicon.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn::ch01 {
namespace {

// The embedding dimensions; a word is the sum of the features it has.
enum Feature : std::size_t { kNoun, kAnimate, kHuman, kPlace, kAction, kState, kPronoun, kFunction, kFeatures };
// The key space: the features a word can advertise to others (state and function words have none).
enum Key : std::size_t { kKeyNoun, kKeyAnimate, kKeyHuman, kKeyPlace, kKeyAction, kKeyPronoun, kKeys };

struct Word {
  const char* text;
  std::vector<Feature> features;
};

// [lexicon]
// The article's sentences, tokenized as the article's table does, and their English twins.
const std::vector<Word>& words() {
  // clang-format off
  static const std::vector<Word> table{
      // 猫坐在垫子上，它很累 — the cat sat on the mat, it was tired
      {"猫", {kNoun, kAnimate}}, {"坐在", {kAction}}, {"垫子上", {kNoun, kPlace}}, {"它", {kPronoun}},
      {"很累", {kState}},
      {"the", {kFunction}}, {"cat", {kNoun, kAnimate}}, {"sat", {kAction}}, {"on", {kFunction}},
      {"mat", {kNoun, kPlace}}, {"it", {kPronoun}}, {"was", {kFunction}}, {"tired", {kState}},
      // 小明养了只猫，它很可爱 — Xiaoming has a cat, it is cute
      {"小明", {kNoun, kAnimate, kHuman}}, {"养了", {kAction}}, {"只", {kFunction}}, {"很可爱", {kState}},
      {"xiaoming", {kNoun, kAnimate, kHuman}}, {"has", {kAction}}, {"a", {kFunction}}, {"is", {kFunction}},
      {"cute", {kState}},
      // 那本书我读完了，它真的很棒 — I finished that book, it is really great
      {"那本", {kFunction}}, {"书", {kNoun}}, {"我", {kNoun, kAnimate, kHuman}}, {"读完了", {kAction}},
      {"真的", {kFunction}}, {"很棒", {kState}},
      {"i", {kNoun, kAnimate, kHuman}}, {"finished", {kAction}}, {"that", {kFunction}}, {"book", {kNoun}},
      {"really", {kFunction}}, {"great", {kState}},
  };
  // clang-format on
  return table;
}
// [lexicon]

const Word& lookup(const std::string& token) {
  for (const Word& w : words())
    if (token == w.text) return w;
  throw std::invalid_argument(
      fmt::format("unknown word '{}'; the words this chapter knows are: {}", token, fmt::join(vocabulary(), " ")));
}

}  // namespace

const std::vector<std::string>& feature_names() {
  static const std::vector<std::string> names{"noun",   "animate", "human",   "place",
                                              "action", "state",   "pronoun", "function"};
  return names;
}

const std::vector<std::string>& key_names() {
  static const std::vector<std::string> names{"noun", "animate", "human", "place", "action", "pronoun"};
  return names;
}

const std::vector<Sentence>& sentences() {
  static const std::vector<Sentence> all{
      {"zh-cat", {"猫", "坐在", "垫子上", "它", "很累"}, 3, 0},
      {"en-cat", {"the", "cat", "sat", "on", "the", "mat", "it", "was", "tired"}, 6, 1},
      {"zh-pet", {"小明", "养了", "只", "猫", "它", "很可爱"}, 4, 3},
      {"en-pet", {"xiaoming", "has", "a", "cat", "it", "is", "cute"}, 4, 3},
      {"zh-book", {"那本", "书", "我", "读完了", "它", "真的", "很棒"}, 4, 1},
      {"en-book", {"i", "finished", "that", "book", "it", "is", "really", "great"}, 4, 3},
  };
  return all;
}

std::vector<std::string> vocabulary() {
  std::vector<std::string> v;
  for (const Word& w : words()) v.emplace_back(w.text);
  return v;
}

std::vector<std::string> tokenize(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> tokens;
  for (std::string token; in >> token;) {
    // Lower-case ASCII only: multi-byte UTF-8 (the Chinese words) must pass through untouched.
    for (char& c : token)
      if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    lookup(token);
    tokens.push_back(token);
    if (tokens.size() > kMaxWords)
      throw std::invalid_argument(
          fmt::format("the sentence has more than {} words; give a shorter one (every table "
                      "and heat map prints one row per word)",
                      kMaxWords));
  }
  if (tokens.empty())
    throw std::invalid_argument("the sentence is empty; give space-separated words, e.g. \"猫 坐在 垫子上 它 很累\"");
  return tokens;
}

std::string sentence_problem(const std::string& text) {
  try {
    tokenize(text);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

std::optional<std::size_t> find_pronoun(const std::vector<std::string>& tokens) {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& f = lookup(tokens[i]).features;
    if (std::find(f.begin(), f.end(), kPronoun) != f.end()) return i;
  }
  return std::nullopt;
}

Matrix embed(const std::vector<std::string>& tokens) {
  Matrix X = xt::zeros<float>({tokens.size(), std::size_t{kFeatures}});  // (n, d_model)
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (Feature f : lookup(tokens[i]).features) X(i, f) = 1.0f;
  return X;
}

// [query_weights]
Matrix query_weights(const Vector& pronoun_query) {
  require(pronoun_query.size() == kKeys,
          fmt::format("query_weights: the pronoun's query is {} but the key space has d_k = {} dimensions ({})",
                      shape_str(pronoun_query), std::size_t{kKeys}, fmt::join(key_names(), ", ")));
  require_finite("query_weights", "pronoun_query", pronoun_query.data(), pronoun_query.size());
  Matrix W_Q = xt::zeros<float>({std::size_t{kFeatures}, std::size_t{kKeys}});  // (d_model, d_k)
  // Each row: what a word with that feature looks for. A word's query is the sum of its features' rows.
  W_Q(kNoun, kKeyAction) = 3;     // a noun asks: what is being done?
  W_Q(kAction, kKeyAnimate) = 3;  // a verb asks: who does it,
  W_Q(kAction, kKeyPlace) = 3;    //   and where?
  W_Q(kPlace, kKeyPlace) = 6;     // a place looks at places (itself) first
  W_Q(kState, kKeyPronoun) = 6;   // "tired" asks: who is? a pronoun first,
  W_Q(kState, kKeyAnimate) = 3;   //   else a living thing
  W_Q(kFunction, kKeyNoun) = 3;   // "the", "a", 只 ask for their noun
  // 它 asks what the learner designed (attn::design_pronoun_query()).
  xt::row(W_Q, kPronoun) = pronoun_query;
  return W_Q;
}
// [query_weights]

Matrix key_weights() {
  Matrix W_K = xt::zeros<float>({std::size_t{kFeatures}, std::size_t{kKeys}});  // (d_model, d_k)
  W_K(kNoun, kKeyNoun) = 1;
  W_K(kAnimate, kKeyAnimate) = 1;
  W_K(kHuman, kKeyHuman) = 1;
  W_K(kPlace, kKeyPlace) = 1;
  W_K(kAction, kKeyAction) = 1;
  W_K(kPronoun, kKeyPronoun) = 1;
  return W_K;
}

Matrix value_weights() { return xt::eye<float>(std::size_t{kFeatures}); }

}  // namespace attn::ch01
