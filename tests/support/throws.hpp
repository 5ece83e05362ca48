/// \file
/// CHECK_THROWS_NAMING(expression, Exception, "word", ...): the expression throws Exception, and its message
/// names every word given: only what the contract promises the message names (a parameter, a shape, an
/// index), never wording of its own. Where doctest's CHECK_THROWS_WITH_AS reports a throw of the right type
/// with other words as "threw a DIFFERENT exception", this says what happened: the type was right, and
/// which of the words the message lacks, with the message itself.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <initializer_list>
#include <string>

namespace attn::test {

/// What CHECK_THROWS_NAMING found wrong with \p run, or "" when it threw \p Exception naming every word.
template <class Exception, class Run>
std::string throw_naming_failure(Run&& run, const char* expression, const char* type,
                                 std::initializer_list<const char*> words) {
  try {
    run();
  } catch (const Exception& e) {
    const std::string message = e.what();
    std::string missing;
    for (const char* word : words)
      if (message.find(word) == std::string::npos)
        missing += std::string(missing.empty() ? "" : ", ") + "\"" + word + "\"";
    if (missing.empty()) return "";
    return std::string(expression) + " threw " + type + ", as it should, but its message does not name " + missing +
           ":\n  \"" + message + "\"";
  } catch (const std::exception& e) {
    return std::string(expression) + " should throw " + type + ", but threw another exception: \"" + e.what() + "\"";
  } catch (...) {
    return std::string(expression) + " should throw " + type + ", but threw something that is no std::exception";
  }
  return std::string(expression) + " should throw " + type + ", but returned normally";
}

}  // namespace attn::test

/// The expression throws Exception whose message contains every one of the words (string literals).
#define CHECK_THROWS_NAMING(expression, Exception, ...)                                                   \
  do {                                                                                                    \
    const std::string attn_throw_failure_ = attn::test::throw_naming_failure<Exception>(                  \
        [&] { static_cast<void>(expression); }, #expression, #Exception, {__VA_ARGS__});                  \
    if (!attn_throw_failure_.empty()) DOCTEST_ADD_FAIL_CHECK_AT(__FILE__, __LINE__, attn_throw_failure_); \
  } while (false)
