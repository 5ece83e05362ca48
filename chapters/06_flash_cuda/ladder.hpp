/// \file
/// Chapter 06's GPU ladder as the host sees it: shapes, device pointers, the four rungs, the device and
/// its ceilings, and the host-side arithmetic (roofline, bf16 reference). No CUDA header is included here,
/// so main.cpp, the tests and the host-only build (no nvcc) all compile against it. Everything that
/// touches a GPU is defined only when ATTN_HAVE_CUDA is 1; callers guard their calls with
/// `#if ATTN_HAVE_CUDA`. Book page: book/06_flash_cuda.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attn::ch06 {

/// \defgroup ch06_ladder Chapter 06: the kernel ladder (host side)
/// The rungs, the device, and the arithmetic that explains their speed.
/// @{

/// The shape of one batched attention call. Tensors are stored head after head:
/// Q and O are (bh, n_q, d), K and V are (bh, n_kv, d), the log-sum-exp is (bh, n_q), all row-major.
struct Shape {
  int bh = 1;           ///< batch · heads: independent attention problems
  int n_q = 1;          ///< queries per head
  int n_kv = 1;         ///< keys and values per head (n_q ≤ n_kv when causal; queries aligned to the end)
  int d = 1;            ///< head size d_k = d_v
  bool causal = false;  ///< query i sees key j only when j ≤ i + (n_kv - n_q), as in chapter 02
};

/// Device pointers of one call (all device memory). The bf16 copies feed the tensor-core rung.
struct DeviceQKV {
  const float* Q = nullptr;            ///< (bh, n_q, d)
  const float* K = nullptr;            ///< (bh, n_kv, d)
  const float* V = nullptr;            ///< (bh, n_kv, d)
  const std::uint16_t* Q16 = nullptr;  ///< (bh, n_q, d) bf16 bits
  const std::uint16_t* K16 = nullptr;  ///< (bh, n_kv, d) bf16 bits
  const std::uint16_t* V16 = nullptr;  ///< (bh, n_kv, d) bf16 bits
  float* O = nullptr;                  ///< (bh, n_q, d) output
  float* lse = nullptr;                ///< (bh, n_q) log Σ_j exp(s_ij), -inf for a row with no allowed key
  float* S = nullptr;                  ///< (bh, n_q, n_kv) scratch for the rungs that materialise S, or null
  void* cublas = nullptr;              ///< a cublasHandle_t (rung 2)
};

/// One rung: a launcher over device pointers, and what a reader needs to know to judge its speed.
struct Rung {
  std::string name;     ///< "1 naive", "2 cublas", ...
  bool tensor_cores;    ///< bf16 inputs on tensor cores (judged against the bf16 ceiling)
  bool materialises_S;  ///< needs DeviceQKV::S, (bh, n_q, n_kv) floats
  std::function<void(const Shape&, const DeviceQKV&)> launch;
};

/// Refuses, before anything is launched, a shape no rung runs: bh outside 1..65535 (grid.y), n_q or n_kv
/// below 1, d outside 1..128, a causal call with n_q > n_kv (the queries are aligned to the end of the
/// keys, so some would sit before the first key), or sizes whose element count overflows 2^62.
/// \throws std::invalid_argument naming \p who and the offending values. Every rung calls it first.
void check_shape(const Shape& shape, const std::string& who);

/// Rung 4 reads K and V 16 bytes at a time when d is 64 or 128: refuses bf16 pointers that are not 16-byte
/// aligned (std::invalid_argument naming the pointer), instead of a misaligned-address fault on the device.
void check_tc_alignment(const DeviceQKV& t, int d);

// --- the rungs (defined in the .cu files; rung 3 is the contract's flash_fp32_forward) -----------------

/// Rung 1: three kernels (scores, row softmax, P·V), S materialised in global memory.
void naive_forward(const Shape& shape, const DeviceQKV& t);
/// Rung 2: cuBLAS SGEMMs (TF32 off) around rung 1's softmax kernel: the vendor baseline.
void cublas_forward(const Shape& shape, const DeviceQKV& t);
/// Rung 4: FlashAttention-2 on tensor cores (mma.sync bf16 × bf16 → fp32), d ≤ 128.
void flash_tc_forward(const Shape& shape, const DeviceQKV& t);

/// The tile sizes and threads each rung launches with, and the shared memory its kernel really asks for
/// (with the padding that avoids bank conflicts), so the planning exercises can be checked against them.
struct KernelPlan {
  std::string rung;
  std::size_t B_r, B_c;
  unsigned threads;
  std::size_t element_bytes;  ///< of Q, K, V in shared memory
  std::size_t smem_bytes;     ///< what the kernel requests at head size d
};
/// The plans of rungs 3 and 4 at head size \p d (host arithmetic; no GPU needed).
/// \throws std::invalid_argument when d is outside 1..128 (the rungs' range; the tile arithmetic is int).
std::vector<KernelPlan> kernel_plans(std::size_t d);

// --- the device ----------------------------------------------------------------------------------------

/// What the program learns about the GPU (present = false without a device or without CUDA).
struct DeviceInfo {
  bool present = false;
  std::string why_not;  ///< when absent: "built without CUDA", "no CUDA device", the driver's message
  std::string name;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  std::size_t smem_per_block = 0;        ///< without opting in (48 KiB)
  std::size_t smem_per_block_optin = 0;  ///< the most a kernel may request
  unsigned max_threads_per_block = 0;
  std::size_t free_bytes = 0, total_bytes = 0;
};
/// Queries device 0. Never throws: a missing device is an answer, not an error.
DeviceInfo query_device();

/// Device memory for one Shape: inputs (fp32 and bf16 copies), outputs, S when asked, a cuBLAS handle,
/// and CUDA-event timing. Throws std::runtime_error naming the failing CUDA call.
class GpuWorkspace {
 public:
  GpuWorkspace(const Shape& shape, bool with_scores);
  ~GpuWorkspace();
  GpuWorkspace(const GpuWorkspace&) = delete;
  GpuWorkspace& operator=(const GpuWorkspace&) = delete;

  /// Copies Q (bh, n_q, d), K and V (bh, n_kv, d) to the device and makes their bf16 copies there.
  void upload(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V);
  /// Fills Q, K and V on the device with standard normal values (random_inputs.hpp's hash_normal; streams
  /// \p seed, \p seed + 1, \p seed + 2) and makes their bf16 copies: the timing run's inputs, drawn by the
  /// GPU in milliseconds instead of by one CPU core in seconds.
  void fill_normal(std::uint64_t seed);
  /// The device pointers for a launcher.
  DeviceQKV tensors() const;
  /// Sets O to NaN and the LSE to NaN, so a rung that forgets a row is caught.
  void poison_outputs();
  std::vector<float> download_O() const;    ///< (bh, n_q, d)
  std::vector<float> download_lse() const;  ///< (bh, n_q)
  /// Runs \p launch \p warmup times, then takes \p repeats samples, each a run of enough back-to-back
  /// launches between two CUDA events to last about 2 ms (so the events' resolution and one launch's
  /// overhead do not distort short kernels); the median time of one launch, in ms.
  /// \throws std::invalid_argument when \p launch is empty, repeats < 1 or warmup < 0, before any launch.
  double median_ms(const std::function<void()>& launch, int repeats, int warmup) const;

 private:
  void make_bf16_copies();  ///< Q16, K16, V16 from Q, K, V, on the device
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The device's ceilings, measured in the same run on random data (a GPU's clock and power draw depend
/// on the bits it multiplies: constant matrices flatter it): cuBLAS SGEMM (fp32, no TF32) and bf16 GEMM
/// rates in TFLOP/s, and device-to-device copy bandwidth in GB/s (read + write counted).
struct Ceilings {
  double fp32_tflops = 0, bf16_tflops = 0, copy_gbs = 0;
};
Ceilings measure_ceilings();

// --- the timing run's order (no GPU needed to test it) ------------------------------------------------

/// One rung's check against the CPU at one head size and mask, before the timing run.
struct RungCheck {
  std::string rung;
  int d = 0;
  bool causal = false;
  bool ok = false;
  std::string error;  ///< what the rung threw when it could not even run (empty when it ran)
};

/// The timing run after its checks: runs \p check (every rung against the CPU), then \p time with the
/// checks' results even when some failed, then throws std::runtime_error naming every failed rung, head
/// size and mask, so the program still exits non-zero. A failed check costs the run its verdict, not its
/// measurements: a lent GPU machine may be gone before a second try. An empty \p check or \p time is refused first
/// (std::invalid_argument naming it), before either runs.
void check_then_time(const std::function<std::vector<RungCheck>()>& check,
                     const std::function<void(const std::vector<RungCheck>&)>& time);

// --- host arithmetic (no GPU needed) --------------------------------------------------------------------

/// FLOPs of attention: 4·n_q·n_kv·d per head (Q·Kᵀ and P·V, 2 per multiply-add), about half when causal.
/// \throws std::invalid_argument as check_shape() does, for a shape no rung runs.
double attention_flops(const Shape& shape);

/// One line of the roofline table: an algorithm's FLOPs, its unavoidable HBM bytes, their ratio.
struct RooflineRow {
  std::string what;
  double flops, bytes, intensity;  ///< intensity = flops / bytes (FLOP per byte)
};
/// Standard attention (S and P written and read in fp32) against flash (Q, K, V read, O written once),
/// for \p element_bytes-wide inputs.
/// \throws std::invalid_argument when element_bytes is not 1 to 8, and as attention_flops() does.
std::vector<RooflineRow> roofline(const Shape& shape, std::size_t element_bytes);

/// A spec-sheet ceiling, for the roofline when no GPU is measured.
struct SpecSheet {
  std::string gpu;
  double fp32_tflops, bf16_tflops, hbm_gbs;
};
/// NVIDIA's published dense peaks for the two GPUs the build targets (A100 SXM, H100/H200 SXM).
std::vector<SpecSheet> spec_sheets();

/// Round-to-nearest-even float → bf16 → float, as __float2bfloat16_rn does: NaN stays NaN, ±inf stays, and a float
/// above bf16's largest finite value rounds to ±inf.
float round_to_bf16(float x);

/// Attention as a bf16 framework computes it (inputs, S, P and O rounded to bf16, sums in fp32), for one
/// head: Q (n_q, d), K and V (n_kv, d) row-major → O (n_q, d). FlashAttention's accuracy rule compares a
/// bf16 kernel with this reference's own error against float64.
std::vector<float> bf16_reference_attention(const float* Q, const float* K, const float* V, int n_q, int n_kv, int d,
                                            bool causal);

/// @}

}  // namespace attn::ch06
