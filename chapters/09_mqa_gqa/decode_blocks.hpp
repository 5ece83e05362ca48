/// \file
/// The block step of chapter 09's one-pass decode kernel, for kernels that walk a cache of another layout:
/// decode_attend_fast() feeds it the blocks of a contiguous cache, chapter 17's paged decode the blocks a block
/// table points at. Kernel plumbing (namespace detail): its callers check every shape first. Book pages:
/// book/measure_09_mqa_gqa.md and book/measure_17_serving.md.
#pragma once

#include <cstddef>
#include <vector>

#include "09_mqa_gqa/decode_fast.hpp"

namespace attn::ch09::detail {

/// One group's r query rows attending to cached keys and values a block at a time, in one pass: the state of
/// chapter 05's online softmax (running max m and sum ℓ per row) and the unnormalised output, kept by the caller.
/// The scores of a block never leave the core's L1 cache: S is at most (r, kDecodeKeysPerBlock).
/// Cached rows that lie together in memory: keys K (keys, d_k) and values V (keys, d_v). K_next and V_next, unless
/// nullptr, are at least as many rows of the next block, prefetched while this one computes.
struct KeyRows {
  const float* K = nullptr;
  const float* V = nullptr;
  std::size_t keys = 0;
  const float* K_next = nullptr;
  const float* V_next = nullptr;
};

class GroupAttention {
 public:
  /// \param Q_j (r, d_k) the group's query rows, already scaled by 1/√d_k (read by every add_block(); kept by the
  ///        caller).
  /// \param r query rows (≥ 1), \param d_k key width, \param d_v value width.
  GroupAttention(const float* Q_j, std::size_t r, std::size_t d_k, std::size_t d_v);

  /// m (r), ℓ (r) and O (r, d_v) ← the state after keys K (keys, d_k) and values V (keys, d_v), rows contiguous,
  /// keys ≤ kDecodeKeysPerBlock. Start from m = −inf, ℓ = 0, O = 0 (an empty range). K_next and V_next, unless
  /// nullptr, are the next block's first `keys` rows, prefetched while this block computes.
  void add_block(const float* K, const float* V, std::size_t keys, const float* K_next, const float* V_next, float* m,
                 float* l, float* O) {
    const KeyRows rows{K, V, keys, K_next, V_next};
    add_parts(&rows, 1, m, l, O);
  }

  /// The same for one block made of \p count stretches of rows, parts[0 … count), whose keys add up to at most
  /// kDecodeKeysPerBlock: a paged cache's blocks shorter than that share one online-softmax step, whose cost (a
  /// max, an exponential and a rescale of O per row) is then paid per kDecodeKeysPerBlock keys whatever the block
  /// size.
  void add_parts(const KeyRows* parts, std::size_t count, float* m, float* l, float* O);

 private:
  const float* Q_;
  std::size_t r_, d_k_, d_v_, r_pad_;  // r_pad_: r rounded up to whole vectors when the scores go by panel, else 0
  std::vector<float> Qt_;              // (d_k, r_pad) the queries transposed, for many rows (MQA)
  std::vector<float> St_;              // (kDecodeKeysPerBlock, r_pad) a block's scores by panel
  std::vector<float> S_;               // (r, kDecodeKeysPerBlock) a block's scores, then its weights
};

}  // namespace attn::ch09::detail
