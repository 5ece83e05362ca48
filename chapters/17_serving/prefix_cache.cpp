// Chapter 17's prefix cache (prefix_cache.hpp): chained block keys, the cache of full blocks and its LRU eviction.
// Chapter code, given to the learner: what lookup_prefix() builds on. Book page: book/17_serving.md.
#include "17_serving/prefix_cache.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

std::uint64_t block_hash(std::uint64_t parent, const std::vector<TokenId>& tokens, std::size_t first, std::size_t B) {
  require(B > 0, "block_hash: B = 0; a block holds at least one token");
  require(first <= tokens.size() && B <= tokens.size() - first,
          fmt::format("block_hash: a block of B = {} tokens from first = {} passes the {} tokens", B, first,
                      tokens.size()));
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the parent's key, then each token, byte by byte
  const auto mix = [&h](std::uint64_t word) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (word >> (8 * byte)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  };
  mix(parent);
  for (std::size_t t = first; t < first + B; ++t) mix(static_cast<std::uint64_t>(tokens[t]));
  return h;
}

std::optional<BlockId> PrefixCache::find(std::uint64_t key) const {
  const auto it = block_of_.find(key);
  if (it == block_of_.end()) return std::nullopt;
  return it->second;
}

void PrefixCache::take(BlockId block) {
  require(key_of_.count(block) > 0,
          fmt::format("PrefixCache::take: block {} is not cached; take only a block find() gave", block));
  pool_.retain(block);
  const auto place = lru_place_.find(block);
  if (place != lru_place_.end()) {  // no table held it: it is in use again, not to be evicted
    lru_.erase(place->second);
    lru_place_.erase(place);
  }
}

void PrefixCache::insert(const BlockTable& table, const std::vector<TokenId>& tokens) {
  const std::size_t B = pool_.block_size();
  const std::size_t full = table.length / B;
  require(tokens.size() >= table.length && table.blocks.size() == full + (table.length % B != 0 ? 1 : 0),
          fmt::format("PrefixCache::insert: a table of length {} in {} blocks with {} tokens; it needs ⌈length / B⌉ "
                      "blocks (B = {}) and at least length tokens",
                      table.length, table.blocks.size(), tokens.size(), B));
  for (const BlockId b : table.blocks)
    require(b < pool_.total_blocks() && pool_.ref_count(b) > 0,
            fmt::format("PrefixCache::insert: the table's block {} is not one the pool holds", b));
  std::uint64_t key = kNoParent;
  for (std::size_t k = 0; k < full; ++k) {
    key = block_hash(key, tokens, k * B, B);
    const BlockId b = table.blocks[k];
    if (block_of_.count(key) > 0 || key_of_.count(b) > 0) continue;  // computed before, or this block is cached
    block_of_[key] = b;
    key_of_[b] = key;
    pool_.retain(b);  // the cache's own reference: a block it caches is never free
  }
}

void PrefixCache::release(BlockTable& table) {
  BlockTable checked = table;
  const std::vector<BlockId> blocks = table.blocks;
  release_table(pool_, checked);  // checks first (the pool unchanged on a bad table), then releases every block
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it)  // last first: later blocks are evicted earlier
    if (key_of_.count(*it) > 0 && pool_.ref_count(*it) == 1 && lru_place_.count(*it) == 0)
      lru_place_[*it] = lru_.insert(lru_.end(), *it);
  table = BlockTable{};
}

std::optional<BlockId> PrefixCache::allocate() {
  if (pool_.free_blocks() == 0 && !lru_.empty()) {  // evict the least recently used block no table holds
    const BlockId victim = lru_.front();
    lru_.pop_front();
    lru_place_.erase(victim);
    block_of_.erase(key_of_.at(victim));
    key_of_.erase(victim);
    pool_.release(victim);  // the cache's reference: it is free now
    ++evictions_;
  }
  return pool_.allocate();
}

}  // namespace attn
