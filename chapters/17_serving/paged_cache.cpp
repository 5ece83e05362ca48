// Chapter 17's paged KV cache (paged_cache.hpp): the pool's bookkeeping and the blocks' storage. Chapter code,
// given to the learner: what the exercises build on. Book page: book/17_serving.md.
#include "17_serving/paged_cache.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

BlockAllocator::BlockAllocator(std::size_t blocks, std::size_t block_size) : block_size_(block_size) {
  require(blocks > 0 && block_size > 0,
          fmt::format("BlockAllocator: blocks = {} and block_size = {}; each must be at least 1", blocks, block_size));
  checked_allocation("BlockAllocator: the reference counts and free list, blocks × 16", {blocks, 16});
  refs_.assign(blocks, 0);
  free_.resize(blocks);
  // Highest first on the stack, so the first allocations hand out blocks 0, 1, 2, …: easy to read in a table.
  for (std::size_t b = 0; b < blocks; ++b) free_[b] = blocks - 1 - b;
}

std::optional<BlockId> BlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  const BlockId b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

std::size_t BlockAllocator::ref_count(BlockId block) const {
  require(block < refs_.size(),
          fmt::format("BlockAllocator: block {} does not exist; the pool has blocks 0 … {}", block, refs_.size() - 1));
  return refs_[block];
}

void BlockAllocator::retain(BlockId block) {
  require(ref_count(block) > 0, fmt::format("BlockAllocator::retain: block {} is free (reference count 0); only a "
                                            "block some table holds can be shared",
                                            block));
  ++refs_[block];
}

void BlockAllocator::release(BlockId block) {
  require(ref_count(block) > 0, fmt::format("BlockAllocator::release: block {} is already free (reference count 0): "
                                            "a table released it twice, or still points at a freed block",
                                            block));
  if (--refs_[block] == 0) free_.push_back(block);
}

void release_table(BlockAllocator& pool, BlockTable& table) {
  // Checked first, so a bad table leaves the pool as it was: a block the table lists k times is released k times, so
  // it must be held at least k times (a table that lists a held block twice would free it, then refuse).
  std::vector<BlockId> sorted = table.blocks;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t k = i + 1;
    while (k < sorted.size() && sorted[k] == sorted[i]) ++k;
    const std::size_t listed = k - i, held = pool.ref_count(sorted[i]);  // ref_count() refuses a block past the pool
    if (held == 0)
      throw std::invalid_argument(fmt::format("release_table: the table points at block {}, which is free", sorted[i]));
    if (listed > held)
      throw std::invalid_argument(
          fmt::format("release_table: the table lists block {} {} times, but its reference "
                      "count is {}: releasing it would free it and then release a free block",
                      sorted[i], listed, held));
    i = k;
  }
  for (const BlockId b : table.blocks) pool.release(b);
  table = BlockTable{};
}

BlockTable share_table(BlockAllocator& pool, const BlockTable& table) {
  for (const BlockId b : table.blocks)
    require(pool.ref_count(b) > 0, fmt::format("share_table: the table points at block {}, which is free", b));
  for (const BlockId b : table.blocks) pool.retain(b);
  return table;
}

std::size_t kv_block_bytes(const KvShape& s, std::size_t bytes_per_number) {
  require(s.layers > 0 && s.kv_heads > 0 && s.d_k > 0 && s.d_v > 0 && s.block_size > 0 && bytes_per_number > 0,
          fmt::format("kv_block_bytes: layers = {}, kv_heads = {}, d_k = {}, d_v = {}, block_size = {}, "
                      "bytes_per_number = {}; each must be at least 1",
                      s.layers, s.kv_heads, s.d_k, s.d_v, s.block_size, bytes_per_number));
  return checked_product(
      "kv_block_bytes: B × layers × g × (d_k + d_v) × bytes",
      {s.block_size, s.layers, s.kv_heads, checked_sum("kv_block_bytes: d_k + d_v", {s.d_k, s.d_v}), bytes_per_number});
}

namespace {

/// The number of blocks of \p shape that \p budget_bytes holds, refused when it is none.
std::size_t blocks_in_budget(const KvShape& shape, std::size_t budget_bytes) {
  const std::size_t per_block = kv_block_bytes(shape, sizeof(float));
  require(budget_bytes >= per_block,
          fmt::format("PagedKVCache: a budget of {} bytes holds no block of {} bytes "
                      "(B = {}, layers = {}, g = {}, d_k = {}, d_v = {}, float32)",
                      budget_bytes, per_block, shape.block_size, shape.layers, shape.kv_heads, shape.d_k, shape.d_v));
  const std::size_t blocks = budget_bytes / per_block;
  checked_allocation("PagedKVCache: the keys and values of the blocks budget_bytes holds, blocks × block bytes",
                     {blocks, per_block});
  return blocks;
}

}  // namespace

PagedKVCache::PagedKVCache(const KvShape& shape, std::size_t budget_bytes)
    : shape_(shape), pool_(blocks_in_budget(shape, budget_bytes), shape.block_size) {
  const std::size_t blocks = pool_.total_blocks(), B = shape.block_size;
  K_.assign(blocks * shape.layers * shape.kv_heads * B * shape.d_k, 0.0f);
  V_.assign(blocks * shape.layers * shape.kv_heads * B * shape.d_v, 0.0f);
}

std::size_t PagedKVCache::offset_of(std::size_t layer, BlockId block, std::size_t head, std::size_t d) const {
  return ((block * shape_.layers + layer) * shape_.kv_heads + head) * shape_.block_size * d;
}

void PagedKVCache::require_slot(const char* where, std::size_t layer, BlockId block, std::size_t head) const {
  // The message is formatted only when the check fails: keys() and values() are called once per stretch of the decode
  // kernels' walk, and formatting it every time (as require(ok, message) must) cost the paged kernel more than its
  // table lookups.
  if (layer < shape_.layers && block < pool_.total_blocks() && head < shape_.kv_heads) return;
  throw std::invalid_argument(
      fmt::format("{}: layer {}, block {}, KV head {} do not exist; the cache has {} layers, {} blocks, {} KV "
                  "heads",
                  where, layer, block, head, shape_.layers, pool_.total_blocks(), shape_.kv_heads));
}

const float* PagedKVCache::keys(std::size_t layer, BlockId block, std::size_t head) const {
  require_slot("PagedKVCache::keys", layer, block, head);
  return K_.data() + offset_of(layer, block, head, shape_.d_k);
}

const float* PagedKVCache::values(std::size_t layer, BlockId block, std::size_t head) const {
  require_slot("PagedKVCache::values", layer, block, head);
  return V_.data() + offset_of(layer, block, head, shape_.d_v);
}

void PagedKVCache::write(std::size_t layer, BlockId block, std::size_t offset, const Matrix& k, const Matrix& v) {
  const std::size_t g = shape_.kv_heads, d_k = shape_.d_k, d_v = shape_.d_v;
  require_slot("PagedKVCache::write", layer, block, 0);
  const std::size_t refs = pool_.ref_count(block);
  require(refs == 1, fmt::format("PagedKVCache::write: block {} has reference count {}; only a block one table "
                                 "holds alone may be written ({})",
                                 block, refs, refs == 0 ? "it is free" : "it is shared: copy it first"));
  require(offset < shape_.block_size,
          fmt::format("PagedKVCache::write: offset {} is past the block's B = {} slots", offset, shape_.block_size));
  require(k.shape(0) == g && k.shape(1) == d_k && v.shape(0) == g && v.shape(1) == d_v,
          fmt::format("PagedKVCache::write: k is {} and v is {}; the cache holds ({}, {}) and ({}, {})", shape_str(k),
                      shape_str(v), g, d_k, g, d_v));
  require_finite("PagedKVCache::write", "k", k.data(), k.size());  // the cache holds finite keys and values only
  require_finite("PagedKVCache::write", "v", v.data(), v.size());
  for (std::size_t j = 0; j < g; ++j) {
    std::copy_n(k.data() + j * d_k, d_k, K_.data() + offset_of(layer, block, j, d_k) + offset * d_k);
    std::copy_n(v.data() + j * d_v, d_v, V_.data() + offset_of(layer, block, j, d_v) + offset * d_v);
  }
}

void PagedKVCache::copy_block(BlockId from, BlockId to, std::size_t rows) {
  const std::size_t n = pool_.total_blocks();
  require(from < n && to < n && from != to,
          fmt::format("PagedKVCache::copy_block: from block {} to block {}: both must be different blocks of 0 … {}",
                      from, to, n - 1));
  const bool from_free = pool_.ref_count(from) == 0, to_free = pool_.ref_count(to) == 0;
  if (from_free || to_free)
    throw std::invalid_argument(fmt::format(
        "PagedKVCache::copy_block: {} (reference count 0); copy between blocks tables hold",
        from_free && to_free ? fmt::format("from block {} and to block {} are free", from, to)
                             : fmt::format("{} block {} is free", from_free ? "from" : "to", from_free ? from : to)));
  require(rows <= shape_.block_size,
          fmt::format("PagedKVCache::copy_block: rows = {} is more than a block's B = {}", rows, shape_.block_size));
  for (std::size_t l = 0; l < shape_.layers; ++l)
    for (std::size_t j = 0; j < shape_.kv_heads; ++j) {
      std::copy_n(K_.data() + offset_of(l, from, j, shape_.d_k), rows * shape_.d_k,
                  K_.data() + offset_of(l, to, j, shape_.d_k));
      std::copy_n(V_.data() + offset_of(l, from, j, shape_.d_v), rows * shape_.d_v,
                  V_.data() + offset_of(l, to, j, shape_.d_v));
    }
}

}  // namespace attn
