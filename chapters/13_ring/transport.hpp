/// \file
/// Chapter 13's MPI program, its transport: how the ranks of ch13_ring_mpi reach one another. The ring's link
/// (MPI_Isend/MPI_Irecv while the rank computes), Ulysses' all-to-alls, the ping-pong between two ranks, and the
/// few collective steps the program's runs share (every rank's figure reduced or gathered on rank 0, ranks other
/// than 0 asleep while rank 0 times alone). Nothing here calls the chapter's exercises: schedule.hpp does.
/// Only ch13_ring_mpi (ring_mpi.cpp) includes it; it needs Open MPI.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "13_ring/ring.hpp"
#include "attn/measure.hpp"
#include "attn/tensor.hpp"

namespace attn::ch13 {

/// This process's place in the job: its rank and the number of ranks P.
struct World {
  int rank = 0, P = 1;
};

/// The world of MPI_COMM_WORLD (after MPI_Init).
World mpi_world();

/// \p floats as an MPI count. \throws std::invalid_argument when it is more than one MPI message can count.
int as_count(std::size_t floats);

/// The ring's transport over MPI: non-blocking, so the rank's flash work runs while the block moves. It counts
/// the bytes it sent and times what the computation did not hide: its waits, on the wall clock and in CPU time
/// (Open MPI polls while it waits, keeping a core busy).
class MpiLink : public RingLink {
 public:
  MpiLink(int rank, int P);
  void start(const KVBlock& outgoing, std::size_t incoming_rows) override;
  KVBlock finish() override;

  std::size_t bytes_sent() const { return bytes_sent_; }
  /// The time spent in finish() so far: wall seconds, and this process's CPU seconds.
  const CallSeconds& waited() const { return waited_; }

 private:
  int next_, prev_;
  MPI_Request requests_[4] = {};
  KVBlock incoming_;
  std::size_t bytes_sent_ = 0;
  CallSeconds waited_;
};

/// Ulysses' first all-to-all, for one of Q, K, V: \p mine (h, rows_r, d) holds every head of this rank's tokens
/// (even_chunk(rank, P, n)); it returns (g, n, d), this rank's g heads (even_chunk(rank, P, h)) for every token,
/// and adds the floats it sent to the other ranks to \p floats_sent.
Tensor3 tokens_to_heads(const World& w, const Tensor3& mine, std::size_t n, std::size_t& floats_sent);

/// Ulysses' second all-to-all: \p O_heads (g, n, d_v), this rank's heads for every token, goes back as
/// (h, rows_r, d_v), every head of this rank's tokens; the floats it sent are added to \p floats_sent.
Tensor3 heads_to_tokens(const World& w, const Tensor3& O_heads, std::size_t h, std::size_t& floats_sent);

/// Half the round trip of a message of \p bytes between ranks 0 and 1 (median of \p repeats after one warm-up,
/// the ranks meeting at a barrier before each, untimed), on rank 0; 0 on the other ranks.
double half_round_trip(const World& w, std::size_t bytes, int repeats);

/// \p value's largest over all ranks (every rank gets it).
double max_over_ranks(double value);
/// \p value summed over all ranks (every rank gets it).
double sum_over_ranks(double value);
/// The smallest of \p value over all ranks (every rank gets it): all ranks agree on a yes/no.
int min_over_ranks(int value);
/// Every rank's \p values (the same count on each), in rank order, on rank 0; empty on the other ranks.
std::vector<double> gather_on_root(const std::vector<double>& values, const World& w);

/// Runs \p work on rank 0 with every core allowed (at np ≤ 2 Open MPI binds each rank to one core, and a
/// multithreaded reference must not share it) while the other ranks sleep without polling (a barrier would poll
/// and steal a core from it); all ranks return together.
void alone_on_root(const World& w, const std::function<void()>& work);

/// On rank 0, a note when some machine runs more ranks than it has cores ("" otherwise): ranks that share a core
/// take turns, so their times say how the scheduler interleaved them, not how balanced the ring is.
std::string oversubscription_note(const World& w);

}  // namespace attn::ch13
