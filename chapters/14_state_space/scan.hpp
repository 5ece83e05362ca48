/// \file
/// Chapter 14's selective scan over a whole sequence, sequential and on several threads: chapter code the
/// book presents and benchmarks, not an exercise. Token by token it is the contract's attn::selective_step();
/// here the same update runs vectorised over the channels (scan_kernels.hpp) on the course's vector layer, with
/// chapter 05's vectorised exponential.
#pragma once

#include <cstddef>
#include <string>

#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::ch14 {

/// How selective_scan() shares the work between threads.
enum class ScanSplit {
  time,     ///< the parallel associative scan: cut the sequence into one chunk per thread, scan each chunk from a
            ///< zero state, carry the chunk-end states across (the scan operator on whole blocks), then correct
  channels  ///< give each thread its own channels: they never interact, so there is nothing to carry
};

/// What a selective scan returns.
struct SelectiveScanOutput {
  Matrix y;  ///< (n, d) the output of every token and channel
  Matrix h;  ///< (d, N) the state after the last token (what decoding continues from)
};

/// Where a selective_scan()'s threads spent their CPU time, and how much the time-parallel scan had to fix up. On a
/// machine shared with other jobs the wall clock of a threaded run mostly measures waiting for cores; CPU time does
/// not.
struct ScanStats {
  double critical_path = 0;      ///< seconds: Σ over the parallel phases of the busiest thread's CPU time, plus the
                                 ///< serial parts: the wall time the scan would take with one idle core per thread
  double total = 0;              ///< seconds: every thread's CPU time added up, the work done
  double fixup = 0;              ///< seconds: the fix-up phase's CPU time, all threads (ScanSplit::time only)
  std::size_t fixup_tokens = 0;  ///< tokens the fix-up corrected, summed over the chunks it corrected
};

/// Mamba's selective scan over n tokens: for t = 0 … n−1 and every channel c and state entry k,
/// `h(c, k) ← exp(Δ(t, c) A(c, k)) h(c, k) + Δ(t, c) B(t, k) x(t, c)`, `y(t, c) = Σ_k C(t, k) h(c, k)`, from
/// h = 0. With threads > 1 the result equals the sequential one up to float32 rounding (split = time groups the
/// decays differently). The time split's fix-up stops, chunk by chunk, where the carried state has decayed below
/// float32's smallest number (ScanKernels::correct): for Mamba's initial steps that is a few thousand tokens.
/// \param x (n, d) inputs.
/// \param delta (n, d) steps, each > 0.
/// \param A (d, N) the diagonal state matrices, each entry < 0.
/// \param B (n, N) input matrices, one per token.
/// \param C (n, N) output matrices, one per token.
/// \param threads ≥ 1; more threads than tokens (time) or channels (channels) leave the extra ones idle.
///        With N = 0 there is no state: y is all zeros and h is (d, 0), whatever the split.
/// \param split how the threads share the work.
/// \param stats when not null, receives the CPU time the call's threads spent and the fix-up's size (see ScanStats).
/// \return y (n, d) and the final state h (d, N).
/// \throws std::invalid_argument naming the shapes when they do not fit, an entry when some Δ ≤ 0, A ≥ 0 or a
///         value is not finite, when threads < 1, and when finite inputs make y or h overflow float32 (naming
///         the first entry), and naming split when it is neither ScanSplit value. An exception in a worker thread
///         reaches the caller.
SelectiveScanOutput selective_scan(const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B,
                                   const Matrix& C, int threads = 1, ScanSplit split = ScanSplit::time,
                                   ScanStats* stats = nullptr);

/// The instruction set selective_scan()'s kernels run: the vector path's name (attn/vector.hpp), "AVX-512",
/// "AVX2+FMA", "NEON" or "portable", each with chapter 05's vectorised exponential.
const char* scan_kernel_isa();

/// The exponential those kernels call, in words ("chapter 05's ExpNonpositive").
const char* scan_kernel_exp();

/// For tests and comparisons: run the kernels of \p isa ("AVX-512", "AVX2+FMA", "NEON", "portable"), or those of
/// the vector path in use ("auto", the default). Returns false, changing nothing, when they cannot run here or \p isa
/// names no kernels. Not thread-safe: call it while no scan runs.
bool use_scan_kernels(const std::string& isa);

/// to[0, n) ← e^from with the active kernels' exponential, n a multiple of 16, every value ≤ 0: the operation the
/// scan spends most of its time in (d·N of them per token), for the benchmark's ceiling.
/// \throws std::invalid_argument when n is not a multiple of 16 (the kernels would write past the end).
void vector_exp(const float* from, float* to, std::size_t n);

/// Bytes a selective scan must move at least: x, Δ, B, C read once and y written once, float32:
/// `4 · n · (3d + 2N)`. The state (d·N floats) stays in the core's cache. Computed in double, so any sizes have an
/// answer (rounded beyond 2^53 bytes), never a wrapped one.
double selective_scan_bytes(std::size_t n, std::size_t d, std::size_t N);

/// The inputs of a selective scan, Mamba-like: Δ log-uniform in [0.001, 0.1] (Mamba's initial range),
/// A(c, k) = −(k + 1) (S4D-Real), x, B, C ~ N(0, 1). The chapter's program, its benchmark and its tests
/// all draw them here.
struct ScanInputs {
  Matrix x, delta, A, B, C;  // (n, d), (n, d), (d, N), (n, N), (n, N)
};

/// Seeded ScanInputs of n tokens, d channels and N state entries per channel.
/// \throws std::invalid_argument when one of the matrices would not fit in memory (Rng's check, naming the
///         estimate, before allocating it).
ScanInputs scan_inputs(Rng& rng, std::size_t n, std::size_t d, std::size_t N);

}  // namespace attn::ch14
