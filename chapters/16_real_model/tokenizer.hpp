/// \file
/// Chapter 16's tokenizer, the part that is chapter code: the vocabulary and BERT's basic tokenization
/// (clean-up, CJK characters split, lower-casing, accent stripping, punctuation split), with ICU for the
/// Unicode tables. The WordPiece step that follows is an exercise (real_model.hpp's wordpiece()).
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace attn::ch16 {

/// vocab.txt: one token per line, its id the line's number (from 0).
struct Vocab {
  std::unordered_map<std::string, int> id_of;  ///< token → id
  std::vector<std::string> token_of;           ///< id → token
  int unk = -1, cls = -1, sep = -1, pad = -1;  ///< the special tokens' ids
  std::size_t max_word_chars = 100;            ///< longer words become [UNK] (BERT's max_input_chars_per_word)

  /// The id of \p token, or -1 when the vocabulary lacks it.
  int find(const std::string& token) const;
};

/// Reads vocab.txt. \throws std::runtime_error naming the file when it cannot be read or is not a regular file
/// (a folder, a FIFO: require_regular_file()); std::invalid_argument
/// when it is empty, repeats a token, or lacks [UNK], [CLS], [SEP] or [PAD].
Vocab load_vocab(const std::string& path);

/// The number of code points in valid UTF-8 \p text. \throws std::invalid_argument when it is not valid UTF-8.
std::size_t utf8_length(const std::string& text);

/// BERT's basic tokenization, as the reference tokenizer does it with do_lower_case: control characters
/// dropped, whitespace normalised, every CJK ideograph made a word of its own, lower-cased, accents removed
/// (NFD, combining marks dropped), then split at every punctuation character (kept as a word of its own).
/// \param text UTF-8.
/// \return the words, in order.
/// \throws std::invalid_argument when \p text is not valid UTF-8.
std::vector<std::string> basic_tokenize(const std::string& text);

}  // namespace attn::ch16
