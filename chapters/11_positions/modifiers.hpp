/// \file
/// The course's attention variants as score_mod / mask_mod callables for flex_attention() (flex.hpp): each
/// a few lines, each equal to dense attention with the same bias or mask. Queries are aligned to the end of
/// the keys (query i sits at position i + offset, offset = n_kv − n_q), as chapter 02's causal mask has it.
/// Chapter code, not an exercise (the document mask is: attn::DocumentMask in positions.hpp).
#pragma once

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/tensor.hpp"

namespace attn::ch11 {

// [modifiers]
/// mask_mod: a query sees itself and the past.
struct Causal {
  std::size_t offset = 0;  ///< n_kv − n_q
  bool operator()(std::size_t, std::size_t q, std::size_t kv) const { return kv <= q + offset; }
};

/// mask_mod: a query sees the last \p window positions up to itself (chapter 07's local attention, causal).
struct SlidingWindow {
  std::size_t window = 256;
  std::size_t offset = 0;
  bool operator()(std::size_t, std::size_t q, std::size_t kv) const {
    return kv <= q + offset && q + offset - kv < window;  // not kv + window: a window of SIZE_MAX must not wrap
  }
};

/// mask_mod: the first \p prefix tokens see each other both ways (the prompt); the rest is causal.
struct PrefixLM {
  std::size_t prefix = 0;  ///< positions [0, prefix) of the keys
  std::size_t offset = 0;  ///< n_kv − n_q, as for Causal: the queries are the last n_q positions
  bool operator()(std::size_t, std::size_t q, std::size_t kv) const { return kv < prefix || kv <= q + offset; }
};

/// score_mod: ALiBi, s − m_head·|position of q − position of kv|.
struct Alibi {
  Vector slopes;  ///< (h) one slope per head (attn::alibi_slopes())
  std::size_t offset = 0;
  /// \throws std::invalid_argument naming the head when it has no slope (check_modifier() makes the kernel's
  ///         heads fit; the check here keeps a stray head from reading past the slopes).
  float operator()(float s, std::size_t head, std::size_t q, std::size_t kv) const {
    if (head >= slopes.size()) no_slope(head);
    // In int (positions < 2^31, as OpenBLAS's sizes): int → float converts a vector (16 lanes, AVX-512) at once.
    const int distance = std::abs(static_cast<int>(q + offset) - static_cast<int>(kv));
    return s - slopes(head) * static_cast<float>(distance);
  }

 private:
  [[noreturn]] void no_slope(std::size_t head) const {
    throw std::invalid_argument(
        fmt::format("Alibi: head {} has no slope; there are {} slopes, one per head", head, slopes.size()));
  }
};

/// score_mod: logit soft-capping (Gemma 2), cap·tanh(s / cap): scores stay in (−cap, cap).
struct SoftCap {
  float cap = 30.0f;
  float operator()(float s, std::size_t, std::size_t, std::size_t) const { return cap * std::tanh(s / cap); }
};
// [modifiers]

/// What flex_attention() and make_block_mask() check before any work: a modifier's parameters, so that one out of
/// range is an std::invalid_argument naming it, never a silently wrong mask or score. This one is for modifiers
/// with nothing to check (NoScoreMod, NoMask, a reader's own lambda); the overloads below check the others.
template <class Modifier>
void check_modifier(const char*, const Modifier&, std::size_t /*heads*/, std::size_t /*n_q*/, std::size_t /*n_kv*/) {}

/// An offset (n_kv − n_q by the alignment rule) is a position among the n_kv keys: one past them would put every
/// query after every key, and one near SIZE_MAX would wrap q + offset to a small position (a silently wrong mask).
/// \throws std::invalid_argument naming \p modifier and the offset when it is above n_kv.
inline void check_offset(const char* where, const char* modifier, std::size_t offset, std::size_t n_kv) {
  require(offset <= n_kv, fmt::format("{}: {}'s offset = {} for n_kv = {} keys; the offset (n_kv − n_q) is at most "
                                      "n_kv",
                                      where, modifier, offset, n_kv));
}

/// \throws std::invalid_argument when the offset is above n_kv (check_offset()).
inline void check_modifier(const char* where, const Causal& m, std::size_t, std::size_t, std::size_t n_kv) {
  check_offset(where, "Causal", m.offset, n_kv);
}

/// \throws std::invalid_argument when the window is 0 (no query would see anything), or the offset is above n_kv.
inline void check_modifier(const char* where, const SlidingWindow& m, std::size_t, std::size_t, std::size_t n_kv) {
  require(m.window > 0, fmt::format("{}: SlidingWindow's window = 0; a query must see at least itself", where));
  check_offset(where, "SlidingWindow", m.offset, n_kv);
}

/// A prefix longer than the keys is every key (attention both ways). \throws std::invalid_argument when the offset
/// is above n_kv.
inline void check_modifier(const char* where, const PrefixLM& m, std::size_t, std::size_t, std::size_t n_kv) {
  check_offset(where, "PrefixLM", m.offset, n_kv);
}

/// \throws std::invalid_argument when there is not one slope per head, a slope is negative or not finite, or a
/// position does not fit in an int (Alibi's distances are computed in int).
inline void check_modifier(const char* where, const Alibi& m, std::size_t heads, std::size_t n_q, std::size_t n_kv) {
  require(m.slopes.size() == heads,
          fmt::format("{}: Alibi has {} slopes for {} heads; it needs one per head", where, m.slopes.size(), heads));
  for (std::size_t k = 0; k < heads; ++k)
    require(std::isfinite(m.slopes(k)) && m.slopes(k) >= 0.0f,
            fmt::format("{}: Alibi's slopes[{}] = {}; slopes are finite and non-negative", where, k, m.slopes(k)));
  constexpr auto kMaxPosition = static_cast<std::size_t>(INT_MAX);
  require(n_kv <= kMaxPosition && n_q <= kMaxPosition && m.offset <= kMaxPosition - n_q,
          fmt::format("{}: Alibi with n_q = {}, n_kv = {} and offset = {}; positions must stay below 2^31", where, n_q,
                      n_kv, m.offset));
}

/// \throws std::invalid_argument when the cap is not a positive finite number.
inline void check_modifier(const char* where, const SoftCap& m, std::size_t, std::size_t, std::size_t) {
  require(std::isfinite(m.cap) && m.cap > 0.0f,
          fmt::format("{}: SoftCap's cap = {}; it must be a positive finite number", where, m.cap));
}

}  // namespace attn::ch11
