// Chapter 11, reference solutions. Book page: book/11_positions.md.
// The formulas are the papers': Vaswani et al. 2017 (sinusoidal), Su et al. 2021 (RoFormer, RoPE),
// Press et al. 2022 (ALiBi); the block mask and the tile loop are PyTorch FlexAttention's design (Dong et al.
// 2024) on chapter 05's tiles. chapters/11_positions/flex.hpp is the same loop made fast.
#include "11_positions/positions.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

namespace {
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
}  // namespace

// [sinusoidal_encoding]
Matrix sinusoidal_encoding(std::size_t n, std::size_t d) {
  checked_allocation("sinusoidal_encoding: the encoding n × d floats", {n, d, sizeof(float)});  // before allocating
  Matrix PE = xt::zeros<float>({n, d});                                                         // (n, d)
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t c = 0; c < d; ++c) {
      // Columns 2i and 2i + 1 share the frequency ω_i = 10000^(−2i/d): a sine and a cosine, one rotating pair.
      const double omega = std::pow(10000.0, -static_cast<double>(c - c % 2) / static_cast<double>(d));
      const double angle = static_cast<double>(p) * omega;
      PE(p, c) = static_cast<float>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  return PE;
}
// [sinusoidal_encoding]

// [apply_rope]
void apply_rope(Matrix& X, std::size_t first_position, float base) {
  const std::size_t n = X.shape(0), d = X.shape(1);
  require(d % 2 == 0,
          fmt::format("apply_rope: X is {}; RoPE rotates pairs of columns, so d must be even", shape_str(X)));
  require(std::isfinite(base) && base > 1.0f,
          fmt::format("apply_rope: base = {} must be a finite number above 1", base));
  require_finite("apply_rope", "X", X.data(), X.size());  // a NaN would rotate into its pair's other column
  // The last row's position first_position + n − 1 must not wrap past 2^64 back to 0.
  if (n > 0) checked_sum("apply_rope: the last position, first_position + n - 1", {first_position, n - 1});
  for (std::size_t p = 0; p < n; ++p) {
    const double position = static_cast<double>(first_position + p);
    for (std::size_t i = 0; i < d / 2; ++i) {
      // θ_i = base^(−2i/d); the angle is computed in double so that large positions keep their digits.
      const double angle =
          position * std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      const float x0 = X(p, 2 * i), x1 = X(p, 2 * i + 1);
      X(p, 2 * i) = c * x0 - s * x1;  // the 2×2 rotation of the pair (x0, x1)
      X(p, 2 * i + 1) = s * x0 + c * x1;
    }
  }
}
// [apply_rope]

// [alibi]
Vector alibi_slopes(std::size_t h) {
  require(h > 0, "alibi_slopes: h = 0; there must be at least one head");
  checked_allocation("alibi_slopes: the slopes, h floats", {h, sizeof(float)});  // before allocating
  // The paper's rule: c = the largest power of two ≤ h; c heads get 2^(−8k/c), k = 1 … c, and the h − c others
  // the slopes halfway between them in the exponent, 2^(−8(2k − 1)/2c): every other slope of 2c heads.
  std::size_t c = 1;
  while (c <= h / 2) c *= 2;  // not 2·c ≤ h: for h ≥ 2^63, 2·c wraps to 0 and the loop never ends
  const double step = 8.0 / static_cast<double>(c);
  Vector slopes = xt::zeros<float>({h});  // (h)
  for (std::size_t k = 0; k < c; ++k) slopes(k) = static_cast<float>(std::exp2(-step * static_cast<double>(k + 1)));
  for (std::size_t k = 0; k < h - c; ++k)
    slopes(c + k) = static_cast<float>(std::exp2(-step * (static_cast<double>(k) + 0.5)));
  return slopes;
}

Matrix alibi_bias(std::size_t n_q, std::size_t n_kv, float slope) {
  require(std::isfinite(slope) && slope >= 0.0f,
          fmt::format("alibi_bias: slope = {}; ALiBi's slopes are finite and non-negative (a penalty for distance)",
                      slope));
  require(n_q <= n_kv,
          fmt::format("alibi_bias: {} queries but only {} keys; queries are the last n_q positions", n_q, n_kv));
  checked_allocation("alibi_bias: the bias n_q × n_kv floats", {n_q, n_kv, sizeof(float)});  // before allocating
  const std::size_t offset = n_kv - n_q;        // query i sits at position i + offset
  Matrix bias = xt::zeros<float>({n_q, n_kv});  // (n_q, n_kv)
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_kv; ++j) {
      const std::size_t q = i + offset, distance = q > j ? q - j : j - q;
      bias(i, j) = -slope * static_cast<float>(distance);
    }
  return bias;
}
// [alibi]

// [document_mask]
bool DocumentMask::operator()(std::size_t /*head*/, std::size_t q, std::size_t kv) const {
  // q + offset < n_kv, tested without computing the sum: an offset near SIZE_MAX would wrap it to an earlier token.
  if (offset >= document.size() || q >= document.size() - offset)
    throw std::out_of_range(
        fmt::format("DocumentMask: query {} at offset {} is past the {} tokens", q, offset, document.size()));
  const std::size_t position = q + offset;
  return document[position] == document.at(kv) && (!causal || kv <= position);
}
// [document_mask]

// [make_block_mask]
ch11::BlockMask make_block_mask(const MaskModFn& mask_mod, std::size_t heads, std::size_t n_q, std::size_t n_kv,
                                std::size_t B_r, std::size_t B_c) {
  require(B_r > 0 && B_c > 0, fmt::format("make_block_mask: B_r = {} and B_c = {} must be positive", B_r, B_c));
  require(static_cast<bool>(mask_mod), "make_block_mask: mask_mod is empty");
  // One mask_mod call per pair: a count past 64 bits (2^32 heads, queries and keys) is a job that never ends.
  checked_product("make_block_mask: the mask_mod calls heads × n_q × n_kv", {heads, n_q, n_kv});
  ch11::BlockMask bm{heads, n_q, n_kv, B_r, B_c, ch11::tiles_of(n_q, B_r), ch11::tiles_of(n_kv, B_c), {}};
  bm.tiles.resize(checked_allocation("make_block_mask: the tiles heads × T_r × T_c × 1 byte",
                                     {heads, bm.T_r, bm.T_c, sizeof(ch11::Tile)}));  // (heads, T_r, T_c)
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < bm.T_r; ++i)
      for (std::size_t j = 0; j < bm.T_c; ++j) {
        // The last row and column of tiles are ragged: count the pairs a tile really has.
        const std::size_t q_end = i * B_r + std::min(B_r, n_q - i * B_r),
                          kv_end = j * B_c + std::min(B_c, n_kv - j * B_c);
        std::size_t allowed = 0;
        for (std::size_t q = i * B_r; q < q_end; ++q)
          for (std::size_t kv = j * B_c; kv < kv_end; ++kv) allowed += mask_mod(h, q, kv) ? 1 : 0;
        const std::size_t pairs = (q_end - i * B_r) * (kv_end - j * B_c);
        bm.tiles[(h * bm.T_r + i) * bm.T_c + j] = allowed == 0       ? ch11::Tile::empty
                                                  : allowed == pairs ? ch11::Tile::full
                                                                     : ch11::Tile::partial;
      }
  return bm;
}
// [make_block_mask]

namespace {

/// flex_attention_tiles' contract: Q (n_q, d_k), K (n_kv, d_k) and V (n_kv, d_v) finite, a block mask made for
/// that many pairs and this head, and both modifiers set.
void require_flex_call(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t head, const ScoreModFn& score_mod,
                       const MaskModFn& mask_mod, const ch11::BlockMask& bm) {
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_k = Q.shape(1);
  require(
      K.shape(1) == d_k && V.shape(0) == n_kv,
      fmt::format("flex_attention_tiles: Q is {}, K is {} and V is {}; Q and K need the same d_k, V one row per key",
                  shape_str(Q), shape_str(K), shape_str(V)));
  require(bm.n_q == n_q && bm.n_kv == n_kv && bm.B_r > 0 && bm.B_c > 0 && (bm.heads == 1 || head < bm.heads) &&
              bm.T_r == ch11::tiles_of(n_q, bm.B_r) && bm.T_c == ch11::tiles_of(n_kv, bm.B_c) &&
              bm.tiles.size() == bm.heads * bm.T_r * bm.T_c,
          fmt::format("flex_attention_tiles: the block mask is for {} heads and ({}, {}) pairs in ({}, {}) tiles; the "
                      "call is head {} of ({}, {}) pairs",
                      bm.heads, bm.n_q, bm.n_kv, bm.B_r, bm.B_c, head, n_q, n_kv));
  require(static_cast<bool>(score_mod) && static_cast<bool>(mask_mod), "flex_attention_tiles: a modifier is empty");
  require_attention_inputs("flex_attention_tiles", Q, K, V);  // every element finite, no score can overflow
}

}  // namespace

// [flex_attention_tiles]
namespace {

/// One tile's own state (m, ℓ, acc) from its masked scores S (rows, cols) and values V_j (cols, d_v): per row the
/// largest score m, ℓ = Σ e^{s − m} and acc = P·V_j with P = e^{S − m}; a row with no allowed key keeps the empty
/// state.
OnlineState tile_state(const Matrix& S, const Matrix& V_j) {
  const std::size_t rows = S.shape(0), cols = S.shape(1);
  OnlineState part = empty_state(rows, V_j.shape(1));
  Matrix P = xt::zeros<float>({rows, cols});  // (rows, cols)
  for (std::size_t r = 0; r < rows; ++r) {
    float m = kMinusInf;
    for (std::size_t c = 0; c < cols; ++c) m = std::max(m, S(r, c));
    if (m == kMinusInf) continue;  // no key of this tile for this row: the empty state
    float l = 0.0f;
    for (std::size_t c = 0; c < cols; ++c) l += P(r, c) = S(r, c) == kMinusInf ? 0.0f : std::exp(S(r, c) - m);
    part.m(r) = m;
    part.l(r) = l;
  }
  part.acc = matmul(P, V_j);  // (rows, d_v)
  return part;
}

}  // namespace

FlashOutput flex_attention_tiles(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t head,
                                 const ScoreModFn& score_mod, const MaskModFn& mask_mod,
                                 const ch11::BlockMask& block_mask) {
  const ch11::BlockMask& bm = block_mask;
  require_flex_call(Q, K, V, head, score_mod, mask_mod, bm);
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_k = Q.shape(1), d_v = V.shape(1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));
  const std::size_t mask_head = bm.heads == 1 ? 0 : head;
  FlashOutput out{Matrix(Matrix::shape_type{n_q, d_v}, 0.0f), Vector(Vector::shape_type{n_q}, kMinusInf), 0};
  for (std::size_t i = 0; i < bm.T_r; ++i) {
    const std::size_t r0 = i * bm.B_r, rows = std::min(bm.B_r, n_q - r0);
    const Matrix Q_i = xt::view(Q, xt::range(r0, r0 + rows), xt::all());  // (rows, d_k)
    OnlineState state = empty_state(rows, d_v);
    for (std::size_t j = 0; j < bm.T_c; ++j) {
      const ch11::Tile tile = bm.at(mask_head, i, j);
      if (tile == ch11::Tile::empty) continue;  // nothing allowed: never computed
      ++out.tiles_visited;
      const std::size_t c0 = j * bm.B_c, cols = std::min(bm.B_c, n_kv - c0);
      const Matrix K_j = xt::view(K, xt::range(c0, c0 + cols), xt::all());  // (cols, d_k)
      const Matrix V_j = xt::view(V, xt::range(c0, c0 + cols), xt::all());  // (cols, d_v)
      Matrix S = matmul(Q_i, K_j, /*transpose_b=*/true, scale);             // (rows, cols)
      // The modifiers, score by score: score_mod first, then the mask (a masked score is -inf whatever
      // score_mod would make of it); a full tile has nothing to mask.
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
          S(r, c) = score_mod(S(r, c), head, r0 + r, c0 + c);
          if (tile == ch11::Tile::partial && !mask_mod(head, r0 + r, c0 + c)) S(r, c) = kMinusInf;
        }
      state = merge_states(state, tile_state(S, V_j));  // chapter 05's merge
    }
    for (std::size_t r = 0; r < rows; ++r) {
      if (state.l(r) == 0.0f) continue;  // saw no key: zeros and lse = -inf
      for (std::size_t c = 0; c < d_v; ++c) out.O(r0 + r, c) = state.acc(r, c) / state.l(r);
      out.lse(r0 + r) = state.m(r) + std::log(state.l(r));
    }
  }
  return out;
}
// [flex_attention_tiles]

}  // namespace attn
