/// \file
/// Chapter 17's prefix cache, the part the chapter gives (vLLM's automatic prefix caching): every full block of a
/// sequence is keyed by a hash of its tokens chained to its parent block's hash, so that one key names the block and
/// everything before it; a request's prompt finds, at admission, the longest run of its full blocks already
/// computed (the learner's lookup_prefix(), serving.hpp); a block no table holds any more stays cached, evictable,
/// until a new block is needed, and then the least recently used goes first. Book page: book/17_serving.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "17_serving/paged_cache.hpp"

namespace attn {

/// \addtogroup ch17
/// @{

/// A token of a prompt (a vocabulary id).
using TokenId = std::size_t;

/// The parent hash of a sequence's first block.
constexpr std::uint64_t kNoParent = 0x9e3779b97f4a7c15ull;

/// The key of the full block of \p B tokens tokens[first … first + B − 1] whose parent block has key \p parent
/// (kNoParent for the first): a 64-bit FNV-1a hash of the parent's key and the tokens. Chaining makes equal keys mean
/// equal prefixes, not only equal blocks: the same 16 tokens after two different prompts have two keys (their keys and
/// values differ: each attended to its own prefix). \throws std::invalid_argument naming B when it is 0, and first, B
/// and the tokens' size when the block passes their
///         end (compared without wrapping).
std::uint64_t block_hash(std::uint64_t parent, const std::vector<TokenId>& tokens, std::size_t first, std::size_t B);

/// The cached full blocks of a pool, by key, and the eviction order of those no table holds. The cache holds one
/// reference of its own on every block it caches, so a cached block is never free: when no table holds it (reference
/// count 1, the cache's) it is evictable, and allocate() evicts the least recently used of them when the pool has no
/// free block. (vLLM keeps such blocks in its free list, in the same order; a reference of the cache's own keeps the
/// pool's bookkeeping, BlockAllocator, as it is.)
class PrefixCache {
 public:
  /// A cache over \p pool, empty. The pool must outlive it.
  explicit PrefixCache(BlockAllocator& pool) : pool_(pool) {}

  std::size_t block_size() const { return pool_.block_size(); }  ///< B
  BlockAllocator& pool() { return pool_; }                       ///< the blocks

  /// The cached block of key \p key, or nothing. Changes nothing (not the eviction order).
  std::optional<BlockId> find(std::uint64_t key) const;

  /// A table takes cached block \p block (found by find()): one more reference, and, when no table held it, it is no
  /// longer evictable (taken out of the eviction order).
  /// \throws std::invalid_argument naming the block when the cache does not hold it.
  void take(BlockId block);

  /// Caches \p table's full blocks under their chained keys, \p tokens (at least table.length of them) being the
  /// table's tokens: after a prefill, or as generated tokens fill a block. A key cached already keeps its block (the
  /// first to compute it wins; the table's own copy stays the table's); a block cached already is skipped.
  /// \throws std::invalid_argument naming the sizes when tokens are fewer than table.length or the table does not
  ///         hold ⌈length / B⌉ blocks, and naming a block of the table the pool has free.
  void insert(const BlockTable& table, const std::vector<TokenId>& tokens);

  /// Releases every block of \p table and empties it; a cached block it leaves to the cache alone becomes evictable,
  /// the most recently used. The table's blocks are released last first, so a sequence's later blocks are evicted
  /// before its earlier ones (a block is useless once its parent is gone: the chain of keys is broken there).
  /// \throws std::invalid_argument as release_table() does, the cache and the pool unchanged then.
  void release(BlockTable& table);

  /// A block for new tokens: a free one of the pool, or else the least recently used evictable block, its key
  /// forgotten (evicted); nothing when neither is left.
  std::optional<BlockId> allocate();

  std::size_t cached() const { return key_of_.size(); }  ///< blocks cached
  std::size_t evictable() const { return lru_.size(); }  ///< cached blocks no table holds
  std::size_t evictions() const { return evictions_; }   ///< blocks evicted so far
  /// The evictable blocks, the next to be evicted first.
  std::vector<BlockId> eviction_order() const { return {lru_.begin(), lru_.end()}; }

 private:
  BlockAllocator& pool_;
  std::unordered_map<std::uint64_t, BlockId> block_of_;                  // key → cached block
  std::unordered_map<BlockId, std::uint64_t> key_of_;                    // cached block → its key
  std::list<BlockId> lru_;                                               // evictable blocks, least recent first
  std::unordered_map<BlockId, std::list<BlockId>::iterator> lru_place_;  // where each evictable block is in lru_
  std::size_t evictions_ = 0;
};

/// @}

}  // namespace attn
