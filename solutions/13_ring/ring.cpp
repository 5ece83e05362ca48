// Chapter 13, reference solutions. Book page: book/13_ring.md.
// The ring is three small ideas: which block a rank holds at each step (modular arithmetic), which
// (query, key) chunk pairs the causal rule lets through, and chapter 05's merge, which makes the order in
// which blocks arrive irrelevant. The flash computation inside each step is chapter 05's fast kernel.
#include "13_ring/ring.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "attn/checks.hpp"

namespace attn::ch13 {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// A finished result (O, lse) seen as an online-softmax state: m = lse and ℓ = 1 make acc / ℓ = O and
// m + log ℓ = lse. A row that saw no key (lse = -inf) is the empty state, ℓ = 0, acc = 0.
OnlineState state_of(const Matrix& O, const Vector& lse, std::size_t row0, std::size_t rows) {
  const std::size_t d_v = O.shape(1);
  OnlineState s = empty_state(rows, d_v);
  for (std::size_t r = 0; r < rows; ++r) {
    if (lse(row0 + r) == kMinusInf) continue;
    s.m(r) = lse(row0 + r);
    s.l(r) = 1.0f;
    for (std::size_t c = 0; c < d_v; ++c) s.acc(r, c) = O(row0 + r, c);
  }
  return s;
}

}  // namespace

// [ring_source]
std::size_t ring_source(std::size_t rank, std::size_t step, std::size_t P) {
  require(P > 0 && rank < P && step < P,
          fmt::format("ring_source: rank {} at step {} of a ring of P = {} (need rank < P, step < P)", rank, step, P));
  // Each step moves every block one rank forward, so after s steps rank r holds what rank r - s had.
  // (Unsigned indices: below step, wrap around by adding P − step, which cannot overflow as rank + P could.)
  return rank >= step ? rank - step : rank + (P - step);
}
// [ring_source]

// [zigzag_chunks]
Chunks zigzag_chunks(std::size_t rank, std::size_t P, std::size_t n) {
  require(P > 0 && rank < P, fmt::format("zigzag_chunks: rank {} of P = {} ranks", rank, P));
  checked_product("zigzag_chunks: 2P pieces", {2, P});
  // Piece r is early (few keys visible), piece 2P-1-r as late as r is early: their sum is the same for all r.
  return Chunks{even_chunk(rank, 2 * P, n), even_chunk(2 * P - 1 - rank, 2 * P, n)};
}
// [zigzag_chunks]

// [causal_block]
CausalBlock causal_block(Chunk q, Chunk k) {
  constexpr auto kMaxPosition = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  require(q.begin <= q.end && k.begin <= k.end && q.end <= kMaxPosition && k.end <= kMaxPosition,
          fmt::format("causal_block: chunks [{}, {}) and [{}, {}); a chunk has begin ≤ end < 2^63", q.begin, q.end,
                      k.begin, k.end));
  const auto offset = static_cast<std::ptrdiff_t>(q.begin) - static_cast<std::ptrdiff_t>(k.begin);
  if (q.size() == 0 || k.size() == 0) return {Visibility::hidden, offset};
  // Query i sees key j when j ≤ i. The first key after the last query: nothing visible.
  if (k.begin > q.end - 1) return {Visibility::hidden, offset};
  // The last key at or before the first query: everything visible.
  if (k.end - 1 <= q.begin) return {Visibility::full, offset};
  return {Visibility::diagonal, offset};
}
// [causal_block]

// [merge_partial]
void merge_partial(FlashOutput& running, std::size_t row0, const FlashOutput& part) {
  const std::size_t rows = part.O.shape(0);
  // row0 ≤ running rows − rows, not row0 + rows ≤ running rows: a row0 near SIZE_MAX must not wrap around.
  require(running.O.shape(0) == running.lse.shape(0) && part.lse.shape(0) == rows &&
              part.O.shape(1) == running.O.shape(1) && rows <= running.O.shape(0) && row0 <= running.O.shape(0) - rows,
          fmt::format("merge_partial: part O {} lse {} at row {} does not fit running O {} lse {}", shape_str(part.O),
                      shape_str(part.lse), row0, shape_str(running.O), shape_str(running.lse)));
  // O finite; lse finite or -inf (a row that saw no key).
  require_finite("merge_partial", "part O", part.O.data(), part.O.size());
  require_finite("merge_partial", "part lse", part.lse.data(), part.lse.size(), /*allow_minus_inf=*/true);
  require_finite("merge_partial", "running O", running.O.data(), running.O.size());
  require_finite("merge_partial", "running lse", running.lse.data(), running.lse.size(), /*allow_minus_inf=*/true);
  const OnlineState merged =
      merge_states(state_of(running.O, running.lse, row0, rows), state_of(part.O, part.lse, 0, rows));
  for (std::size_t r = 0; r < rows; ++r) {
    const float l = merged.l(r);
    // ℓ = 0: no key in either part; the row stays O = 0, lse = -inf (never 0/0).
    running.lse(row0 + r) = l > 0.0f ? merged.m(r) + std::log(l) : kMinusInf;
    for (std::size_t c = 0; c < merged.acc.shape(1); ++c)
      running.O(row0 + r, c) = l > 0.0f ? merged.acc(r, c) / l : 0.0f;
  }
}
// [merge_partial]

// [fold_block]
void fold_block(FlashOutput& running, const Matrix& Q, const Chunks& q_chunks, const KVBlock& block,
                const Chunks& k_chunks, bool causal, const Tiles& tiles) {
  require(Q.shape(0) == rows_of(q_chunks) && running.O.shape(0) == Q.shape(0) && running.lse.shape(0) == Q.shape(0) &&
              block.K.shape(0) == rows_of(k_chunks) && block.V.shape(0) == block.K.shape(0) &&
              block.K.shape(1) == Q.shape(1) && running.O.shape(1) == block.V.shape(1),
          fmt::format("fold_block: Q {} ({} positions), running O {}, K {} and V {} ({} positions) do not fit",
                      shape_str(Q), rows_of(q_chunks), shape_str(running.O), shape_str(block.K), shape_str(block.V),
                      rows_of(k_chunks)));
  // Every input checked before the first merge, so a refusal leaves running as it was: the values (finite, no score
  // past float: the overflow policy), then every pair's causal relation.
  require_attention_inputs("fold_block", Q, block.K, block.V);
  if (causal)
    for (const Chunk& qc : q_chunks)
      for (const Chunk& kc : k_chunks) {
        const CausalBlock cb = causal_block(qc, kc);
        require(cb.visibility != Visibility::diagonal ||
                    cb.offset == static_cast<std::ptrdiff_t>(kc.size()) - static_cast<std::ptrdiff_t>(qc.size()),
                fmt::format("fold_block: query chunk [{}, {}) and key chunk [{}, {}) overlap without ending together",
                            qc.begin, qc.end, kc.begin, kc.end));
      }
  std::size_t q_row = 0;
  for (const Chunk& qc : q_chunks) {
    std::size_t k_row = 0;
    for (const Chunk& kc : k_chunks) {
      const CausalBlock cb = causal ? causal_block(qc, kc) : CausalBlock{Visibility::full, 0};
      const bool empty = qc.size() == 0 || kc.size() == 0;
      if (!empty && cb.visibility != Visibility::hidden) {
        // Chapter 05's causal rule is j ≤ i + (n_kv - n_q): it matches this pair's offset when the chunks end
        // together, which is the only diagonal a partition of the positions produces (a chunk with itself; checked
        // above).
        const Matrix Q_c = xt::view(Q, xt::range(q_row, q_row + qc.size()), xt::all());        // (|qc|, d_k)
        const Matrix K_c = xt::view(block.K, xt::range(k_row, k_row + kc.size()), xt::all());  // (|kc|, d_k)
        const Matrix V_c = xt::view(block.V, xt::range(k_row, k_row + kc.size()), xt::all());  // (|kc|, d_v)
        const FlashOutput part =
            ch05::flash_attention_fast(Q_c, K_c, V_c, cb.visibility == Visibility::diagonal, tiles);  // (|qc|, d_v)
        merge_partial(running, q_row, part);
      }
      k_row += kc.size();
    }
    q_row += qc.size();
  }
}
// [fold_block]

// [ring_attention_rank]
FlashOutput ring_attention_rank(std::size_t rank, std::size_t P, std::size_t n, Split split, const Matrix& Q,
                                const KVBlock& own, bool causal, RingLink& link, const Tiles& tiles) {
  const Chunks q_chunks = rank_chunks(rank, P, n, split);
  const std::size_t rows = rows_of(q_chunks);
  require(Q.shape(0) == rows && own.K.shape(0) == rows && own.V.shape(0) == rows,
          fmt::format("ring_attention_rank: rank {} of {} owns {} of n = {} positions, but Q is {}, K {}, V {}", rank,
                      P, rows, n, shape_str(Q), shape_str(own.K), shape_str(own.V)));
  FlashOutput running{Matrix(Matrix::shape_type{rows, own.V.shape(1)}, 0.0f),  // (rows, d_v)
                      Vector(Vector::shape_type{rows}, kMinusInf)};            // (rows)
  KVBlock held = own;
  for (std::size_t step = 0; step < P; ++step) {
    const bool more = step + 1 < P;
    // Send first, compute second: the transfer of the held block overlaps the flash work on it.
    if (more) link.start(held, rows_of(rank_chunks(ring_source(rank, step + 1, P), P, n, split)));
    fold_block(running, Q, q_chunks, held, rank_chunks(ring_source(rank, step, P), P, n, split), causal, tiles);
    if (more) held = link.finish();
  }
  return running;
}
// [ring_attention_rank]

}  // namespace attn::ch13
