/// \file
/// The tile sizes of rungs 3 and 4 and the shared memory their kernels request: one definition read by the
/// kernels (.cu) and by the host's planning table (main.cpp), so the two cannot disagree.
#pragma once

#include <cstddef>

#include "06_flash_cuda/host_device.hpp"

namespace attn::ch06::tiles {

/// Largest head size the fused kernels support (their per-thread accumulators are sized for it).
inline constexpr int kMaxD = 128;

/// Rung 3 (fp32): B_r query rows × B_c keys per tile, kThreadsPerRow threads share one query row.
inline constexpr int kFp32Br = 32;
inline constexpr int kFp32Bc = 32;
inline constexpr int kFp32ThreadsPerRow = 4;
inline constexpr int kFp32Threads = kFp32Br * kFp32ThreadsPerRow;  // 128

/// Rung 3's shared memory at head size d: Q_i (B_r, d + 1), K_j (B_c, d + 1), V_j (B_c, d) and
/// S_ij (B_r, B_c + 1), all fp32. The extra float per row of Q_i, K_j and S_ij shifts consecutive rows onto
/// different banks: the eight rows a warp reads at once would otherwise all hit the same bank.
constexpr std::size_t fp32_smem_bytes(int d) {
  return sizeof(float) *
         static_cast<std::size_t>(kFp32Br * (d + 1) + kFp32Bc * (d + 1) + kFp32Bc * d + kFp32Br * (kFp32Bc + 1));
}

/// Rung 4 (bf16 on tensor cores): each of kTcWarps warps owns 16 query rows.
inline constexpr int kTcWarps = 4;
inline constexpr int kTcBr = 16 * kTcWarps;  // 64
inline constexpr int kTcBc = 64;
inline constexpr int kTcThreads = 32 * kTcWarps;  // 128
/// Rung 4 is compiled for two head sizes; a smaller d is zero-padded up to the next one.
constexpr int tc_head_dim(int d) { return d <= 64 ? 64 : 128; }
/// Rows of Q_i and K_j in shared memory hold D + 8 bf16; rows of V_jᵀ hold B_c + 8 (the + 8 staggers the
/// rows a warp's fragment loads touch across banks).
ATTN_HOST_DEVICE constexpr int tc_qk_stride(int D) { return D + 8; }
inline constexpr int kTcVtStride = kTcBc + 8;  // 72 bf16 = 36 words
/// Rung 4's shared memory: Q_i (B_r, D + 8), K_j (B_c, D + 8) and V_jᵀ (D, B_c + 8) in bf16. S never
/// touches shared memory: it lives in registers.
constexpr std::size_t tc_smem_bytes(int d) {
  return 2 * static_cast<std::size_t>(kTcBr * tc_qk_stride(tc_head_dim(d)) + kTcBc * tc_qk_stride(tc_head_dim(d)) +
                                      tc_head_dim(d) * kTcVtStride);
}

// [vt_store]
/// Shared memory has 32 banks of 4 bytes; a warp's store is served in one pass only when no two lanes
/// touch different 4-byte words of the same bank. V_j (B_c, D) goes into shared memory transposed,
/// V_jᵀ (D, B_c + 8), as 4-byte words that each hold one column's entries of two adjacent rows,
/// (V(2p, c), V(2p + 1, c)). Work item idx of a block covers row pair p and the W columns c .. c + W - 1
/// (W = 8 for the 16-byte loads at d = 64, 128; W = 1 for the element-wise ragged path).
struct VtItem {
  int pair;  ///< rows 2·pair and 2·pair + 1 of V_j
  int c;     ///< first column
};
/// Consecutive lanes take consecutive row pairs, so one warp's 32 lanes cover all B_c / 2 = 32 pairs of
/// the same columns: word (c·(B_c + 8) + 2p) / 2 = 36c + p sits in bank (4c + p) mod 32, 32 lanes in 32
/// banks. (Giving consecutive lanes consecutive column chunks of one row instead puts a warp's 16 chunks
/// of a row at columns 8k: bank (32k + p) mod 32 = p for all of them, a 16-way conflict at D = 128.)
ATTN_HOST_DEVICE constexpr VtItem tc_vt_item(int idx, int W) { return {idx % (kTcBc / 2), idx / (kTcBc / 2) * W}; }
/// The 4-byte word of V_jᵀ (counted from its start) that holds column c of row pair p.
ATTN_HOST_DEVICE constexpr int tc_vt_word(int c, int pair) { return (c * kTcVtStride) / 2 + pair; }
// [vt_store]

}  // namespace attn::ch06::tiles
