// Chapter 06, rung 4 of the ladder: FlashAttention-2 on tensor cores, bf16 inputs, fp32 sums.
//
// What changed from rung 3: the two products S = Q Kᵀ and O += P V run as mma.sync.m16n8k16 instructions:
// one warp multiplies a 16×16 bf16 tile by a 16×8 one into 16×8 fp32 sums in one instruction, instead of
// 16·8·16 separate fused multiply-adds. Each of the 4 warps owns 16 query rows; S, P and O live in the
// warp's registers in the layout the instruction defines, so the online softmax runs on registers and the
// P fragment feeds the second mma directly (FlashAttention-2's layout trick). bf16 halves the bytes of
// Q, K, V. Exponentials use exp2 with log2(e) folded into the scale.
// Measured ratio against rung 1, and % of PyTorch's SDPA: not measured yet: no GPU in this session.
//
// What it leaves out: cp.async double buffering, ldmatrix, swizzled shared memory, warp specialisation
// (FlashAttention-3); d is compiled for 64 and 128 (other d ≤ 128 are zero-padded up to one of them).
// Book page: book/06_flash_cuda.md.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "06_flash_cuda/cuda_check.cuh"
#include "06_flash_cuda/ladder.hpp"
#include "06_flash_cuda/tiles.hpp"

namespace attn::ch06 {
namespace {

using bf16 = __nv_bfloat16;

// [mma]
// D (16×8 fp32) += A (16×16 bf16, row-major) · B (16×8 bf16, column-major). Per lane, with g = lane / 4 and
// q = lane % 4: a[0] holds A(g, 2q..2q+1), a[1] A(g+8, 2q..), a[2] A(g, 2q+8..), a[3] A(g+8, 2q+8..);
// b[0] holds B(2q..2q+1, g), b[1] B(2q+8.., g); d[0..1] are D(g, 2q..2q+1) and d[2..3] D(g+8, 2q..2q+1).
__device__ __forceinline__ void mma_bf16_16816(float (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the build targets sm_80 and sm_90 only
#endif
}
// [mma]

// ptxas allocates registers for the whole kernel: on sm_80, letting it unroll the ragged path's loads
// costs 38 registers at D = 128 (206 instead of 168: two blocks per SM instead of three), so there the
// loops stay rolled; on sm_90 rolling them would cost D = 64 a register over 128 (a block per SM).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define ATTN_ROLLED_ON_SM80 _Pragma("unroll 1")
#else
#define ATTN_ROLLED_ON_SM80
#endif

// Two adjacent bf16 in shared memory as one 32-bit register (the lower address in the lower half).
__device__ __forceinline__ std::uint32_t load_pair(const bf16* p) { return *reinterpret_cast<const std::uint32_t*>(p); }

// The bf16 bits of two adjacent keys' entries of one column as one word of V_jᵀ (the lower key in the lower half).
__device__ __forceinline__ std::uint32_t pair_word(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

template <int D>  // head size as compiled: 64 or 128 (the real d ≤ D, padded with zeros)
__global__ void __launch_bounds__(tiles::kTcThreads)
    flash_tc_kernel(const bf16* Q, const bf16* K, const bf16* V, float* O, float* lse, int n_q, int n_kv, int d,
                    float scale_log2, bool causal) {
  constexpr int B_r = tiles::kTcBr, B_c = tiles::kTcBc, QK_STRIDE = tiles::tc_qk_stride(D);
  constexpr int VT_STRIDE = tiles::kTcVtStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Q_i = reinterpret_cast<bf16*>(smem_raw);            // (B_r, D + 8)
  bf16* K_j = Q_i + B_r * QK_STRIDE;                        // (B_c, D + 8)
  bf16* Vt_j = K_j + B_c * QK_STRIDE;                       // (D, B_c + 8): V_j transposed, so P·V reads pairs
  auto* Vt_words = reinterpret_cast<std::uint32_t*>(Vt_j);  // the same, as words of two adjacent keys
  const long long head = blockIdx.y + static_cast<long long>(blockIdx.z) * gridDim.y;
  const int q0 = static_cast<int>(blockIdx.x) * B_r;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4;  // the mma layout's row group and column pair
  const int offset = n_kv - n_q;
  Q += head * n_q * d;
  K += head * n_kv * d;
  V += head * n_kv * d;
  const bf16 zero = __float2bfloat16(0.0f);

  for (int idx = tid; idx < B_r * D; idx += tiles::kTcThreads) {
    const int row = idx / D, c = idx % D;
    Q_i[row * QK_STRIDE + c] = q0 + row < n_q && c < d ? Q[static_cast<long long>(q0 + row) * d + c] : zero;
  }
  __syncthreads();
  // The warp's 16 rows of Q as A fragments, loaded once and kept in registers: (D/16) k-steps × 4 registers.
  const int w0 = warp * 16;
  std::uint32_t q_frag[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const bf16* base = Q_i + (w0 + g) * QK_STRIDE + kk * 16 + 2 * q;
    q_frag[kk][0] = load_pair(base);
    q_frag[kk][1] = load_pair(base + 8 * QK_STRIDE);
    q_frag[kk][2] = load_pair(base + 8);
    q_frag[kk][3] = load_pair(base + 8 * QK_STRIDE + 8);
  }

  // Each lane holds two rows, g and g + 8, of the warp's 16: their running max (in log2 units) and sum.
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[D / 8][4];  // O (16, D) as D/8 fragments of 16×8
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

  const int last_query = min(q0 + B_r, n_q) - 1;
  const int kv_end = causal ? min(n_kv, last_query + offset + 1) : n_kv;
  for (int k0 = 0; k0 < kv_end; k0 += B_c) {
    __syncthreads();
    if (d == D) {  // whole rows: 16-byte loads of 8 bf16 (rows are 16-byte aligned when d is 64 or 128)
      // K_j: consecutive lanes take consecutive 16-byte chunks of a row: coalesced loads, and each group of
      // 8 lanes stores 128 contiguous bytes, all 32 banks once.
      for (int idx = tid; idx < B_c * D / 8; idx += tiles::kTcThreads) {
        const int row = idx / (D / 8), c = idx % (D / 8) * 8;
        uint4 k8 = make_uint4(0, 0, 0, 0);
        if (k0 + row < n_kv) k8 = *reinterpret_cast<const uint4*>(K + static_cast<long long>(k0 + row) * D + c);
        *reinterpret_cast<uint4*>(K_j + row * QK_STRIDE + c) = k8;
      }
      // V_jᵀ: consecutive lanes take consecutive row pairs (tiles::tc_vt_item): a warp's stores of one
      // column land in 32 different banks.
      for (int idx = tid; idx < B_c / 2 * D / 8; idx += tiles::kTcThreads) {
        const tiles::VtItem it = tiles::tc_vt_item(idx, 8);
        const int row = k0 + 2 * it.pair;
        uint4 lo8 = make_uint4(0, 0, 0, 0), hi8 = lo8;
        if (row < n_kv) lo8 = *reinterpret_cast<const uint4*>(V + static_cast<long long>(row) * D + it.c);
        if (row + 1 < n_kv) hi8 = *reinterpret_cast<const uint4*>(V + static_cast<long long>(row + 1) * D + it.c);
        const auto* lo = reinterpret_cast<const std::uint16_t*>(&lo8);
        const auto* hi = reinterpret_cast<const std::uint16_t*>(&hi8);
#pragma unroll
        for (int e = 0; e < 8; ++e) Vt_words[tiles::tc_vt_word(it.c + e, it.pair)] = pair_word(lo[e], hi[e]);
      }
    } else {  // a ragged head size: element by element, zeros past d
      ATTN_ROLLED_ON_SM80
      for (int idx = tid; idx < B_c * D; idx += tiles::kTcThreads) {
        const int row = idx / D, c = idx % D;
        const bool inside = k0 + row < n_kv && c < d;
        K_j[row * QK_STRIDE + c] = inside ? K[static_cast<long long>(k0 + row) * d + c] : zero;
      }
      ATTN_ROLLED_ON_SM80
      for (int idx = tid; idx < B_c / 2 * D; idx += tiles::kTcThreads) {
        const tiles::VtItem it = tiles::tc_vt_item(idx, 1);
        const int row = k0 + 2 * it.pair;
        const std::uint16_t* bits = reinterpret_cast<const std::uint16_t*>(V);
        const std::uint16_t lo = row < n_kv && it.c < d ? bits[static_cast<long long>(row) * d + it.c] : 0;
        const std::uint16_t hi = row + 1 < n_kv && it.c < d ? bits[static_cast<long long>(row + 1) * d + it.c] : 0;
        Vt_words[tiles::tc_vt_word(it.c, it.pair)] = pair_word(lo, hi);
      }
    }
    __syncthreads();

    // [tc_kernel]
    // S (16, B_c) = Q_w Kᵀ: B_c/8 fragments; B(k = c, n = key) = K_j(key, c), so pairs along c are adjacent.
    float s[B_c / 8][4];
#pragma unroll
    for (int nt = 0; nt < B_c / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const bf16* base = K_j + (nt * 8 + g) * QK_STRIDE + kk * 16 + 2 * q;
        mma_bf16_16816(s[nt], q_frag[kk], load_pair(base), load_pair(base + 8));
      }
    }
    // Scale into log2 units and mask: fragment entry e sits at row g + 8·(e / 2), column 2q + e % 2.
    float m_tile[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < B_c / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = q0 + w0 + g + 8 * (e / 2), key = k0 + nt * 8 + 2 * q + e % 2;
        const bool allowed = key < n_kv && (!causal || key <= i + offset);
        s[nt][e] = allowed ? s[nt][e] * scale_log2 : -INFINITY;
        m_tile[e / 2] = fmaxf(m_tile[e / 2], s[nt][e]);
      }
    // The four lanes of a row group hold its B_c scores between them: combine their maxima.
    float alpha[2], m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(0xffffffffu, m_tile[r], 1));
      m_tile[r] = fmaxf(m_tile[r], __shfl_xor_sync(0xffffffffu, m_tile[r], 2));
      const float m_new = fmaxf(m[r], m_tile[r]);
      m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: exp2(-inf - 0) = 0, never NaN
      alpha[r] = exp2f(m[r] - m_use[r]);
      m[r] = m_new;
      l[r] *= alpha[r];  // each lane keeps a partial sum of its own columns; summed over lanes at the end
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
    // P = exp2(s - m), rounded to bf16 straight into A fragments: the accumulator layout of two adjacent
    // 16×8 S fragments is exactly the A layout of one 16×16 P fragment.
    std::uint32_t p_frag[B_c / 16][4];
#pragma unroll
    for (int kk = 0; kk < B_c / 16; ++kk) {
      float p[2][4];
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          p[half][e] = exp2f(s[2 * kk + half][e] - m_use[e / 2]);
          l[e / 2] += p[half][e];
        }
      p_frag[kk][0] = pack_bf16(p[0][0], p[0][1]);
      p_frag[kk][1] = pack_bf16(p[0][2], p[0][3]);
      p_frag[kk][2] = pack_bf16(p[1][0], p[1][1]);
      p_frag[kk][3] = pack_bf16(p[1][2], p[1][3]);
    }
    // O (16, D) += P (16, B_c) V_j (B_c, D): B(k = key, n = c) = Vt_j(c, key), adjacent along key.
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int kk = 0; kk < B_c / 16; ++kk) {
        const bf16* base = Vt_j + (dt * 8 + g) * VT_STRIDE + kk * 16 + 2 * q;
        mma_bf16_16816(o[dt], p_frag[kk], load_pair(base), load_pair(base + 8));
      }
    // [tc_kernel]
  }

  // ℓ: sum the four lanes' partial sums; then O / ℓ and lse = ln 2 · (m + log2 ℓ).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = q0 + w0 + g + 8 * r;
    if (i >= n_q) continue;
    const float inv_l = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* out = O + (head * n_q + i) * d;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = dt * 8 + 2 * q + e;
        if (c < d) out[c] = o[dt][2 * r + e] * inv_l;
      }
    if (q == 0) lse[head * n_q + i] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * 0.69314718f : -INFINITY;
  }
}

template <int D>
void launch_tc(const Shape& shape, const DeviceQKV& t) {
  const std::size_t smem = tiles::tc_smem_bytes(D);
  // Opt in to more than 48 KiB once per process (per compiled D), so timed launches do not repeat the call.
  static const bool opted_in = [smem] {
    ATTN_CUDA_CHECK(
        cudaFuncSetAttribute(flash_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(blocks_for(shape.n_q, tiles::kTcBr), static_cast<unsigned>(shape.bh), 1);
  const float scale_log2 = 1.4426950409f / std::sqrt(static_cast<float>(shape.d));  // log2(e) / √d
  flash_tc_kernel<D><<<grid, tiles::kTcThreads, smem>>>(
      reinterpret_cast<const bf16*>(t.Q16), reinterpret_cast<const bf16*>(t.K16), reinterpret_cast<const bf16*>(t.V16),
      t.O, t.lse, shape.n_q, shape.n_kv, shape.d, scale_log2, shape.causal);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_tc_forward(const Shape& shape, const DeviceQKV& t) {
  check_shape(shape, "flash_tc_forward");
  check_tc_alignment(t, shape.d);
  if (tiles::tc_head_dim(shape.d) == 64)
    launch_tc<64>(shape, t);
  else
    launch_tc<128>(shape, t);
}

}  // namespace attn::ch06
