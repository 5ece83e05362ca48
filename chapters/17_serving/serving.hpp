/// \file
/// Chapter 17, serving attention: the contract the learner implements in exercises/17_serving/serving.cpp.
/// Book page: book/17_serving.md.
///
/// Many sequences decode at once from one pool of KV blocks (paged_cache.hpp, given): each sequence's block
/// table grows a block at a time (append_slot()), attention reads the keys and values through the table
/// (paged_attention()), one long sequence's attention is split across threads and the parts merged
/// (merge_splits()), sequences that share a prompt share its blocks until one of them writes (copy_on_write()),
/// a scheduler decides at every step who runs, who waits and who is preempted (schedule_step()), and a request
/// finds at admission the blocks of its prompt a prefix cache already holds (lookup_prefix()).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

#include "05_flash_cpu/flash_cpu.hpp"
#include "17_serving/paged_cache.hpp"
#include "17_serving/prefix_cache.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \addtogroup ch17
/// @{

/// Where one token's key and value go: offset \p offset of physical block \p block.
struct Slot {
  BlockId block = 0;       ///< the physical block
  std::size_t offset = 0;  ///< the row inside it, 0 … B − 1
};

/// Reserves the slot of the table's next token (position table.length): offset length % B of the last block,
/// after allocating a new block from \p pool when the last one is full (length a multiple of B, 0 included).
/// The table then holds one token more. A shared last block (reference count above 1) is not copied here: the slot
/// is in it, and the caller makes the block its own (copy_on_write()) before writing, which the cache demands.
/// \param table the sequence's block table; grows by one token (and by one block at a block boundary).
/// \param pool the blocks; one fewer free block when a new one was needed.
/// \return the slot, or nothing when a new block was needed and none is free (table and pool unchanged).
/// \throws std::invalid_argument naming the length and the number of blocks when the table does not hold
///         ⌈length / B⌉ blocks, naming the length when it is SIZE_MAX (length + 1 does not fit), and naming the
///         block when the token goes into the table's last block (length not a multiple of B) and that block is
///         not one the pool holds (past its blocks, or free); table and pool unchanged then.
std::optional<Slot> append_slot(BlockTable& table, BlockAllocator& pool);

/// The attention of one new token's queries over every token of a block table (the token's own key and value
/// already written): chapter 09's decode step, with the keys and values read through the table. Query head i
/// reads KV head kv_group_of(i, h, g); token t's key for KV head j is row t % B of
/// cache.keys(layer, table.blocks[t / B], j).
/// \param cache the paged cache: g = cache.shape().kv_heads divides h.
/// \param layer the layer whose keys and values are attended.
/// \param table the sequence's table: tokens 0 … table.length − 1 are attended.
/// \param q (h, d_k) the new token's query, one row per query head.
/// \return (h, d_v): each query head's attention output, finite for any finite cache and q the other checks let
///         through (scores of ±1e4 included: subtract each head's largest score before exponentiating, as
///         chapter 09's decode does; and values near float's limit: weigh each value by its normalised weight, so
///         that O, a weighted mean, never passes the largest value). The keys and values are read in the blocks,
///         where the table puts them: no contiguous copy of them is made (the heap holds at most the scores and O).
/// \throws std::invalid_argument naming the shapes when q's width is not d_k, naming h and g when g does not
///         divide h or h = 0 (q of no rows), naming the length when the table is empty or does not hold ⌈length / B⌉
///         blocks, naming the layer when it does not exist, naming the first NaN/Inf of q, naming a block of the
///         table the cache does not have, and naming q and k when d_k · max|q| · max|k| over the table's keys
///         (tokens 0 … length − 1 only: the unused slots of the last block are neither attended nor bounded) is
///         past attn/checks.hpp's overflow bound (a score could overflow float).
Matrix paged_attention(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q);

/// The attention of the same query rows over the union of disjoint sets of keys, from each set's result
/// (split-KV decoding: each thread attends over one part of a long sequence). Part s gives O_s (rows, d_v) and
/// lse_s (rows); the union's lse = log Σ_s e^{lse_s} and O = Σ_s e^{lse_s − lse} O_s, computed without
/// overflow for any finite lse (e^{lse} itself may be far past float's range). A part with lse = −inf for a row
/// saw no key for it and weighs nothing; a row with −inf in every part gets O = 0 and lse = −inf.
/// \param parts (S ≥ 1) results, each with O (rows, d_v) and lse (rows); tiles_visited is ignored.
/// \return O (rows, d_v) and lse (rows) over all parts; its tiles_visited is 0 (a merge visits no tile).
/// \throws std::invalid_argument when parts is empty, naming the shapes when parts differ in rows or d_v or
///         a part's lse does not have one entry per row, naming the part and the row when an lse is NaN or +inf.
FlashOutput merge_splits(const std::vector<FlashOutput>& parts);

/// Makes block \p index of \p table its own before the sequence writes into it: when the block is shared
/// (reference count above 1), a free block is allocated, the slots the table uses in it are copied into it
/// (cache.copy_block(), every layer), the table points at the copy, and the shared block is released once
/// (the other tables keep it). A block the table already holds alone is left as it is.
/// \param cache the cache whose pool holds the blocks.
/// \param table the sequence's table; its block \p index may change.
/// \param index a logical block of the table, below table.blocks.size().
/// \return true when the block is now the table's alone; false when it was shared and no block was free (table
///         and cache unchanged).
/// \throws std::invalid_argument naming index and the table's number of blocks when index is past them, naming the
///         length and the blocks when the table does not hold ⌈length / B⌉ blocks (append_slot()'s check), and
///         naming the block when block \p index is not one the pool holds (past its blocks, or free); unchanged then.
bool copy_on_write(PagedKVCache& cache, BlockTable& table, std::size_t index);

/// One request as the scheduler holds it.
struct Sequence {
  std::size_t id = 0;         ///< the request's name in plans and traces
  std::size_t prompt = 0;     ///< tokens to prefill when admitted (after a preemption: everything it had)
  std::size_t remaining = 0;  ///< tokens it has still to generate
  BlockTable table;           ///< its blocks while running; while waiting, none or a shared prefix's full blocks
};

/// What one scheduler step decided; each list holds request ids, in the order the step took them.
struct StepPlan {
  std::vector<std::size_t> finished;   ///< left at the start of the step (remaining was 0); their blocks freed
  std::vector<std::size_t> preempted;  ///< sent back to the front of the queue, their blocks freed
  std::vector<std::size_t> decoded;    ///< running sequences that decode one token this step
  std::vector<std::size_t> admitted;   ///< waiting requests admitted: their prompts are prefilled this step
};

/// One step of continuous batching under the pool's budget, in this order:
///  1. Finished: every running sequence with remaining = 0 leaves (release_table()) and is listed in finished.
///  2. Decode: every running sequence, oldest first, reserves the slot of the token it decodes this step
///     (append_slot()) and then has remaining − 1. When the pool has no block for it, the youngest running
///     sequence (the back of \p running, possibly itself) is preempted until it fits: its blocks are released,
///     its prompt becomes table.length + 1 (recompute: its cached tokens and the last token it generated are
///     prefilled again when it returns), its remaining is unchanged (it decoded nothing this step), and it goes
///     to the front of \p waiting, ahead of every request that waited already, listed in preempted.
///  3. Admit: while \p waiting is not empty and fewer than \p max_running sequences run, the front request is
///     admitted (a sequence preempted in step 2 too: it is at the front now) when the free blocks hold the
///     blocks its prompt adds to its table (⌈(table.length + prompt) / B⌉ − table.blocks.size(): ⌈prompt / B⌉
///     for an empty table), else admission stops (first come, first served). An admitted request reserves its
///     prompt's slots (append_slot(), prompt times), has remaining − 1 (the prefill yields its first token),
///     joins the back of \p running, and is listed in admitted.
/// The pool's free blocks never go below zero: every block a running table holds was allocated by it.
/// \param pool the blocks.
/// \param waiting the queue, front first; each has prompt ≥ 1 and remaining ≥ 1, and holds no blocks or only the
///        full blocks of a prefix it shares with others (share_table(); table.length a multiple of B).
/// \param running the sequences that run, oldest first.
/// \param max_running the most sequences that may run at once (≥ 1).
/// \return what the step did.
/// \throws std::invalid_argument naming max_running when it is 0; naming the request's id when one of the requests
///         the step could admit (the first min(max_running, the pool's blocks) of \p waiting) has prompt = 0 or
///         remaining = 0, holds a table whose length is not a multiple of B, or could never fit
///         (⌈(table.length + prompt + remaining − 1) / B⌉ above the pool's blocks, computed without wrapping), or
///         holds a block the pool does not have or has free. Checked before anything changes. A request further
///         back is checked when it comes that far: a step costs what it runs, admits and preempts, never the
///         queue's length (a serving system checks a request once, when it arrives; see serve_paged()).
StepPlan schedule_step(BlockAllocator& pool, std::deque<Sequence>& waiting, std::vector<Sequence>& running,
                       std::size_t max_running);

/// Prefix caching at admission (vLLM's automatic prefix caching): the longest run of \p prompt's full blocks, from
/// the first, that \p cache holds. Block k holds tokens kB … kB + B − 1 (B = cache.block_size()) and its key is
/// block_hash(key of block k − 1, prompt, kB, B), kNoParent standing for the key before block 0: a block is found
/// only under the key of everything before it, so the walk stops at the first block not found (a later block
/// found after a miss holds the keys and values of another prefix's tokens). Only full blocks are looked up, and at
/// most ⌊(n − 1) / B⌋ of them for a prompt of n tokens: its last token is always computed, because its output is the
/// request's first token (a prompt of 2B tokens whose two blocks are both cached takes the first only). Each block
/// found is taken (cache.take()): the table holds it, and it is not evicted while it does.
/// \param cache the prefix cache; find() and take() change nothing else.
/// \param prompt (n ≥ 1) the request's tokens.
/// \return the table of the blocks found, in order, length = B × their number (empty when none).
/// \throws std::invalid_argument naming the prompt when it is empty; the cache unchanged then.
BlockTable lookup_prefix(PrefixCache& cache, const std::vector<TokenId>& prompt);

/// @}

}  // namespace attn
