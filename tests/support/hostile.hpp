/// \file
/// The hostile-input battery: every argument of a public function replaced in turn by the standard hostile values
/// of its type, each call judged by one rule. A function's test gives the battery a good call and the
/// contract's rule for which arguments fit; the battery does the rest:
///
///   - matrices, vectors, tensors and masks of shape 0 in each dimension, (1, 1), one row or column too many or too
///     few; NaN, ±∞ and finite values near float's limit in an entry, and every entry 1e20 (products past float);
///   - every weight of a struct (EncoderLayerWeights, NodeModel, …: hostile::Weights<T> names them) wrong in each
///     dimension in turn, and with a NaN;
///   - sizes 0, 1, 2^32, 2^63, SIZE_MAX, and every size argument 2^32 at once (their product wraps);
///   - floats NaN, ±∞, ±3e38, 0, 1, −1; strings empty, invalid UTF-8, 1 MB long, with a NUL inside;
///   - lists empty, one longer, one shorter, with SIZE_MAX, −1 or 2^63 in them; an enum value none of its own;
///   - paths (hostile::Path) missing, a folder, a FIFO (always refused), and empty, truncated to half, and lying (its
///     first 8 bytes changed: a safetensors header's length, a text's first line), judged by fits(). An unreadable
///     file is not made: the tests run as root in CI, where permissions do not stop a read.
///
/// Each call has one of three outcomes, and anything else fails the case, naming the variant:
///   - a refusal: std::invalid_argument (std::runtime_error too for a path) whose message names what was wrong (the
///     argument's name as a word, its shape, or its value), leaving every argument unchanged;
///   - an answer the contract defines: the rule (fits) says the input is valid, and the result holds no NaN
///     (from finite input) and passes the test's own check of it;
///   - a stated exemption (exempt(label, reason)): the call may do either, never crash or hang.
/// A crash is doctest's (the variant is in the case's context), a hang past kSeconds ends the program naming the
/// variant (SIGALRM), and an absurd allocation fails with std::bad_alloc under an address-space limit of the
/// memory in use + kHeadroomBytes (not under a sanitizer, whose shadow memory needs the address space).
/// A refusal made before any allocation is checked by that limit for the sizes that matter; a refusal after a
/// small allocation cannot be seen here.
///
/// ATTN_HOSTILE_REPORT=file appends one line per battery run: function, cases, refused, answered, exempt.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::test::hostile {

/// The longest a single hostile call may take before it counts as a hang.
inline constexpr unsigned kSeconds = 20;
/// The address space a hostile call may add beyond what the process held before it: 4 GiB.
inline constexpr rlim_t kHeadroomBytes = rlim_t{4} << 30;

/// A path argument: its variants are files, not strings. \p good is a real file of the kind the function reads.
struct Path {
  std::string path;
};

/// How a variant was made, which decides the rule that judges it.
enum class Kind {
  shape,       ///< a shape, a size, a scalar, a list, a string: valid when the test's fits() says so
  non_finite,  ///< NaN or ±∞ in a tensor's entry: refused when the contract promises finite input
  huge,        ///< finite entries near float's limit: refused, or answered without a NaN
  path,        ///< a file that is not what it should be: always refused
};

/// One hostile value of a type, with its label ("W_Q (3, 4)", "n = 2^63") for the failure messages.
template <class T>
struct Variant {
  std::string label;
  T value;
  Kind kind = Kind::shape;
  std::vector<std::string> names;  ///< words of which the refusal must name one (the shape, the value)
};

/// The weights of a struct, for "each dimension of every weight wrong in turn": specialise with
/// `static constexpr bool defined = true;` and a `template <class F> static void visit(T&, F&& f)` calling
/// f("W_Q", W.W_Q) for each Matrix and Vector member.
template <class T>
struct Weights {
  static constexpr bool defined = false;
};

namespace detail {

template <class T>
struct has_weights : std::bool_constant<Weights<T>::defined> {};

template <class T>
struct is_vector : std::false_type {};
template <class E, class A>
struct is_vector<std::vector<E, A>> : std::true_type {};

template <class T, class = void>
struct is_xtensor : std::false_type {};
template <class T>
struct is_xtensor<T,
                  std::void_t<typename T::shape_type, decltype(T::from_shape(std::declval<typename T::shape_type>()))>>
    : std::true_type {};

inline char current_case[512] = "";  // the variant being called, for the hang handler (no allocation there)

inline void on_hang(int) {
  const char head[] = "\nhostile battery: a call ran past its time limit (a hang): ";
  ssize_t ignored = ::write(2, head, sizeof head - 1);
  ignored = ::write(2, current_case, std::strlen(current_case));
  ignored = ::write(2, "\n", 1);
  static_cast<void>(ignored);
  ::_exit(70);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// The process's address space now, in bytes (/proc/self/statm's first field, in pages).
inline rlim_t address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  unsigned long long pages = 0;
  statm >> pages;
  return static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
}

/// While alive: the hang alarm is set, and (not under a sanitizer) the address space is limited.
class Guard {
 public:
  explicit Guard(const std::string& label) {
    std::snprintf(current_case, sizeof current_case, "%s", label.c_str());
    struct sigaction action {};
    action.sa_handler = on_hang;
    ::sigaction(SIGALRM, &action, &old_action_);
    ::alarm(kSeconds);
    if (!kSanitized && ::getrlimit(RLIMIT_AS, &old_limit_) == 0) {
      rlimit limited = old_limit_;
      limited.rlim_cur = std::min(old_limit_.rlim_max, address_space_bytes() + kHeadroomBytes);
      limited_ = ::setrlimit(RLIMIT_AS, &limited) == 0;
    }
  }
  ~Guard() {
    if (limited_) ::setrlimit(RLIMIT_AS, &old_limit_);
    ::alarm(0);
    ::sigaction(SIGALRM, &old_action_, nullptr);
    current_case[0] = '\0';
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  struct sigaction old_action_ {};
  rlimit old_limit_{};
  bool limited_ = false;
};

/// Whether \p word occurs in \p text as a word of its own (no letter, digit or '_' on either side).
inline bool names_word(const std::string& text, const std::string& word) {
  if (word.empty()) return false;
  const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool before = at == 0 || !is_word(text[at - 1]) || !is_word(word.front());
    const std::size_t end = at + word.size();
    const bool after = end == text.size() || !is_word(text[end]) || !is_word(word.back());
    if (before && after) return true;
  }
  return false;
}

// --- whether a result holds a NaN ----------------------------------------------------------------------------------

template <class T, class = void>
struct is_float_tensor : std::false_type {};
template <class T>
struct is_float_tensor<T, std::enable_if_t<is_xtensor<T>::value>>
    : std::bool_constant<std::is_floating_point_v<typename T::value_type>> {};

template <class T>
bool has_nan(const T& x) {
  if constexpr (is_float_tensor<T>::value) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::isnan(x.data()[i])) return true;
    return false;
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(x);
  } else if constexpr (has_weights<T>::value) {
    bool found = false;
    T copy = x;
    Weights<T>::visit(copy, [&](const char*, auto& w) { found = found || has_nan(w); });
    return found;
  } else {
    return false;  // a type the battery cannot look into: the test's own check judges it
  }
}

template <class T>
bool has_nan(const std::vector<T>& xs) {
  for (const T& x : xs)
    if (has_nan(x)) return true;
  return false;
}

// --- whether two values are the same (a refused call must leave its arguments so) ----------------------------------

template <class T, class = void>
struct has_equal : std::false_type {};
template <class T>
struct has_equal<T, std::void_t<decltype(std::declval<const T&>() == std::declval<const T&>())>> : std::true_type {};

template <class T, class A>
bool same(const std::vector<T, A>& a, const std::vector<T, A>& b);

template <class T>
bool same(const T& a, const T& b) {
  if constexpr (is_float_tensor<T>::value) {  // bitwise: NaN entries equal themselves
    return a.shape() == b.shape() &&
           (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0);
  } else if constexpr (has_weights<T>::value) {
    std::vector<Matrix> wa, wb;
    std::vector<Vector> va, vb;
    T ca = a, cb = b;
    Weights<T>::visit(ca, [&](const char*, auto& w) {
      if constexpr (std::is_same_v<std::decay_t<decltype(w)>, Matrix>)
        wa.push_back(w);
      else
        va.push_back(w);
    });
    Weights<T>::visit(cb, [&](const char*, auto& w) {
      if constexpr (std::is_same_v<std::decay_t<decltype(w)>, Matrix>)
        wb.push_back(w);
      else
        vb.push_back(w);
    });
    for (std::size_t i = 0; i < wa.size(); ++i)
      if (!same(wa[i], wb[i])) return false;
    for (std::size_t i = 0; i < va.size(); ++i)
      if (!same(va[i], vb[i])) return false;
    return true;
  } else if constexpr (has_equal<T>::value) {
    if constexpr (std::is_floating_point_v<T>)
      return std::memcmp(&a, &b, sizeof a) == 0;
    else
      return static_cast<bool>(a == b);
  } else {
    return true;  // not comparable here (a file, a functor): taken by const reference by every function
  }
}

template <class T, class A>
bool same(const std::vector<T, A>& a, const std::vector<T, A>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same<T>(a[i], b[i])) return false;
  return true;
}

}  // namespace detail

// --- the hostile values of each type -------------------------------------------------------------------------------

/// Fills a tensor of \p shape with standard normal values (fixed seed: the battery is deterministic).
template <class T>
T filled(const typename T::shape_type& shape) {
  T t = T::from_shape(shape);
  Rng rng(4747);
  const Matrix r = rng.normal(1, std::max<std::size_t>(t.size(), 1));
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<typename T::value_type>(r(0, i));
  return t;
}

/// The shapes of a tensor: every dimension 0, one more and one fewer in turn, and all dimensions 1.
template <class T>
std::vector<typename T::shape_type> hostile_shapes(const typename T::shape_type& good) {
  std::vector<typename T::shape_type> out;
  for (std::size_t k = 0; k < good.size(); ++k) {
    typename T::shape_type s = good;
    s[k] = 0;
    out.push_back(s);
    s[k] = good[k] + 1;
    out.push_back(s);
    if (good[k] > 1) {
      s[k] = good[k] - 1;
      out.push_back(s);
    }
  }
  typename T::shape_type ones = good;
  for (auto& d : ones) d = 1;
  if (ones != good) out.push_back(ones);
  return out;
}

inline std::string shape_words(const std::vector<std::size_t>& s) {
  std::string out = "(";
  for (std::size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + ")";
}

/// Shapes and values of a float tensor named \p name.
template <class T>
std::vector<Variant<T>> tensor_variants(const T& good, const std::string& name) {
  std::vector<Variant<T>> out;
  for (const auto& shape : hostile_shapes<T>(good.shape())) {
    const std::vector<std::size_t> s(shape.begin(), shape.end());
    out.push_back({name + " " + shape_words(s), filled<T>(shape), Kind::shape, {name, shape_words(s)}});
  }
  if (good.size() == 0) return out;
  const std::size_t mid = good.size() / 2;
  const auto with = [&](float v) {
    T t = good;
    t.data()[mid] = static_cast<typename T::value_type>(v);
    return t;
  };
  const float inf = std::numeric_limits<float>::infinity();
  out.push_back({name + " with a NaN", with(std::nanf("")), Kind::non_finite, {name, "nan"}});
  out.push_back({name + " with +inf", with(inf), Kind::non_finite, {name, "inf"}});
  out.push_back({name + " with -inf", with(-inf), Kind::non_finite, {name, "inf"}});
  out.push_back({name + " with 3e38", with(3e38f), Kind::huge, {name}});
  T all = good;
  for (std::size_t i = 0; i < all.size(); ++i) all.data()[i] = (i % 2 ? -1e20f : 1e20f);
  out.push_back({name + " all ±1e20", all, Kind::huge, {name}});
  return out;
}

inline std::string size_words(std::size_t v) {
  if (v == std::numeric_limits<std::size_t>::max()) return "18446744073709551615";
  return std::to_string(v);
}

/// The hostile values of \p good, an argument named \p name, by type.
template <class T>
std::vector<Variant<T>> variants(const T& good, const std::string& name) {
  using U = std::decay_t<T>;
  std::vector<Variant<T>> out;
  if constexpr (detail::is_float_tensor<U>::value) {
    return tensor_variants(good, name);
  } else if constexpr (detail::is_xtensor<U>::value) {  // a mask, a table of hops: its shapes, filled with 1
    for (const auto& shape : hostile_shapes<U>(good.shape())) {
      const std::vector<std::size_t> s(shape.begin(), shape.end());
      out.push_back(
          {name + " " + shape_words(s), U(shape, typename U::value_type(1)), Kind::shape, {name, shape_words(s)}});
    }
  } else if constexpr (std::is_same_v<U, bool>) {
    out.push_back({name + " = " + (good ? "false" : "true"), !good, Kind::shape, {name}});
  } else if constexpr (std::is_enum_v<U>) {
    out.push_back({name + " = 7 (no value of its type)", static_cast<U>(7), Kind::shape, {name, "7"}});
  } else if constexpr (std::is_same_v<U, std::size_t> || std::is_same_v<U, std::uint64_t>) {
    const std::size_t big = std::size_t{1} << 32, huge = std::size_t{1} << 63,
                      max = std::numeric_limits<std::size_t>::max();
    for (const auto& [label, v] : std::vector<std::pair<const char*, std::size_t>>{
             {"0", 0}, {"1", 1}, {"2^32", big}, {"2^63", huge}, {"SIZE_MAX", max}})
      if (v != good) out.push_back({name + " = " + label, static_cast<U>(v), Kind::shape, {name, size_words(v)}});
  } else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) {
    for (const U v : {U(-1), U(0), std::numeric_limits<U>::max(), std::numeric_limits<U>::min()})
      if (v != good) out.push_back({name + " = " + std::to_string(v), v, Kind::shape, {name, std::to_string(v)}});
  } else if constexpr (std::is_floating_point_v<U>) {
    const U inf = std::numeric_limits<U>::infinity();
    for (const auto& [label, v] : std::vector<std::pair<const char*, U>>{{"NaN", std::numeric_limits<U>::quiet_NaN()},
                                                                         {"+inf", inf},
                                                                         {"-inf", -inf},
                                                                         {"3e38", U(3e38)},
                                                                         {"-3e38", U(-3e38)},
                                                                         {"0", U(0)},
                                                                         {"1", U(1)},
                                                                         {"-1", U(-1)}})
      if (!(v == good)) out.push_back({name + " = " + label, v, Kind::shape, {name}});
  } else if constexpr (std::is_same_v<U, std::string>) {
    out.push_back({name + " empty", std::string(), Kind::shape, {name}});
    out.push_back({name + " not UTF-8", std::string("a\xff\xfe b"), Kind::shape, {name, "UTF-8"}});
    out.push_back({name + " 1 MB long", std::string(std::size_t{1} << 20, 'a'), Kind::shape, {name}});
    out.push_back({name + " with a NUL", std::string("a\0b c", 5), Kind::shape, {name}});
  } else if constexpr (std::is_same_v<U, Path>) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("attn_hostile_paths_" + std::to_string(::getpid())) / name;
    fs::remove_all(dir);
    fs::create_directories(dir / "folder");
    const fs::path fifo = dir / "fifo";
    ::mkfifo(fifo.c_str(), 0600);
    std::ifstream in(good.path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto write = [&](const std::string& file, const std::string& content) {
      std::ofstream(dir / file, std::ios::binary) << content;
      return (dir / file).string();
    };
    std::string lying = bytes;
    for (std::size_t i = 0; i < std::min<std::size_t>(lying.size(), 8); ++i) lying[i] = '\x7f';  // a header that lies
    out.push_back({name + " missing", Path{(dir / "missing").string()}, Kind::path, {"missing"}});
    out.push_back({name + " a folder", Path{(dir / "folder").string()}, Kind::path, {"folder"}});
    out.push_back({name + " a FIFO", Path{fifo.string()}, Kind::path, {"fifo"}});
    // Empty, truncated and lying files may still be valid files of a line-based format: fits() decides.
    out.push_back({name + " empty", Path{write("empty", "")}, Kind::shape, {"empty"}});
    out.push_back(
        {name + " truncated", Path{write("truncated", bytes.substr(0, bytes.size() / 2))}, Kind::shape, {"truncated"}});
    out.push_back({name + " lying", Path{write("lying", lying)}, Kind::shape, {"lying"}});
  } else if constexpr (std::is_same_v<U, std::vector<std::size_t>> || std::is_same_v<U, std::vector<long>> ||
                       std::is_same_v<U, std::vector<int>>) {
    using E = typename U::value_type;
    out.push_back({name + " empty", U{}, Kind::shape, {name}});
    if (!good.empty()) {
      U longer = good, shorter = good;
      longer.push_back(good.back());
      shorter.pop_back();
      out.push_back({name + " one longer", longer, Kind::shape, {name}});
      out.push_back({name + " one shorter", shorter, Kind::shape, {name}});
      const std::vector<std::pair<const char*, E>> values =
          std::is_signed_v<E> ? std::vector<std::pair<const char*, E>>{{"-1", E(-1)},
                                                                       {"max", std::numeric_limits<E>::max()},
                                                                       {"min", std::numeric_limits<E>::min()}}
                              : std::vector<std::pair<const char*, E>>{{"2^63", E(std::size_t{1} << 63)},
                                                                       {"max", std::numeric_limits<E>::max()}};
      for (const auto& [label, v] : values) {
        U t = good;
        t[t.size() / 2] = v;
        out.push_back({name + " with " + label, t, Kind::shape, {name, std::to_string(v)}});
      }
    }
  } else if constexpr (std::is_same_v<U, std::vector<double>>) {
    // A list of numbers: empty, one longer, one shorter, and its middle entry NaN, ±∞, 0, −1 and ±3e38 in turn.
    // (Lists of float are packed rows in the chapters, -inf a valid entry: they keep the general rule below.)
    using E = typename U::value_type;
    out.push_back({name + " empty", U{}, Kind::shape, {name}});
    if (!good.empty()) {
      U longer = good, shorter = good;
      longer.push_back(good.back());
      shorter.pop_back();
      out.push_back({name + " one longer", longer, Kind::shape, {name}});
      out.push_back({name + " one shorter", shorter, Kind::shape, {name}});
      const E inf = std::numeric_limits<E>::infinity();
      for (const auto& [label, v, kind] :
           std::vector<std::tuple<const char*, E, Kind>>{{"NaN", std::numeric_limits<E>::quiet_NaN(), Kind::non_finite},
                                                         {"+inf", inf, Kind::non_finite},
                                                         {"-inf", -inf, Kind::non_finite},
                                                         {"0", E(0), Kind::shape},
                                                         {"-1", E(-1), Kind::shape},
                                                         {"3e38", E(3e38), Kind::shape},
                                                         {"-3e38", E(-3e38), Kind::shape}}) {
        U t = good;
        t[t.size() / 2] = v;
        out.push_back({name + " with " + label, t, kind, {name, std::string(label) == "NaN" ? "nan" : "inf"}});
      }
    }
  } else if constexpr (std::is_same_v<U, std::vector<std::string>>) {
    // A list of words: empty, one longer, one shorter, and its middle word each hostile string in turn.
    out.push_back({name + " empty", U{}, Kind::shape, {name}});
    if (!good.empty()) {
      U longer = good, shorter = good;
      longer.push_back(good.back());
      shorter.pop_back();
      out.push_back({name + " one longer", longer, Kind::shape, {name}});
      out.push_back({name + " one shorter", shorter, Kind::shape, {name}});
      for (auto& v : variants<std::string>(good[good.size() / 2], name + "[" + std::to_string(good.size() / 2) + "]")) {
        U t = good;
        t[t.size() / 2] = std::move(v.value);
        v.names.push_back(name);
        out.push_back({v.label, t, v.kind, v.names});
      }
    }
  } else if constexpr (std::is_same_v<U, std::vector<bool>>) {
    out.push_back({name + " empty", U{}, Kind::shape, {name}});
    U longer = good;
    longer.push_back(true);
    out.push_back({name + " one longer", longer, Kind::shape, {name}});
    if (!good.empty()) out.push_back({name + " one shorter", U(good.begin(), good.end() - 1), Kind::shape, {name}});
  } else if constexpr (std::is_same_v<U, std::vector<std::vector<std::size_t>>>) {
    out.push_back({name + " empty", U{}, Kind::shape, {name}});
    if (!good.empty()) {
      U longer = good, shorter = good, past = good;
      longer.push_back(good.back());
      shorter.pop_back();
      past[0].push_back(std::numeric_limits<std::size_t>::max());
      out.push_back({name + " one longer", longer, Kind::shape, {name}});
      out.push_back({name + " one shorter", shorter, Kind::shape, {name}});
      out.push_back(
          {name + " with SIZE_MAX", past, Kind::shape, {name, size_words(std::numeric_limits<std::size_t>::max())}});
    }
  } else if constexpr (detail::has_weights<U>::value) {
    // Each weight of the struct, in turn: its shapes, and a NaN in it.
    std::vector<std::string> fields;
    U probe = good;
    Weights<U>::visit(probe, [&](const char* field, auto&) { fields.emplace_back(field); });
    for (const std::string& field : fields) {
      U pick = good;
      Weights<U>::visit(pick, [&](const char* f, auto& w) {
        if (field != f) return;
        for (auto& v : tensor_variants(w, field)) {
          U changed = good;
          Weights<U>::visit(changed, [&](const char* g, auto& x) {
            if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::decay_t<decltype(w)>>)
              if (field == g) x = v.value;
          });
          if (v.kind == Kind::shape || v.label.find("NaN") != std::string::npos)
            out.push_back({name + "." + v.label, changed, v.kind, v.names});
        }
      });
    }
  } else if constexpr (detail::is_vector<U>::value) {
    // A list of structs: empty, and each variant of its first element.
    using E = typename U::value_type;
    out.push_back({name + " empty", U{}, Kind::shape, {name}});
    if constexpr (detail::has_weights<E>::value)
      if (!good.empty())
        for (auto& v : variants<E>(good[0], name + "[0]")) {
          U t = good;
          t[0] = v.value;
          out.push_back({v.label, t, v.kind, v.names});
        }
  }
  return out;
}

// --- the battery ---------------------------------------------------------------------------------------------------

/// One function's battery: the good arguments, their names, the call and the contract's rules.
template <class Call, class... Args>
class Battery {
  using Result = std::decay_t<decltype(std::apply(std::declval<Call&>(), std::declval<std::tuple<Args...>&>()))>;

 public:
  /// \p function names it in failures; \p names names each argument, in order (a refusal names one of them); a name
  /// may give the other words a message may use for it after '|': "eps|ε", "ids|tokens".
  Battery(std::string function, std::vector<std::string> names, Call call, Args... good)
      : function_(std::move(function)), names_(std::move(names)), call_(std::move(call)), good_(std::move(good)...) {
    REQUIRE_MESSAGE(names_.size() == sizeof...(Args), "hostile battery: one name per argument");
  }

  /// The contract's rule for which inputs are valid (shapes, sizes, scalars, lists, strings): a valid one must be
  /// answered, an invalid one refused. Without it either outcome passes, as long as it is a clean one.
  Battery& fits(std::function<bool(const Args&...)> rule) {
    fits_ = std::move(rule);
    return *this;
  }
  /// A check of every answer beyond "no NaN from finite input" (the result's shape, a property).
  template <class Check>
  Battery& answer(Check check) {
    answer_ = [check](const auto& result, const std::tuple<Args...>& args) {
      return std::apply([&](const Args&... a) { return check(result, a...); }, args);
    };
    return *this;
  }
  /// NaN or ±∞ in a tensor entry is answered, not refused: the contract promises no check of it (say why).
  Battery& non_finite_passes(const std::string& reason) {
    non_finite_reason_ = reason;
    return *this;
  }
  /// The variants whose label contains \p label are exempt from the outcome rule (never from crash or hang).
  Battery& exempt(const std::string& label, const std::string& reason) {
    exempt_.emplace_back(label, reason);
    return *this;
  }

  /// Runs every variant of every argument; fails the test case once, listing what went wrong. Returns the cases run.
  std::size_t run() {
    run_each(std::index_sequence_for<Args...>{});
    run_wrapping_sizes(std::index_sequence_for<Args...>{});
    if (const char* file = std::getenv("ATTN_HOSTILE_REPORT"))
      std::ofstream(file, std::ios::app) << fmt::format("{}\t{}\t{}\t{}\t{}\n", function_, cases_, refused_, answered_,
                                                        exempted_);
    std::string all;
    for (const std::string& f : failures_) all += "\n  - " + f;
    CHECK_MESSAGE(failures_.empty(),
                  function_ << ": " << failures_.size() << " of " << cases_ << " hostile calls went wrong:" << all);
    CHECK(cases_ > 0);
    return cases_;
  }

 private:
  template <std::size_t... I>
  void run_each(std::index_sequence<I...>) {
    (run_argument<I>(), ...);
  }

  template <std::size_t I>
  void run_argument() {
    using T = std::tuple_element_t<I, std::tuple<Args...>>;
    for (auto& v : variants<T>(std::get<I>(good_), names_[I].substr(0, names_[I].find('|')))) {
      std::tuple<Args...> args = good_;
      std::get<I>(args) = std::move(v.value);
      judge(v.label, v.kind, v.names, args);
    }
  }

  // Every size argument 2^32 at once: any product of two of them wraps to 0.
  template <std::size_t... I>
  void run_wrapping_sizes(std::index_sequence<I...>) {
    constexpr std::size_t sizes = (std::size_t{0} + ... + (std::is_same_v<Args, std::size_t> ? 1 : 0));
    if constexpr (sizes >= 2) {
      std::tuple<Args...> args = good_;
      std::vector<std::string> words{"4294967296"};
      (([&] {
         if constexpr (std::is_same_v<std::tuple_element_t<I, std::tuple<Args...>>, std::size_t>) {
           std::get<I>(args) = std::size_t{1} << 32;
           words.push_back(names_[I]);
         }
       }()),
       ...);
      judge("every size 2^32 (products wrap)", Kind::shape, words, args);
    }
  }

  static bool names_huge_size(const std::string& label) {
    for (const char* size : {"2^32", "2^63", "SIZE_MAX"})
      if (label.find(size) != std::string::npos) return true;
    return false;
  }

  void judge(const std::string& label, Kind kind, const std::vector<std::string>& words, std::tuple<Args...>& args) {
    ++cases_;
    const std::string where = function_ + " with " + label;
    INFO("hostile call: ", where);
    for (const auto& [part, reason] : exempt_)
      if (label.find(part) != std::string::npos) {
        ++exempted_;
        // An exempt call of a huge size may do the work it asks for (a 4 GiB mask, say): with the address space
        // limited that is a quick refusal, under a sanitizer (no limit: its shadow memory needs the space)
        // minutes of real work. The sanitizers' run leaves those calls to ./course test's, which checks them for
        // crashes and hangs; every other exempt call runs under the sanitizers too.
        if (detail::kSanitized && names_huge_size(label)) return;
        try {
          const detail::Guard guard(where);
          call(args);
        } catch (const std::exception&) {
        }
        return;
      }
    const std::tuple<Args...> before = args;
    bool valid = true;
    if (fits_ && (kind == Kind::shape)) valid = std::apply(fits_, static_cast<const std::tuple<Args...>&>(args));
    if (kind == Kind::path) valid = false;
    if (kind == Kind::non_finite && non_finite_reason_.empty()) valid = false;
    std::string message;
    try {
      const detail::Guard guard(where);
      const bool ok = call(args);
      ++answered_;
      if (kind == Kind::huge || (kind == Kind::non_finite && !non_finite_reason_.empty())) {
        if (kind == Kind::huge && !ok) fail(where, "answered with a NaN from finite input");
        return;
      }
      if (!valid) return fail(where, "answered an input the contract refuses (a silent broadcast or garbage)");
      if (!ok) fail(where, "answered with a NaN from finite input, or an answer the test's check refuses");
      return;
    } catch (const std::invalid_argument& e) {
      message = e.what();
    } catch (const std::runtime_error& e) {
      if (kind != Kind::path) return fail(where, std::string("threw std::runtime_error: ") + e.what());
      message = e.what();
    } catch (const std::bad_alloc&) {
      return fail(where, "ran out of memory (an absurd allocation, past the battery's limit)");
    } catch (const std::exception& e) {
      return fail(where, std::string("threw ") + typeid(e).name() + ": " + e.what());
    }
    ++refused_;
    if (valid && kind == Kind::shape && fits_) return fail(where, "refused a valid input: \"" + message + "\"");
    // A value near float's limit is refused where it overflows, naming that intermediate (Q, K, the scores): any
    // refusal of it counts. Every other refusal names the argument (a word of its name), its shape or its value.
    bool named = kind == Kind::huge;
    std::vector<std::string> wanted = words;  // what the message may name: the variant's words, every argument's names
    for (const std::string& n : names_)
      for (std::size_t at = 0; at <= n.size();) {
        const std::size_t bar = std::min(n.find('|', at), n.size());
        wanted.push_back(n.substr(at, bar - at));
        at = bar + 1;
      }
    for (const std::string& w : wanted) named = named || detail::names_word(message, w);
    if (!named) {
      std::string list;
      for (const std::string& w : wanted) list += (list.empty() ? "" : ", ") + w;
      fail(where, "refused without naming what was wrong (it names none of: " + list + "): \"" + message + "\"");
    }
    if (!same_args(before, args, std::index_sequence_for<Args...>{})) fail(where, "refused but changed an argument");
  }

  // Calls the function; true when the answer holds no NaN (the battery's own check) and passes the test's check.
  bool call(std::tuple<Args...>& args) {
    if constexpr (std::is_void_v<Result>) {
      std::apply(call_, args);
      return true;
    } else {
      const Result result = std::apply(call_, args);
      if (detail::has_nan(result)) return false;
      return !answer_ || answer_(result, args);
    }
  }

  template <std::size_t... I>
  bool same_args(const std::tuple<Args...>& a, const std::tuple<Args...>& b, std::index_sequence<I...>) {
    return (detail::same(std::get<I>(a), std::get<I>(b)) && ...);
  }

  // A failure's line, cut to 300 characters: a 1 MB argument echoed in a message must not flood the report.
  void fail(const std::string& where, const std::string& what) {
    const std::string line = where + ": " + what;
    failures_.push_back(line.size() > 300 ? line.substr(0, 300) + " […]" : line);
  }

  using AnswerCheck =
      std::function<bool(const std::conditional_t<std::is_void_v<Result>, int, Result>&, const std::tuple<Args...>&)>;

  std::string function_;
  std::vector<std::string> names_;
  Call call_;
  std::tuple<Args...> good_;
  std::function<bool(const Args&...)> fits_;
  AnswerCheck answer_;
  std::string non_finite_reason_;
  std::vector<std::pair<std::string, std::string>> exempt_;
  std::vector<std::string> failures_;
  std::size_t cases_ = 0, refused_ = 0, answered_ = 0, exempted_ = 0;
};

/// A battery for \p function called as \p call(args...), the good arguments \p good named \p names.
template <class Call, class... Args>
Battery<Call, Args...> battery(std::string function, std::vector<std::string> names, Call call, Args... good) {
  return Battery<Call, Args...>(std::move(function), std::move(names), std::move(call), std::move(good)...);
}

/// Whether \p x holds no NaN or infinity (for the tests' answer checks).
template <class T>
bool all_finite(const T& x) {
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x.data()[i])) return false;
  return true;
}

}  // namespace attn::test::hostile
