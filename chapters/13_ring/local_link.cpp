// The one-process ring link (see local_link.hpp). Book page: book/13_ring.md.
#include "13_ring/local_link.hpp"

#include <fmt/format.h>

namespace attn::ch13 {

namespace {
std::size_t block_bytes(const KVBlock& b) { return (b.K.size() + b.V.size()) * sizeof(float); }
}  // namespace

LocalLink::LocalLink(const std::vector<KVBlock>& blocks, std::size_t rank) : blocks_(blocks), rank_(rank) {
  require(rank < blocks.size(), fmt::format("LocalLink: rank {} in a ring of {} ranks", rank, blocks.size()));
}

void LocalLink::start(const KVBlock& outgoing, std::size_t incoming_rows) {
  const std::size_t P = blocks_.size();
  require(!started_, fmt::format("LocalLink: rank {} called start() twice at step {} without finish()", rank_, step_));
  require(step_ + 1 < P, fmt::format("LocalLink: rank {} sends at step {}, but a ring of {} has only {} transfers",
                                     rank_, step_, P, P - 1));
  // The ring's own schedule, written independently of the exercise: after s steps a rank holds the block
  // of rank - s, and receives the block of rank - s - 1.
  const std::size_t held = (rank_ + P - step_) % P, arriving = (rank_ + 2 * P - step_ - 1) % P;
  require(outgoing.K == blocks_[held].K && outgoing.V == blocks_[held].V,
          fmt::format("LocalLink: rank {} at step {} sends an outgoing block (K {}, V {}) that is not the one it holds "
                      "(rank {}'s: K {}, V {})",
                      rank_, step_, shape_str(outgoing.K), shape_str(outgoing.V), held, shape_str(blocks_[held].K),
                      shape_str(blocks_[held].V)));
  require(
      incoming_rows == blocks_[arriving].K.shape(0),
      fmt::format("LocalLink: rank {} at step {} expects {} rows (incoming_rows), but rank {}'s block arriving has {}",
                  rank_, step_, incoming_rows, arriving, blocks_[arriving].K.shape(0)));
  bytes_sent_ += block_bytes(outgoing);
  started_ = true;
}

KVBlock LocalLink::finish() {
  require(started_, fmt::format("LocalLink: rank {} called finish() at step {} without start()", rank_, step_));
  const std::size_t P = blocks_.size();
  const KVBlock& arriving = blocks_[(rank_ + 2 * P - step_ - 1) % P];
  bytes_received_ += block_bytes(arriving);
  started_ = false;
  ++step_;
  return arriving;
}

}  // namespace attn::ch13
