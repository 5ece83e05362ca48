/// \file
/// Chapter 05's slow/fast memory model: the two-level machine of the FlashAttention paper's IO analysis.
/// Fast memory (SRAM on a GPU, cache on a CPU) holds at most M floats; slow memory (HBM, DRAM) holds
/// everything. An algorithm is a schedule of loads and stores; the model runs it, refuses any step that
/// would overfill fast memory, and counts every float moved. It computes no arithmetic: it counts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attn::ch05 {

/// Floats moved between slow and fast memory.
struct IoCount {
  std::uint64_t reads = 0;   ///< slow → fast
  std::uint64_t writes = 0;  ///< fast → slow
  std::uint64_t total() const { return reads + writes; }
};

/// The largest fast memory the model simulates, in floats (1 GiB: beyond any cache or GPU shared memory by far).
inline constexpr std::size_t kMaxFastMemory = std::size_t{1} << 28;
/// The most block transfers simulate_standard() and simulate_tiled() step through one by one (seconds of work).
inline constexpr double kMaxModelSteps = 1e9;

/// Fast memory of capacity M floats, with a counter of what crosses into and out of it. Every member refuses what
/// the memory cannot do (std::invalid_argument naming the numbers) and then changes nothing.
class FastMemory {
 public:
  /// A fast memory that holds at most \p capacity floats (M).
  explicit FastMemory(std::size_t capacity);
  /// Brings \p floats from slow memory into fast memory (counted as reads).
  /// \throws std::invalid_argument when they do not fit beside what is resident, or the count would wrap.
  void load(std::size_t floats);
  /// Makes room for \p floats computed in fast memory (a score tile, an accumulator): no transfer.
  /// \throws std::invalid_argument when they do not fit beside what is resident.
  void allocate(std::size_t floats);
  /// Sends \p floats from fast memory to slow memory (counted as writes); they stay resident.
  /// \throws std::invalid_argument when the count of writes would wrap.
  void store(std::size_t floats);
  /// Forgets \p floats that are no longer needed (no transfer).
  /// \throws std::invalid_argument when fewer than \p floats are resident.
  void release(std::size_t floats);

  const IoCount& count() const { return count_; }     ///< floats moved so far
  std::size_t peak() const { return peak_; }          ///< most floats resident at once
  std::size_t capacity() const { return capacity_; }  ///< M

 private:
  void hold(std::size_t floats);
  std::size_t capacity_;
  std::size_t resident_ = 0;
  std::size_t peak_ = 0;
  IoCount count_;
};

/// Block sizes of the tiled forward in the model: the largest B_r with B_c = min(B_r, d) (at least 1) whose working
/// set — Q_i and O_i (B_r·d each), m and ℓ (B_r each), K_j and V_j (B_c·d each), the score tile (B_r·B_c) —
/// fits in M floats. So B_r = Θ(M/d) (the paper's choice, with rows and columns swapped for the
/// FlashAttention-2 loop order).
struct TilePlan {
  std::size_t B_r = 0;  ///< query rows per block
  std::size_t B_c = 0;  ///< keys per block
};
/// The plan for head dimension \p d and a fast memory of \p M floats (see TilePlan).
/// \throws std::invalid_argument when even B_r = B_c = 1 does not fit (M < 4d + 3), or M > kMaxFastMemory.
TilePlan plan_tiles(std::size_t d, std::size_t M);

/// Standard attention in the model (the paper's Algorithm 0), with n_q = n_kv = n and d_k = d_v = d:
/// S = QKᵀ by blocks written to slow memory; P = softmax(S) row by row (two reads of a row that does not
/// fit); O = PV by blocks. Θ(n·d + n²) floats moved.
/// \param n sequence length. \param d head dimension. \param M fast memory, in floats.
/// \throws std::invalid_argument when M cannot hold two rows of d, M > kMaxFastMemory, or the simulation would step
///         through more than kMaxModelSteps transfers, before any.
IoCount simulate_standard(std::size_t n, std::size_t d, std::size_t M);

/// The tiled forward in the model (FlashAttention-2 order): for each block of B_r query rows, load Q_i,
/// stream every K_j, V_j past it, write O_i and its log-sum-exp. Θ(n²·d²/M) floats moved.
/// \param n sequence length. \param d head dimension. \param M fast memory, in floats.
/// \param plan the block sizes (plan_tiles() gives the largest that fit).
/// \throws std::invalid_argument when the plan's working set does not fit in M (computed without wrapping), a block
///         size is 0, M > kMaxFastMemory, or the simulation would step through more than kMaxModelSteps transfers.
IoCount simulate_tiled(std::size_t n, std::size_t d, std::size_t M, TilePlan plan);

}  // namespace attn::ch05
