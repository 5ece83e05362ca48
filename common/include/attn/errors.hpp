/// \file
/// attn::not_implemented: what every exercise skeleton throws until the learner writes it.
#pragma once

#include <stdexcept>
#include <string>

namespace attn {

/// Thrown by an exercise skeleton. Its message names the function, gives the hint that gets a learner
/// moving, and points at the book page and at `./course hint NN` for more; doctest prints it when the
/// exercise's tests fail, and a chapter executable prints it when it runs unfinished code.
class not_implemented : public std::logic_error {
 public:
  /// \param function  the contract function, e.g. "stable_softmax"
  /// \param chapter   the chapter stem, e.g. "01_intuition"
  /// \param hint      one or two sentences: the idea, not the answer
  not_implemented(const std::string& function, const std::string& chapter, const std::string& hint)
      : std::logic_error(function + " is not implemented yet (exercises/" + chapter + "/).\n" +
                         wrapped("  Hint: ", hint) + "\n  Read: book/" + chapter + ".md    More hints: ./course hint " +
                         chapter.substr(0, 2)),
        function_(function),
        chapter_(chapter) {}

  const std::string& function() const noexcept { return function_; }
  const std::string& chapter() const noexcept { return chapter_; }

 private:
  /// \p prefix then \p text, broken at spaces into lines of at most 100 columns (code points; the hints are
  /// not CJK), the continuations indented under the text: a program stopped here prints it as it is.
  static std::string wrapped(const std::string& prefix, const std::string& text) {
    const auto columns = [](const std::string& s) {
      std::size_t n = 0;
      for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // not a UTF-8 continuation
      return n;
    };
    const std::string indent(prefix.size(), ' ');
    std::string out = prefix, line, word;
    std::size_t used = prefix.size();
    for (std::size_t k = 0; k <= text.size(); ++k) {
      if (k < text.size() && text[k] != ' ' && text[k] != '\n') {
        word += text[k];
        continue;
      }
      if (word.empty()) continue;
      if (used > indent.size() && used + 1 + columns(word) > 100) {
        out += "\n" + indent;
        used = indent.size();
      } else if (used > indent.size()) {
        out += ' ';
        ++used;
      }
      out += word;
      used += columns(word);
      word.clear();
    }
    return out;
  }

  std::string function_;
  std::string chapter_;
};

}  // namespace attn
