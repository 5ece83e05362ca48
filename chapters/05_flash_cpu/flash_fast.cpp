// Chapter 05's fast CPU FlashAttention. Book page: book/05_flash_cpu.md (section "A fast kernel").
//
// The algorithm is solutions/05_flash_cpu/flash_cpu.cpp's; what changes is only how the work is laid out,
// after PyTorch's CPU flash kernel (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp):
//   1. Work items are (head, block of B_r query rows), handed to std::threads through one atomic counter,
//      most expensive first (under a causal mask the last query blocks see the most keys).
//   2. The two products of a tile, S = scale·Q_i·K_jᵀ and O_i += P·V_j, run on the course's own register-
//      blocked micro-kernels (tile_kernels.inl; AVX-512 or AVX2+FMA, chosen at run time). K is packed once
//      per call, head by head, into panels the S kernel streams through; V and P are read where they are.
//      Both kernels ask for what they read next (the next key panel; V's row 8 keys ahead): a head's packed
//      keys and values (1 MiB each at n = 4096) outgrow L2, so a tile's first row block waited on L3.
//      On a CPU with neither instruction set both products are OpenBLAS sgemm calls instead, with OpenBLAS
//      single-threaded inside our threads (attn::SingleThreadedBlas): two threads on two cores, never four.
//   3. The output block itself is the accumulator: O_i += P·V_j, rescaled in place.
//   4. Each row's max over the tile comes out of the S micro-kernel, taken while the scores are in registers
//      (a pass over the tile saved). The softmax passes left between the products (exp and sum, rescale)
//      are plain loops that the compiler vectorises once per instruction set (AVX-512, AVX2, baseline),
//      chosen at run time (exp and sum also by hand with AVX-512's vscalefps: the same bits, 16 instructions per 16
//      lanes where the compiler's loop takes 21); exp is a polynomial (no -ffast-math, which would break the NaN/Inf
//      handling the tests check). They live in row_ops.cpp, shared with chapter 07's block-sparse kernel.
//   5. Causal: tiles past the diagonal are never visited, and the tile that crosses it is cut at the last
//      key its block can see.
// The ladder, measured by `ch05_flash_cpu bench` (8 heads, n = 4096, d = 64, 2 threads): rung 1, the
// exercise's flash_attention (one thread, a copy of every tile); rung 2, this file with OpenBLAS doing
// every tile's products (`flash_fast_openblas`); rung 3, this file as it is (`flash_fast`). The figures, against
// the machine's ceilings and PyTorch's CPU flash kernel, are on book/measure_05_flash_cpu.md with the
// recordings they come from (book/recorded/ch05_bench.txt, ch05_vs_torch.txt): source comments would go stale.
#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "attn/cblas.hpp"
#include "attn/checks.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace attn::ch05 {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// One problem: h heads of contiguous (n, d) matrices.
struct Problem {
  const float *Q, *K, *V;
  float *O, *lse;
  std::size_t h, n_q, n_kv, d_k, d_v;
  bool causal;
};

/// What one thread owns: its score tile, the block's running max and sum, and the current tile's own row maxima.
struct Scratch {
  std::vector<float> S;              // (B_r, B_c)
  std::vector<float> m;              // (B_r)
  std::vector<float> l;              // (B_r)
  std::vector<float> m_tile;         // (B_r): max of each row's visible scores in this tile
  std::vector<std::size_t> visible;  // (B_r): how many keys of this tile each row may see
};

// [fast_block]
// One work item: query rows [r0, r0 + rows) of head `head`, against every key they may see.
void attend_block(const Problem& p, const FastConfig& cfg, std::size_t head, std::size_t r0, Scratch& w,
                  PackedKeys& keys) {
  const std::size_t rows = std::min(cfg.B_r, p.n_q - r0), offset = p.n_kv - p.n_q;
  const float* Q_i = p.Q + (head * p.n_q + r0) * p.d_k;  // (rows, d_k)
  const float* K = p.K + head * p.n_kv * p.d_k;          // (n_kv, d_k)
  const float* V = p.V + head * p.n_kv * p.d_v;          // (n_kv, d_v)
  float* O_i = p.O + (head * p.n_q + r0) * p.d_v;        // (rows, d_v): the accumulator, then the output
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(p.d_k, 1)));
  const bool own_kernels = keys.used();
  const float* K_panels = own_kernels ? keys.head(head) : nullptr;  // (panels, d_k, width)
  const std::size_t width = key_panel_width();
  std::fill(w.m.begin(), w.m.end(), kMinusInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  std::fill(O_i, O_i + rows * p.d_v, 0.0f);
  const std::size_t kv_end = p.causal ? std::min(p.n_kv, r0 + rows + offset) : p.n_kv;
  const auto i = [](std::size_t v) { return static_cast<int>(v); };
  for (std::size_t c0 = 0; c0 < kv_end; c0 += cfg.B_c) {
    const std::size_t cols = std::min(cfg.B_c, kv_end - c0);  // causal: cut at the block's last visible key
    for (std::size_t r = 0; r < rows; ++r) {
      // Causal: row r sees keys up to r0 + r + offset, a prefix of this tile (maybe empty).
      const std::size_t horizon = r0 + r + offset + 1;
      w.visible[r] = !p.causal ? cols : horizon <= c0 ? 0 : std::min(cols, horizon - c0);
    }
    std::fill(w.m_tile.begin(), w.m_tile.end(), kMinusInf);
    // S = scale · Q_i K_jᵀ  (rows, cols), leading dimension B_c; the micro-kernel takes each row's max as well
    if (own_kernels) {
      scores_tile(Q_i, rows, p.d_k, p.d_k, K_panels + (c0 / width) * p.d_k * width, (cols + width - 1) / width, scale,
                  w.S.data(), cfg.B_c, w.visible.data(), w.m_tile.data());
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i(rows), i(cols), i(p.d_k), scale, Q_i, i(p.d_k),
                  K + c0 * p.d_k, i(p.d_k), 0.0f, w.S.data(), i(cfg.B_c));
      for (std::size_t r = 0; r < rows; ++r) w.m_tile[r] = row_max(w.S.data() + r * cfg.B_c, w.visible[r]);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      float* s = w.S.data() + r * cfg.B_c;
      const std::size_t visible = w.visible[r];
      std::fill(s + visible, s + cols, 0.0f);  // hidden keys get weight 0 in P·V_j
      if (visible == 0) continue;
      const float m_new = std::max(w.m[r], w.m_tile[r]);
      const float alpha = w.m[r] == kMinusInf ? 0.0f : std::exp(w.m[r] - m_new);
      w.l[r] = alpha * w.l[r] + exp_shift_sum(s, visible, m_new);
      w.m[r] = m_new;
      if (alpha != 1.0f) scale_row(O_i + r * p.d_v, p.d_v, alpha);
    }
    // O_i += P V_j  (rows, d_v)
    if (own_kernels)
      accumulate_pv(w.S.data(), rows, cols, cfg.B_c, V + c0 * p.d_v, p.d_v, p.d_v, O_i, p.d_v);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(rows), i(p.d_v), i(cols), 1.0f, w.S.data(), i(cfg.B_c),
                  V + c0 * p.d_v, i(p.d_v), 1.0f, O_i, i(p.d_v));
  }
  float* lse = p.lse + head * p.n_q + r0;
  for (std::size_t r = 0; r < rows; ++r) {  // the one division per row
    if (w.l[r] == 0.0f) {
      lse[r] = kMinusInf;  // saw no key: O stays zero
      continue;
    }
    scale_row(O_i + r * p.d_v, p.d_v, 1.0f / w.l[r]);
    lse[r] = w.m[r] + std::log(w.l[r]);
  }
}
// [fast_block]

// [fast_threads]
void run(const Problem& p, const FastConfig& cfg) {
  const std::size_t T_r = (p.n_q + cfg.B_r - 1) / cfg.B_r, items = p.h * T_r;
  // The micro-kernels need whole panels per tile; else both products are OpenBLAS calls.
  PackedKeys keys(p.K, p.h, p.n_kv, p.d_k, key_panel_width() > 0 && cfg.B_c % key_panel_width() == 0);
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    // Inside the worker, so that a failed allocation is an exception the caller sees (run_on_threads).
    Scratch w{std::vector<float>(cfg.B_r * cfg.B_c), std::vector<float>(cfg.B_r), std::vector<float>(cfg.B_r),
              std::vector<float>(cfg.B_r), std::vector<std::size_t>(cfg.B_r)};
    // Item t: the query block T_r - 1 - t / h, counted from the end (the costliest under a causal mask).
    for (std::size_t t = next++; t < items; t = next++)
      attend_block(p, cfg, t % p.h, (T_r - 1 - t / p.h) * cfg.B_r, w, keys);
  };
  const SingleThreadedBlas blas;  // our threads are the parallelism; OpenBLAS must not add its own on top
  run_on_threads(static_cast<std::size_t>(cfg.threads), worker);
}
// [fast_threads]

/// Checks what both entry points share, then runs: \p p's pointers and sizes describe valid shapes.
void check_and_run(const Problem& p, std::size_t elements_q, std::size_t elements_kv, const FastConfig& cfg) {
  constexpr const char* where = "flash_attention_fast";
  require(
      cfg.B_r > 0 && cfg.B_c > 0 && cfg.threads > 0,
      fmt::format("{}: B_r = {}, B_c = {}, threads = {}; all must be positive", where, cfg.B_r, cfg.B_c, cfg.threads));
  require(!p.causal || p.n_q <= p.n_kv,
          fmt::format("{}: causal with {} queries but only {} keys; n_q <= n_kv", where, p.n_q, p.n_kv));
  // No more threads than work items (a head's block of B_r query rows): a thread beyond them would only start and
  // stop, and a count far past the machine's (threads = 2^31 − 1) would fail to start at all.
  FastConfig used = cfg;
  const std::size_t items = p.h * (p.n_q / cfg.B_r + (p.n_q % cfg.B_r != 0));  // no n_q + B_r − 1: it can wrap
  used.threads = static_cast<int>(std::min(static_cast<std::size_t>(cfg.threads), std::max<std::size_t>(items, 1)));
  // On the kernel's own threads: on one, the scan was 2–3% of a call's time with the other core idle.
  require_attention_inputs(where, p.Q, elements_q, p.d_k, p.K, elements_kv, p.d_k, p.V, p.h * p.n_kv * p.d_v,
                           static_cast<std::size_t>(used.threads));
  // Key tiles larger than the sequence hold nothing more: one tile covers it either way, so B_c is cut to it (the
  // same bits; B_c stays a multiple of the key panels when it was one). B_r stays as given: chapter 10's backward
  // recomputes these scores bit for bit only from the forward's own row blocks. Then each thread's score tile is
  // refused, with the estimate, when it cannot fit.
  const std::size_t width = key_panel_width();
  const std::size_t keys = std::max<std::size_t>(p.n_kv, 1);
  used.B_c = std::min(cfg.B_c, width > 0 && cfg.B_c % width == 0 ? (keys + width - 1) / width * width : keys);
  checked_allocation("flash_attention_fast: the score tiles threads × B_r × B_c floats",
                     {static_cast<std::size_t>(used.threads), used.B_r, used.B_c, sizeof(float)});
  if (p.h * p.n_q > 0) run(p, used);
}

}  // namespace

FlashHeadsOutput flash_attention_fast(const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal,
                                      const FastConfig& config) {
  const std::size_t h = Q.shape(0), n_q = Q.shape(1), n_kv = K.shape(1), d_k = Q.shape(2), d_v = V.shape(2);
  require(K.shape(0) == h && V.shape(0) == h && K.shape(2) == d_k && V.shape(1) == n_kv,
          fmt::format("flash_attention_fast: Q is {}, K is {} and V is {}; they need the same heads, Q and K the "
                      "same d_k, V one row per key",
                      shape_str(Q), shape_str(K), shape_str(V)));
  FlashHeadsOutput out{Tensor3(Tensor3::shape_type{h, n_q, d_v}), Matrix(Matrix::shape_type{h, n_q})};
  check_and_run({Q.data(), K.data(), V.data(), out.O.data(), out.lse.data(), h, n_q, n_kv, d_k, d_v, causal}, Q.size(),
                K.size(), config);
  return out;
}

FlashOutput flash_attention_fast(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal,
                                 const FastConfig& config) {
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_k = Q.shape(1), d_v = V.shape(1);
  require(K.shape(1) == d_k && V.shape(0) == n_kv,
          fmt::format("flash_attention_fast: Q is {}, K is {} and V is {}; Q and K need the same d_k, V one row "
                      "per key",
                      shape_str(Q), shape_str(K), shape_str(V)));
  FlashOutput out{Matrix(Matrix::shape_type{n_q, d_v}), Vector(Vector::shape_type{n_q})};
  check_and_run({Q.data(), K.data(), V.data(), out.O.data(), out.lse.data(), 1, n_q, n_kv, d_k, d_v, causal}, Q.size(),
                K.size(), config);
  return out;
}

}  // namespace attn::ch05
