// Chapter 12's pronoun task: sentences from chapter 01's words whose answer is the pronoun's antecedent.
// What it demonstrates: a task where, as with induction, the data says which earlier token the answer comes
// from, so explanations can be scored. What it leaves out: real text (the sentences follow three templates).
// Book page: book/12_learning.md.
#include "12_learning/pronoun.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "12_learning/model.hpp"

namespace attn::ch12 {

namespace {

// [pronoun_words]
// The first word of each kind is chapter 01's (小明, 我: people; 猫: an animal; 书: a thing; 垫子上: a place).
const std::vector<std::string> kPeople{"小明", "我", "小红", "老王", "妈妈"};
const std::vector<std::string> kAnimals{"猫", "狗", "鸟", "兔子", "鱼"};
const std::vector<std::string> kThings{"书", "杂志", "小说"};
const std::vector<std::string> kPlaces{"垫子上", "桌子上", "床上", "椅子上"};
const std::vector<std::string> kGlue{"养了", "只", "坐在", "那本", "读完了", "很累", "，", "它", "是"};
// [pronoun_words]

std::size_t token_of(const std::string& word) {
  const std::vector<std::string>& v = pronoun_vocabulary();
  return static_cast<std::size_t>(std::distance(v.begin(), std::find(v.begin(), v.end(), word)));
}

/// A uniformly drawn word of \p kind, as a token.
std::size_t draw(const std::vector<std::string>& kind, Rng& rng) {
  std::uniform_int_distribution<std::size_t> pick(0, kind.size() - 1);
  return token_of(kind[pick(rng.engine())]);
}

}  // namespace

const std::vector<std::string>& pronoun_vocabulary() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> v;
    for (const auto* kind : {&kPeople, &kAnimals, &kThings, &kPlaces, &kGlue})
      v.insert(v.end(), kind->begin(), kind->end());
    return v;
  }();
  return all;
}

std::string pronoun_words(const std::vector<std::size_t>& tokens) {
  const std::vector<std::string>& v = pronoun_vocabulary();
  std::string out;
  for (std::size_t t : tokens) {
    require(t < v.size(), fmt::format("pronoun_words: token {} is outside the vocabulary 0 … {}", t, v.size() - 1));
    out += (out.empty() ? "" : " ") + v[t];
  }
  return out;
}

// [pronoun_task]
PronounSequence make_pronoun(Rng& rng) {
  const std::size_t pet = token_of("养了"), one = token_of("只"), sits = token_of("坐在"), that = token_of("那本");
  const std::size_t read = token_of("读完了"), tired = token_of("很累"), comma = token_of("，");
  std::uniform_int_distribution<int> pick3(0, 2), pick2(0, 1);
  // The clause that holds the antecedent (marked by its index in the clause), then the distractors.
  std::vector<std::vector<std::size_t>> clauses;
  std::size_t answer_in_clause = 0;
  switch (pick3(rng.engine())) {
    case 0:  // 小明 养了 只 猫
      clauses.push_back({draw(kPeople, rng), pet, one, draw(kAnimals, rng)});
      answer_in_clause = 3;
      break;
    case 1:  // 猫 坐在 垫子上
      clauses.push_back({draw(kAnimals, rng), sits, draw(kPlaces, rng)});
      answer_in_clause = 0;
      break;
    default:  // 那本 书 我 读完了
      clauses.push_back({that, draw(kThings, rng), draw(kPeople, rng), read});
      answer_in_clause = 1;
  }
  const std::size_t distractors = 1 + static_cast<std::size_t>(pick2(rng.engine()));
  for (std::size_t i = 0; i < distractors; ++i) {
    if (pick2(rng.engine()) == 0)
      clauses.push_back({draw(kPeople, rng), sits, draw(kPlaces, rng)});  // 小明 坐在 椅子上
    else
      clauses.push_back({draw(kPeople, rng), tired});  // 妈妈 很累
  }
  // Where the antecedent's clause goes among the others: any of the 1 + distractors places, uniformly.
  std::uniform_int_distribution<std::size_t> pick_slot(0, distractors);
  const std::size_t slot = pick_slot(rng.engine());
  std::rotate(clauses.begin(), clauses.begin() + 1, clauses.begin() + 1 + static_cast<std::ptrdiff_t>(slot));
  PronounSequence s;
  for (std::size_t c = 0; c < clauses.size(); ++c) {
    if (c > 0) s.tokens.push_back(comma);
    if (c == slot) s.antecedent = s.tokens.size() + answer_in_clause;
    s.tokens.insert(s.tokens.end(), clauses[c].begin(), clauses[c].end());
  }
  for (const char* word : {"，", "它", "是"}) s.tokens.push_back(token_of(word));
  s.targets.assign(s.tokens.size(), kIgnore);
  s.targets.back() = s.tokens[s.antecedent];  // after 它 是 comes what 它 is
  return s;
}
// [pronoun_task]

}  // namespace attn::ch12
