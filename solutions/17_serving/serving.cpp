// Chapter 17, reference solutions. Book page: book/17_serving.md.
// The cache's bookkeeping (paged_cache.hpp) is given; what is written here is what a serving system adds on it:
// where the next token goes, how attention finds the keys through a table, how split results merge, when a
// shared block must be copied, and who runs at each step.
#include "17_serving/serving.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "09_mqa_gqa/mqa_gqa.hpp"
#include "attn/checks.hpp"

namespace attn {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// ⌈n / B⌉: the blocks n tokens occupy (without wrapping for n near SIZE_MAX).
std::size_t blocks_for(std::size_t n, std::size_t B) { return n / B + (n % B != 0 ? 1 : 0); }

/// Throws unless \p table holds exactly the blocks its length needs (the message formatted only then: append_slot()
/// runs for every token of every step).
void require_table(const char* where, const BlockTable& table, std::size_t B) {
  if (table.blocks.size() != blocks_for(table.length, B))
    throw std::invalid_argument(
        fmt::format("{}: the table holds {} tokens in {} blocks; with B = {} that needs {} "
                    "blocks",
                    where, table.length, table.blocks.size(), B, blocks_for(table.length, B)));
}

}  // namespace

// [append_slot]
std::optional<Slot> append_slot(BlockTable& table, BlockAllocator& pool) {
  const std::size_t B = pool.block_size();
  require_table("append_slot", table, B);
  if (table.length == std::numeric_limits<std::size_t>::max())  // length + 1 would wrap to 0
    throw std::invalid_argument(
        fmt::format("append_slot: the table holds length = {} tokens, the most a std::size_t "
                    "counts: one more does not fit",
                    table.length));
  const std::size_t offset = table.length % B;
  if (offset != 0) {  // the token goes into the table's last block: it must be one the pool holds
    const BlockId last = table.blocks.back();
    if (last >= pool.total_blocks() || pool.ref_count(last) == 0)
      throw std::invalid_argument(
          fmt::format("append_slot: the table's last block {} is not a block the pool holds "
                      "(the pool has blocks 0 … {}{})",
                      last, pool.total_blocks() - 1, last < pool.total_blocks() ? "; it is free" : ""));
  }
  if (offset == 0) {  // the last block is full (or there is none): the token opens a new one
    const std::optional<BlockId> fresh = pool.allocate();
    if (!fresh) return std::nullopt;  // out of blocks: nothing changed, the caller decides (wait, preempt)
    table.blocks.push_back(*fresh);
  }
  ++table.length;
  return Slot{table.blocks.back(), offset};
}
// [append_slot]

// [paged_attention]
Matrix paged_attention(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q) {
  const KvShape& s = cache.shape();
  const std::size_t h = q.shape(0), g = s.kv_heads, B = s.block_size, n = table.length;
  if (q.shape(1) != s.d_k)
    throw std::invalid_argument(
        fmt::format("paged_attention: q is {} but the cache holds keys of d_k = {}", shape_str(q), s.d_k));
  if (h == 0 || h % g != 0)
    throw std::invalid_argument(
        fmt::format("paged_attention: q is {}: h = {} query heads cannot share g = {} "
                    "key/value heads evenly; g must divide h (and h be at least 1)",
                    shape_str(q), h, g));
  require(n > 0, "paged_attention: the table is empty (length 0): write the new token's key and value first");
  require_table("paged_attention", table, B);
  if (layer >= s.layers)
    throw std::invalid_argument(
        fmt::format("paged_attention: layer {} does not exist; the cache has {}", layer, s.layers));
  require_finite("paged_attention", "q", q.data(), q.size());
  // The overflow policy (attn/checks.hpp) over the keys the table names: d_k · max|q| · max|k| within the bound,
  // checked block by block (cache.keys() refuses, naming it, a block the cache does not have).
  float max_q = 0.0f;
  for (std::size_t c = 0; c < q.size(); ++c) max_q = std::max(max_q, std::abs(q.data()[c]));
  for (std::size_t b = 0; b < table.blocks.size(); ++b)
    for (std::size_t j = 0; j < g; ++j)
      require_bounded_products("paged_attention", "q", &max_q, 1, "k", cache.keys(layer, table.blocks[b], j),
                               std::min(B, n - b * B) * s.d_k, s.d_k);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d_k));
  Matrix O = xt::zeros<float>({h, s.d_v});  // (h, d_v)
  std::vector<float> scores(n);             // (n) one query head's scores, then its weights
  for (std::size_t i = 0; i < h; ++i) {
    const std::size_t j = kv_group_of(i, h, g);  // chapter 09: the KV head this query head reads
    const float* q_i = q.data() + i * s.d_k;
    for (std::size_t t = 0; t < n; ++t) {  // token t: row t % B of block blocks[t / B]
      const float* k_t = cache.keys(layer, table.blocks[t / B], j) + (t % B) * s.d_k;
      float dot = 0.0f;
      for (std::size_t c = 0; c < s.d_k; ++c) dot += q_i[c] * k_t[c];
      scores[t] = dot * scale;
    }
    const float m = *std::max_element(scores.begin(), scores.end());  // softmax, shifted by its max
    float sum = 0.0f;
    for (float& x : scores) sum += (x = std::exp(x - m));
    for (std::size_t t = 0; t < n; ++t) {
      const float* v_t = cache.values(layer, table.blocks[t / B], j) + (t % B) * s.d_v;
      const float w = scores[t] / sum;
      for (std::size_t c = 0; c < s.d_v; ++c) O(i, c) += w * v_t[c];
    }
  }
  return O;
}
// [paged_attention]

// [merge_splits]
FlashOutput merge_splits(const std::vector<FlashOutput>& parts) {
  require(!parts.empty(), "merge_splits: no parts to merge; split-KV decoding gives at least one");
  const std::size_t rows = parts[0].O.shape(0), d_v = parts[0].O.shape(1);
  for (std::size_t s = 0; s < parts.size(); ++s) {
    const FlashOutput& p = parts[s];
    if (p.O.shape(0) != rows || p.O.shape(1) != d_v || p.lse.shape(0) != rows)
      throw std::invalid_argument(
          fmt::format("merge_splits: part {} has O {} and lse {}; part 0 has O {}: every part "
                      "needs O (rows, d_v) and lse (rows) of the same rows",
                      s, shape_str(p.O), shape_str(p.lse), shape_str(parts[0].O)));
    for (std::size_t r = 0; r < rows; ++r)  // the message formatted only for a bad row, not for every row
      if (std::isnan(p.lse(r)) || p.lse(r) == std::numeric_limits<float>::infinity())
        throw std::invalid_argument(
            fmt::format("merge_splits: part {} row {} has lse = {}; an lse is finite, or -inf "
                        "for no key",
                        s, r, p.lse(r)));
  }
  FlashOutput out{xt::zeros<float>({rows, d_v}), Vector(Vector::shape_type{rows}, kMinusInf), 0};
  for (std::size_t r = 0; r < rows; ++r) {
    float m = kMinusInf;  // the largest lse: every weight e^{lse_s − m} is then at most 1, never overflowing
    for (const FlashOutput& p : parts) m = std::max(m, p.lse(r));
    if (m == kMinusInf) continue;  // no part saw a key for this row
    float sum = 0.0f;
    for (const FlashOutput& p : parts) sum += std::exp(p.lse(r) - m);  // e^{-inf} = 0: an empty part weighs nothing
    for (const FlashOutput& p : parts) {
      const float w = std::exp(p.lse(r) - m) / sum;  // e^{lse_s − lse}: the share of the part's keys
      if (w == 0.0f) continue;
      for (std::size_t c = 0; c < d_v; ++c) out.O(r, c) += w * p.O(r, c);
    }
    out.lse(r) = m + std::log(sum);
  }
  return out;
}
// [merge_splits]

// [copy_on_write]
bool copy_on_write(PagedKVCache& cache, BlockTable& table, std::size_t index) {
  if (index >= table.blocks.size())
    throw std::invalid_argument(
        fmt::format("copy_on_write: index {} is past the table's {} blocks", index, table.blocks.size()));
  BlockAllocator& pool = cache.pool();
  require_table("copy_on_write", table, pool.block_size());
  const BlockId shared = table.blocks[index];
  if (pool.ref_count(shared) == 0)  // ref_count() refuses, naming it, a block the pool does not have
    throw std::invalid_argument(
        fmt::format("copy_on_write: block {} (index {} of the table) is free: the table "
                    "points at a freed block",
                    shared, index));
  if (pool.ref_count(shared) == 1) return true;  // already ours alone: write in place
  const std::optional<BlockId> copy = pool.allocate();
  if (!copy) return false;
  const std::size_t B = pool.block_size();
  const std::size_t used = std::min(B, table.length - index * B);  // the slots of this block the table uses
  cache.copy_block(shared, *copy, used);
  table.blocks[index] = *copy;
  pool.release(shared);  // one reference fewer; the other tables keep the original
  return true;
}
// [copy_on_write]

namespace {

/// Throws, naming the request, unless waiting request \p w can be admitted some day. The messages are formatted only
/// on failure: a step checks up to max_running requests.
void require_waiting(const Sequence& w, const BlockAllocator& pool) {
  const std::size_t B = pool.block_size(), blocks = pool.total_blocks();
  if (w.remaining == 0 || w.prompt == 0)
    throw std::invalid_argument(
        fmt::format("schedule_step: request {} waits with prompt = {} and remaining = {}; "
                    "each must be at least 1",
                    w.id, w.prompt, w.remaining));
  // The whole pool's tokens, saturated at SIZE_MAX; the request's longest compared without adding (it can wrap).
  const std::size_t most =
      B > std::numeric_limits<std::size_t>::max() / blocks ? std::numeric_limits<std::size_t>::max() : blocks * B;
  if (w.table.length > most || w.prompt > most - w.table.length || w.remaining - 1 > most - w.table.length - w.prompt)
    throw std::invalid_argument(
        fmt::format("schedule_step: request {} waits holding {} tokens with prompt = {} and "
                    "remaining = {}; the pool's {} blocks of B = {} hold {} tokens: it could "
                    "never finish",
                    w.id, w.table.length, w.prompt, w.remaining, blocks, B, most));
  if (w.table.length % B != 0 || w.table.blocks.size() != w.table.length / B)
    throw std::invalid_argument(
        fmt::format("schedule_step: request {} waits holding {} tokens in {} blocks; a waiting "
                    "request holds only whole shared blocks of B = {} tokens",
                    w.id, w.table.length, w.table.blocks.size(), B));
  for (const BlockId b : w.table.blocks)
    if (b >= blocks || pool.ref_count(b) == 0)
      throw std::invalid_argument(fmt::format("schedule_step: request {} waits holding block {}, which the pool {}",
                                              w.id, b, b < blocks ? "has free" : "does not have"));
  const std::size_t longest = blocks_for(w.table.length + w.prompt + w.remaining - 1, B);  // fits: checked above
  if (longest > blocks)
    throw std::invalid_argument(
        fmt::format("schedule_step: request {} needs {} blocks at its longest, more than the "
                    "pool's {}: it could never finish",
                    w.id, longest, blocks));
}

/// Sends the youngest running sequence back to the front of the queue, its blocks freed (recompute).
void preempt_youngest(BlockAllocator& pool, std::deque<Sequence>& waiting, std::vector<Sequence>& running,
                      StepPlan& plan) {
  Sequence victim = std::move(running.back());
  running.pop_back();
  victim.prompt = victim.table.length + 1;  // its cached tokens and its last generated token, prefilled again
  release_table(pool, victim.table);
  plan.preempted.push_back(victim.id);
  waiting.push_front(std::move(victim));
}

}  // namespace

// [schedule_step]
StepPlan schedule_step(BlockAllocator& pool, std::deque<Sequence>& waiting, std::vector<Sequence>& running,
                       std::size_t max_running) {
  require(max_running > 0, "schedule_step: max_running = 0; at least one sequence must be able to run");
  // The requests this step could admit, checked before anything changes: at most max_running join, each needs a
  // block of its own (its prompt goes past the whole blocks it may hold), and the preempted that go ahead of them
  // were running. A request further back is checked when it gets this far: a step costs what it runs, admits and
  // preempts, not the queue's length (checking all of it at every step made a long trace quadratic).
  const std::size_t window = std::min({waiting.size(), max_running, pool.total_blocks()});
  for (std::size_t i = 0; i < window; ++i) require_waiting(waiting[i], pool);
  StepPlan plan;
  // 1. Finished sequences leave, and their blocks go back to the pool.
  for (auto it = running.begin(); it != running.end();) {
    if (it->remaining > 0) {
      ++it;
      continue;
    }
    release_table(pool, it->table);
    plan.finished.push_back(it->id);
    it = running.erase(it);
  }
  // 2. Every running sequence decodes one token, oldest first; the youngest make room when blocks run out.
  for (std::size_t i = 0; i < running.size(); ++i) {
    std::optional<Slot> slot = append_slot(running[i].table, pool);
    while (!slot) {
      const bool self = i + 1 == running.size();
      preempt_youngest(pool, waiting, running, plan);
      if (self) break;  // it was the youngest: it waits now
      slot = append_slot(running[i].table, pool);
    }
    if (!slot) break;
    --running[i].remaining;
    plan.decoded.push_back(running[i].id);
  }
  // 3. Waiting requests join, first come first served, while their prompts fit.
  while (!waiting.empty() && running.size() < max_running) {
    Sequence& next = waiting.front();
    const std::size_t needed =
        blocks_for(next.table.length + next.prompt, pool.block_size()) - next.table.blocks.size();
    if (needed > pool.free_blocks()) break;
    for (std::size_t t = 0; t < next.prompt; ++t) append_slot(next.table, pool);  // fits: checked above
    --next.remaining;
    plan.admitted.push_back(next.id);
    running.push_back(std::move(next));
    waiting.pop_front();
  }
  return plan;
}
// [schedule_step]

// [lookup_prefix]
BlockTable lookup_prefix(PrefixCache& cache, const std::vector<TokenId>& prompt) {
  require(!prompt.empty(), "lookup_prefix: the prompt is empty (n = 0); a request has at least one token");
  const std::size_t B = cache.block_size();
  const std::size_t most = (prompt.size() - 1) / B;  // whole blocks that leave the last token to compute
  BlockTable table;
  std::uint64_t key = kNoParent;
  for (std::size_t k = 0; k < most; ++k) {
    key = block_hash(key, prompt, k * B, B);  // chained: the key of block k and everything before it
    const std::optional<BlockId> block = cache.find(key);
    if (!block) break;  // a miss ends the prefix: no later block can be the same prefix's
    cache.take(*block);
    table.blocks.push_back(*block);
    table.length += B;
  }
  return table;
}
// [lookup_prefix]

}  // namespace attn
