/// \file
/// Chapter 06, FlashAttention in CUDA: the contract the learner implements in
/// exercises/06_flash_cuda/flash_cuda.cpp (the host-side launch planning, tested everywhere) and
/// exercises/06_flash_cuda/flash_cuda_inner.cu (the inner loop of rung 3, tested where a GPU exists).
/// Book page: book/06_flash_cuda.md. The reference answers are in solutions/06_flash_cuda/.
#pragma once

#include <cstddef>

#include "06_flash_cuda/ladder.hpp"

namespace attn {

/// \defgroup ch06 Chapter 06: FlashAttention in CUDA
/// Planning a launch on the host (how much shared memory a tile needs, which grid covers the problem,
/// whether it fits the device, how many tiles a causal query tile visits) and the inner loop of the fused
/// fp32 kernel.
/// @{

/// Shared memory one thread block of a FlashAttention kernel needs: the query tile Q_i (B_r, d), the key
/// and value tiles K_j and V_j (B_c, d) in the input's element type, and the score tile S_ij (B_r, B_c)
/// in fp32: `(B_r + 2·B_c)·d·element_bytes + 4·B_r·B_c` bytes (real kernels add a little padding).
/// \param B_r query rows per tile. \param B_c key columns per tile. \param d head size.
/// \param element_bytes 4 for fp32, 2 for bf16 or fp16.
/// \throws std::invalid_argument naming the parameter when one of them is 0, or naming the sizes (B_r, B_c, d,
/// element_bytes) when the count does not fit in std::size_t (it is refused, never wrapped around to a small number).
std::size_t flash_smem_bytes(std::size_t B_r, std::size_t B_c, std::size_t d, std::size_t element_bytes);

/// CUDA's dim3, without CUDA's headers.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// A kernel launch: blocks in the grid, threads in a block.
struct LaunchShape {
  Dim3 grid;
  Dim3 block;
};

/// The launch of a FlashAttention-2 forward kernel: one thread block per (query tile, head, batch entry),
/// grid = (⌈n_q / B_r⌉, heads, batch), block = (threads_per_block, 1, 1).
/// \throws std::invalid_argument when a size is 0 or when heads or batch exceed CUDA's limit of 65535
///         blocks in grid.y and grid.z, or the query tiles grid.x's 2^31 − 1 (the message names the values, n_q and
///         B_r for the tiles, and the limit).
LaunchShape flash_launch_shape(std::size_t batch, std::size_t heads, std::size_t n_q, std::size_t B_r,
                               unsigned threads_per_block);

/// What a device allows one thread block.
struct DeviceLimits {
  std::size_t smem_per_block = 0;  ///< bytes of shared memory a block may request (after opting in)
  unsigned max_threads_per_block = 0;
};

/// Whether a block asking for \p smem_bytes of shared memory and \p threads_per_block threads can be
/// launched on a device with \p limits (both must be within the limit; equal is fine). Any values have an answer:
/// limits of 0 (no device) fit nothing but an empty request of 0 threads.
bool plan_fits(std::size_t smem_bytes, unsigned threads_per_block, const DeviceLimits& limits);

/// How many K/V tiles the causal query tile \p q_tile visits: the tiles j whose first key some query of
/// the tile may see. Query i sits at position i + (n_kv - n_q) (chapter 02's alignment), the tile holds
/// queries [q_tile·B_r, min((q_tile + 1)·B_r, n_q)), and K/V tiles hold B_c keys (the last one ragged).
/// \throws std::invalid_argument naming q_tile when it is past the last tile, n_q and n_kv when n_q > n_kv,
///         and when a size is 0.
std::size_t causal_kv_tiles(std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q, std::size_t n_kv);

/// Rung 3, the fused fp32 FlashAttention-2 kernel, running YOUR inner loop (flash_inner_step in
/// flash_cuda_inner.cu): O (bh, n_q, d) and the log-sum-exp (bh, n_q) from Q, K, V on the device.
/// d ≤ 128; n_q, n_kv and d need not be multiples of the tile. Defined only when built with CUDA.
/// \throws attn::not_implemented while the inner loop is a skeleton; std::invalid_argument for d > 128;
///         std::runtime_error naming a failing CUDA call.
void flash_fp32_forward(const ch06::Shape& shape, const ch06::DeviceQKV& tensors);

/// @}

}  // namespace attn
