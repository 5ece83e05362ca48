/// \file
/// Chapter 17's fast decode over a paged cache, and split-KV decoding of one long sequence on many cores. Chapter
/// code, not an exercise: it sits beside the learner's paged_attention() as chapter 09's decode_attend_fast()
/// sits beside decode_step(). Book pages: book/17_serving.md and book/measure_17_serving.md.
#pragma once

#include <cstddef>

#include "05_flash_cpu/flash_cpu.hpp"
#include "17_serving/paged_cache.hpp"
#include "attn/tensor.hpp"

namespace attn::ch17 {

/// The new token's attention over tokens [first, end) of \p table, one pass: for each group of r = h/g query heads
/// and each block, the r × (keys in the block) scores, chapter 05's online softmax per query head and O += P·V with
/// the block's values, as chapter 09's one-pass kernel does over a contiguous cache; the keys are read where the
/// table puts them. An empty range gives O = 0 and lse = −inf.
/// \param cache the paged cache; g = cache.shape().kv_heads divides h.
/// \param layer the layer attended.
/// \param table the sequence's table.
/// \param q (h, d_k) the new token's query.
/// \param first the first token of the range.
/// \param end one past the last (≤ table.length).
/// \return O (h, d_v) and lse (h): the part's result, for merge_splits() or chapter 05's merge.
/// \throws std::invalid_argument naming the shapes when q's width is not d_k, h and g when g does not divide h, the
///         range when first > end or end > table.length, the length when the table does not hold ⌈length / B⌉
///         blocks (computed without wrapping, for any length), the layer when it does not exist, the first NaN/Inf
///         of q; and, after the pass, when O is not finite: naming q and k when d_k · max|q| · max|k| over the range
///         is past attn/checks.hpp's bound (a score overflowed), else naming the values (their sum e^{s − m}·v,
///         made before the division by Σ e^{s − m} as chapter 09's one pass makes it, overflowed: values near
///         float's limit, which paged_attention() answers).
FlashOutput paged_decode_range(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q,
                               std::size_t first, std::size_t end);

/// paged_decode_range() over the whole table: (h, d_v), what paged_attention() computes, up to float rounding, for
/// values whose unnormalised sum stays finite (the learner's normalised weights answer beyond that too).
/// \throws std::invalid_argument as paged_decode_range() does, and naming the length when the table is empty.
Matrix paged_decode(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q);

/// Split-KV decoding (Flash-Decoding): the table's tokens cut into \p splits ranges of whole blocks, each attended by
/// paged_decode_range() on one of \p threads threads, the parts merged with chapter 05's merge_states() (a part
/// (O, lse) is the state m = lse, ℓ = 1, acc = O). Equal to paged_decode() up to float rounding.
/// \param cache the paged cache, as for paged_decode_range().
/// \param layer the layer attended.
/// \param table the sequence's table (at least one token).
/// \param q (h, d_k) the new token's query.
/// \param splits ranges (≥ 1; more than the table's blocks are not made: each range holds at least one block).
/// \param threads threads (≥ 1).
/// \return O (h, d_v) and lse (h).
/// \throws std::invalid_argument naming splits or threads when 0, and as paged_decode() does; an error in a worker
///         thread reaches the caller.
FlashOutput split_kv_decode(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q,
                            std::size_t splits, std::size_t threads);

}  // namespace attn::ch17
