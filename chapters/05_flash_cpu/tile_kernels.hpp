/// \file
/// The two products of one FlashAttention tile, S = scale·Q_i·K_jᵀ and O_i += P·V_j, as register-blocked
/// micro-kernels of the course's own (AVX-512 or AVX2+FMA, chosen at run time from the CPU), for
/// flash_attention_fast(). Why not OpenBLAS: for tiles this small, a BLAS call spends a quarter of its time
/// packing its operands (the same K/V tile again for every query block) and zeroing the output before
/// writing it; here K is packed once per call (pack_keys) and V and P are read as they are. Chapter code,
/// not an exercise.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace attn::ch05 {

/// The instruction set the micro-kernels run: "AVX-512", "AVX2+FMA" or "NEON", that of the vector path in use
/// (attn/vector.hpp, which ATTN_VECTOR_ISA can force), or "" on the portable path (then flash_attention_fast()
/// calls OpenBLAS for the two products instead).
const char* tile_kernel_isa();

/// For tests and comparisons: run the micro-kernels of \p isa ("AVX-512", "AVX2+FMA" or "NEON"), those of the
/// vector path in use ("auto", the default: none on the portable path), or none ("none": the OpenBLAS path).
/// Returns false, changing nothing, when the CPU cannot run \p isa or \p isa names no kernels. Not thread-safe: call it
/// while no kernel runs.
bool use_tile_kernels(const std::string& isa);

/// Keys per packed panel of Kᵀ: 32 with AVX-512, 16 with AVX2, 8 with NEON (two vector registers wide); 0 without
/// micro-kernels.
std::size_t key_panel_width();

/// Packs K (n_kv, d_k) for scores_tile(): panel p holds keys [p·w, p·w + w) as a (d_k, w) row-major block
/// (w = key_panel_width()), keys past n_kv zero. \p packed receives panels(n_kv)·d_k·w floats (none without
/// micro-kernels, or for n_kv = 0: then nothing is read or written).
void pack_keys(const float* K, std::size_t n_kv, std::size_t d_k, float* packed);

/// Number of panels pack_keys() makes for \p n_kv keys: ⌈n_kv / w⌉, for any n_kv (0 without micro-kernels).
std::size_t key_panels(std::size_t n_kv);

/// K of every head packed once for scores_tile(), head by head, by whichever thread needs a head first
/// (flash_attention_fast() and chapter 11's flex_attention() share it). Nothing is allocated when \p use is
/// false (the caller runs OpenBLAS instead: no micro-kernels on this CPU, or tiles not a whole number of panels).
class PackedKeys {
 public:
  /// \param K (h, n_kv, d_k) keys, read (not copied) at the first head() of each head.
  /// \param h heads.
  /// \param n_kv keys per head.
  /// \param d_k features per key.
  /// \param use whether to pack at all: false where the caller's tiles are not whole panels.
  /// \throws std::invalid_argument when the packed keys would not fit in memory (naming the estimate, before
  ///         allocating).
  PackedKeys(const float* K, std::size_t h, std::size_t n_kv, std::size_t d_k, bool use);
  /// Whether the keys are packed at all (the \p use of the constructor).
  bool used() const { return panels_ != nullptr; }
  /// Head \p h's panels (key_panels(n_kv), d_k, key_panel_width()), packed at its first call. Thread-safe.
  /// \throws std::out_of_range naming h when it is not a head, or when nothing was packed (used() is false).
  const float* head(std::size_t h);

 private:
  const float* K_;
  std::size_t n_kv_, d_k_, per_head_ = 0;  // per_head_: floats per head
  // (h, key_panels(n_kv), d_k, key_panel_width()); not zeroed here: pack_keys() writes every float, padding
  // included, and a zeroing pass over a fresh allocation would cost its page faults twice, on one thread.
  std::unique_ptr<float[]> panels_;
  std::vector<std::once_flag> packed_;  // (h): head packed yet?
};

/// S (rows, panels·w), leading dimension ld_s ← scale · Q_i · K_jᵀ, where Q_i is (rows, d_k) with leading
/// dimension ld_q and K_j is \p panels consecutive panels of pack_keys()'s output. Columns past the real
/// keys come out 0 (the zero padding) and must be ignored by the caller.
/// With \p m (rows), also each row's maximum, taken while the scores are still in registers (the softmax then
/// needs no pass of its own over S to find it): m[r] ← max(m[r], S[r, 0..visible[r])), where \p visible (rows)
/// says how many leading columns row r may see (a causal cut, the real keys: at most panels·w counted).
/// \throws std::invalid_argument when no micro-kernels run (tile_kernel_isa() is ""), ld_q < d_k,
///         ld_s < panels·key_panel_width(), or \p m is given without \p visible.
void scores_tile(const float* Q, std::size_t rows, std::size_t ld_q, std::size_t d_k, const float* K_panels,
                 std::size_t panels, float scale, float* S, std::size_t ld_s, const std::size_t* visible = nullptr,
                 float* m = nullptr);

/// O (rows, d_v), leading dimension ld_o, += P · V, where P is (rows, cols) with leading dimension ld_p and
/// V is (cols, d_v) with leading dimension ld_v.
/// \throws std::invalid_argument when no micro-kernels run, or a leading dimension is below its matrix's width.
void accumulate_pv(const float* P, std::size_t rows, std::size_t cols, std::size_t ld_p, const float* V,
                   std::size_t ld_v, std::size_t d_v, float* O, std::size_t ld_o);

}  // namespace attn::ch05
