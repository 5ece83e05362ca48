// Chapter 16's basic tokenization, as the tokenizer the model ships with does it (its tokenizer.json, run by
// Hugging Face's tokenizers): clean, split CJK, split at whitespace, strip accents, lower-case, split at
// punctuation. ICU supplies the Unicode tables: character categories and ages, White_Space, full lower-casing and
// the NFD decomposition that separates accents from their letters. Where that tokenizer differs from the original
// BERT one (categories of Unicode 8.0, lower-casing one character at a time, its CJK range), this follows it:
// the ids are the model's. chapters/16_real_model/record_tokenizer.py compares the two on every code point.
#include "16_real_model/tokenizer.hpp"

#include "16_real_model/safetensors.hpp"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace attn::ch16 {

namespace {

// The code points of UTF-8 \p text; std::invalid_argument at the first ill-formed byte.
std::u32string decode(const std::string& text) {
  std::u32string out;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  if (text.size() > static_cast<std::size_t>(INT32_MAX))
    throw std::invalid_argument(fmt::format("text of {} bytes is longer than the tokenizer accepts", text.size()));
  for (int32_t i = 0; i < length;) {
    const int32_t at = i;
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    if (c < 0) throw std::invalid_argument(fmt::format("text is not valid UTF-8 (byte {} of {})", at, length));
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

std::string encode(const std::u32string& cps) {
  std::string out;
  for (char32_t c : cps) {
    uint8_t buf[4];
    int32_t n = 0;
    U8_APPEND_UNSAFE(buf, n, static_cast<UChar32>(c));  // c came from decode() or ICU: a valid code point
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
  }
  return out;
}

// The tokenizer the model ships with (its tokenizer.json, run by Hugging Face's tokenizers, which is what
// sentence-transformers runs) reads character categories from Unicode 8.0's tables. A code point those tables do
// not list — unassigned then (or still), like every emoji and punctuation mark added since — is an ordinary
// letter to it: kept, never split off, never stripped, so a word holding one is [UNK]. To give the same ids, the
// category here is the one Unicode 8.0 gave (ICU knows when each character was added), not today's.
UCharCategory category_in_unicode_8(char32_t c) {
  switch (c) {     // the characters whose category changed after Unicode 8.0 (planes 0–3), with their 8.0 one
    case 0x166D:   // CANADIAN SYLLABICS CHI SIGN: So since Unicode 12
    case 0x111C9:  // SHARADA SANDHI MARK: Mn since Unicode 10
      return U_OTHER_PUNCTUATION;
    case 0x1734:  // HANUNOO SIGN PAMUDPOD: Mc since Unicode 14
      return U_NON_SPACING_MARK;
    case 0x1885:  // MONGOLIAN LETTER ALI GALI BALUDA: Mn since Unicode 9
    case 0x1886:  // MONGOLIAN LETTER ALI GALI THREE BALUDA
      return U_OTHER_LETTER;
    case 0xA9BD:  // JAVANESE CONSONANT SIGN KERET: Mn since Unicode 12
      return U_COMBINING_SPACING_MARK;
    default:
      break;
  }
  const auto now = static_cast<UCharCategory>(u_charType(static_cast<UChar32>(c)));
  UVersionInfo age{};
  u_charAge(static_cast<UChar32>(c), age);
  const bool after_8 = age[0] > 8 || (age[0] == 8 && (age[1] > 0 || age[2] > 0));
  return now == U_UNASSIGNED || after_8 ? U_OTHER_LETTER : now;
}

// Unicode's White_Space property (with tab, newline and carriage return): the Zs spaces, but also U+2028 LINE
// SEPARATOR and U+2029 PARAGRAPH SEPARATOR (categories Zl and Zp), which separate words as a space does.
// (U+0085 NEXT LINE is White_Space too, but a control character, dropped before this is asked.)
bool is_whitespace(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' ||
         u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

// Control, format, private-use and surrogate code points (the "C" categories Unicode 8.0 lists), except the
// whitespace kept (tab, newline, carriage return). Unassigned ones are letters here (see above).
bool is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  switch (category_in_unicode_8(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return true;
    default:
      return false;
  }
}

// ASCII symbols count as punctuation too ($, +, ^, `, …), as in BERT, besides Unicode 8.0's "P" categories.
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (category_in_unicode_8(c)) {
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

// The CJK Unified Ideographs blocks split character by character (not Hangul, Hiragana or Katakana), as the
// shipped tokenizer has them: its range after Extension D starts at U+2B920, where the original BERT's starts at
// U+2B820 (so U+2B820 … U+2B91F stay inside their word, as there).
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Accents stripped (NFD, then the nonspacing marks of Unicode 8.0 dropped), then lower-cased one code point at a
// time with the full case mapping of the root locale, in the shipped tokenizer's order. One at a time: a capital
// sigma becomes σ even at the end of a word (ΟΔΟΣ → οδοσ), where lower-casing the whole word gives ς.
std::u32string lower_without_accents(const std::u32string& word) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  const icu::UnicodeString u =
      icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(word.data()), static_cast<int32_t>(word.size()));
  const icu::UnicodeString decomposed = nfd->normalize(u, status);
  if (U_FAILURE(status)) throw std::runtime_error(fmt::format("ICU's NFD failed: {}", u_errorName(status)));
  std::u32string out;
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    i += U16_LENGTH(c);
    if (category_in_unicode_8(static_cast<char32_t>(c)) == U_NON_SPACING_MARK) continue;
    icu::UnicodeString one(c);
    one.toLower(icu::Locale::getRoot());  // alone, so no context: no final sigma
    for (int32_t k = 0; k < one.length();) {
      const UChar32 lower = one.char32At(k);
      k += U16_LENGTH(lower);
      out.push_back(static_cast<char32_t>(lower));
    }
  }
  return out;
}

}  // namespace

int Vocab::find(const std::string& token) const {
  const auto it = id_of.find(token);
  return it == id_of.end() ? -1 : it->second;
}

Vocab load_vocab(const std::string& path) {
  require_regular_file("vocabulary", path);  // a folder would read as empty, a FIFO would block
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("vocabulary {}: cannot read it", path));
  Vocab v;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int id = static_cast<int>(v.token_of.size());
    if (!v.id_of.emplace(line, id).second)
      throw std::invalid_argument(fmt::format("vocabulary {}: token '{}' appears twice (line {})", path, line, id + 1));
    v.token_of.push_back(line);
  }
  if (v.token_of.empty()) throw std::invalid_argument(fmt::format("vocabulary {}: empty", path));
  v.unk = v.find("[UNK]");
  v.cls = v.find("[CLS]");
  v.sep = v.find("[SEP]");
  v.pad = v.find("[PAD]");
  if (v.unk < 0 || v.cls < 0 || v.sep < 0 || v.pad < 0)
    throw std::invalid_argument(fmt::format("vocabulary {}: lacks one of [UNK], [CLS], [SEP], [PAD]", path));
  return v;
}

std::size_t utf8_length(const std::string& text) { return decode(text).size(); }

// [basic_tokenize]
std::vector<std::string> basic_tokenize(const std::string& text) {
  // 1. Clean up and give every CJK ideograph spaces of its own: Chinese has no spaces between words, so
  //    BERT's vocabulary holds its characters one by one.
  std::u32string cleaned;
  for (char32_t c : decode(text)) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      cleaned.push_back(U' ');
    } else if (is_cjk(c)) {
      cleaned += {U' ', c, U' '};
    } else {
      cleaned.push_back(c);
    }
  }
  // 2. Split at whitespace; lower-case and strip accents per word; split at every punctuation mark.
  std::vector<std::string> words;
  std::u32string word;
  const auto flush = [&](std::u32string& w) {
    if (!w.empty()) words.push_back(encode(w));
    w.clear();
  };
  std::size_t i = 0;
  while (i < cleaned.size()) {
    while (i < cleaned.size() && cleaned[i] == U' ') ++i;
    std::u32string raw;
    while (i < cleaned.size() && cleaned[i] != U' ') raw.push_back(cleaned[i++]);
    for (char32_t c : lower_without_accents(raw)) {
      if (is_punctuation(c)) {
        flush(word);
        std::u32string mark(1, c);
        flush(mark);
      } else {
        word.push_back(c);
      }
    }
    flush(word);
  }
  return words;
}
// [basic_tokenize]

}  // namespace attn::ch16
