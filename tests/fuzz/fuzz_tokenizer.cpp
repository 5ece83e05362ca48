// Chapter 16's tokenizer on any bytes: BERT's basic tokenization (ICU's tables, UTF-8 decoding) and the
// WordPiece step on every word it yields, with a small vocabulary of whole words, pieces and CJK characters.
#include <cstddef>
#include <cstdint>
#include <string>

#include "16_real_model/real_model.hpp"
#include "16_real_model/tokenizer.hpp"
#include "fuzz_file.hpp"

namespace {

const attn::ch16::Vocab& vocab() {
  static const attn::ch16::Vocab v = [] {
    attn::ch16::Vocab out;
    for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "##s", "##at", "c", "##a", "##t",
                          "\xe7\x8c\xab", "\xe5\xae\x83", ",", "."}) {
      out.id_of.emplace(t, static_cast<int>(out.token_of.size()));
      out.token_of.emplace_back(t);
    }
    out.pad = 0;
    out.unk = 1;
    out.cls = 2;
    out.sep = 3;
    return out;
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attn::fuzz::judge([&] {
    for (const std::string& word : attn::ch16::basic_tokenize(text)) {
      if (word.empty()) __builtin_trap();  // basic_tokenize() never yields an empty word
      if (attn::ch16::wordpiece(word, vocab()).empty()) __builtin_trap();  // ≥ 1 id per word
    }
  });
  return 0;
}
