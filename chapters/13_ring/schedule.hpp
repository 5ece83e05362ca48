/// \file
/// Chapter 13's MPI program, its schedule: what each rank of ch13_ring_mpi computes, on which rows, and what the
/// runs measure. The ring (the chapter's ring_attention_rank() over the MPI link of transport.hpp), Ulysses (two
/// all-to-alls around chapter 05's flash), the checks against single-process flash, and the timed runs; the
/// program (ring_mpi.cpp) prints what they return. It calls the chapter's exercises, so each track's program (the
/// reference's and the learner's) is compiled with its own.
#pragma once

#include <mpi.h>  // an MPI program's part: it runs under mpirun, tested by the program's ctest cases

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "05_flash_cpu/flash_cpu.hpp"
#include "13_ring/ring.hpp"
#include "13_ring/transport.hpp"

namespace attn::ch13 {

/// Q, K or V rows at \p chunks' positions, each row drawn from its own seed (position, tensor), so a rank makes
/// only its own rows (memory ∝ n/P) and every rank, and the single-process reference, agree on them.
Matrix make_rows(const Chunks& chunks, std::size_t d, std::uint64_t seed, std::uint64_t tensor);

/// A rank's queries and its own key/value block.
struct RankInputs {
  std::size_t n = 0;
  Matrix Q;     // (rows, d)
  KVBlock own;  // K (rows, d), V (rows, d)
};
RankInputs rank_inputs(const Chunks& chunks, std::size_t n, std::size_t d, std::uint64_t seed);

/// One rank's ring: its output rows, the bytes it sent, and its times (all ranks enter it together).
struct RankRun {
  FlashOutput out;
  std::size_t bytes_sent = 0;
  CallSeconds time;    ///< the whole ring on this rank: wall, and this process's CPU (computing and MPI's polling)
  CallSeconds waited;  ///< the part spent waiting for a block (MpiLink::waited())
};

/// Makes rank \p rank throw before the ring (--fail-on-rank): the test that a failing rank stops the job.
void fail_on_rank(int rank);

RankRun run_rank(const World& w, const RankInputs& in, Split split, bool causal, const Tiles& tiles);

/// One line of a check: P, n, what ran, whether it equals single-process flash within the tolerance and sends the
/// formula's bytes, and the largest differences (ring: O and lse; Ulysses: O only, lse_diff < 0).
struct CheckLine {
  std::size_t n = 0;
  std::string what;  ///< "contiguous causal = 1", "Ulysses h = 3 causal = 0"
  bool ok = false, bytes_ok = false;
  double O_diff = 0, lse_diff = -1;
};

/// The ring against chapter 05's single-process flash for ragged n, causal and not, both splits, and every
/// rank's bytes against ring_bytes_sent(); the lines on rank 0 (the bytes' mismatches reported by each rank).
std::vector<CheckLine> check_ring(const World& w);

/// Ulysses likewise, with h = P and P + 1 heads (not a multiple of P), against ulysses_bytes_sent().
std::vector<CheckLine> check_ulysses(const World& w);

/// The timed ring: per split, the slowest rank's time and all ranks' CPU seconds (medians of the runs), and every
/// rank's computing and waiting time (medians), on rank 0.
struct SplitTimes {
  Split split;
  double wall = 0, cpu = 0, polling_cpu = 0;
  std::vector<double> computing, waiting;  ///< per rank, on rank 0
};
/// time_ring()'s answer: the single-process flash it is raced against, and each split's times.
struct RingTimes {
  CallSeconds single;  ///< chapter 05's single-process flash on P threads (medians; 0 in a memory run)
  std::vector<SplitTimes> splits;
};
RingTimes time_ring(const World& w, std::size_t n, std::size_t d, bool causal, int repeats, bool memory);

/// Ulysses beside the ring on \p h heads: single-process flash on all heads (P threads), the zigzag ring one head
/// after another, and Ulysses; medians of the slowest rank's time and of all ranks' CPU seconds, and the bytes
/// rank 0 sent with their formulas.
struct UlyssesTimes {
  CallSeconds single, ring, ulysses;
  std::size_t ring_bytes = 0, ring_formula = 0, ulysses_bytes = 0, ulysses_formula = 0;
};
UlyssesTimes time_ulysses_beside_ring(const World& w, std::size_t n, std::size_t d, std::size_t h, bool causal,
                                      int repeats);

/// Ulysses splits the heads over the ranks: \throws std::invalid_argument naming --heads when h < P.
void require_heads_for_ulysses(std::size_t h, int P);

const char* name_of(Split s);

}  // namespace attn::ch13
