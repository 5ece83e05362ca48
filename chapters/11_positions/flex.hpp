/// \file
/// Chapter 11's modifier kernel: chapter 05's tiled FlashAttention forward with two hooks, after PyTorch's
/// FlexAttention. `score_mod(s, head, q, kv)` rewrites a scaled score (ALiBi, soft-capping, any bias) and
/// `mask_mod(head, q, kv)` says whether query q may see key kv (causal, sliding window, documents, prefix-LM).
/// Both are compile-time callables: the compiler inlines them into the tile loop, and when they are absent
/// (NoScoreMod, NoMask) the loops that would call them are not compiled at all. A BlockMask, computed once
/// from mask_mod, says which tiles are empty (skipped, never loaded), partial (mask_mod evaluated per pair)
/// or full (no mask work). The two products of a tile are chapter 05's register-blocked micro-kernels
/// (tile_kernels.hpp), on keys packed once per head, so with no modifier the kernel does flash_fast's work.
/// Chapter code, not an exercise. (Chapter 12's model does not use it: it trains with chapter 02's forward
/// and chapter 10's attention_backward.)
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "11_positions/modifiers.hpp"
#include "11_positions/positions.hpp"
#include "attn/cblas.hpp"
#include "attn/checks.hpp"
#include "attn/tensor.hpp"
#include "attn/vector.hpp"

namespace attn::ch11 {

/// The identity score_mod: scores pass unchanged, and the kernel compiles no loop for it.
struct NoScoreMod {
  float operator()(float s, std::size_t, std::size_t, std::size_t) const { return s; }
};

/// The empty mask_mod: every pair allowed, every tile full, no block mask needed.
struct NoMask {
  bool operator()(std::size_t, std::size_t, std::size_t) const { return true; }
};

// [block_mask]
/// Evaluates \p mask_mod on every (head, q, kv) and records each tile's state. O(heads·n_q·n_kv) calls of
/// mask_mod, once; a kernel call then costs only the tiles that are not empty.
/// \throws std::invalid_argument when a tile size is 0, when mask_mod's parameters are out of range
///         (check_modifier()), or when the tiles would not fit in memory (naming the estimate).
template <class MaskMod>
BlockMask make_block_mask(const MaskMod& mask_mod, std::size_t heads, std::size_t n_q, std::size_t n_kv,
                          std::size_t B_r, std::size_t B_c) {
  check_modifier("make_block_mask", mask_mod, heads, n_q, n_kv);
  // The tiles are the learner's make_block_mask() (positions.hpp): one mechanism for both kernels.
  return attn::make_block_mask(MaskModFn(mask_mod), heads, n_q, n_kv, B_r, B_c);
}
// [block_mask]

/// How the kernel cuts the work: chapter 05's defaults.
struct FlexConfig {
  std::size_t B_r = 128;  ///< query rows per block: one work item is (head, query block)
  std::size_t B_c = 512;  ///< keys per tile; chapter 05's micro-kernels need a multiple of ch05::key_panel_width()
                          ///< (else OpenBLAS computes both products)
  int threads = 2;        ///< std::threads; OpenBLAS runs single-threaded inside them
};

namespace detail {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// One call's operands and sizes, as the kernel's pieces pass them on: Q (h, n_q, d_k), K (h, n_kv, d_k),
/// V (h, n_kv, d_v), O (h, n_q, d_v), lse (h, n_q), all row-major.
struct Problem {
  const float *Q, *K, *V;
  float *O, *lse;
  std::size_t h, n_q, n_kv, d_k, d_v;
};

/// What one thread owns: its score tile and the block's running max and sum.
struct Scratch {
  std::vector<float> S;  // (B_r, B_c)
  std::vector<float> m;  // (B_r)
  std::vector<float> l;  // (B_r)
};

inline int blas_int(std::size_t v) { return static_cast<int>(v); }

/// s[c] ← score_mod(s[c], head, q, c0 + c) for c in [0, cols): one row of the score tile (in L1), right after
/// the product that made it. The loop the compiler vectorises, inlined into one copy per x86 path below.
template <class ScoreMod>
[[gnu::always_inline]] inline void modify_row_loop(float* s, std::size_t cols, const ScoreMod& score_mod,
                                                   std::size_t head, std::size_t q, std::size_t c0) {
  float* __restrict__ row = s;  // no other pointer reaches the tile: the modifier's own data stays in registers
  for (std::size_t c = 0; c < cols; ++c) row[c] = score_mod(row[c], head, q, c0 + c);
}
#if ATTN_VECTOR_X86
template <class ScoreMod>
ATTN_TARGET_AVX512 void modify_row_avx512(float* s, std::size_t cols, const ScoreMod& score_mod, std::size_t head,
                                          std::size_t q, std::size_t c0) {
  modify_row_loop(s, cols, score_mod, head, q, c0);
}
template <class ScoreMod>
ATTN_TARGET_AVX2 void modify_row_avx2(float* s, std::size_t cols, const ScoreMod& score_mod, std::size_t head,
                                      std::size_t q, std::size_t c0) {
  modify_row_loop(s, cols, score_mod, head, q, c0);
}
#endif

/// modify_row_loop() compiled for the vector path in use (attn/vector.hpp), so an inlined modifier such as ALiBi
/// runs 16 scores per instruction on AVX-512 (an add and a multiply-add each). A template over the caller's
/// modifier cannot be compiled per instruction set by Highway, which compiles whole files: the layer's x86
/// attributes serve it instead, chosen by vector_path() as Highway chooses (so ATTN_VECTOR_ISA forces it too).
/// On arm64 the loop is compiled once, for NEON, which every arm64 CPU has.
template <class ScoreMod>
void modify_row(float* s, std::size_t cols, const ScoreMod& score_mod, std::size_t head, std::size_t q,
                std::size_t c0) {
#if ATTN_VECTOR_X86
  switch (vector_path()) {
    case VectorPath::avx512:
      return modify_row_avx512(s, cols, score_mod, head, q, c0);
    case VectorPath::avx2:
      return modify_row_avx2(s, cols, score_mod, head, q, c0);
    default:
      break;
  }
#endif
  modify_row_loop(s, cols, score_mod, head, q, c0);
}

// [flex_block]
/// One work item: query rows [r0, r0 + rows) of head \p head against every tile the block mask keeps. The
/// two products are chapter 05's (its micro-kernels on K packed once per head, or OpenBLAS where they do not
/// run); the modifiers act on each row of the score tile while it is in L1, between the two products.
template <class ScoreMod, class MaskMod>
void flex_block(const Problem& p, const FlexConfig& cfg, const ScoreMod& score_mod, const MaskMod& mask_mod,
                const BlockMask* bm, std::size_t head, std::size_t r0, Scratch& w, ch05::PackedKeys& keys) {
  constexpr bool has_score_mod = !std::is_same_v<ScoreMod, NoScoreMod>, has_mask = !std::is_same_v<MaskMod, NoMask>;
  const std::size_t rows = std::min(cfg.B_r, p.n_q - r0), ld = cfg.B_c;
  const float* Q_i = p.Q + (head * p.n_q + r0) * p.d_k;  // (rows, d_k)
  float* O_i = p.O + (head * p.n_q + r0) * p.d_v;        // (rows, d_v): the accumulator, then the output
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(p.d_k, 1)));
  const bool own_kernels = keys.used();
  const float* K_panels = own_kernels ? keys.head(head) : nullptr;  // (panels, d_k, width)
  const std::size_t width = ch05::key_panel_width();
  std::fill(w.m.begin(), w.m.end(), kMinusInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  std::fill(O_i, O_i + rows * p.d_v, 0.0f);
  for (std::size_t c0 = 0, j = 0; c0 < p.n_kv; c0 += cfg.B_c, ++j) {
    Tile tile = Tile::full;
    if constexpr (has_mask) tile = bm->at(bm->heads == 1 ? 0 : head, r0 / cfg.B_r, j);
    if (tile == Tile::empty) continue;  // never loaded
    const std::size_t cols = std::min(cfg.B_c, p.n_kv - c0);
    const float* V_j = p.V + (head * p.n_kv + c0) * p.d_v;  // (cols, d_v)
    // S = scale · Q_i K_jᵀ  (rows, cols), leading dimension B_c
    if (own_kernels)
      ch05::scores_tile(Q_i, rows, p.d_k, p.d_k, K_panels + (c0 / width) * p.d_k * width, (cols + width - 1) / width,
                        scale, w.S.data(), ld);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows), blas_int(cols), blas_int(p.d_k), scale, Q_i,
                  blas_int(p.d_k), p.K + (head * p.n_kv + c0) * p.d_k, blas_int(p.d_k), 0.0f, w.S.data(), blas_int(ld));
    for (std::size_t r = 0; r < rows; ++r) {
      float* s = w.S.data() + r * ld;
      const std::size_t q = r0 + r;
      if constexpr (has_score_mod) modify_row(s, cols, score_mod, head, q, c0);
      if (tile == Tile::partial)
        for (std::size_t c = 0; c < cols; ++c)
          if (!mask_mod(head, q, c0 + c)) s[c] = kMinusInf;
      const float m_tile = ch05::row_max(s, cols);
      if (m_tile == kMinusInf) {  // nothing allowed for this row here: it adds nothing to P·V_j
        std::fill(s, s + cols, 0.0f);
        continue;
      }
      const float m_new = std::max(w.m[r], m_tile);
      const float alpha = w.m[r] == kMinusInf ? 0.0f : std::exp(w.m[r] - m_new);
      float sum = 0.0f;
      if (tile == Tile::full) {
        sum = ch05::exp_shift_sum(s, cols, m_new);  // vectorised
      } else {
        for (std::size_t c = 0; c < cols; ++c) sum += (s[c] = s[c] == kMinusInf ? 0.0f : std::exp(s[c] - m_new));
      }
      w.l[r] = alpha * w.l[r] + sum;
      w.m[r] = m_new;
      if (alpha != 1.0f) ch05::scale_row(O_i + r * p.d_v, p.d_v, alpha);
    }
    // O_i += P V_j  (rows, d_v)
    if (own_kernels)
      ch05::accumulate_pv(w.S.data(), rows, cols, ld, V_j, p.d_v, p.d_v, O_i, p.d_v);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows), blas_int(p.d_v), blas_int(cols), 1.0f,
                  w.S.data(), blas_int(ld), V_j, blas_int(p.d_v), 1.0f, O_i, blas_int(p.d_v));
  }
  float* lse = p.lse + head * p.n_q + r0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (w.l[r] == 0.0f) {  // saw no key: zeros, never NaN
      lse[r] = kMinusInf;
      continue;
    }
    ch05::scale_row(O_i + r * p.d_v, p.d_v, 1.0f / w.l[r]);
    lse[r] = w.m[r] + std::log(w.l[r]);
  }
}
// [flex_block]

}  // namespace detail

/// Attention with a score_mod and a mask_mod, over \p h heads, multithreaded over (head, query block):
/// O = softmax(score_mod(Q Kᵀ / √d_k) with the pairs mask_mod refuses at -inf) V. A query that may see no
/// key gets zeros and lse = -inf.
/// \param Q (h, n_q, d_k) queries.
/// \param K (h, n_kv, d_k) keys.
/// \param V (h, n_kv, d_v) values.
/// \param score_mod `float(float s, size_t head, size_t q, size_t kv)`, returning a finite score.
/// \param mask_mod `bool(size_t head, size_t q, size_t kv)`, true = may attend.
/// \param block_mask the tiles of mask_mod for these shapes and config's tiles, with 1 or h heads; null = compute it
///        here (ignored for NoMask).
/// \param config tiles and threads.
/// \return O (h, n_q, d_v) and lse (h, n_q).
/// \throws std::invalid_argument naming the shapes when they do not fit (inputs, or a block mask made for
///         other shapes or tiles, or missing some), when a tile size or the thread count is 0, when a modifier's
///         parameter is out of range (check_modifier()), naming the first NaN/Inf, when a score could overflow
///         (the course's overflow policy: attn/checks.hpp), or when the output or the score tiles would not fit
///         in memory (naming the estimate). An exception in a worker
///         thread reaches the caller; OpenBLAS's thread count is restored either way.
template <class ScoreMod = NoScoreMod, class MaskMod = NoMask>
ch05::FlashHeadsOutput flex_attention(const Tensor3& Q, const Tensor3& K, const Tensor3& V,
                                      const ScoreMod& score_mod = {}, const MaskMod& mask_mod = {},
                                      const BlockMask* block_mask = nullptr, const FlexConfig& config = {}) {
  constexpr const char* where = "flex_attention";
  const std::size_t h = Q.shape(0), n_q = Q.shape(1), n_kv = K.shape(1), d_k = Q.shape(2), d_v = V.shape(2);
  require(K.shape(0) == h && V.shape(0) == h && K.shape(2) == d_k && V.shape(1) == n_kv,
          fmt::format("{}: Q is {}, K is {} and V is {}; they need the same heads, Q and K the same d_k, V one row "
                      "per key",
                      where, shape_str(Q), shape_str(K), shape_str(V)));
  require(config.B_r > 0 && config.B_c > 0 && config.threads > 0,
          fmt::format("{}: B_r = {}, B_c = {}, threads = {}; all must be positive", where, config.B_r, config.B_c,
                      config.threads));
  check_modifier(where, score_mod, h, n_q, n_kv);
  check_modifier(where, mask_mod, h, n_q, n_kv);
  require_attention_inputs(where, Q, K, V);  // every element finite, and no score can overflow
  // Before allocating anything: the output, and one score tile per thread.
  checked_allocation("flex_attention: the output h × n_q × d_v floats", {h, n_q, d_v, sizeof(float)});
  checked_allocation("flex_attention: the score tiles threads × B_r × B_c floats",
                     {static_cast<std::size_t>(config.threads), config.B_r, config.B_c, sizeof(float)});
  BlockMask own;
  if constexpr (!std::is_same_v<MaskMod, NoMask>) {
    if (block_mask == nullptr) {
      own = make_block_mask(mask_mod, h, n_q, n_kv, config.B_r, config.B_c);
      block_mask = &own;
    }
    const BlockMask& bm = *block_mask;
    require(bm.n_q == n_q && bm.n_kv == n_kv && bm.B_r == config.B_r && bm.B_c == config.B_c &&
                (bm.heads == 1 || bm.heads == h),
            fmt::format("{}: the block mask is for {} heads, ({}, {}) pairs in ({}, {}) tiles; the call has {} heads, "
                        "({}, {}) pairs, ({}, {}) tiles",
                        where, bm.heads, bm.n_q, bm.n_kv, bm.B_r, bm.B_c, h, n_q, n_kv, config.B_r, config.B_c));
    // A block mask built by hand, or edited, must still hold every tile: the kernel reads them unchecked.
    require(bm.T_r == tiles_of(n_q, bm.B_r) && bm.T_c == tiles_of(n_kv, bm.B_c) &&
                bm.tiles.size() == checked_product("flex_attention: block mask tiles", {bm.heads, bm.T_r, bm.T_c}),
            fmt::format("{}: the block mask has T_r = {}, T_c = {} and {} tiles; ({}, {}) pairs in ({}, {}) tiles "
                        "need T_r = {}, T_c = {} and {} × T_r × T_c tiles",
                        where, bm.T_r, bm.T_c, bm.tiles.size(), n_q, n_kv, bm.B_r, bm.B_c, tiles_of(n_q, bm.B_r),
                        tiles_of(n_kv, bm.B_c), bm.heads));
  }
  ch05::FlashHeadsOutput out{Tensor3(Tensor3::shape_type{h, n_q, d_v}), Matrix(Matrix::shape_type{h, n_q})};
  const detail::Problem p{Q.data(), K.data(), V.data(), out.O.data(), out.lse.data(), h, n_q, n_kv, d_k, d_v};
  const std::size_t T_r = tiles_of(n_q, config.B_r), items = h * T_r;
  // Chapter 05's micro-kernels need whole panels per tile; else both products are OpenBLAS calls.
  const std::size_t width = ch05::key_panel_width();
  ch05::PackedKeys keys(K.data(), h, n_kv, d_k, width > 0 && config.B_c % width == 0);
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    // Inside the worker, so that a failed allocation is an exception the caller sees (run_on_threads).
    detail::Scratch w{std::vector<float>(config.B_r * config.B_c), std::vector<float>(config.B_r),
                      std::vector<float>(config.B_r)};
    // Item t: the query block T_r - 1 - t / h, counted from the end, as chapter 05 orders them.
    for (std::size_t t = next++; t < items; t = next++)
      detail::flex_block(p, config, score_mod, mask_mod, block_mask, t % h, (T_r - 1 - t / h) * config.B_r, w, keys);
  };
  const SingleThreadedBlas blas;  // our threads are the parallelism; OpenBLAS must not add its own on top
  run_on_threads(static_cast<std::size_t>(config.threads), worker);
  return out;
}

}  // namespace attn::ch11
