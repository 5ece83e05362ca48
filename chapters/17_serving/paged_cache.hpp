/// \file
/// Chapter 17's paged KV cache, the part the chapter gives: a pool of fixed-size blocks under a byte budget
/// with a reference count per block (BlockAllocator), the block table of one sequence (BlockTable), and the
/// keys and values of every block, for every layer and KV head (PagedKVCache). What the learner writes on it
/// (the append, the attention over a table, copy-on-write, the scheduler's step) is the contract,
/// serving.hpp. Book page: book/17_serving.md.
///
/// The layout, as an operating system's virtual memory: a sequence's token t lives in logical block t / B at
/// offset t % B, and its block table maps logical block i to a physical block of the pool, anywhere. Blocks are
/// allocated one at a time as the sequence grows, so a sequence never holds more than B − 1 slots it does not
/// use, and two sequences that start alike can point at the same physical blocks (reference count 2).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch17 Chapter 17: serving attention
/// A paged KV cache, attention over block tables, split-KV decoding, copy-on-write and a scheduler.
/// @{

/// A physical block of the pool: 0 … total_blocks() − 1.
using BlockId = std::size_t;

/// One sequence's view of the cache: token t is at offset t % B of physical block blocks[t / B].
struct BlockTable {
  std::vector<BlockId> blocks;  ///< (⌈length / B⌉) the physical block of each logical block
  std::size_t length = 0;       ///< tokens whose slots the table holds
};

/// The pool's bookkeeping, without the numbers: which blocks are free and how many tables point at each.
/// A block is free when its reference count is 0; allocate() hands out a free block with count 1, retain()
/// adds a table, release() takes one away and frees the block at 0. The scheduler plans with this alone.
class BlockAllocator {
 public:
  /// A pool of \p blocks blocks of \p block_size tokens each, all free.
  /// \throws std::invalid_argument naming blocks and block_size when either is 0.
  BlockAllocator(std::size_t blocks, std::size_t block_size);

  std::size_t block_size() const { return block_size_; }                   ///< B, tokens per block
  std::size_t total_blocks() const { return refs_.size(); }                ///< blocks in the pool
  std::size_t free_blocks() const { return free_.size(); }                 ///< blocks with reference count 0
  std::size_t used_blocks() const { return refs_.size() - free_.size(); }  ///< blocks some table holds

  /// A free block, now with reference count 1; nothing when every block is in use (the pool unchanged).
  /// The block freed last is handed out first.
  std::optional<BlockId> allocate();

  /// One more table points at \p block.
  /// \throws std::invalid_argument naming the block when it does not exist or is free (count 0).
  void retain(BlockId block);

  /// One table fewer points at \p block; at count 0 it is free again.
  /// \throws std::invalid_argument naming the block when it does not exist or is already free (a double free).
  void release(BlockId block);

  /// How many tables point at \p block (0: free).
  /// \throws std::invalid_argument naming the block when it does not exist.
  std::size_t ref_count(BlockId block) const;

 private:
  std::size_t block_size_;
  std::vector<std::size_t> refs_;  // (blocks) reference count of each block
  std::vector<BlockId> free_;      // the free blocks, a stack: the last one freed is reused first
};

/// Releases every block of \p table and empties it (length 0): what a finished or preempted sequence does. A block
/// the table lists k times is released k times.
/// \throws std::invalid_argument naming the block when one of the table's blocks is already free or does not exist,
///         or is listed more times than its reference count (it would be freed, then released free); the table and
///         the pool are then unchanged.
void release_table(BlockAllocator& pool, BlockTable& table);

/// A second table over the same blocks as \p table, each block retained once more: a request that starts with
/// another's tokens (a shared system prompt) shares its blocks instead of copying them.
/// \throws std::invalid_argument naming the block when one of the table's blocks is free.
BlockTable share_table(BlockAllocator& pool, const BlockTable& table);

/// The sizes of a paged cache: per block, for every layer and every KV head, B keys of d_k and B values of d_v.
struct KvShape {
  std::size_t layers = 1;       ///< transformer layers, each with its own keys and values in every block
  std::size_t kv_heads = 1;     ///< g, key/value heads per layer
  std::size_t d_k = 1;          ///< width of a key
  std::size_t d_v = 1;          ///< width of a value
  std::size_t block_size = 16;  ///< B, tokens per block
};

/// Bytes of one block: B · layers · g · (d_k + d_v) · \p bytes_per_number.
/// \throws std::invalid_argument naming the sizes when one is 0 or the product does not fit in 64 bits.
std::size_t kv_block_bytes(const KvShape& shape, std::size_t bytes_per_number);

/// The keys and values of a pool of blocks, float32, allocated once for as many blocks as \p budget_bytes holds.
/// Block b's keys for layer l and KV head j are B rows of d_k floats, contiguous (keys()); the values likewise.
class PagedKVCache {
 public:
  /// As many blocks of \p shape as fit in \p budget_bytes (float32), all free.
  /// \throws std::invalid_argument naming the sizes when one is 0, naming the budget and the bytes of a block
  ///         when not even one block fits, or when the storage does not fit in memory (before allocating).
  PagedKVCache(const KvShape& shape, std::size_t budget_bytes);

  const KvShape& shape() const { return shape_; }                                ///< the sizes
  BlockAllocator& pool() { return pool_; }                                       ///< the blocks' bookkeeping
  const BlockAllocator& pool() const { return pool_; }                           ///< the same, read-only
  std::size_t bytes() const { return (K_.size() + V_.size()) * sizeof(float); }  ///< storage held

  /// Keys of \p block for \p layer and KV head \p head: (B, d_k), row o is offset o.
  /// \throws std::invalid_argument naming the block, layer or head that does not exist.
  const float* keys(std::size_t layer, BlockId block, std::size_t head) const;
  /// Values of \p block for \p layer and KV head \p head: (B, d_v).
  /// \throws std::invalid_argument as keys() does.
  const float* values(std::size_t layer, BlockId block, std::size_t head) const;

  /// Writes one token's keys \p k (g, d_k) and values \p v (g, d_v) for \p layer at \p offset of \p block.
  /// \throws std::invalid_argument naming the block and its reference count when the block is free (0) or shared
  ///         (more than 1: copy it first, copy_on_write()), naming the shapes when k or v does not fit, naming the
  ///         offset when it is not below B or the layer when it does not exist, naming the first NaN/Inf of k or v
  ///         (the cache holds finite numbers only); the cache is unchanged then.
  void write(std::size_t layer, BlockId block, std::size_t offset, const Matrix& k, const Matrix& v);

  /// Copies the first \p rows slots of block \p from into block \p to, for every layer and KV head.
  /// \throws std::invalid_argument naming the blocks when one does not exist or they are the same block, naming
  ///         which of them is free ("from block 2 is free") when one or both are, or naming rows when it exceeds B.
  void copy_block(BlockId from, BlockId to, std::size_t rows);

 private:
  std::size_t offset_of(std::size_t layer, BlockId block, std::size_t head, std::size_t d) const;
  void require_slot(const char* where, std::size_t layer, BlockId block, std::size_t head) const;

  KvShape shape_;
  BlockAllocator pool_;
  std::vector<float> K_;  // (blocks, layers, g, B, d_k)
  std::vector<float> V_;  // (blocks, layers, g, B, d_v)
};

/// @}

}  // namespace attn
