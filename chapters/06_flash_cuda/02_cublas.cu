// Chapter 06, rung 2 of the ladder: the two products as cuBLAS SGEMMs around rung 1's softmax.
//
// What changed from rung 1: S = QKᵀ/√d and O = P·V are batched SGEMMs. cuBLAS keeps tiles of Q, K, P and V
// in shared memory and registers and reuses each loaded value many times, so the products run near the
// fp32 ceiling. TF32 is switched off (CUBLAS_DEFAULT_MATH, and we never ask for TF32), so the comparison
// with the fp32 rungs is fair. What did not change: S and P still go to HBM and back, (bh, n_q, n_kv)
// floats, which is what the fused rungs remove.
// Measured ratio against rung 1: not measured yet: no GPU in this session.
// Book page: book/06_flash_cuda.md.
#include <cmath>

#include "06_flash_cuda/cuda_check.cuh"
#include "06_flash_cuda/ladder.hpp"

namespace attn::ch06 {

// [cublas_forward]
// cuBLAS is column-major; a row-major (rows, cols) matrix is its transpose in column-major. So the row-major
// S = Q Kᵀ (n_q, n_kv) is computed as the column-major Sᵀ = K Qᵀ (n_kv, n_q), and O = P V as Oᵀ = Vᵀ Pᵀ.
void cublas_forward(const Shape& shape, const DeviceQKV& t) {
  check_shape(shape, "cublas_forward");
  if (t.S == nullptr || t.cublas == nullptr) throw std::invalid_argument("cublas_forward: needs S and a handle");
  // The handle is in CUBLAS_DEFAULT_MATH (GpuWorkspace sets it once, outside the timed region): no TF32.
  auto handle = static_cast<cublasHandle_t>(t.cublas);
  const int n_q = shape.n_q, n_kv = shape.n_kv, d = shape.d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d)), one = 1.0f, zero = 0.0f;
  const long long q_stride = static_cast<long long>(n_q) * d, kv_stride = static_cast<long long>(n_kv) * d;
  const long long s_stride = static_cast<long long>(n_q) * n_kv;
  // Sᵀ (n_kv, n_q) = scale · K (n_kv, d) · Qᵀ (d, n_q): K is stored as column-major (d, n_kv), hence OP_T.
  ATTN_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, n_kv, n_q, d, &scale, t.K, d, kv_stride,
                                              t.Q, d, q_stride, &zero, t.S, n_kv, s_stride, shape.bh));
  launch_softmax_rows(t.S, t.lse, shape.bh, n_q, n_kv, shape.causal);  // S becomes P in place
  // Oᵀ (d, n_q) = Vᵀ (d, n_kv) · Pᵀ (n_kv, n_q): both are already column-major as stored.
  ATTN_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, d, n_q, n_kv, &one, t.V, d, kv_stride,
                                              t.S, n_kv, s_stride, &zero, t.O, d, q_stride, shape.bh));
}
// [cublas_forward]

}  // namespace attn::ch06
