// Chapter 17, your exercises. Book page: book/17_serving.md.
// Check your progress with `./course check 17`; stuck? `./course hint 17`.
// Watch your code run the chapter: `./course run 17 --track exercise`.
#include "17_serving/serving.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "09_mqa_gqa/mqa_gqa.hpp"
#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "17_serving";
}

std::optional<Slot> append_slot(BlockTable& table, BlockAllocator& pool) {
  // TODO(learner): reserve the slot of token table.length. It lands at offset length % B of the last block; when
  //   that offset is 0 the token needs a fresh block from the pool first (nothing free: return std::nullopt and
  //   change nothing). Refuse a table that does not hold ⌈length / B⌉ blocks, naming the length and the blocks, a
  //   length of SIZE_MAX (one more token does not fit in it), and a last block the token would go into that the pool
  //   does not hold (past its blocks, or free), naming it.
  throw not_implemented("append_slot", kChapter,
                        "which offset does token `length` get in its block, and when is that a block no one has yet?");
}

Matrix paged_attention(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q) {
  // TODO(learner): chapter 09's decode attention, (h, d_v), but token t's key and value for KV head j live at row
  //   t % B of cache.keys(layer, table.blocks[t / B], j) and cache.values(...): read them there, one token at a time,
  //   never copied out into a contiguous K and V. Weigh each value by its normalised weight (values near float's
  //   limit must not overflow). Check what the contract lists first, the overflow bound d_k · max|q| · max|k| over
  //   the table's keys included (require_bounded_products()).
  throw not_implemented("paged_attention", kChapter,
                        "the same softmax(q·kᵀ/√d_k)·V per query head; only where a key lives has changed.");
}

FlashOutput merge_splits(const std::vector<FlashOutput>& parts) {
  // TODO(learner): per row, lse = log Σ_s e^{lse_s} and O = Σ_s e^{lse_s − lse} O_s, finite for any finite lse
  //   (lse_s may be 1e4), with −inf parts weighing nothing and a row that is −inf everywhere giving O = 0, lse = −inf.
  //   Refuse no parts, parts of different shapes, and an lse that is NaN or +inf (naming the part and the row).
  throw not_implemented("merge_splits", kChapter,
                        "chapter 05's online softmax merged two states with their maxima; here there are S of them.");
}

bool copy_on_write(PagedKVCache& cache, BlockTable& table, std::size_t index) {
  // TODO(learner): if block `index` of the table is shared (reference count above 1), give the table a copy of
  //   the slots it uses there in a fresh block and let go of the shared one once; if no block is free, return
  //   false and change nothing. A block the table holds alone needs nothing. First refuse an index past the blocks, a
  //   table that does not hold ⌈length / B⌉ blocks and a block the pool has free, naming them, before allocating.
  throw not_implemented("copy_on_write", kChapter,
                        "cache.pool() counts the references; cache.copy_block() moves the numbers.");
}

StepPlan schedule_step(BlockAllocator& pool, std::deque<Sequence>& waiting, std::vector<Sequence>& running,
                       std::size_t max_running) {
  // TODO(learner): the contract's three stages in order: finished sequences leave; every running one reserves the
  //   slot of its next token (append_slot), preempting the youngest when the pool runs dry; then waiting requests
  //   join, front first, while their prompts fit and fewer than max_running run. Check the requests the step could
  //   admit (the first min(max_running, blocks) of the queue, not all of it) before changing anything (length +
  //   prompt + remaining can wrap past SIZE_MAX: compare without adding).
  throw not_implemented("schedule_step", kChapter,
                        "release_table() and append_slot() do the block work; the order of the stages is the policy.");
}

BlockTable lookup_prefix(PrefixCache& cache, const std::vector<TokenId>& prompt) {
  // TODO(learner): walk the prompt's full blocks from the first, each block's key block_hash(previous key, prompt, kB,
  //   B) starting from kNoParent, and look each key up with cache.find(); stop at the first miss, and after
  //   ⌊(n − 1) / B⌋ blocks at most (the prompt's last token is always computed). Take each block found
  //   (cache.take()) and put it in the table you return (length B per block). Refuse an empty prompt, naming it.
  throw not_implemented("lookup_prefix", kChapter,
                        "a block's key stands for the block and everything before it: what does a miss mean for the "
                        "blocks after it?");
}

}  // namespace attn
