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

/// Chunked prefill (Sarathi-Serve; vLLM V1 with max_num_batched_tokens): the attention of a chunk of c consecutive
/// tokens of one sequence, at positions first … first + c − 1 of \p table, each over every token up to itself
/// (causal): the cached prefix [0, first), read once for the whole chunk, and the chunk's own keys before it. The
/// chunk's keys and values are already written into the table. A prompt prefilled chunk by chunk over several steps
/// gives, row for row, what one prefill of the whole prompt gives; the last chunk's last row is the first token's.
/// Per group of r = h/g query heads, the prefix is attended by the c·r rows together (each key row loaded once for
/// every query of the chunk: what makes a prefill compute-bound where a decode is memory-bound), then each token's r
/// rows continue over the chunk's keys up to its own, on the same block step as paged_decode_range().
/// \param cache the paged cache; g = cache.shape().kv_heads divides h.
/// \param layer the layer attended.
/// \param table the sequence's table, holding at least first + c tokens (tokens past first + c are not attended).
/// \param Q (h, c, d_k) the chunk's queries, c ≥ 1.
/// \param first the position of the chunk's first token (the tokens cached before it).
/// \return (h, c, d_v): row i of head h' is token first + i's attention output.
/// \throws std::invalid_argument naming the shapes when Q's width is not d_k or it has no rows, h and g when g does
///         not divide h or h = 0, first and c when first + c passes table.length (computed without wrapping), the
///         length when the table does not hold ⌈length / B⌉ blocks, the layer when it does not exist, the first
///         NaN/Inf of Q; and, after the pass, when the output is not finite, the scores or the values as
///         paged_decode_range() does.
Tensor3 paged_prefill(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Tensor3& Q,
                      std::size_t first);

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
