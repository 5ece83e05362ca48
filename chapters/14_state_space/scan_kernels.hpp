/// \file
/// The inner loops of chapter 14's selective scan, which scan.cpp runs on its threads: the scan of a slice of
/// channels over a range of tokens, and the time-parallel scan's fix-up. Written once (scan_kernels.inl) and
/// compiled by the course's vector layer (attn/vector.hpp, scan_kernels.cpp) for each instruction set, with
/// chapter 05's vectorised exponential; scan.cpp runs those of the vector path in use.
/// Chapter code, not an exercise.
#pragma once

#include <cstddef>

#include "attn/vector.hpp"

namespace attn::ch14 {

/// What one kernel call works on: channels [c0, c0 + w) of tokens [t0, t1) of a selective scan whose inputs are
/// whole row-major arrays. The kernels keep their channels' numbers in rows of wp floats: w rounded up to whole
/// vectors (ScanKernels::lanes); the extra lanes are padding, a unit step with no input, that never reaches y.
struct ScanSlice {
  const float* x;      ///< (n, d) inputs
  const float* delta;  ///< (n, d) steps
  const float* B;      ///< (n, N) input matrices
  const float* C;      ///< (n, N) output matrices
  float* y;            ///< the outputs of token t0's first channel: the scan writes the slice's w outputs of token
                       ///< t at y + (t − t0)·ld_y, the fix-up adds to them
  std::size_t ld_y;    ///< floats from one token's outputs to the next: d in y itself, w in a thread's own tile
  std::size_t d, N;    ///< channels and state entries of the whole problem
  std::size_t c0, w;   ///< the slice's first channel and its number of channels
  std::size_t wp;      ///< w rounded up to a multiple of ScanKernels::lanes
  std::size_t t0, t1;  ///< the slice's tokens
};

/// Floats of scratch a kernel call needs beyond its state: (N + kScanScratchRows) · wp.
constexpr std::size_t kScanScratchRows = 5;

/// The kernels of one instruction set.
struct ScanKernels {
  const char* isa = "";   ///< the vector path's name: "AVX-512", "AVX2+FMA", "NEON" or "portable"
  std::size_t lanes = 0;  ///< floats per vector: the multiple ScanSlice::wp is rounded to
  const char* exp = "";   ///< which exponential the kernels call

  /// to[0, n) ← e^from, n a multiple of lanes, every value ≤ 0 (the decays): the kernels' exponential.
  void (*exp_to)(const float* from, float* to, std::size_t n) = nullptr;

  /// The scan of the slice: for every token, E = exp(Δ·A) for all N·w state entries (one vectorised call), then
  /// h ← E ∘ h + Δ·x·B, y = C·h, one vector of channels at a time down the N state entries.
  /// AT (N, wp): Aᵀ of the slice's channels, padding −1. hT (N, wp): the state, updated in place. sum_delta (wp):
  /// gets Σ_t Δ(t, c) added (the decay of the whole range, for the time-parallel scan's carries). work:
  /// (N + kScanScratchRows)·wp floats. Returns false when some x, Δ, B or C read is not finite or some Δ ≤ 0 (what
  /// it wrote is then meaningless: the caller names the entry and throws).
  bool (*scan)(const ScanSlice& s, const float* AT, float* hT, float* sum_delta, float* work) = nullptr;

  /// The fix-up of a chunk that was scanned from a zero state instead of its true start state H (N, wp): from the
  /// chunk's first token t0 on, `y(t, c) += Σ_k C(t, k) · exp(A(c, k) · S(t, c)) · H(k, c)`, S(t, c) = Σ Δ(t0 … t,
  /// c). It stops at the first token where every channel's slowest decay is below e^−104 < 2^−150, half the
  /// smallest float32: from there on every factor is 0 in float32 (S only grows), and so is every correction.
  /// Returns the number of tokens it corrected.
  std::size_t (*correct)(const ScanSlice& s, const float* AT, const float* H, float* work) = nullptr;
};

namespace detail {
/// The kernels of \p path (whether the CPU runs it is the caller's question: attn::vector_paths_available()).
/// scan.cpp's, not a function of the chapter.
ScanKernels scan_kernels_of(VectorPath path);
}  // namespace detail

}  // namespace attn::ch14
