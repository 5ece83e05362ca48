// Chapter 06: the device side of the ladder's frame: finding the GPU, its memory for one problem, timing
// with CUDA events, and the device's own ceilings (cuBLAS GEMM rates, copy bandwidth) measured in the
// same run, so every rung's TFLOP/s is set against what this GPU can do. Every CUDA call is checked.
// Book page: book/06_flash_cuda.md.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "06_flash_cuda/cuda_check.cuh"
#include "06_flash_cuda/ladder.hpp"

namespace attn::ch06 {
namespace {

__global__ void to_bf16_kernel(const float* in, __nv_bfloat16* out, long long count) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < count) out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void fill_kernel(float* p, long long count, float value) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < count) p[i] = value;
}

template <class T>
T* device_alloc(std::size_t count) {
  void* p = nullptr;
  ATTN_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  return static_cast<T*>(p);
}

void fill(float* p, std::size_t count, float value) {
  if (count == 0) return;
  fill_kernel<<<blocks_for(static_cast<long long>(count), 256), 256>>>(p, static_cast<long long>(count), value);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace

DeviceInfo query_device() {
  DeviceInfo info;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    info.why_not = status != cudaSuccess ? std::string("no CUDA device (") + cudaGetErrorString(status) + ")"
                                         : std::string("no CUDA device");
    cudaGetLastError();  // clear the sticky error of the failed query
    return info;
  }
  cudaDeviceProp prop{};
  ATTN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  info.present = true;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.smem_per_block = prop.sharedMemPerBlock;
  info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  info.max_threads_per_block = static_cast<unsigned>(prop.maxThreadsPerBlock);
  ATTN_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

struct GpuWorkspace::Impl {
  Shape shape;
  std::size_t q_count = 0, kv_count = 0, s_count = 0;
  float *Q = nullptr, *K = nullptr, *V = nullptr, *O = nullptr, *lse = nullptr, *S = nullptr;
  __nv_bfloat16 *Q16 = nullptr, *K16 = nullptr, *V16 = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;

  ~Impl() {  // no checks here: a destructor must not throw, and freeing cannot fail in a way we could fix
    for (void* p : {static_cast<void*>(Q), static_cast<void*>(K), static_cast<void*>(V), static_cast<void*>(O),
                    static_cast<void*>(lse), static_cast<void*>(S), static_cast<void*>(Q16), static_cast<void*>(K16),
                    static_cast<void*>(V16)})
      if (p != nullptr) cudaFree(p);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

GpuWorkspace::GpuWorkspace(const Shape& shape, bool with_scores) : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  w.shape = shape;
  w.q_count =
      static_cast<std::size_t>(shape.bh) * static_cast<std::size_t>(shape.n_q) * static_cast<std::size_t>(shape.d);
  w.kv_count =
      static_cast<std::size_t>(shape.bh) * static_cast<std::size_t>(shape.n_kv) * static_cast<std::size_t>(shape.d);
  w.Q = device_alloc<float>(w.q_count);
  w.K = device_alloc<float>(w.kv_count);
  w.V = device_alloc<float>(w.kv_count);
  w.O = device_alloc<float>(w.q_count);
  w.lse = device_alloc<float>(static_cast<std::size_t>(shape.bh) * static_cast<std::size_t>(shape.n_q));
  w.Q16 = device_alloc<__nv_bfloat16>(w.q_count);
  w.K16 = device_alloc<__nv_bfloat16>(w.kv_count);
  w.V16 = device_alloc<__nv_bfloat16>(w.kv_count);
  if (with_scores) {
    w.s_count =
        static_cast<std::size_t>(shape.bh) * static_cast<std::size_t>(shape.n_q) * static_cast<std::size_t>(shape.n_kv);
    w.S = device_alloc<float>(w.s_count);
  }
  ATTN_CUBLAS_CHECK(cublasCreate(&w.cublas));
  ATTN_CUDA_CHECK(cudaEventCreate(&w.start));
  ATTN_CUDA_CHECK(cudaEventCreate(&w.stop));
}

GpuWorkspace::~GpuWorkspace() = default;

void GpuWorkspace::upload(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V) {
  Impl& w = *impl_;
  if (Q.size() != w.q_count || K.size() != w.kv_count || V.size() != w.kv_count)
    throw std::invalid_argument("GpuWorkspace::upload: Q, K, V sizes " + std::to_string(Q.size()) + ", " +
                                std::to_string(K.size()) + ", " + std::to_string(V.size()) + " do not match the shape");
  const std::pair<const std::vector<float>*, std::pair<float*, __nv_bfloat16*>> parts[] = {
      {&Q, {w.Q, w.Q16}}, {&K, {w.K, w.K16}}, {&V, {w.V, w.V16}}};
  for (const auto& [host, device] : parts) {
    ATTN_CUDA_CHECK(cudaMemcpy(device.first, host->data(), host->size() * sizeof(float), cudaMemcpyHostToDevice));
    const auto count = static_cast<long long>(host->size());
    to_bf16_kernel<<<blocks_for(count, 256), 256>>>(device.first, device.second, count);
    ATTN_CUDA_CHECK_LAUNCH();
  }
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceQKV GpuWorkspace::tensors() const {
  const Impl& w = *impl_;
  DeviceQKV t;
  t.Q = w.Q;
  t.K = w.K;
  t.V = w.V;
  t.Q16 = reinterpret_cast<const std::uint16_t*>(w.Q16);
  t.K16 = reinterpret_cast<const std::uint16_t*>(w.K16);
  t.V16 = reinterpret_cast<const std::uint16_t*>(w.V16);
  t.O = w.O;
  t.lse = w.lse;
  t.S = w.S;
  t.cublas = w.cublas;
  return t;
}

void GpuWorkspace::poison_outputs() {
  const Impl& w = *impl_;
  fill(w.O, w.q_count, NAN);
  fill(w.lse, static_cast<std::size_t>(w.shape.bh) * static_cast<std::size_t>(w.shape.n_q), NAN);
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<float> GpuWorkspace::download_O() const {
  std::vector<float> out(impl_->q_count);
  ATTN_CUDA_CHECK(cudaMemcpy(out.data(), impl_->O, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

std::vector<float> GpuWorkspace::download_lse() const {
  std::vector<float> out(static_cast<std::size_t>(impl_->shape.bh) * static_cast<std::size_t>(impl_->shape.n_q));
  ATTN_CUDA_CHECK(cudaMemcpy(out.data(), impl_->lse, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

double GpuWorkspace::median_ms(const std::function<void()>& launch, int repeats, int warmup) const {
  for (int i = 0; i < warmup; ++i) launch();
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    ATTN_CUDA_CHECK(cudaEventRecord(impl_->start));
    launch();
    ATTN_CUDA_CHECK(cudaEventRecord(impl_->stop));
    ATTN_CUDA_CHECK(cudaEventSynchronize(impl_->stop));
    float elapsed = 0.0f;
    ATTN_CUDA_CHECK(cudaEventElapsedTime(&elapsed, impl_->start, impl_->stop));
    ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

// [ceilings]
Ceilings measure_ceilings() {
  constexpr int n = 8192;  // square GEMMs large enough to reach the plateau
  Ceilings c;
  float *A = device_alloc<float>(std::size_t{n} * n), *B = device_alloc<float>(std::size_t{n} * n),
        *C = device_alloc<float>(std::size_t{n} * n);
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  try {
    fill(A, std::size_t{n} * n, 0.5f);
    fill(B, std::size_t{n} * n, 0.25f);
    fill(C, std::size_t{n} * n, 0.125f);
    ATTN_CUBLAS_CHECK(cublasCreate(&handle));
    ATTN_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // fp32 means fp32: no TF32
    ATTN_CUDA_CHECK(cudaEventCreate(&start));
    ATTN_CUDA_CHECK(cudaEventCreate(&stop));
    auto time_ms = [&](const std::function<void()>& work) {
      work();  // warm-up
      std::vector<float> ms;
      for (int i = 0; i < 5; ++i) {
        ATTN_CUDA_CHECK(cudaEventRecord(start));
        work();
        ATTN_CUDA_CHECK(cudaEventRecord(stop));
        ATTN_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.0f;
        ATTN_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      return static_cast<double>(ms[2]);
    };
    const float one = 1.0f, zero = 0.0f;
    const double gemm_flops = 2.0 * n * static_cast<double>(n) * n;
    c.fp32_tflops =
        gemm_flops / time_ms([&] {
          ATTN_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n));
        }) /
        1e9;
    // bf16 × bf16 → fp32 on tensor cores: A and B reinterpreted as bf16 (2n² halves fit in n² floats).
    auto* A16 = reinterpret_cast<__nv_bfloat16*>(A);
    auto* B16 = reinterpret_cast<__nv_bfloat16*>(B);
    to_bf16_kernel<<<blocks_for(std::int64_t{n} * n, 256), 256>>>(C, A16, std::int64_t{n} * n);
    ATTN_CUDA_CHECK_LAUNCH();
    to_bf16_kernel<<<blocks_for(std::int64_t{n} * n, 256), 256>>>(C, B16, std::int64_t{n} * n);
    ATTN_CUDA_CHECK_LAUNCH();
    c.bf16_tflops = gemm_flops / time_ms([&] {
                      ATTN_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A16, CUDA_R_16BF,
                                                     n, B16, CUDA_R_16BF, n, &zero, C, CUDA_R_32F, n,
                                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    }) /
                    1e9;
    const double bytes = 2.0 * sizeof(float) * n * static_cast<double>(n);  // read + write
    c.copy_gbs = bytes / time_ms([&] {
                   ATTN_CUDA_CHECK(cudaMemcpy(C, A, sizeof(float) * std::size_t{n} * n, cudaMemcpyDeviceToDevice));
                 }) /
                 1e6;
  } catch (...) {
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    if (handle != nullptr) cublasDestroy(handle);
    throw;
  }
  ATTN_CUDA_CHECK(cudaFree(A));
  ATTN_CUDA_CHECK(cudaFree(B));
  ATTN_CUDA_CHECK(cudaFree(C));
  ATTN_CUBLAS_CHECK(cublasDestroy(handle));
  ATTN_CUDA_CHECK(cudaEventDestroy(start));
  ATTN_CUDA_CHECK(cudaEventDestroy(stop));
  return c;
}
// [ceilings]

}  // namespace attn::ch06
