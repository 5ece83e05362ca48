/// \file
/// Chapter 09's fast decode step: the attention of one new token over the KV cache, with each group's cached
/// keys and values read once for all the query heads of the group, in one pass. Chapter code, not an
/// exercise: it sits beside the learner's decode_step() as chapter 05's flash_attention_fast() sits beside
/// flash_attention(). Book pages: book/09_mqa_gqa.md (the roofline of decode) and
/// book/measure_09_mqa_gqa.md (its measurements).
#pragma once

#include <cstddef>

#include "09_mqa_gqa/mqa_gqa.hpp"
#include "attn/tensor.hpp"

namespace attn::ch09 {

/// Cached tokens per block: the block's keys and values (32 × d_k and 32 × d_v floats, 16 KiB each for
/// d = 128) stay in the core's L1 cache while every query head of the group uses them.
constexpr std::size_t kDecodeKeysPerBlock = 32;

/// The new token's attention over every token in \p cache (the new token's own key and value already
/// appended), as decode_step() computes it after its append, in one pass over the cache: for each group of
/// r = h/g query heads and each block of kDecodeKeysPerBlock cached keys, the r × block scores, an online
/// softmax per query head (chapter 05's running max and sum) and O += P · V with the block still in cache.
/// The cache is read where it lies, never copied; its rows are taken as appended (decode_step() checks each
/// token's key and value before it appends them).
/// \param cache (g, capacity, d_k) keys and (g, capacity, d_v) values; rows [0, length()) are attended.
/// \param q (h, d_k) the new token's query, one row per query head; g = cache.kv_heads() divides h.
/// \return (h, d_v): each query head's attention output; head i reads KV head kv_group_of(i, h, g).
/// \throws std::invalid_argument naming the shapes when q's width is not the cache's d_k, h and g when g
///         does not divide h, the empty cache (length() = 0: there is nothing to attend to), or the first
///         NaN/Inf of q.
Matrix decode_attend_fast(const KVCache& cache, const Matrix& q);

}  // namespace attn::ch09
