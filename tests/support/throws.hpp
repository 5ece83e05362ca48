/// \file
/// CHECK_THROWS_NAMING(expression, Exception, "item", ...): the expression throws Exception, and its message
/// names every item, the way a contract promises ("names the tensor and both shapes"), never its wording:
/// - a number ("3", "-1", "0.5", "4e+38") is found as a number token of the message: "3" is in "3 heads", "(2, 3)",
///   "[2, 3]" and "2x3", not in "33" or "3.5";
/// - a name ("v", "W_Q", "d_k", "ε") is found as a word: "v" is in "'v'" and "v (2, 3)", not in "vv" or "v2"; a
///   Greek letter also as its usual ASCII spelling, the parameter's name in code: "ε" is in "eps = 0" and
///   "epsilon 0", "γ" in "gamma (3)";
/// - anything else (a phrase with spaces or punctuation: "h = 3", "[2, 3]") is found as it is written, which
///   binds the test to the message's wording: an exercise test may do that only where its contract states the
///   wording verbatim (cmake/check_error_wording.py checks it).
/// Where doctest's CHECK_THROWS_WITH_AS reports a throw of the right type with other words as "threw a
/// DIFFERENT exception", this says what happened: the type was right, the message does not name 3.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <initializer_list>
#include <string>

namespace attn::test {

namespace detail {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_word_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         (static_cast<unsigned char>(c) >= 0x80);  // a byte of a UTF-8 letter (ε, γ, 猫) belongs to its word
}

/// A number as the contract gives it: digits, an optional leading '-', fraction and exponent ("4e+38").
inline bool is_number(const std::string& s) {
  std::size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  const auto digits = [&] {
    const std::size_t from = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    return i > from;
  };
  if (!digits()) return false;
  if (i < s.size() && s[i] == '.' && (++i, !digits())) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

/// A name: one word of letters, digits and '_' (or UTF-8 letters), not starting with a digit.
inline bool is_name(const std::string& s) {
  if (s.empty() || is_digit(s[0])) return false;
  for (const char c : s)
    if (!is_word_char(c)) return false;
  return true;
}

/// Whether \p message has the number \p number as a token: its digits not joined to more digits or to a
/// fraction on either side, and its sign (when it has one) not the end of a word ("x-1" is not -1).
inline bool names_number(const std::string& message, const std::string& number) {
  for (std::size_t at = message.find(number); at != std::string::npos; at = message.find(number, at + 1)) {
    const std::size_t end = at + number.size();
    const bool before_ok = at == 0 || !(is_digit(message[at - 1]) || message[at - 1] == '.' ||
                                        (number[0] != '-' && message[at - 1] == '-') ||
                                        (number[0] == '-' && is_word_char(message[at - 1])));
    const bool after_ok =
        end == message.size() ||
        !(is_digit(message[end]) || (message[end] == '.' && end + 1 < message.size() && is_digit(message[end + 1])));
    if (before_ok && after_ok) return true;
  }
  return false;
}

/// Whether \p message has \p name as a word (not part of a longer one).
inline bool names_word(const std::string& message, const std::string& name) {
  for (std::size_t at = message.find(name); at != std::string::npos; at = message.find(name, at + 1)) {
    const std::size_t end = at + name.size();
    if ((at == 0 || !is_word_char(message[at - 1])) && (end == message.size() || !is_word_char(message[end])))
      return true;
  }
  return false;
}

/// Whether \p message names the Greek letter \p letter by its usual ASCII spelling in code (ε as `eps` or
/// `epsilon`); false for any other item.
inline bool names_ascii_spelling(const std::string& message, const std::string& letter) {
  struct Spelling {
    const char* letter;
    const char* spelling;
  };
  static constexpr Spelling kSpellings[] = {{"ε", "eps"},   {"ε", "epsilon"}, {"α", "alpha"}, {"β", "beta"},
                                            {"γ", "gamma"}, {"λ", "lambda"},  {"μ", "mu"},    {"σ", "sigma"},
                                            {"τ", "tau"},   {"θ", "theta"}};
  for (const Spelling& s : kSpellings)
    if (letter == s.letter && names_word(message, s.spelling)) return true;
  return false;
}
}  // namespace detail

/// Whether \p message names \p item: a number as a number token, a name as a word (a Greek letter also as its
/// ASCII spelling), anything else verbatim.
inline bool message_names(const std::string& message, const std::string& item) {
  if (detail::is_number(item)) return detail::names_number(message, item);
  if (detail::is_name(item)) return detail::names_word(message, item) || detail::names_ascii_spelling(message, item);
  return message.find(item) != std::string::npos;
}

/// What CHECK_THROWS_NAMING found wrong with \p run, or "" when it threw \p Exception naming every item.
template <class Exception, class Run>
std::string throw_naming_failure(Run&& run, const char* expression, const char* type,
                                 std::initializer_list<const char*> items) {
  try {
    run();
  } catch (const Exception& e) {
    const std::string message = e.what();
    std::string missing;
    for (const char* item : items)
      if (!message_names(message, item)) missing += std::string(missing.empty() ? "" : ", ") + item;
    if (missing.empty()) return "";
    return std::string(expression) + " threw " + type + ", as it should, but the message does not name " + missing +
           ": " + message;
  } catch (const std::exception& e) {
    return std::string(expression) + " should throw " + type + ", but threw another exception: " + e.what();
  } catch (...) {
    return std::string(expression) + " should throw " + type + ", but threw something that is no std::exception";
  }
  return std::string(expression) + " should throw " + type + ", but returned normally";
}

}  // namespace attn::test

/// The expression throws Exception whose message names every item (string literals; see the file's comment).
#define CHECK_THROWS_NAMING(expression, Exception, ...)                                                   \
  do {                                                                                                    \
    const std::string attn_throw_failure_ = attn::test::throw_naming_failure<Exception>(                  \
        [&] { static_cast<void>(expression); }, #expression, #Exception, {__VA_ARGS__});                  \
    if (!attn_throw_failure_.empty()) DOCTEST_ADD_FAIL_CHECK_AT(__FILE__, __LINE__, attn_throw_failure_); \
  } while (false)
