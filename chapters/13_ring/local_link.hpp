/// \file
/// Chapter 13's ring in one process: a RingLink that hands a rank, at each step, the block its left
/// neighbour would have sent, so ring_attention_rank() runs rank after rank without MPI (the tests, the
/// book's tables). It checks what the rank sends against the ring's own schedule and counts the bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "13_ring/ring.hpp"

namespace attn::ch13 {

/// The link of rank \p rank in a ring whose ranks own \p blocks (one per rank, in rank order).
class LocalLink : public RingLink {
 public:
  /// \param blocks every rank's own K (rows_r, d_k) and V (rows_r, d_v); kept by reference.
  /// \param rank the rank this link serves.
  LocalLink(const std::vector<KVBlock>& blocks, std::size_t rank);

  /// Checks that \p outgoing is the block this rank holds at this step (the block of rank - step) and
  /// that \p incoming_rows is the size of the block arriving (rank - step - 1); counts both.
  /// \throws std::invalid_argument naming the step and the ranks when either is not.
  void start(const KVBlock& outgoing, std::size_t incoming_rows) override;
  /// The block of rank - step - 1 (mod P), a copy, as a transfer would deliver it.
  KVBlock finish() override;

  std::size_t bytes_sent() const { return bytes_sent_; }          ///< float32 bytes of K and V sent so far
  std::size_t bytes_received() const { return bytes_received_; }  ///< float32 bytes of K and V received
  std::size_t transfers() const { return step_; }                 ///< completed start/finish pairs

 private:
  const std::vector<KVBlock>& blocks_;
  std::size_t rank_;
  std::size_t step_ = 0;
  bool started_ = false;
  std::size_t bytes_sent_ = 0, bytes_received_ = 0;
};

/// What ring_in_one_process() returns: the whole sequence's result and what every rank's link counted.
struct RingRun {
  FlashOutput out;                          ///< O (n, d_v) and lse (n), at their positions
  std::vector<std::size_t> rows;            ///< positions per rank
  std::vector<std::size_t> bytes_sent;      ///< per rank
  std::vector<std::size_t> bytes_received;  ///< per rank
  std::vector<std::size_t> transfers;       ///< start/finish pairs per rank
};

/// The most ranks ring_in_one_process() simulates: it runs all P² steps one after the other, and 1024 ranks are
/// already a million folds.
inline constexpr std::size_t kMaxRanksInOneProcess = 1024;

/// The whole ring in one process: ring_attention_rank() of rank 0, 1, …, P-1 over LocalLinks, every rank's
/// rows put back at their positions. (Inline: it runs the learner's contract, so it lives with the tracks.)
/// \param Q (n, d_k) the whole sequence's queries.
/// \param K (n, d_k) its keys.
/// \param V (n, d_v) its values.
/// \param P number of ranks.
/// \param split how positions are assigned to ranks.
/// \param causal apply the causal rule.
/// \param tiles block sizes and threads of the fast kernel inside each step.
/// \throws std::invalid_argument when P is 0, above n (a rank would own nothing) or above kMaxRanksInOneProcess,
///         or naming the shapes when K or V does not have Q's n rows (and as ring_attention_rank() does).
inline RingRun ring_in_one_process(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t P, Split split,
                                   bool causal, const Tiles& tiles = ch05::default_tiles_on(1)) {
  const std::size_t n = Q.shape(0);
  require(P > 0 && P <= std::max<std::size_t>(n, 1) && P <= kMaxRanksInOneProcess,
          fmt::format("ring_in_one_process: P = {} ranks for n = {} positions; need 1 ≤ P ≤ n and P ≤ {} (one process "
                      "runs all P² steps)",
                      P, n, kMaxRanksInOneProcess));
  require(K.shape(0) == n && V.shape(0) == n,
          fmt::format("ring_in_one_process: Q is {}, K {} and V {}; the ring needs one key and value per query "
                      "position",
                      shape_str(Q), shape_str(K), shape_str(V)));
  std::vector<KVBlock> blocks;
  std::vector<Chunks> chunks;
  for (std::size_t r = 0; r < P; ++r) {
    chunks.push_back(rank_chunks(r, P, n, split));
    blocks.push_back({gather_rows(K, chunks[r]), gather_rows(V, chunks[r])});  // (rows_r, d_k), (rows_r, d_v)
  }
  RingRun run{{Matrix(Matrix::shape_type{n, V.shape(1)}, 0.0f), Vector(Vector::shape_type{n}, 0.0f)}, {}, {}, {}, {}};
  for (std::size_t r = 0; r < P; ++r) {
    LocalLink link(blocks, r);
    const FlashOutput part =
        ring_attention_rank(r, P, n, split, gather_rows(Q, chunks[r]), blocks[r], causal, link, tiles);
    scatter_rows(run.out.O, part.O, chunks[r]);
    std::size_t row = 0;
    for (const Chunk& c : chunks[r])
      for (std::size_t i = c.begin; i < c.end; ++i) run.out.lse(i) = part.lse(row++);
    run.rows.push_back(rows_of(chunks[r]));
    run.bytes_sent.push_back(link.bytes_sent());
    run.bytes_received.push_back(link.bytes_received());
    run.transfers.push_back(link.transfers());
  }
  return run;
}

}  // namespace attn::ch13
