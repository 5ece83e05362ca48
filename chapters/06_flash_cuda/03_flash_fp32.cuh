// Chapter 06, rung 3 of the ladder: fused FlashAttention-2 in fp32 (the kernel's frame; its inner loop,
// flash_inner_step, is the learner's exercise in exercises/06_flash_cuda/flash_cuda_inner.cu, answered in
// solutions/06_flash_cuda/flash_cuda_inner.cu, which both include this file).
//
// What changed from rungs 1 and 2: one kernel does everything. A thread block owns B_r query rows (the
// FlashAttention-2 split: the outer loop over query tiles becomes the grid, so blocks never share an
// output row and need no atomics). It loads Q_i once into shared memory, then walks the K/V tiles: load
// K_j and V_j into shared memory, compute S_ij there, and fold it into a running (m, ℓ, O) with the online
// softmax: chapter 05's loop, one tile at a time. S never goes to HBM: HBM traffic drops from Θ(n²) to
// Θ(n·d) per K/V pass, and causal query tiles stop at the diagonal instead of masking the whole row.
// Measured ratio against rung 1: not measured yet: no GPU in this session.
//
// What it leaves out: tensor cores (rung 4), asynchronous copies and double buffering.
// Book page: book/06_flash_cuda.md.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "06_flash_cuda/cuda_check.cuh"
#include "06_flash_cuda/flash_cuda.hpp"
#include "06_flash_cuda/tiles.hpp"
#include "attn/errors.hpp"

namespace attn::ch06 {

/// Columns of the output row one thread accumulates: d / threads-per-row at most.
inline constexpr int kDPerThread = tiles::kMaxD / tiles::kFp32ThreadsPerRow;

// [row_state]
/// What one thread carries from one K/V tile to the next for its query row: the running max m, the
/// running sum ℓ of exp(s - m), and its share of the unnormalised output Σ_j exp(s_j - m)·V_j, the
/// columns c = t, t + T, t + 2T, ... of the row (T threads share a row; t is this thread's index among them).
struct RowState {
  float m;
  float l;
  float o[kDPerThread];
};
// [row_state]

/// The inner loop of rung 3, for one thread: fold one K/V tile into the thread's RowState.
/// \param s_row  (B_c) this query row's scaled scores s_j = q·k_j/√d for the tile, -inf where masked
///               (causal, or past the last key); in shared memory, the same for the T threads of the row.
/// \param B_c    keys in the tile.
/// \param V_tile (B_c, d) the tile's value rows, row-major, in shared memory.
/// \param d      head size (≤ 128).
/// \param t      this thread's index among the T threads of its row: it owns columns t, t + T, ...
/// \param T      threads per row.
/// \param st     the running state, updated in place.
/// Defined by each track (solutions/ and exercises/06_flash_cuda/flash_cuda_inner.cu).
__device__ void flash_inner_step(const float* s_row, int B_c, const float* V_tile, int d, int t, int T, RowState& st);

namespace {

// Set by the exercise skeleton's flash_inner_step, so the host can say "not implemented" instead of
// returning garbage.
__device__ int g_inner_step_missing = 0;

// [fp32_kernel]
__global__ void __launch_bounds__(tiles::kFp32Threads)
    flash_fp32_kernel(const float* Q, const float* K, const float* V, float* O, float* lse, int n_q, int n_kv, int d,
                      float scale, bool causal) {
  constexpr int B_r = tiles::kFp32Br, B_c = tiles::kFp32Bc, T = tiles::kFp32ThreadsPerRow;
  extern __shared__ float smem[];
  float* Q_i = smem;                 // (B_r, d + 1): one float of padding per row keeps a warp's
  float* K_j = Q_i + B_r * (d + 1);  // (B_c, d + 1)  eight rows on eight different banks
  float* V_j = K_j + B_c * (d + 1);  // (B_c, d)
  float* S_ij = V_j + B_c * d;       // (B_r, B_c + 1)
  const long long head = blockIdx.y + static_cast<long long>(blockIdx.z) * gridDim.y;
  const int q0 = static_cast<int>(blockIdx.x) * B_r;  // this block's first query row
  const int tid = static_cast<int>(threadIdx.x);
  const int r = tid / T, t = tid % T;  // the row this thread works on, and its place among the row's threads
  const int offset = n_kv - n_q;       // causal alignment: query i sits at position i + offset
  Q += head * n_q * d;
  K += head * n_kv * d;
  V += head * n_kv * d;

  for (int idx = tid; idx < B_r * d; idx += blockDim.x) {  // Q_i once; rows past n_q are zeros
    const int row = idx / d, c = idx % d;
    Q_i[row * (d + 1) + c] = q0 + row < n_q ? Q[static_cast<long long>(q0 + row) * d + c] : 0.0f;
  }
  RowState st;
  st.m = -INFINITY;
  st.l = 0.0f;
  for (int k = 0; k < kDPerThread; ++k) st.o[k] = 0.0f;

  // Causal: the block's last query sees keys up to its position; later K/V tiles are never loaded.
  const int last_query = min(q0 + B_r, n_q) - 1;
  const int kv_end = causal ? min(n_kv, last_query + offset + 1) : n_kv;
  for (int k0 = 0; k0 < kv_end; k0 += B_c) {
    __syncthreads();  // everyone is done with the previous K_j, V_j
    for (int idx = tid; idx < B_c * d; idx += blockDim.x) {
      const int row = idx / d, c = idx % d;
      const bool inside = k0 + row < n_kv;
      K_j[row * (d + 1) + c] = inside ? K[static_cast<long long>(k0 + row) * d + c] : 0.0f;
      V_j[idx] = inside ? V[static_cast<long long>(k0 + row) * d + c] : 0.0f;
    }
    __syncthreads();
    // S_ij: the T threads of row r compute its B_c scores between them, thread t the keys t, t + T, ...
    // Looping over c outside reads each Q value once for all of the thread's keys.
    const int i = q0 + r;
    float s[B_c / T];
#pragma unroll
    for (int k = 0; k < B_c / T; ++k) s[k] = 0.0f;
    for (int c = 0; c < d; ++c) {
      const float q = Q_i[r * (d + 1) + c];
#pragma unroll
      for (int k = 0; k < B_c / T; ++k) s[k] += q * K_j[(t + k * T) * (d + 1) + c];
    }
#pragma unroll
    for (int k = 0; k < B_c / T; ++k) {
      const int key = k0 + t + k * T;
      const bool allowed = key < n_kv && (!causal || key <= i + offset);
      S_ij[r * (B_c + 1) + t + k * T] = allowed ? s[k] * scale : -INFINITY;
    }
    __syncthreads();
    flash_inner_step(S_ij + r * (B_c + 1), B_c, V_j, d, t, T, st);  // the online softmax: the learner's part
  }

  // O_i = O / ℓ and lse = m + log ℓ; a row that saw no allowed key (ℓ = 0) writes zeros and -inf.
  const int i = q0 + r;
  if (i >= n_q) return;
  const float inv_l = st.l > 0.0f ? 1.0f / st.l : 0.0f;
  for (int k = 0; k < kDPerThread; ++k) {
    const int c = t + k * T;
    if (c < d) O[(head * n_q + i) * d + c] = st.o[k] * inv_l;
  }
  if (t == 0) lse[head * n_q + i] = st.l > 0.0f ? st.m + logf(st.l) : -INFINITY;
}
// [fp32_kernel]

// Launches rung 3 on the given tensors; throws not_implemented once, on the first launch, when the
// track's flash_inner_step is still the skeleton.
void launch_flash_fp32(const Shape& shape, const DeviceQKV& t) {
  check_shape(shape, "flash_fp32_forward");
  const std::size_t smem = tiles::fp32_smem_bytes(shape.d);
  // More than 48 KiB of dynamic shared memory must be asked for explicitly (up to the device's opt-in
  // limit). Asked once per process, for the largest d, so no later (timed) launch repeats the call.
  static const bool opted_in = [] {
    ATTN_CUDA_CHECK(cudaFuncSetAttribute(flash_fp32_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(tiles::fp32_smem_bytes(tiles::kMaxD))));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(blocks_for(shape.n_q, tiles::kFp32Br), static_cast<unsigned>(shape.bh), 1);
  flash_fp32_kernel<<<grid, tiles::kFp32Threads, smem>>>(t.Q, t.K, t.V, t.O, t.lse, shape.n_q, shape.n_kv, shape.d,
                                                         1.0f / std::sqrt(static_cast<float>(shape.d)), shape.causal);
  ATTN_CUDA_CHECK_LAUNCH();
  static bool checked = false;  // one synchronising read per process, so timings stay clean
  if (!checked) {
    checked = true;
    int missing = 0;
    ATTN_CUDA_CHECK(cudaMemcpyFromSymbol(&missing, g_inner_step_missing, sizeof missing));
    if (missing != 0)
      throw not_implemented("flash_inner_step", "06_flash_cuda",
                            "chapter 05's online-softmax update for one row and one tile: new max, rescale "
                            "o and l by exp(m_old - m_new), add exp(s_j - m_new)·V_j.");
  }
}

}  // namespace

}  // namespace attn::ch06

/// The exercise skeleton's body: marks the kernel as not implemented (the host then throws).
#define ATTN_INNER_STEP_NOT_IMPLEMENTED() (::attn::ch06::g_inner_step_missing = 1)
