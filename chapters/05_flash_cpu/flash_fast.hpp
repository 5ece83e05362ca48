/// \file
/// Chapter 05's fast CPU FlashAttention: the algorithm of flash_attention() arranged for speed, after
/// PyTorch's CPU flash kernel, with its two products on micro-kernels of the course's own
/// (tile_kernels.hpp). Chapter code, not an exercise: read it once the tiled forward is yours.
#pragma once

#include <cstddef>

#include "05_flash_cpu/flash_cpu.hpp"
#include "attn/tensor.hpp"

namespace attn::ch05 {

/// How the fast kernel cuts the work.
struct FastConfig {
  std::size_t B_r = 128;  ///< query rows per block: one work item is (head, query block)
  std::size_t B_c = 512;  ///< keys per tile: the score tile (B_r, B_c) stays in the core's L2 cache; the
                          ///< micro-kernels need a multiple of key_panel_width() (else OpenBLAS is used)
  int threads = 2;        ///< std::threads, at most one per work item (a head's block of B_r rows); OpenBLAS runs
                          ///< single-threaded inside them, so 2 threads = 2 cores
};

/// The default block sizes (FastConfig's B_r and B_c, written only there) on \p threads threads: what other
/// chapters run the fast kernel with, e.g. one thread per rank in chapter 13.
inline FastConfig default_tiles_on(int threads) {
  FastConfig config;
  config.threads = threads;
  return config;
}

/// Every head's output: O (h, n_q, d_v) and the log-sum-exp (h, n_q).
struct FlashHeadsOutput {
  Tensor3 O;
  Matrix lse;
};

/// FlashAttention forward over \p h heads at once, multithreaded over (head, query block).
/// The same results as attn::flash_attention() head by head (up to float rounding; its exp is a
/// vectorised polynomial within 2 ulp of std::exp, and e^x below e^-87 is taken as 0).
/// \param Q (h, n_q, d_k) queries, head by head.
/// \param K (h, n_kv, d_k) keys.
/// \param V (h, n_kv, d_v) values.
/// \param causal query i sees key j only when j ≤ i + n_kv - n_q (chapter 02's causal_mask()).
/// \param config block sizes and thread count. Key tiles larger than the sequence are cut to it (the same bits).
/// \return O (h, n_q, d_v) and lse (h, n_q).
/// \throws std::invalid_argument naming the shapes when they do not fit, when a block size or the thread
///         count is 0, when causal and n_q > n_kv, naming the first NaN/Inf of Q, K or V, when a score
///         could overflow (the course's overflow policy: attn/checks.hpp), or when the threads' score tiles
///         would not fit in memory (with the estimate). An exception in a worker thread reaches the caller;
///         OpenBLAS's thread count is restored either way.
FlashHeadsOutput flash_attention_fast(const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal,
                                      const FastConfig& config = {});

/// One head; see the multi-head version above.
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param V (n_kv, d_v) values.
/// \param causal query i sees key j only when j ≤ i + n_kv - n_q.
/// \param config block sizes and thread count.
/// \return O (n_q, d_v) and lse (n_q).
FlashOutput flash_attention_fast(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal,
                                 const FastConfig& config = {});

}  // namespace attn::ch05
