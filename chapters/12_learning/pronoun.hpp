/// \file
/// Chapter 12's second task: the article's pronoun resolution, "小明 养了 只 猫 ， 它 是 → 猫", as a seeded
/// generator of sentences whose answer is the pronoun's antecedent. The words are chapter 01's (its three
/// Chinese sentences, tokenized as the article does), with a few more owners, animals, things and places of the
/// same kinds so that neither the answer nor its position is fixed. Book page: book/12_learning.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "attn/rng.hpp"

namespace attn::ch12 {

/// The pronoun task's words; a token is an index into this list.
const std::vector<std::string>& pronoun_vocabulary();

/// The words of \p tokens joined by spaces (for printing).
/// \throws std::invalid_argument naming the token when one is outside the vocabulary.
std::string pronoun_words(const std::vector<std::size_t>& tokens);

/// One sentence of the pronoun task.
struct PronounSequence {
  std::vector<std::size_t> tokens;   ///< (n) clauses joined by ， then ， 它 是
  std::vector<std::size_t> targets;  ///< (n) the antecedent at the last position (after 是), kIgnore elsewhere
  std::size_t antecedent = 0;        ///< position of the antecedent: the only animal or thing in the sentence
};

/// The longest sentence make_pronoun() draws (the model's context must reach it).
inline constexpr std::size_t kPronounMaxLength = 15;

/// One sentence: the clause that holds the antecedent — OWNER 养了 只 ANIMAL (chapter 01's 小明 养了 只 猫),
/// ANIMAL 坐在 PLACE (猫 坐在 垫子上) or 那本 THING OWNER 读完了 (那本 书 我 读完了) — and one or two
/// distractor clauses with only people and places (OWNER 坐在 PLACE, OWNER 很累), in a random order, joined
/// by ， and followed by ， 它 是. Every slot is drawn uniformly. The antecedent is the sentence's only animal
/// or thing; people and places are never the answer (它 is "it": not a person, and not where something sat),
/// so a model must read which word is of which kind, wherever it stands. 9 to 15 tokens.
PronounSequence make_pronoun(Rng& rng);

}  // namespace attn::ch12
