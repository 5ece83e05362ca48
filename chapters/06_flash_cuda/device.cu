// Chapter 06: the device side of the ladder's frame: finding the GPU, its memory for one problem, timing
// with CUDA events, and the device's own ceilings (cuBLAS GEMM rates, copy bandwidth) measured in the
// same run, so every rung's TFLOP/s is set against what this GPU can do. Every CUDA call is checked.
// Book page: book/06_flash_cuda.md.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "06_flash_cuda/cuda_check.cuh"
#include "06_flash_cuda/ladder.hpp"
#include "06_flash_cuda/random_inputs.hpp"

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

// Uniform values in [-1, 1) (random_inputs.hpp): random data for the ceilings.
__global__ void fill_uniform_kernel(float* p, long long count, unsigned long long seed) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < count) p[i] = hash_uniform(seed, static_cast<std::uint64_t>(i));
}

// Standard normal values (random_inputs.hpp): the timing run's Q, K and V, drawn where they are used.
__global__ void fill_normal_kernel(float* p, long long count, unsigned long long seed) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < count) p[i] = hash_normal(seed, static_cast<std::uint64_t>(i));
}

// Two CUDA events that are destroyed on every path, the error paths included.
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    ATTN_CUDA_CHECK(cudaEventCreate(&start));
    try {
      ATTN_CUDA_CHECK(cudaEventCreate(&stop));
    } catch (...) {
      cudaEventDestroy(start);
      throw;
    }
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// Device memory freed on every path.
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
template <class T>
using DeviceBuffer = std::unique_ptr<T, DeviceFree>;

// [timing]
// The time of `count` back-to-back launches between two events, in ms.
double time_launches(const Events& ev, const std::function<void()>& launch, int count) {
  ATTN_CUDA_CHECK(cudaEventRecord(ev.start));
  for (int i = 0; i < count; ++i) launch();
  ATTN_CUDA_CHECK(cudaEventRecord(ev.stop));
  ATTN_CUDA_CHECK(cudaEventSynchronize(ev.stop));
  float elapsed = 0.0f;
  ATTN_CUDA_CHECK(cudaEventElapsedTime(&elapsed, ev.start, ev.stop));
  return elapsed;
}

// Warm-up launches first (the first launch of a kernel loads its code and sets its attributes), then
// `repeats` samples, each of enough launches to last about 2 ms: a short kernel timed alone would carry
// the events' resolution (~0.5 µs) and the gap before the launch in every sample. The median per launch.
double median_ms_per_launch(const Events& ev, const std::function<void()>& launch, int repeats, int warmup) {
  for (int i = 0; i < warmup; ++i) launch();
  ATTN_CUDA_CHECK(cudaDeviceSynchronize());
  const double one = time_launches(ev, launch, 1);
  const int per_sample = static_cast<int>(std::clamp(std::ceil(2.0 / std::max(one, 1e-3)), 1.0, 1000.0));
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) ms.push_back(time_launches(ev, launch, per_sample) / per_sample);
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? one : ms[ms.size() / 2];
}
// [timing]

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
  Events events;

  ~Impl() {  // no checks here: a destructor must not throw, and freeing cannot fail in a way we could fix
    for (void* p : {static_cast<void*>(Q), static_cast<void*>(K), static_cast<void*>(V), static_cast<void*>(O),
                    static_cast<void*>(lse), static_cast<void*>(S), static_cast<void*>(Q16), static_cast<void*>(K16),
                    static_cast<void*>(V16)})
      if (p != nullptr) cudaFree(p);
    if (cublas != nullptr) cublasDestroy(cublas);
  }
};

GpuWorkspace::GpuWorkspace(const Shape& shape, bool with_scores) {
  check_shape(shape, "GpuWorkspace");
  impl_ = std::make_unique<Impl>();
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
  // Set once here, outside any timed region: fp32 products stay fp32 (no TF32) for rung 2.
  ATTN_CUBLAS_CHECK(cublasSetMathMode(w.cublas, CUBLAS_DEFAULT_MATH));
}

GpuWorkspace::~GpuWorkspace() = default;

void GpuWorkspace::upload(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V) {
  Impl& w = *impl_;
  if (Q.size() != w.q_count || K.size() != w.kv_count || V.size() != w.kv_count)
    throw std::invalid_argument("GpuWorkspace::upload: Q, K, V sizes " + std::to_string(Q.size()) + ", " +
                                std::to_string(K.size()) + ", " + std::to_string(V.size()) + " do not match the shape");
  const std::pair<const std::vector<float>*, float*> parts[] = {{&Q, w.Q}, {&K, w.K}, {&V, w.V}};
  for (const auto& [host, device] : parts)
    ATTN_CUDA_CHECK(cudaMemcpy(device, host->data(), host->size() * sizeof(float), cudaMemcpyHostToDevice));
  make_bf16_copies();
}

void GpuWorkspace::fill_normal(std::uint64_t seed) {
  Impl& w = *impl_;
  const std::pair<float*, std::size_t> parts[] = {{w.Q, w.q_count}, {w.K, w.kv_count}, {w.V, w.kv_count}};
  for (const auto& [device, count] : parts) {
    const auto n = static_cast<long long>(count);
    fill_normal_kernel<<<blocks_for(n, 256), 256>>>(device, n, seed++);  // one stream per tensor
    ATTN_CUDA_CHECK_LAUNCH();
  }
  make_bf16_copies();
}

void GpuWorkspace::make_bf16_copies() {
  Impl& w = *impl_;
  const std::pair<const float*, std::pair<__nv_bfloat16*, std::size_t>> parts[] = {
      {w.Q, {w.Q16, w.q_count}}, {w.K, {w.K16, w.kv_count}}, {w.V, {w.V16, w.kv_count}}};
  for (const auto& [fp32, bf16] : parts) {
    const auto count = static_cast<long long>(bf16.second);
    to_bf16_kernel<<<blocks_for(count, 256), 256>>>(fp32, bf16.first, count);
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
  // Before any launch: an empty launch would throw std::bad_function_call from inside the timing, and no sample
  // has no median.
  if (!launch || repeats < 1 || warmup < 0)
    throw std::invalid_argument("GpuWorkspace::median_ms: " + std::string(launch ? "" : "an empty launch, ") +
                                "repeats = " + std::to_string(repeats) + ", warmup = " + std::to_string(warmup) +
                                "; need a launch, repeats >= 1 and warmup >= 0");
  return median_ms_per_launch(impl_->events, launch, repeats, warmup);
}

// [ceilings]
Ceilings measure_ceilings() {
  constexpr int n = 8192;  // square GEMMs large enough to reach the plateau
  constexpr std::size_t count = std::size_t{n} * n;
  constexpr long long kCount = static_cast<long long>(count);
  const DeviceBuffer<float> A(device_alloc<float>(count)), B(device_alloc<float>(count)), C(device_alloc<float>(count));
  for (float* p : {A.get(), B.get(), C.get()}) {
    fill_uniform_kernel<<<blocks_for(kCount, 256), 256>>>(p, kCount, reinterpret_cast<std::uintptr_t>(p));
    ATTN_CUDA_CHECK_LAUNCH();
  }
  cublasHandle_t raw = nullptr;
  ATTN_CUBLAS_CHECK(cublasCreate(&raw));
  const std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> handle(raw, cublasDestroy);
  ATTN_CUBLAS_CHECK(cublasSetMathMode(raw, CUBLAS_DEFAULT_MATH));  // fp32 means fp32: no TF32
  const Events ev;
  const auto time_ms = [&](const std::function<void()>& work) { return median_ms_per_launch(ev, work, 5, 1); };
  const float one = 1.0f, zero = 0.0f;
  const double gemm_flops = 2.0 * n * static_cast<double>(n) * n;
  Ceilings c;
  c.fp32_tflops = gemm_flops / time_ms([&] {
                    ATTN_CUBLAS_CHECK(cublasSgemm(raw, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A.get(), n, B.get(), n,
                                                  &zero, C.get(), n));
                  }) /
                  1e9;
  // bf16 × bf16 → fp32 on tensor cores: bf16 copies of the random A and B in the first halves of B and C.
  auto* A16 = reinterpret_cast<__nv_bfloat16*>(B.get());
  auto* B16 = reinterpret_cast<__nv_bfloat16*>(C.get());
  to_bf16_kernel<<<blocks_for(kCount, 256), 256>>>(A.get(), A16, kCount);
  ATTN_CUDA_CHECK_LAUNCH();
  fill_uniform_kernel<<<blocks_for(kCount, 256), 256>>>(A.get(), kCount, 12345);
  ATTN_CUDA_CHECK_LAUNCH();
  to_bf16_kernel<<<blocks_for(kCount, 256), 256>>>(A.get(), B16, kCount);
  ATTN_CUDA_CHECK_LAUNCH();
  c.bf16_tflops = gemm_flops / time_ms([&] {
                    ATTN_CUBLAS_CHECK(cublasGemmEx(raw, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A16, CUDA_R_16BF, n,
                                                   B16, CUDA_R_16BF, n, &zero, A.get(), CUDA_R_32F, n,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                  }) /
                  1e9;
  const double bytes = 2.0 * sizeof(float) * static_cast<double>(count);  // read + write
  c.copy_gbs =
      bytes /
      time_ms([&] { ATTN_CUDA_CHECK(cudaMemcpy(A.get(), C.get(), sizeof(float) * count, cudaMemcpyDeviceToDevice)); }) /
      1e6;
  return c;
}
// [ceilings]

}  // namespace attn::ch06
