// Chapter 09's fast decode step (decode_fast.hpp). Book pages: book/09_mqa_gqa.md, "The roofline of a decode
// step", and book/measure_09_mqa_gqa.md.
//
// The learner's decode_step() is right and simple: per group, S = Q_j·K_jᵀ, softmax, O_j = A·V_j, through
// OpenBLAS. It reads each group's keys and values once, but in three passes with an (r, n) score matrix in
// memory between them, and for r > 1 OpenBLAS's sgemm repacks all n cached keys at every step. This file
// makes the same computation one pass over the cache, as FlashDecoding does for grouped heads:
//   1. For each group and each block of kDecodeKeysPerBlock cached keys (16 KiB of K and 16 KiB of V at
//      d = 128, in L1), the r × block scores. Few query rows (r < 16: MHA, GQA-8): two rows against four
//      keys at a time, each vector of a key loaded once feeding two or four multiply-adds, the partial sums
//      added in a shuffle tree (block_scores). Many rows (MQA): the group's queries transposed once per
//      step, and the scores by a GEMM micro-kernel, a key value broadcast against 16 or 32 queries
//      (panel_scores, on accumulate_rows). The queries are scaled by 1/√d_k once per step.
//   2. An online softmax per query row over the block (chapter 05's running max m and sum ℓ, on chapter 05's
//      vectorised row passes: row_max, exp_shift_sum, scale_row).
//   3. O_j += P · V_block while the block's values are still in L1 (accumulate_pv_block, on the same
//      accumulate_rows): each value row loaded once feeds all r rows.
// So the keys and values are each read from memory once per step, the scores never leave L1, and the cache
// is never packed or copied. The loops are written on GCC's vector extensions (a Vec: one AVX-512 register
// of 16 floats, or 8 floats on AVX2 and NEON, so that the accumulators fit each register file), and the course's vector
// layer (attn/vector.hpp: Google Highway) compiles them once per instruction set and calls the copy of the path in use;
// this file alone is compiled with -ffp-contract=fast so that a·b + c becomes one fused multiply-add. `ch09_mqa_gqa
// bench` times it beside the learner's version (its rows with fast:1 and fast:0), against the roofline bound of each
// step.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "09_mqa_gqa/decode_fast.cpp"
#include "attn/vector.hpp"  // first: it names the instruction sets

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include "09_mqa_gqa/decode_blocks.hpp"
#include "09_mqa_gqa/decode_fast.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/row_ops.hpp"
#include "attn/checks.hpp"

// The kernels, compiled once per instruction set (HWY_NAMESPACE names the copy: N_AVX3, N_AVX2, ...).
HWY_BEFORE_NAMESPACE();
namespace attn::ch09::HWY_NAMESPACE {

/// One AVX-512 register of 16 floats, or 8 floats elsewhere: GCC lowers the operators on it to the instruction set
/// each copy is compiled for. Loaded and stored with memcpy (any alignment). The width follows the register file,
/// because the blocks below keep up to 26 Vecs live: AVX-512 has 32 registers of 16 floats, AVX2 16 of 8 and NEON
/// 32 of 4, so 16 floats a Vec would spill AVX2's accumulators to the stack at every multiply-add, and 8 keeps
/// them in registers (two NEON registers a Vec).
#if HWY_TARGET == HWY_AVX3
constexpr std::size_t kW = 16;      // floats per Vec
constexpr std::size_t kPvRows = 4;  // accumulate_pv_block's rows at a time: 4 × 4 Vecs of O, 4 of V
#else
constexpr std::size_t kW = 8;
constexpr std::size_t kPvRows = 2;  // 2 × 4 Vecs of O, 4 of V: 12 of AVX2's 16 registers
#endif
using Vec = float __attribute__((vector_size(kW * sizeof(float))));

// [block_scores]
/// s[u] ← the sum of the 16 lanes of acc[u], for U = 4 accumulators at once: halves added pairwise in a tree
/// (16 → 8 → 4 → 2 → 1 per accumulator) with the four accumulators' halves packed into one vector at each
/// level, so four sums cost ten shuffles and five vector additions instead of a chain of 64 scalar ones.
/// For U = 1 the same tree on one vector.
template <std::size_t U>
inline void sum_lanes(const Vec (&acc)[U], float (&s)[U]) {
#if HWY_TARGET != HWY_AVX3
  if constexpr (U == 4) {  // the same tree on 8 lanes: 8 → 4 → 2 → 1
    const Vec a = __builtin_shufflevector(acc[0], acc[1], 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(acc[0], acc[1], 4, 5, 6, 7, 12, 13, 14, 15);
    const Vec b = __builtin_shufflevector(acc[2], acc[3], 0, 1, 2, 3, 8, 9, 10, 11) +
                  __builtin_shufflevector(acc[2], acc[3], 4, 5, 6, 7, 12, 13, 14, 15);
    const Vec c = __builtin_shufflevector(a, b, 0, 1, 4, 5, 8, 9, 12, 13) +
                  __builtin_shufflevector(a, b, 2, 3, 6, 7, 10, 11, 14, 15);
    const Vec e =
        __builtin_shufflevector(c, c, 0, 2, 4, 6, 0, 2, 4, 6) + __builtin_shufflevector(c, c, 1, 3, 5, 7, 1, 3, 5, 7);
    std::memcpy(s, &e, 4 * sizeof(float));
  } else
#else
  if constexpr (U == 4) {
    const Vec a = __builtin_shufflevector(acc[0], acc[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                  __builtin_shufflevector(acc[0], acc[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const Vec b = __builtin_shufflevector(acc[2], acc[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                  __builtin_shufflevector(acc[2], acc[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    // a = [acc0: 8 | acc1: 8], b = [acc2: 8 | acc3: 8] → c = [acc0: 4 | acc1: 4 | acc2: 4 | acc3: 4]
    const Vec c = __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
                  __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    // → [acc0: 2 | acc1: 2 | acc2: 2 | acc3: 2 | …] → [s0, s1, s2, s3, …]: the four sums in one vector's low lanes
    const Vec e = __builtin_shufflevector(c, c, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14) +
                  __builtin_shufflevector(c, c, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
    const Vec f = __builtin_shufflevector(e, e, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6) +
                  __builtin_shufflevector(e, e, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7);
    std::memcpy(s, &f, 4 * sizeof(float));
  } else
#endif
  {
    for (std::size_t u = 0; u < U; ++u) {
      float t[kW];
      std::memcpy(t, &acc[u], sizeof t);
      for (std::size_t w = kW / 2; w > 0; w /= 2)
        for (std::size_t l = 0; l < w; ++l) t[l] += t[l + w];
      s[u] = t[0];
    }
  }
}

/// S (R rows, U keys), leading dimension ld_s ← Q (R, d) · K (U, d)ᵀ: R·U accumulators of 16 partial sums,
/// so each loaded chunk of a key feeds R multiply-adds and each chunk of a query U; the 16 partial sums of
/// each score are added up once, at the end. The same keys of the next block (K_next, unless nullptr) are
/// prefetched on the way, a cache line per chunk.
template <std::size_t R, std::size_t U>
void scores_of_keys(const float* Q, const float* K, std::size_t d, float* S, std::size_t ld_s, const float* K_next) {
  const std::size_t body = d - d % kW;  // the features a whole Vec covers; the rest plainly
  Vec acc[R][U] = {};
  for (std::size_t c = 0; c < body; c += kW) {
    Vec k[U];
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) {
      std::memcpy(&k[u], K + u * d + c, sizeof(Vec));
      if (K_next != nullptr) __builtin_prefetch(K_next + u * d + c);
    }
#pragma GCC unroll 2
    for (std::size_t i = 0; i < R; ++i) {
      Vec x;
      std::memcpy(&x, Q + i * d + c, sizeof x);
#pragma GCC unroll 4
      for (std::size_t u = 0; u < U; ++u) acc[i][u] += x * k[u];
    }
  }
#pragma GCC unroll 2
  for (std::size_t i = 0; i < R; ++i) {
    float s[U];
    sum_lanes(acc[i], s);
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) {
      for (std::size_t c = body; c < d; ++c) s[u] += Q[i * d + c] * K[u * d + c];
      S[i * ld_s + u] = s[u];
    }
  }
}

/// U keys against every query row: two rows at a time, the last alone; only the first rows prefetch.
template <std::size_t U>
void scores_of_rows(const float* Q, std::size_t r, const float* K, std::size_t d, float* S, std::size_t ld_s,
                    const float* K_next) {
  std::size_t i = 0;
  for (; i + 2 <= r; i += 2, K_next = nullptr) scores_of_keys<2, U>(Q + i * d, K, d, S + i * ld_s, ld_s, K_next);
  if (i < r) scores_of_keys<1, U>(Q + i * d, K, d, S + i * ld_s, ld_s, K_next);
}

/// S (r, keys) ← Q (r, d) · K_block (keys, d)ᵀ: the keys four at a time, the last ones one by one; the next
/// block's keys (K_next, as many, or nullptr) prefetched on the way.
void block_scores(const float* Q, std::size_t r, const float* K, std::size_t keys, std::size_t d, float* S,
                  std::size_t ld_s, const float* K_next) {
  const auto next = [&](std::size_t j) { return K_next != nullptr ? K_next + j * d : nullptr; };
  std::size_t j = 0;
  for (; j + 4 <= keys; j += 4) scores_of_rows<4>(Q, r, K + j * d, d, S + j, ld_s, next(j));
  for (; j < keys; ++j) scores_of_rows<1>(Q, r, K + j * d, d, S + j, ld_s, next(j));
}
// [block_scores]

// [micro_kernel]
/// C (R rows, N·16 columns), leading dimension ld_c += A (R, steps) · B (steps, N·16 columns): the classic
/// GEMM micro-kernel. The R × N vectors of C stay in registers over all the steps; per step, N vector loads
/// of B's row and R broadcasts of one value of A feed R·N multiply-adds. It serves both products of a block:
/// O += P·V (A = P, B = V's rows) and, for many query rows, the scores St = K·Qt (A = the keys, B = the
/// transposed queries, C zeroed first).
/// B_next, unless nullptr, is prefetched as B is read: the same columns of the next block's rows.
template <std::size_t R, std::size_t N>
void accumulate_rows(const float* A, std::size_t ld_a, std::size_t steps, const float* B, std::size_t ld_b, float* C,
                     std::size_t ld_c, const float* B_next) {
  Vec acc[R][N];
#pragma GCC unroll 4
  for (std::size_t i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (std::size_t c = 0; c < N; ++c) std::memcpy(&acc[i][c], C + i * ld_c + c * kW, sizeof(Vec));
  for (std::size_t t = 0; t < steps; ++t) {
    Vec b[N];
#pragma GCC unroll 4
    for (std::size_t c = 0; c < N; ++c) {
      std::memcpy(&b[c], B + t * ld_b + c * kW, sizeof(Vec));
      if (B_next != nullptr) __builtin_prefetch(B_next + t * ld_b + c * kW);
    }
#pragma GCC unroll 4
    for (std::size_t i = 0; i < R; ++i) {
      const float a = A[i * ld_a + t];
#pragma GCC unroll 4
      for (std::size_t c = 0; c < N; ++c) acc[i][c] += a * b[c];
    }
  }
#pragma GCC unroll 4
  for (std::size_t i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (std::size_t c = 0; c < N; ++c) std::memcpy(C + i * ld_c + c * kW, &acc[i][c], sizeof(Vec));
}
// [micro_kernel]

// [panel_scores]
/// For many query rows (r ≥ 16): St (keys, r_pad) ← K_block (keys, d) · Qt (d, r_pad), Qt the group's queries
/// transposed once per step and zero-padded to r_pad, a multiple of 16. Four keys × 32 queries at a time (16
/// for the last when r_pad is an odd multiple): a key value broadcast against whole vectors of queries, so
/// each accumulator holds whole scores and nothing is added up across lanes.
template <std::size_t N>
void panel_scores_columns(const float* Qt, std::size_t r_pad, const float* K, std::size_t keys, std::size_t d,
                          float* St) {
  std::size_t j = 0;
  for (; j + 4 <= keys; j += 4) accumulate_rows<4, N>(K + j * d, d, d, Qt, r_pad, St + j * r_pad, r_pad, nullptr);
  for (; j < keys; ++j) accumulate_rows<1, N>(K + j * d, d, d, Qt, r_pad, St + j * r_pad, r_pad, nullptr);
}
void panel_scores(const float* Qt, std::size_t r_pad, const float* K, std::size_t keys, std::size_t d, float* St) {
  std::fill(St, St + keys * r_pad, 0.0f);
  std::size_t q0 = 0;
  for (; q0 + 2 * kW <= r_pad; q0 += 2 * kW) panel_scores_columns<2>(Qt + q0, r_pad, K, keys, d, St + q0);
  if (q0 < r_pad) panel_scores_columns<1>(Qt + q0, r_pad, K, keys, d, St + q0);
}
// [panel_scores]

// [accumulate_pv_block]
/// O (r, d_v) += P (r, keys) · V_block (keys, d_v): kPvRows rows and four Vecs of columns at a time, the columns
/// past the last whole chunk plainly; the first rows prefetch the next block's values (V_next, or nullptr).
void accumulate_pv_block(const float* P, std::size_t r, std::size_t ld_p, std::size_t keys, const float* V,
                         std::size_t d_v, float* O, const float* V_next) {
  const std::size_t chunk = 4 * kW, body = d_v - d_v % chunk;
  for (std::size_t c0 = 0; c0 < body; c0 += chunk) {
    const float* next = V_next != nullptr ? V_next + c0 : nullptr;
    std::size_t i = 0;
    for (; i + kPvRows <= r; i += kPvRows, next = nullptr)
      accumulate_rows<kPvRows, 4>(P + i * ld_p, ld_p, keys, V + c0, d_v, O + i * d_v + c0, d_v, next);
    for (; i < r; ++i, next = nullptr)
      accumulate_rows<1, 4>(P + i * ld_p, ld_p, keys, V + c0, d_v, O + i * d_v + c0, d_v, next);
  }
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < keys; ++j)
      for (std::size_t c = body; c < d_v; ++c) O[i * d_v + c] += P[i * ld_p + j] * V[j * d_v + c];
}
// [accumulate_pv_block]

}  // namespace attn::ch09::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::ch09 {

HWY_EXPORT(panel_scores);
HWY_EXPORT(block_scores);
HWY_EXPORT(accumulate_pv_block);

namespace detail {

// The queries are padded for the panel scores to whole vectors of the widest path, 16 floats, which are whole
// vectors of every narrower one too (the panel loops go 2 or 1 of their own vectors at a time).
constexpr std::size_t kW = 16;

GroupAttention::GroupAttention(const float* Q_j, std::size_t r, std::size_t d_k, std::size_t d_v)
    : Q_(Q_j), r_(r), d_k_(d_k), d_v_(d_v), r_pad_(r >= kW ? (r + kW - 1) / kW * kW : 0) {
  // Many query rows: their scores as a micro-kernel over the transposed queries Qt (d_k, r_pad), then St
  // (B, r_pad) transposed into S; few rows: each row against the keys directly (block_scores).
  Qt_.assign(d_k * r_pad_, 0.0f);
  St_.assign(kDecodeKeysPerBlock * r_pad_, 0.0f);
  S_.assign(r * kDecodeKeysPerBlock, 0.0f);
  for (std::size_t i = 0; i < (r_pad_ > 0 ? r : 0); ++i)
    for (std::size_t c = 0; c < d_k; ++c) Qt_[c * r_pad_ + i] = Q_j[i * d_k + c];
}

// [add_block]
void GroupAttention::add_parts(const KeyRows* parts, std::size_t count, float* m, float* l, float* O) {
  constexpr std::size_t B = kDecodeKeysPerBlock;  // S's leading dimension
  std::size_t keys = 0;                           // the block's keys so far: each part's scores go after them
  for (const KeyRows* p = parts; p != parts + count; keys += p->keys, ++p) {
    if (r_pad_ > 0) {  // St (keys, r_pad)
      ATTN_DISPATCH(panel_scores)(Qt_.data(), r_pad_, p->K, p->keys, d_k_, St_.data() + keys * r_pad_);
    } else {
      ATTN_DISPATCH(block_scores)(Q_, r_, p->K, p->keys, d_k_, S_.data() + keys, B, p->K_next);
    }
  }
  if (r_pad_ > 0)
    for (std::size_t i = 0; i < r_; ++i)
      for (std::size_t j = 0; j < keys; ++j) S_[i * B + j] = St_[j * r_pad_ + i];
  for (std::size_t i = 0; i < r_; ++i) {  // chapter 05's online softmax, row by row
    float* s = S_.data() + i * B;
    const float m_new = std::max(m[i], ch05::row_max(s, keys));
    const float alpha = std::exp(m[i] - m_new);  // 0 at the first block (m = -inf)
    l[i] = alpha * l[i] + ch05::exp_shift_sum(s, keys, m_new);
    if (alpha != 1.0f) ch05::scale_row(O + i * d_v_, d_v_, alpha);
    m[i] = m_new;
  }
  std::size_t first = 0;  // each part's weights against its values, while they are still in L1
  for (const KeyRows* p = parts; p != parts + count; first += p->keys, ++p)
    ATTN_DISPATCH(accumulate_pv_block)(S_.data() + first, r_, B, p->keys, p->V, d_v_, O, p->V_next);
}
// [add_block]

}  // namespace detail

namespace {

// [attend_group]
/// One group: its r query rows Q_j (r, d_k), already scaled by 1/√d_k, over the group's n cached keys K_j
/// (n, d_k) and values V_j (n, d_v), into O_j (r, d_v). One pass over the cache, block by block.
void attend_group(const float* Q_j, std::size_t r, const float* K_j, const float* V_j, std::size_t n, std::size_t d_k,
                  std::size_t d_v, float* O_j) {
  constexpr std::size_t B = kDecodeKeysPerBlock;
  detail::GroupAttention group(Q_j, r, d_k, d_v);
  std::vector<float> m(r, -std::numeric_limits<float>::infinity()), l(r, 0.0f);  // running max and sum per row
  std::fill(O_j, O_j + r * d_v, 0.0f);                                           // (r, d_v) the accumulator
  for (std::size_t j0 = 0; j0 < n; j0 += B) {
    const std::size_t keys = std::min(B, n - j0);
    // The next block, when it is as long as this one, is prefetched while this one computes: the hardware
    // prefetcher stops at every 4 KiB page (8 rows of 128 floats), and without this the loads and the
    // arithmetic of a block take turns instead of overlapping.
    const bool next_full = j0 + B + keys <= n;
    group.add_block(K_j + j0 * d_k, V_j + j0 * d_v, keys, next_full ? K_j + (j0 + B) * d_k : nullptr,
                    next_full ? V_j + (j0 + B) * d_v : nullptr, m.data(), l.data(), O_j);
  }
  for (std::size_t i = 0; i < r; ++i) ch05::scale_row(O_j + i * d_v, d_v, 1.0f / l[i]);  // ℓ ≥ 1: the max's own 1
}
// [attend_group]

}  // namespace

// [decode_attend_fast]
Matrix decode_attend_fast(const KVCache& cache, const Matrix& q) {
  const std::size_t h = q.shape(0), g = cache.kv_heads(), d_k = cache.d_k(), d_v = cache.d_v();
  const std::size_t n = cache.length();
  require(q.shape(1) == d_k, fmt::format("decode_attend_fast: q is {} but the cache holds keys of d_k = {}; q must "
                                         "be (h, {})",
                                         shape_str(q), d_k, d_k));
  require(h > 0 && h % g == 0, fmt::format("decode_attend_fast: q is {}: h = {} query heads cannot be shared evenly "
                                           "by the cache's g = {} key/value heads; g must divide h",
                                           shape_str(q), h, g));
  require(n > 0,
          "decode_attend_fast: the cache is empty (length 0): there is no token to attend to; append the "
          "new token's key and value first");
  require_attention_inputs("decode_attend_fast", q.data(), q.size(), d_k, nullptr, 0, d_k, nullptr, 0);
  const std::size_t r = h / g;
  const Matrix q_scaled = q * (1.0f / std::sqrt(static_cast<float>(d_k)));  // (h, d_k): the 1/√d_k once
  Matrix O = xt::empty<float>({h, d_v});                                    // (h, d_v)
  for (std::size_t j = 0; j < g; ++j)  // group j: query rows j·r … j·r + r - 1 share KV head j
    attend_group(q_scaled.data() + j * r * d_k, r, cache.keys().data() + j * cache.capacity() * d_k,
                 cache.values().data() + j * cache.capacity() * d_v, n, d_k, d_v, O.data() + j * r * d_v);
  // q and the cache are finite, but the overflow policy's bound on d_k·max|q|·max|k| needs the cache's largest key,
  // which only this pass reads: a score that overflowed shows here, as a NaN of O, and is refused by name.
  const auto bad = std::find_if(O.begin(), O.end(), [](float x) { return !std::isfinite(x); });
  float max_q = 0.0f;
  for (const float x : q) max_q = std::max(max_q, std::fabs(x));
  require(bad == O.end(), fmt::format("decode_attend_fast: a score q·k overflowed float (d_k = {}, max|q| = {:.3g}): "
                                      "scale the query or the cached keys down",
                                      d_k, max_q));
  return O;
}
// [decode_attend_fast]

}  // namespace attn::ch09
#endif  // HWY_ONCE
