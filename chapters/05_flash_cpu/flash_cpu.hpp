/// \file
/// Chapter 05, FlashAttention on the CPU: the contract the learner implements in
/// exercises/05_flash_cpu/flash_cpu.cpp. Book page: book/05_flash_cpu.md.
///
/// The tiled forward computes exactly what chapter 02's scaled_dot_product_attention() computes, without
/// ever holding the (n_q, n_kv) score matrix: it walks over blocks of B_r query rows and, inside, over
/// blocks of B_c keys, carrying per row the online-softmax state (m, ℓ, and the un-normalised output).
/// FlashOutput is also the type chapter 06's CUDA kernels are checked against.
#pragma once

#include <cstddef>
#include <limits>

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch05 Chapter 05: FlashAttention on the CPU
/// The online softmax, one tile step, the tiled forward, and what its log-sum-exp is good for.
/// @{

/// What a FlashAttention forward returns.
struct FlashOutput {
  Matrix O;    ///< (n_q, d_v) the attention output, equal to softmax(Q Kᵀ / √d_k) V
  Vector lse;  ///< (n_q) lse_i = log Σ_j exp(s_ij), s_ij = q_i·k_j / √d_k over the keys row i may see
               ///< (-inf for a row that sees no key); A(i, j) = exp(s_ij - lse_i) recovers any row of A
  std::size_t tiles_visited = 0;  ///< (Q_i, K_j) tiles whose scores flash_attention() computed: the work it
                                  ///< did, so a test can see the causal skip (0 from kernels that do not count)
};

/// The online-softmax state of a block of query rows after it has seen some of the keys.
/// With s_j the scaled scores of the keys seen so far:
/// m = max_j s_j, ℓ = Σ_j exp(s_j - m), acc = Σ_j exp(s_j - m) v_j. The attention output is acc / ℓ and the
/// log-sum-exp is m + log ℓ. Before any key: m = -inf, ℓ = 0, acc = 0 (see empty_state()).
struct OnlineState {
  Vector m;    ///< (rows) running max of the scaled scores seen so far
  Vector l;    ///< (rows) running sum ℓ of exp(s - m)
  Matrix acc;  ///< (rows, d_v) running Σ exp(s - m)·v: the output before its one division by ℓ
};

/// The state of \p rows query rows that have seen no key yet: m = -inf, ℓ = 0, acc = 0 (\p rows, \p d_v).
/// \throws std::invalid_argument naming rows and d_v when the state would not fit in memory (checked_allocation()).
inline OnlineState empty_state(std::size_t rows, std::size_t d_v) {
  checked_allocation("empty_state: m and ℓ, 2 × rows floats", {2, rows, sizeof(float)});
  checked_allocation("empty_state: acc, rows × d_v floats", {rows, d_v, sizeof(float)});
  return OnlineState{Vector(xt::xtensor<float, 1>::shape_type{rows}, -std::numeric_limits<float>::infinity()),
                     Vector(xt::xtensor<float, 1>::shape_type{rows}, 0.0f),
                     Matrix(Matrix::shape_type{rows, d_v}, 0.0f)};
}

/// Merges the states of the same query rows over two disjoint sets of keys into their state over the
/// union: m = max(m_a, m_b), ℓ = ℓ_a e^{m_a - m} + ℓ_b e^{m_b - m}, acc likewise. The merge is associative
/// and commutative (up to float rounding), and empty_state() is its identity; rows that have seen no key
/// in either state stay empty (never NaN).
/// \param a a state: m, ℓ (rows) and acc (rows, d_v).
/// \param b a state of the same shapes, over other keys.
/// \return the merged state, same shapes.
/// \throws std::invalid_argument naming the shapes when a and b (or a state's own parts) differ.
OnlineState merge_states(const OnlineState& a, const OnlineState& b);

/// One step of the tiled forward: the rows of \p Q_i see the keys \p K_j and values \p V_j.
/// Computes the scores S = Q_i K_jᵀ / √d_k (B_r, B_c), sets disallowed entries to -inf, takes the new row
/// max, rescales ℓ and acc by e^{m_old - m_new} where the max moved, and adds exp(S - m_new) and
/// exp(S - m_new)·V_j. A row with no allowed key in this tile is left as it was.
/// \param state m, ℓ (B_r) and acc (B_r, d_v), updated in place.
/// \param Q_i (B_r, d_k) a block of query rows.
/// \param K_j (B_c, d_k) a block of keys.
/// \param V_j (B_c, d_v) their values.
/// \param allowed (B_r, B_c), true = may attend; empty (the default) = all pairs allowed.
/// \throws std::invalid_argument naming the shapes when they do not fit together.
void tile_step(OnlineState& state, const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j,
               const Mask& allowed = Mask());

/// The tiled forward in FlashAttention-2 order: for each block of \p B_r query rows, loop over blocks of
/// \p B_c keys with tile_step(), then divide once by ℓ. With \p causal, query i sees key j only when
/// j ≤ i + (n_kv - n_q) (chapter 02's causal_mask()): tiles wholly above that diagonal are skipped and the
/// tiles it crosses are masked. n_q and n_kv need not be multiples of B_r and B_c. Extra memory is
/// O(B_r·B_c + B_r·d_v), never (n_q, n_kv).
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param V (n_kv, d_v) values.
/// \param causal apply the causal mask.
/// \param B_r query rows per block (≥ 1).
/// \param B_c keys per block (≥ 1).
/// \return O (n_q, d_v), lse (n_q) and tiles_visited, the number of tile_step() calls: ⌈n_q/B_r⌉·⌈n_kv/B_c⌉
///         without causal, only the tiles the diagonal leaves some allowed pair in with it. A row that sees
///         no key (n_kv = 0) gets zeros and lse = -inf.
/// \throws std::invalid_argument naming the shapes when Q, K, V do not fit together, when B_r or B_c is 0,
///         when causal and n_q > n_kv, or naming the first NaN/Inf in Q, K or V.
FlashOutput flash_attention(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal, std::size_t B_r,
                            std::size_t B_c);

/// Row \p i of the attention matrix A, recomputed from the queries, the keys and the log-sum-exp that
/// flash_attention() returned: A(i, j) = exp(q_i·k_j / √d_k - lse_i), and 0 where \p causal hides key j.
/// O(n_kv·d_k) work, no (n_q, n_kv) matrix: the debug view of a flash kernel, and what the backward pass uses.
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param lse (n_q) the log-sum-exp flash_attention() returned.
/// \param i the row wanted, i < n_q.
/// \param causal whether lse came from a causal run.
/// \return (n_kv), summing to 1 (or all zeros when lse_i = -inf).
/// \throws std::invalid_argument when the shapes do not fit, i ≥ n_q, causal and n_q > n_kv, lse_i is NaN or +inf,
///         or Q or K holds a NaN/Inf (or a score could overflow).
Vector attention_row(const Matrix& Q, const Matrix& K, const Vector& lse, std::size_t i, bool causal);

/// Floats the tiled forward (FlashAttention-2 order, non-causal, n_q = n_kv = \p n, d_k = d_v = \p d)
/// moves between slow and fast memory in the chapter's IO model: every block of B_r query rows is read
/// once, every key and value is read once per query block, and O and the log-sum-exp are written once.
/// \param n sequence length (queries and keys).
/// \param d head dimension.
/// \param B_r query rows per block.
/// \return reads + writes, in floats.
/// \throws std::invalid_argument when B_r is 0, or naming the sizes when the count does not fit in 64 bits.
std::size_t tiled_io_floats(std::size_t n, std::size_t d, std::size_t B_r);

/// @}

}  // namespace attn
