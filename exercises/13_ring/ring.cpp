// Chapter 13, your exercises. Book page: book/13_ring.md.
// Check your progress with `./course check 13`; stuck? `./course hint 13`.
// Watch your code run the chapter: `./course run 13 --track exercise`.
#include "13_ring/ring.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn::ch13 {

namespace {
constexpr const char* kChapter = "13_ring";
}

std::size_t ring_source(std::size_t rank, std::size_t step, std::size_t P) {
  // TODO(learner): every step passes each block to rank + 1. Which rank's block has reached `rank` after
  //   `step` steps? Mind the unsigned wrap-around (rank + P itself can wrap when P is near SIZE_MAX).
  //   P == 0, rank >= P or step >= P is std::invalid_argument.
  throw not_implemented("ring_source", kChapter, "one subtraction modulo P; add P first, the indices are unsigned.");
}

Chunks zigzag_chunks(std::size_t rank, std::size_t P, std::size_t n) {
  // TODO(learner): cut [0, n) into 2P pieces with even_chunk(); rank owns piece `rank` and piece 2P-1-rank,
  //   in that order. P == 0, rank >= P or a 2P that does not fit (attn::checked_product) is std::invalid_argument.
  throw not_implemented("zigzag_chunks", kChapter,
                        "two calls to even_chunk(index, 2 * P, n): one early, one late piece.");
}

CausalBlock causal_block(Chunk q, Chunk k) {
  // TODO(learner): query position i sees key position j when j ≤ i. Compare the first and last positions
  //   of the two chunks: hidden, full or diagonal; offset = q.begin - k.begin. An empty chunk is hidden.
  //   A chunk that ends before it begins, or past 2^63 (offset is a ptrdiff_t), is std::invalid_argument.
  throw not_implemented(
      "causal_block", kChapter,
      "the last query is q.end - 1 and the last key k.end - 1; a key AT the query's position is visible.");
}

void merge_partial(FlashOutput& running, std::size_t row0, const FlashOutput& part) {
  // TODO(learner): the rows part covers, merged with the result over other keys already in running (with
  //   chapter 05's merge); running is unchanged when the shapes do not fit.
  throw not_implemented(
      "merge_partial", kChapter,
      "a finished (O, lse) is the online state m = lse, ℓ = 1, acc = O; merge_states() does the rest.");
}

void fold_block(FlashOutput& running, const Matrix& Q, const Chunks& q_chunks, const KVBlock& block,
                const Chunks& k_chunks, bool causal, const Tiles& tiles) {
  // TODO(learner): fold one received block into the rank's running result, chunk pair by chunk pair, with
  //   the causal rule on global positions when asked; shapes that do not fit the chunks are refused, and so are
  //   NaN/Inf or overflowing inputs (require_attention_inputs()) and a diagonal pair that does not end together,
  //   all before the first merge (running unchanged on a refusal).
  throw not_implemented("fold_block", kChapter,
                        "two nested loops over chunks, keeping the first local row of each; xt::range picks the rows.");
}

FlashOutput ring_attention_rank(std::size_t rank, std::size_t P, std::size_t n, Split split, const Matrix& Q,
                                const KVBlock& own, bool causal, RingLink& link, const Tiles& tiles) {
  // TODO(learner): the rank's whole ring: P steps, each passing the held block on while folding it, so the
  //   transfer overlaps the work; the rank never holds more than a few blocks (a test measures its heap).
  throw not_implemented("ring_attention_rank", kChapter,
                        "start the send BEFORE folding the held block, so the transfer overlaps the computation.");
}

}  // namespace attn::ch13
