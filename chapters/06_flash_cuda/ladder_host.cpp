// Chapter 06, the host side of the ladder: the rungs' tile plans, the roofline arithmetic, the spec-sheet
// ceilings and the bf16 reference. None of it needs a GPU; without CUDA, query_device() says so.
// Book page: book/06_flash_cuda.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "06_flash_cuda/ladder.hpp"
#include "06_flash_cuda/tiles.hpp"

namespace attn::ch06 {

void check_then_time(const std::function<std::vector<RungCheck>()>& check,
                     const std::function<void(const std::vector<RungCheck>&)>& time) {
  // Both before either runs: an empty one threw std::bad_function_call, or (time) was caught as a failed timing.
  if (!check || !time)
    throw std::invalid_argument(std::string("check_then_time: an empty ") + (check ? "time" : "check") +
                                " function; both the checks and the timing are needed");
  const std::vector<RungCheck> checks = check();
  std::string failed;
  for (const RungCheck& c : checks)
    if (!c.ok)
      failed += "\n  " + c.rung + " at d = " + std::to_string(c.d) + (c.causal ? ", causal" : ", not causal") +
                (c.error.empty() ? ": its output differs from the CPU's" : ": it could not run: " + c.error);
  if (failed.empty()) {
    time(checks);
    return;
  }
  try {
    time(checks);
  } catch (const std::exception& e) {  // a broken rung may have broken the device: say both
    throw std::runtime_error("these checks against the CPU failed:" + failed +
                             "\nthen the timing stopped: " + e.what());
  }
  throw std::runtime_error("the timings were taken, but these checks against the CPU failed:" + failed);
}

std::vector<KernelPlan> kernel_plans(std::size_t d) {
  // The tile arithmetic is int (it runs on the device too): d outside the rungs' range would wrap it.
  if (d < 1 || d > static_cast<std::size_t>(tiles::kMaxD))
    throw std::invalid_argument("kernel_plans: d = " + std::to_string(d) + "; the rungs take d in 1..128");
  const int di = static_cast<int>(d);
  return {{"3 flash fp32", tiles::kFp32Br, tiles::kFp32Bc, tiles::kFp32Threads, 4, tiles::fp32_smem_bytes(di)},
          {"4 flash tc bf16", tiles::kTcBr, tiles::kTcBc, tiles::kTcThreads, 2, tiles::tc_smem_bytes(di)}};
}

// [check_shape]
void check_shape(const Shape& s, const std::string& who) {
  const std::string values = " (bh = " + std::to_string(s.bh) + ", n_q = " + std::to_string(s.n_q) +
                             ", n_kv = " + std::to_string(s.n_kv) + ", d = " + std::to_string(s.d) +
                             (s.causal ? ", causal)" : ")");
  if (s.bh < 1 || s.bh > 65535) throw std::invalid_argument(who + ": bh must be in 1..65535 (grid.y)" + values);
  if (s.n_q < 1 || s.n_kv < 1) throw std::invalid_argument(who + ": n_q and n_kv must be at least 1" + values);
  if (s.d < 1 || s.d > tiles::kMaxD) throw std::invalid_argument(who + ": d must be in 1..128" + values);
  if (s.causal && s.n_q > s.n_kv)
    throw std::invalid_argument(who + ": a causal call needs n_q <= n_kv: query i sits at key position " +
                                "i + n_kv - n_q, which is negative for the first queries" + values);
  // The largest tensor a rung touches is S, (bh, n_q, n_kv); its indices are 64-bit.
  const double elements = static_cast<double>(s.bh) * s.n_q * std::max(s.n_kv, s.d);
  if (elements > 4.6e18) throw std::invalid_argument(who + ": the tensors' element counts overflow 2^62" + values);
}
// [check_shape]

void check_tc_alignment(const DeviceQKV& t, int d) {
  if (tiles::tc_head_dim(d) != d) return;  // the ragged path reads element by element
  const std::pair<const char*, const void*> pointers[] = {{"Q16", t.Q16}, {"K16", t.K16}, {"V16", t.V16}};
  for (const auto& [name, p] : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument(std::string("flash_tc_forward: ") + name + " must be 16-byte aligned at d = " +
                                  std::to_string(d) + " (rung 4 reads K and V 16 bytes at a time)");
}

#if !ATTN_HAVE_CUDA
DeviceInfo query_device() {
  DeviceInfo info;
  info.why_not = "built without CUDA (no nvcc when the build was configured)";
  return info;
}
#endif

// [roofline]
double attention_flops(const Shape& shape) {
  check_shape(shape, "attention_flops");  // a negative size would count negative work
  // Per head: Q·Kᵀ is n_q·n_kv·d multiply-adds, P·V the same; 2 FLOPs each. Causal keeps the pairs with
  // j ≤ i + (n_kv - n_q): about half of them when n_q = n_kv.
  const double pairs_full = static_cast<double>(shape.n_q) * shape.n_kv;
  double pairs = pairs_full;
  if (shape.causal) {
    pairs = 0.0;
    for (int i = 0; i < shape.n_q; ++i) pairs += std::min(shape.n_kv, i + (shape.n_kv - shape.n_q) + 1);
  }
  return 4.0 * pairs * shape.d * shape.bh;
}

std::vector<RooflineRow> roofline(const Shape& shape, std::size_t element_bytes) {
  if (element_bytes < 1 || element_bytes > 8)  // 0 bytes read would make the intensity infinite
    throw std::invalid_argument("roofline: element_bytes = " + std::to_string(element_bytes) + "; 1 to 8 bytes");
  const double flops = attention_flops(shape);
  const double e = static_cast<double>(element_bytes), bh = shape.bh;
  const double qkvo = bh * e * shape.d * (2.0 * shape.n_q + 2.0 * shape.n_kv);  // read Q, K, V, write O
  const double s_elems = bh * static_cast<double>(shape.n_q) * shape.n_kv;
  // Standard attention: S written (4 B), read by softmax and P written (8 B), P read by P·V (4 B).
  const double standard = qkvo + 16.0 * s_elems;
  return {{"standard (S, P in HBM, fp32)", flops, standard, flops / standard},
          {"flash (Q, K, V, O once)", flops, qkvo, flops / qkvo}};
}
// [roofline]

std::vector<SpecSheet> spec_sheets() {
  // Dense (no sparsity) peaks from NVIDIA's data sheets, SXM boards.
  return {{"A100 SXM 80GB", 19.5, 312.0, 2039.0}, {"H100 SXM", 67.0, 989.0, 3350.0}, {"H200 SXM", 67.0, 989.0, 4800.0}};
}

float round_to_bf16(float x) {
  if (std::isnan(x)) return x;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even, on the 16 bits dropped
  bits &= 0xffff0000u;
  float y = 0.0f;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

std::vector<float> bf16_reference_attention(const float* Q, const float* K, const float* V, int n_q, int n_kv, int d,
                                            bool causal) {
  check_shape(Shape{1, n_q, n_kv, d, causal}, "bf16_reference_attention");
  const auto nq = static_cast<std::size_t>(n_q), nkv = static_cast<std::size_t>(n_kv), dd = static_cast<std::size_t>(d);
  auto b = [](float x) { return round_to_bf16(x); };
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> O(nq * dd, 0.0f), s(nkv);
  for (std::size_t i = 0; i < nq; ++i) {
    const std::size_t last = causal ? i + (nkv - nq) : nkv - 1;
    float m = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < nkv; ++j) {
      float dot = 0.0f;
      for (std::size_t c = 0; c < dd; ++c) dot += b(Q[i * dd + c]) * b(K[j * dd + c]);
      s[j] = j <= last ? b(b(dot) * scale) : -std::numeric_limits<float>::infinity();  // S stored in bf16
      m = std::max(m, s[j]);
    }
    if (m == -std::numeric_limits<float>::infinity()) continue;  // no allowed key: zeros
    float l = 0.0f;
    for (std::size_t j = 0; j < nkv; ++j) l += std::exp(s[j] - m);
    for (std::size_t c = 0; c < dd; ++c) {
      float o = 0.0f;
      for (std::size_t j = 0; j < nkv; ++j) o += b(std::exp(s[j] - m) / l) * b(V[j * dd + c]);  // P in bf16
      O[i * dd + c] = b(o);                                                                     // O stored in bf16
    }
  }
  return O;
}

}  // namespace attn::ch06
