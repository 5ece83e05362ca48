// Chapter 06, rung 1 of the ladder: naive attention on the GPU, three kernels with S in global memory.
//
// The ladder (one file per rung, in the order the book teaches them):
//   1 naive     (this file)  S = QKᵀ/√d_k, softmax, P·V: three kernels, S (bh, n_q, n_kv) written to HBM,
//                            read back, written again as P and read once more. Every thread computes one
//                            entry from global memory: no reuse of Q, K or V in fast memory.
//   2 cublas    02_cublas.cu  the two products become cuBLAS SGEMMs (TF32 off): data reuse in shared
//                            memory and registers, done by the vendor. S still makes its round trips.
//   3 flash     03_flash_fp32.cuh + solutions/06_flash_cuda/flash_cuda_inner.cu: one fused kernel,
//                            Q, K, V tiles in shared memory, online softmax: S never leaves the chip.
//   4 flash tc  04_flash_tc.cu  the same algorithm with bf16 inputs on tensor cores (mma.sync), fp32 sums.
// Measured ratios against rung 1: not measured yet: no GPU in this session (./course gpu-check records
// them in book/recorded/06_flash_cuda.txt on a GPU machine).
//
// What it leaves out: any data reuse; this is the baseline that shows what memory traffic costs.
// Book page: book/06_flash_cuda.md.
#include <cmath>

#include "06_flash_cuda/cuda_check.cuh"
#include "06_flash_cuda/ladder.hpp"

namespace attn::ch06 {
namespace {

// [naive_scores]
// One thread per score: S(h, i, j) = Σ_c Q(h, i, c) K(h, j, c) / √d. Threads of a warp share i and read
// consecutive keys j, so Q's row is a broadcast and K is read d times over from global memory.
__global__ void scores_kernel(const float* Q, const float* K, float* S, int n_q, int n_kv, int d, float scale) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int i = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  const long long h = blockIdx.z;
  if (i >= n_q || j >= n_kv) return;
  const float* q = Q + (h * n_q + i) * d;   // (d)
  const float* k = K + (h * n_kv + j) * d;  // (d)
  float s = 0.0f;
  for (int c = 0; c < d; ++c) s += q[c] * k[c];
  S[(h * n_q + i) * n_kv + j] = s * scale;
}
// [naive_scores]

// Block-wide reduction of one value per thread (max or sum), for the row softmax.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / 32;
  v = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // scratch is reused by the next reduction
  return v;
}

// [naive_softmax]
// One block per row of S: the row's max, then Σ exp(s - max), then P = exp(s - max) / Σ in place.
// Three passes over the row in global memory; the causal mask is applied here, as -inf.
__global__ void softmax_rows_kernel(float* S, float* lse, int n_q, int n_kv, bool causal) {
  __shared__ float scratch[32];
  const long long row = blockIdx.x;  // h · n_q + i
  const int i = static_cast<int>(row % n_q);
  const int last_allowed = causal ? i + (n_kv - n_q) : n_kv - 1;
  float* s = S + row * n_kv;  // (n_kv)
  float m = -INFINITY;
  for (int j = static_cast<int>(threadIdx.x); j < n_kv; j += static_cast<int>(blockDim.x))
    if (j <= last_allowed) m = fmaxf(m, s[j]);
  m = block_reduce<true>(m, scratch);
  float l = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < n_kv; j += static_cast<int>(blockDim.x))
    if (j <= last_allowed) l += expf(s[j] - m);
  l = block_reduce<false>(l, scratch);
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // a row with no allowed key gets P = 0, never NaN
  for (int j = static_cast<int>(threadIdx.x); j < n_kv; j += static_cast<int>(blockDim.x))
    s[j] = j <= last_allowed ? expf(s[j] - m) * inv_l : 0.0f;
  if (threadIdx.x == 0) lse[row] = l > 0.0f ? m + logf(l) : -INFINITY;
}
// [naive_softmax]

// One thread per output: O(h, i, c) = Σ_j P(h, i, j) V(h, j, c). A warp covers 32 consecutive c, so reads of
// V are coalesced and P(i, j) is a broadcast; each P row is read d/32 times from global memory.
__global__ void pv_kernel(const float* P, const float* V, float* O, int n_q, int n_kv, int d) {
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int i = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  const long long h = blockIdx.z;
  if (i >= n_q || c >= d) return;
  const float* p = P + (h * n_q + i) * n_kv;  // (n_kv)
  const float* v = V + h * n_kv * d + c;      // column c of (n_kv, d)
  float o = 0.0f;
  for (int j = 0; j < n_kv; ++j) o += p[j] * v[static_cast<long long>(j) * d];
  O[(h * n_q + i) * d + c] = o;
}

}  // namespace

void launch_softmax_rows(float* S, float* lse, int bh, int n_q, int n_kv, bool causal) {
  softmax_rows_kernel<<<static_cast<unsigned>(bh) * static_cast<unsigned>(n_q), 256>>>(S, lse, n_q, n_kv, causal);
  ATTN_CUDA_CHECK_LAUNCH();
}

void naive_forward(const Shape& shape, const DeviceQKV& t) {
  check_shape(shape, "naive_forward");
  if (t.S == nullptr) throw std::invalid_argument("naive_forward: needs the S scratch buffer");
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.d));
  const dim3 score_block(32, 8);
  const dim3 score_grid(blocks_for(shape.n_kv, 32), blocks_for(shape.n_q, 8), static_cast<unsigned>(shape.bh));
  scores_kernel<<<score_grid, score_block>>>(t.Q, t.K, t.S, shape.n_q, shape.n_kv, shape.d, scale);
  ATTN_CUDA_CHECK_LAUNCH();
  launch_softmax_rows(t.S, t.lse, shape.bh, shape.n_q, shape.n_kv, shape.causal);
  const dim3 pv_block(32, 8);
  const dim3 pv_grid(blocks_for(shape.d, 32), blocks_for(shape.n_q, 8), static_cast<unsigned>(shape.bh));
  pv_kernel<<<pv_grid, pv_block>>>(t.S, t.V, t.O, shape.n_q, shape.n_kv, shape.d);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace attn::ch06
