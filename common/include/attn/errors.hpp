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
      : std::logic_error(function + " is not implemented yet (exercises/" + chapter + "/).\n  Hint: " + hint +
                         "\n  Read: book/" + chapter + ".md    More hints: ./course hint " + chapter.substr(0, 2)),
        function_(function),
        chapter_(chapter) {}

  const std::string& function() const noexcept { return function_; }
  const std::string& chapter() const noexcept { return chapter_; }

 private:
  std::string function_;
  std::string chapter_;
};

}  // namespace attn
