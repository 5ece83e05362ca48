// Chapter 11, your exercises. Book page: book/11_positions.md.
// Check your progress with `./course check 11`; stuck? `./course hint 11`.
// Watch your code run the chapter: `./course run 11 --track exercise`.
// Suggested order: sinusoidal_encoding, apply_rope, alibi_slopes, alibi_bias, DocumentMask, make_block_mask,
// flex_attention_tiles.
#include "11_positions/positions.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "11_positions";
}

Matrix sinusoidal_encoding(std::size_t n, std::size_t d) {
  // TODO(learner): PE(p, c) = sin(p·ω) for even c and cos(p·ω) for odd c, with ω = 10000^(−(c − c mod 2)/d):
  //   columns 2i and 2i + 1 share one frequency. Compute the angle in double. Refuse sizes that cannot fit
  //   before allocating: attn::checked_allocation (attn/checks.hpp) does it and names the estimate.
  throw not_implemented("sinusoidal_encoding", kChapter,
                        "each pair of columns is a sine and a cosine of p·ω_i, ω_i = 10000^(−2i/d).");
}

void apply_rope(Matrix& X, std::size_t first_position, float base) {
  // TODO(learner): refuse an odd d (and base ≤ 1, and a NaN/Inf in X: attn::require_finite) before touching X. For row
  // p (position first_position + p)
  //   and each pair i: angle = position·base^(−2i/d); (x0, x1) ← (cos·x0 − sin·x1, sin·x0 + cos·x1).
  throw not_implemented("apply_rope", kChapter,
                        "rotate each pair of columns (2i, 2i+1) by position·θ_i, θ_i = base^(−2i/d).");
}

Vector alibi_slopes(std::size_t h) {
  // TODO(learner): for h a power of two, m_k = 2^(−8k/h) for k = 1 … h. Otherwise, c = the largest power of two
  //   below h: the c slopes of c heads, then the first h − c of every other slope of 2c heads. Refuse h = 0.
  throw not_implemented("alibi_slopes", kChapter,
                        "a geometric sequence from 2^(−8/h) down to 2^(−8) when h is a power of two; the paper fills "
                        "other head counts from the next power of two.");
}

Matrix alibi_bias(std::size_t n_q, std::size_t n_kv, float slope) {
  // TODO(learner): bias(i, j) = −slope·|i + n_kv − n_q − j|; refuse a negative (or NaN) slope and n_q > n_kv,
  //   and (attn::checked_allocation) an (n_q, n_kv) that cannot fit, before allocating it.
  throw not_implemented("alibi_bias", kChapter, "the penalty grows linearly with the distance between query and key.");
}

bool DocumentMask::operator()(std::size_t head, std::size_t q, std::size_t kv) const {
  // TODO(learner): query q is token q + offset (queries aligned to the end of the keys): same document
  //   (document.at(q + offset) == document.at(kv)), and with causal also kv ≤ q + offset.
  throw not_implemented("DocumentMask", kChapter, "a token sees only its own document (and, causal, only its past).");
}

ch11::BlockMask make_block_mask(const MaskModFn& mask_mod, std::size_t heads, std::size_t n_q, std::size_t n_kv,
                                std::size_t B_r, std::size_t B_c) {
  // TODO(learner): every tile of every head marked empty, partial or full by what mask_mod allows in it,
  //   the ragged last tiles included; bad input refused as positions.hpp says.
  (void)mask_mod, (void)heads, (void)n_q, (void)n_kv, (void)B_r, (void)B_c;
  throw not_implemented("make_block_mask", kChapter,
                        "count the allowed pairs of each tile: none is empty, all of the tile's pairs is full.");
}

FlashOutput flex_attention_tiles(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t head,
                                 const ScoreModFn& score_mod, const MaskModFn& mask_mod,
                                 const ch11::BlockMask& block_mask) {
  // TODO(learner): chapter 05's tiled forward with the two modifiers: skip the tiles the block mask marks
  //   empty, rewrite every computed score with score_mod, hide what mask_mod refuses; O, lse and the tiles
  //   visited as positions.hpp says.
  (void)Q, (void)K, (void)V, (void)head, (void)score_mod, (void)mask_mod, (void)block_mask;
  throw not_implemented("flex_attention_tiles", kChapter,
                        "chapter 05's two loops; between the products, score_mod on each score, then the mask.");
}

}  // namespace attn
