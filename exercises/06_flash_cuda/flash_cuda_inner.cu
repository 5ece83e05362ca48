// Chapter 06, the kernel exercise: the inner loop of rung 3, the fused fp32 FlashAttention-2 kernel whose
// frame is chapters/06_flash_cuda/03_flash_fp32.cuh (read it first: it loads the tiles, computes S_ij and
// calls this function once per K/V tile). Its tests need a GPU: `./course check 06` on a GPU machine.
// Stuck? `./course hint 06`. Book page: book/06_flash_cuda.md.
#include "06_flash_cuda/03_flash_fp32.cuh"

namespace attn::ch06 {

__device__ void flash_inner_step(const float* s_row, int B_c, const float* V_tile, int d, int t, int T, RowState& st) {
  // TODO(learner): chapter 05's online-softmax update, for this thread's row and its output columns
  //   c = t, t + T, t + 2T, ... (st.o[k] holds column t + k·T; skip columns c >= d):
  //   1. m_new = max(st.m, max_j s_row[j]); if m_new is -inf every key is masked: return unchanged.
  //   2. alpha = exp(st.m - m_new); scale st.o[k] and st.l by alpha.
  //   3. for each key j: p = exp(s_row[j] - m_new); st.l += p; st.o[k] += p · V_tile[j·d + c].
  //   4. st.m = m_new.
  //   Then delete the line below (it tells the host that this function is still a skeleton).
  ATTN_INNER_STEP_NOT_IMPLEMENTED();
}

}  // namespace attn::ch06

namespace attn {

void flash_fp32_forward(const ch06::Shape& shape, const ch06::DeviceQKV& tensors) {
  ch06::launch_flash_fp32(shape, tensors);
}

}  // namespace attn
