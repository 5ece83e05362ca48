/// \file
/// The tile sizes of rungs 3 and 4 and the shared memory their kernels request: one definition read by the
/// kernels (.cu) and by the host's planning table (main.cpp), so the two cannot disagree.
#pragma once

#include <cstddef>

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
/// Rung 4's shared memory: Q_i (B_r, D + 8), K_j (B_c, D + 8) and V_jᵀ (D, B_c + 8) in bf16 (the + 8
/// padding staggers rows across banks). S never touches shared memory: it lives in registers.
constexpr std::size_t tc_smem_bytes(int d) {
  return 2 * static_cast<std::size_t>(kTcBr * (tc_head_dim(d) + 8) + kTcBc * (tc_head_dim(d) + 8) +
                                      tc_head_dim(d) * (kTcBc + 8));
}

}  // namespace attn::ch06::tiles
