/// \file
/// The course's attention variants as score_mod / mask_mod callables for flex_attention() (flex.hpp): each
/// a few lines, each equal to dense attention with the same bias or mask. Queries are aligned to the end of
/// the keys (query i sits at position i + offset, offset = n_kv − n_q), as chapter 02's causal mask has it.
/// Chapter code, not an exercise (the document mask is: attn::DocumentMask in positions.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdlib>

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
    return kv <= q + offset && q + offset < kv + window;
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
  float operator()(float s, std::size_t head, std::size_t q, std::size_t kv) const {
    // In int (positions < 2^31, as OpenBLAS's sizes): int → float converts a vector (16 lanes, AVX-512) at once.
    const int distance = std::abs(static_cast<int>(q + offset) - static_cast<int>(kv));
    return s - slopes(head) * static_cast<float>(distance);
  }
};

/// score_mod: logit soft-capping (Gemma 2), cap·tanh(s / cap): scores stay in (−cap, cap).
struct SoftCap {
  float cap = 30.0f;
  float operator()(float s, std::size_t, std::size_t, std::size_t) const { return cap * std::tanh(s / cap); }
};
// [modifiers]

}  // namespace attn::ch11
