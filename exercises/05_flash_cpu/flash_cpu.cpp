// Chapter 05, your exercises. Book page: book/05_flash_cpu.md.
// Check your progress with `./course check 05`; stuck? `./course hint 05`.
// Watch your code run the chapter: `./course run 05 --track exercise`.
// Suggested order: tiled_io_floats, merge_states, tile_step, flash_attention, attention_row.
#include "05_flash_cpu/flash_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "05_flash_cpu";
}

OnlineState merge_states(const OnlineState& a, const OnlineState& b) {
  // TODO(learner): per row, m = max(a.m, b.m); bring both sums to that reference with e^{m_a - m} and
  //   e^{m_b - m} and add them (ℓ and every column of acc). A row where both m are -inf stays empty:
  //   e^{-inf - (-inf)} is NaN, so treat "m_old = -inf" as factor 0. Check the shapes first.
  throw not_implemented("merge_states", kChapter,
                        "m = max(m_a, m_b); ℓ = ℓ_a·exp(m_a - m) + ℓ_b·exp(m_b - m); acc the same way.");
}

void tile_step(OnlineState& state, const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Mask& allowed) {
  // TODO(learner): S = Q_i K_jᵀ / sqrt(d_k) (B_r, B_c); -inf where allowed is false; per row the new max
  //   m_new = max(m, max_c S); rescale ℓ and acc by exp(m - m_new); P = exp(S - m_new); ℓ += Σ_c P;
  //   acc += P·V_j. A row whose tile is fully masked must stay unchanged (and never become NaN).
  throw not_implemented("tile_step", kChapter,
                        "scores, new max, rescale the old sums, add the new ones: the online softmax on a block.");
}

FlashOutput flash_attention(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal, std::size_t B_r,
                            std::size_t B_c) {
  // TODO(learner): for each block of B_r query rows: state = empty_state(rows, d_v); for each block of B_c
  //   keys, tile_step (with the causal part of the mask where the diagonal crosses the tile; skip tiles
  //   wholly above it); then O = acc / ℓ and lse = m + log ℓ. Blocks at the end may be smaller.
  //   Count the tile_step calls in the result's tiles_visited (the tests check the causal skip with it),
  //   and never hold an (n_q, n_kv) matrix: the tests measure the heap.
  //   Reject bad shapes, B_r or B_c = 0, causal with n_q > n_kv, and NaN/Inf or overflowing inputs
  //   (attn::require_attention_inputs, attn/checks.hpp).
  throw not_implemented(
      "flash_attention", kChapter,
      "two loops (query blocks outside, key blocks inside) around tile_step, one division at the end.");
}

Vector attention_row(const Matrix& Q, const Matrix& K, const Vector& lse, std::size_t i, bool causal) {
  // TODO(learner): A(i, j) = exp(q_i·k_j / sqrt(d_k) - lse_i) for the keys row i may see, 0 elsewhere
  //   (and all zeros when lse_i is -inf). Refuse a NaN or +inf lse_i, and NaN/Inf in Q or K
  //   (attn::require_attention_inputs).
  throw not_implemented("attention_row", kChapter, "softmax(s)_j = exp(s_j) / Σ exp = exp(s_j - log Σ exp).");
}

std::size_t tiled_io_floats(std::size_t n, std::size_t d, std::size_t B_r) {
  // TODO(learner): count the floats read (Q once, K and V once per query block) and written (O and lse).
  //   Sizes whose count passes 64 bits are refused, not wrapped (attn::checked_product, attn::checked_sum).
  throw not_implemented("tiled_io_floats", kChapter, "how many query blocks are there, and what does each one read?");
}

}  // namespace attn
