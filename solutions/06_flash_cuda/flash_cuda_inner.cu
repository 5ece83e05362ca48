// Chapter 06, the kernel exercise answered: the inner loop of rung 3 (the fused fp32 FlashAttention-2
// kernel in chapters/06_flash_cuda/03_flash_fp32.cuh), and rung 3's entry point.
// Book page: book/06_flash_cuda.md.
#include "06_flash_cuda/03_flash_fp32.cuh"

namespace attn::ch06 {

// [inner_step]
__device__ void flash_inner_step(const float* s_row, int B_c, const float* V_tile, int d, int t, int T, RowState& st) {
  // The tile's max. Every thread of the row reads the whole (B_c) row from shared memory and reaches the
  // same m_new: a little redundant arithmetic instead of a shuffle between them.
  float m_tile = -INFINITY;
  for (int j = 0; j < B_c; ++j) m_tile = fmaxf(m_tile, s_row[j]);
  const float m_new = fmaxf(st.m, m_tile);
  if (m_new == -INFINITY) return;  // every key so far is masked: nothing to add, and exp(-inf - -inf) is NaN
  // Old sums were taken relative to st.m; rescale them to m_new (exp(-inf) = 0 on the first tile).
  const float alpha = expf(st.m - m_new);
  for (int k = 0; k < kDPerThread; ++k) st.o[k] *= alpha;
  float l_tile = 0.0f;
  for (int j = 0; j < B_c; ++j) {
    const float p = expf(s_row[j] - m_new);  // masked keys: exp(-inf) = 0
    l_tile += p;
    const float* v = V_tile + j * d;  // (d)
    for (int k = 0; k < kDPerThread; ++k) {
      const int c = t + k * T;
      if (c < d) st.o[k] += p * v[c];
    }
  }
  st.l = st.l * alpha + l_tile;
  st.m = m_new;
}
// [inner_step]

}  // namespace attn::ch06

namespace attn {

void flash_fp32_forward(const ch06::Shape& shape, const ch06::DeviceQKV& tensors) {
  ch06::launch_flash_fp32(shape, tensors);
}

}  // namespace attn
