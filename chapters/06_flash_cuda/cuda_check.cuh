// Chapter 06: checking every CUDA and cuBLAS call. A failing call throws std::runtime_error naming the
// call, the file and line, and CUDA's own message, so no error goes unnoticed into a wrong timing.
// Book page: book/06_flash_cuda.md.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace attn::ch06 {

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cudaGetErrorString(status));
}

inline void cublas_check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                             ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

}  // namespace attn::ch06

/// Checks a CUDA runtime call.
#define ATTN_CUDA_CHECK(call) ::attn::ch06::cuda_check((call), #call, __FILE__, __LINE__)
/// Checks a cuBLAS call.
#define ATTN_CUBLAS_CHECK(call) ::attn::ch06::cublas_check((call), #call, __FILE__, __LINE__)
/// Checks that the kernel launch just made was accepted (bad configuration, too much shared memory...).
#define ATTN_CUDA_CHECK_LAUNCH() ATTN_CUDA_CHECK(cudaGetLastError())

namespace attn::ch06 {

/// Blocks of \p per_block covering \p total items.
inline unsigned blocks_for(long long total, int per_block) {
  return static_cast<unsigned>((total + per_block - 1) / per_block);
}

/// Rung 1's row softmax, shared with rung 2 (defined in 01_naive.cu): S (bh·n_q rows, n_kv) becomes P in
/// place, the log-sum-exp of each row goes to lse; causal entries (j > i + n_kv - n_q) count as -inf.
void launch_softmax_rows(float* S, float* lse, int bh, int n_q, int n_kv, bool causal);

}  // namespace attn::ch06
