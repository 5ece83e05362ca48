// Chapter 05, reference solutions. Book page: book/05_flash_cpu.md.
// Written to be read beside the FlashAttention-2 paper's Algorithm 1: the names are the paper's
// (Q_i, K_j, V_j, m, ℓ, B_r, B_c), the products are OpenBLAS (attn::matmul), the rest is plain loops.
// The fast version of the same algorithm is chapters/05_flash_cpu/flash_fast.cpp.
#include "05_flash_cpu/flash_cpu.hpp"
#include "attn/checks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace attn {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

void require_state_shapes(const char* where, const OnlineState& s) {
  require(s.m.shape(0) == s.l.shape(0) && s.acc.shape(0) == s.m.shape(0),
          fmt::format("{}: a state's m is {}, ℓ is {} and acc is {}; they need one row each", where, shape_str(s.m),
                      shape_str(s.l), shape_str(s.acc)));
}

// e^{m_old - m_new}, the factor that moves a sum taken relative to m_old to one relative to m_new.
// A row that has seen nothing (m_old = -inf) has nothing to rescale: 0, not e^{-inf + inf} = NaN.
float rescale_factor(float m_old, float m_new) { return m_old == kMinusInf ? 0.0f : std::exp(m_old - m_new); }

}  // namespace

// [merge_states]
OnlineState merge_states(const OnlineState& a, const OnlineState& b) {
  require_state_shapes("merge_states", a);
  require_state_shapes("merge_states", b);
  require(a.acc.shape() == b.acc.shape(),
          fmt::format("merge_states: acc is {} in one state and {} in the other; merge the same query rows",
                      shape_str(a.acc), shape_str(b.acc)));
  const std::size_t rows = a.m.shape(0), d_v = a.acc.shape(1);
  OnlineState out = empty_state(rows, d_v);
  for (std::size_t r = 0; r < rows; ++r) {
    const float m = std::max(a.m(r), b.m(r));
    if (m == kMinusInf) continue;  // neither side has seen a key: the row stays empty
    // Both sums are brought to the common reference m; the side that held the max keeps factor 1.
    const float fa = rescale_factor(a.m(r), m), fb = rescale_factor(b.m(r), m);
    out.m(r) = m;
    out.l(r) = fa * a.l(r) + fb * b.l(r);
    for (std::size_t c = 0; c < d_v; ++c) out.acc(r, c) = fa * a.acc(r, c) + fb * b.acc(r, c);
  }
  return out;
}
// [merge_states]

// [tile_step]
void tile_step(OnlineState& state, const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Mask& allowed) {
  const std::size_t B_r = Q_i.shape(0), B_c = K_j.shape(0), d_v = V_j.shape(1);
  require(Q_i.shape(1) == K_j.shape(1) && V_j.shape(0) == B_c,
          fmt::format("tile_step: Q_i is {}, K_j is {} and V_j is {}; Q_i and K_j need the same d_k and V_j one "
                      "row per key",
                      shape_str(Q_i), shape_str(K_j), shape_str(V_j)));
  require(state.m.shape(0) == B_r && state.l.shape(0) == B_r && state.acc.shape(0) == B_r && state.acc.shape(1) == d_v,
          fmt::format("tile_step: the state has m {}, ℓ {}, acc {} but Q_i is {} and V_j is {}", shape_str(state.m),
                      shape_str(state.l), shape_str(state.acc), shape_str(Q_i), shape_str(V_j)));
  require(allowed.size() == 0 || (allowed.shape(0) == B_r && allowed.shape(1) == B_c),
          fmt::format("tile_step: the mask is {} but the tile is ({}, {})", shape_str(allowed), B_r, B_c));

  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(Q_i.shape(1), 1)));
  Matrix P = matmul(Q_i, K_j, /*transpose_b=*/true, scale);  // (B_r, B_c): S_ij, overwritten by exp(S_ij - m_new)
  for (std::size_t r = 0; r < B_r; ++r) {
    float* p = P.data() + r * B_c;
    if (allowed.size() > 0)
      for (std::size_t c = 0; c < B_c; ++c)
        if (!allowed(r, c)) p[c] = kMinusInf;
    const float m_tile = *std::max_element(p, p + B_c);
    if (m_tile == kMinusInf) {  // nothing allowed in this tile for this row: it contributes nothing
      std::fill(p, p + B_c, 0.0f);
      continue;
    }
    const float m_new = std::max(state.m(r), m_tile);
    const float alpha = rescale_factor(state.m(r), m_new);  // how far the old sums must shrink
    float rowsum = 0.0f;
    for (std::size_t c = 0; c < B_c; ++c) rowsum += (p[c] = std::exp(p[c] - m_new));  // each ≤ 1, masked → 0
    state.m(r) = m_new;
    state.l(r) = alpha * state.l(r) + rowsum;
    for (std::size_t c = 0; c < d_v; ++c) state.acc(r, c) *= alpha;
  }
  state.acc += matmul(P, V_j);  // (B_r, d_v): Σ_c exp(S_rc - m_new) v_c, added to the rescaled sums
}
// [tile_step]

namespace {

// The part of the causal mask that falls in the tile of query rows [r0, r0 + B_r) and keys [c0, c0 + B_c):
// query i sees key j when j ≤ i + offset, offset = n_kv - n_q.
Mask causal_tile(std::size_t r0, std::size_t B_r, std::size_t c0, std::size_t B_c, std::size_t offset) {
  Mask allowed = xt::zeros<bool>({B_r, B_c});  // (B_r, B_c)
  for (std::size_t r = 0; r < B_r; ++r)
    for (std::size_t c = 0; c < B_c && c0 + c <= r0 + r + offset; ++c) allowed(r, c) = true;
  return allowed;
}

}  // namespace

// [flash_attention]
FlashOutput flash_attention(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal, std::size_t B_r,
                            std::size_t B_c) {
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_v = V.shape(1);
  require(Q.shape(1) == K.shape(1) && V.shape(0) == n_kv,
          fmt::format("flash_attention: Q is {}, K is {} and V is {}; Q and K need the same d_k and V one row per key",
                      shape_str(Q), shape_str(K), shape_str(V)));
  require(B_r > 0 && B_c > 0,
          fmt::format("flash_attention: tile sizes must be positive, got B_r = {}, B_c = {}", B_r, B_c));
  require(!causal || n_q <= n_kv, fmt::format("flash_attention: causal with {} queries but only {} keys; the queries "
                                              "are the last n_q positions, so n_q <= n_kv",
                                              n_q, n_kv));
  require_attention_inputs("flash_attention", Q, K, V);  // finite, and no score can overflow float

  const std::size_t offset = n_kv - std::min(n_q, n_kv);  // query i sits at position i + offset
  FlashOutput out{Matrix(Matrix::shape_type{n_q, d_v}, 0.0f), Vector(Vector::shape_type{n_q}, kMinusInf)};
  for (std::size_t r0 = 0; r0 < n_q; r0 += B_r) {  // outer loop: one block of query rows, Q_i, at a time
    const std::size_t rows = std::min(B_r, n_q - r0);
    const Matrix Q_i = xt::view(Q, xt::range(r0, r0 + rows), xt::all());  // (rows, d_k)
    OnlineState state = empty_state(rows, d_v);                           // m, ℓ (rows), acc (rows, d_v)
    // Causal: the last row of this block sees keys up to r0 + rows - 1 + offset; later tiles are skipped.
    const std::size_t kv_end = causal ? std::min(n_kv, r0 + rows + offset) : n_kv;
    for (std::size_t c0 = 0; c0 < kv_end; c0 += B_c) {  // inner loop: K_j, V_j stream past the block
      // The last tile may be short. A tile the diagonal crosses is computed whole and masked, not cut at the last
      // visible key: chapter 10's backward recomputes these scores from tiles of the same shapes, so that they
      // are the same products and round the same.
      const std::size_t cols = std::min(B_c, n_kv - c0);
      const Matrix K_j = xt::view(K, xt::range(c0, c0 + cols), xt::all());  // (cols, d_k)
      const Matrix V_j = xt::view(V, xt::range(c0, c0 + cols), xt::all());  // (cols, d_v)
      // Only a tile the diagonal crosses needs a mask: its last key lies beyond the first row's horizon.
      const bool crosses_diagonal = causal && c0 + cols - 1 > r0 + offset;
      tile_step(state, Q_i, K_j, V_j, crosses_diagonal ? causal_tile(r0, rows, c0, cols, offset) : Mask());
      ++out.tiles_visited;  // the work done: the tests see from it that causal skipped the tiles above
    }
    for (std::size_t r = 0; r < rows; ++r) {  // one division per row, at the very end
      if (state.l(r) == 0.0f) continue;       // no key seen: zeros and lse = -inf
      for (std::size_t c = 0; c < d_v; ++c) out.O(r0 + r, c) = state.acc(r, c) / state.l(r);
      out.lse(r0 + r) = state.m(r) + std::log(state.l(r));
    }
  }
  return out;
}
// [flash_attention]

// [attention_row]
Vector attention_row(const Matrix& Q, const Matrix& K, const Vector& lse, std::size_t i, bool causal) {
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_k = Q.shape(1);
  require(K.shape(1) == d_k && lse.shape(0) == n_q,
          fmt::format("attention_row: Q is {}, K is {} and lse is {}; Q and K need the same d_k and lse one entry "
                      "per query",
                      shape_str(Q), shape_str(K), shape_str(lse)));
  require(i < n_q, fmt::format("attention_row: row {} asked for but Q has {} rows", i, n_q));
  require(!causal || n_q <= n_kv, fmt::format("attention_row: causal with {} queries but only {} keys", n_q, n_kv));
  require(std::isfinite(lse(i)) || lse(i) == kMinusInf,
          fmt::format("attention_row: lse[{}] is {}; a log-sum-exp is finite, or -inf for a row that saw no key", i,
                      lse(i)));
  require_attention_inputs("attention_row", Q.data(), Q.size(), d_k, K.data(), K.size(), d_k, nullptr, 0);
  Vector a = xt::zeros<float>({n_kv});  // (n_kv)
  if (lse(i) == kMinusInf) return a;    // the row saw no key
  const std::size_t visible = causal ? i + (n_kv - n_q) + 1 : n_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));
  for (std::size_t j = 0; j < visible; ++j) {
    float s = 0.0f;
    for (std::size_t c = 0; c < d_k; ++c) s += Q(i, c) * K(j, c);
    a(j) = std::exp(s * scale - lse(i));  // exp(s - lse) = exp(s) / Σ exp: the softmax, without the sum
  }
  return a;
}
// [attention_row]

// [tiled_io_floats]
std::size_t tiled_io_floats(std::size_t n, std::size_t d, std::size_t B_r) {
  require(B_r > 0, "tiled_io_floats: B_r must be positive");
  const std::size_t T_r = n / B_r + (n % B_r != 0);  // query blocks (⌈n / B_r⌉ without n + B_r - 1 wrapping)
  // Each count is checked: at absurd sizes the answer is an error naming them, never a wrapped-around number.
  const std::size_t nd = checked_product("tiled_io_floats: n × d", {n, d});
  return checked_sum("tiled_io_floats",
                     {nd,  // read Q, one block at a time
                      checked_product("tiled_io_floats: T_r × 2 × n × d", {T_r, 2, n, d}),  // K_j, V_j per block
                      nd, n});  // write O and the log-sum-exp
}
// [tiled_io_floats]

}  // namespace attn
