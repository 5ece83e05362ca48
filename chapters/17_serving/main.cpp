// Chapter 17 — Serving attention: a paged KV cache, continuous batching, split-KV decoding and shared prefixes.
//
// What it shows: a sequence's keys and values in fixed-size blocks found through its block table, a block allocated
// only when the last one is full; attention through a block table equal to contiguous attention for any block size
// and grouped heads; one long sequence's decode step split across threads and merged, equal to the unsplit one;
// two sequences sharing a prompt's blocks, and copy-on-write when one of them writes; a seeded request trace
// served under one memory budget (Llama-3-8B's KV shape) by static batching, by continuous batching that reserves
// each sequence's maximum, and by the learner's paged scheduler: the memory each wastes, the sequences each runs at
// once, tokens per step and latency in steps; the memory a shared system prompt saves for N requests; and chapter
// 12's trained model generating under paged continuous batching with a shared prefix, token for token as chapter
// 12's own forward pass generates one request at a time; a prefix cache (chained block keys, the learner's
// lookup_prefix(), LRU eviction) over shared system prompts and multi-turn conversations; and chunked prefill under a
// per-step token budget beside the other schedulers.
// Time is counted in scheduler steps here (the output is the same on every machine; the step clock charges no prefill,
// and the output says so); `ch17_serving bench` serves open-loop arrivals in seconds (TTFT, TPOT) and measures
// the paged decode's cost against the contiguous one at block sizes 8–128, split-KV decoding at batch 1 over
// 1K–128K tokens against chapter 09's kernel and the triad's bound, and real decode steps of the schedulers
// (bench.cpp; the recorded figures are on book/measure_17_serving.md).
// What it leaves out: a GPU, sampling other than greedy, swapping preempted blocks to host memory (recompute only),
// prefix sharing inside a block (only whole blocks are shared), speculative decoding and quantised caches.
// Run it: ./course run 17      Benchmarks: build/default/bin/ch17_serving bench
// Your code: ./course run 17 --track exercise      Book page: book/17_serving.md
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "09_mqa_gqa/mqa_gqa.hpp"
#include "12_learning/model.hpp"
#include "12_learning/train.hpp"
#include "17_serving/model_serving.hpp"
#include "17_serving/paged_decode.hpp"
#include "17_serving/prefix_cache.hpp"
#include "17_serving/serve_sim.hpp"
#include "17_serving/serving.hpp"
#include "17_serving/trace.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/random_heads.hpp"
#include "attn/rng.hpp"

namespace {

using attn::BlockTable;
using attn::fixed;
using attn::Matrix;
using attn::Tensor3;
namespace ch12 = attn::ch12;
namespace ch17 = attn::ch17;

/// The command line's settings.
struct Options {
  std::uint64_t seed = 17;
  std::size_t block_size = 16;   // B of the trace's paged scheduler
  std::size_t requests = 400;    // requests in the trace
  std::size_t train_steps = 60;  // chapter 12's training of the model the last part serves (it trains 800)
};

/// Llama-3-8B's KV shape: 32 layers, 8 KV heads of 128 (32 query heads share them), bf16: bytes per cached token.
constexpr std::size_t kLlamaLayers = 32, kLlamaKvHeads = 8, kLlamaQueryHeads = 32, kLlamaDk = 128;
constexpr std::size_t kLlamaBytesPerToken = 2 * kLlamaLayers * kLlamaKvHeads * kLlamaDk * 2;
constexpr std::size_t kBudgetBytes = std::size_t{16} << 30;   // the KV cache's memory budget: 16 GiB
constexpr std::size_t kMaxLen = 4096;                         // the longest sequence the server allows
constexpr std::size_t kMaxRunning = 256;                      // the most sequences in one batch
constexpr std::size_t kChunkTokens = 512;                     // chunked prefill: tokens a step computes at most
constexpr std::size_t kProofBlockSize = 4, kProofBlocks = 9;  // the pool chapter 12's model is served from

/// "3 4 7": the physical blocks of a table.
std::string blocks_of(const BlockTable& t) {
  std::vector<std::string> ids;
  for (const attn::BlockId b : t.blocks) ids.push_back(fmt::format("{}", b));
  return ids.empty() ? "-" : attn::joined(ids);
}

// --- 1. a block table, token by token ---------------------------------------------------------------------------

void print_block_table() {
  const std::size_t B = 4;
  attn::heading(fmt::format("A block table, token by token (B = {} tokens per block, a pool of 8 blocks)", B));
  attn::BlockAllocator pool(8, B);
  BlockTable a, b;
  attn::Table t({"token", "sequence", "slot (block, offset)", "its table", "free blocks", "slots held, unused"});
  t.set_left(1);
  // Two sequences grow in turns, so their blocks interleave in the pool: a table, not an address, finds them.
  for (std::size_t i = 0; i < 10; ++i) {
    const bool first = i % 3 != 2;
    BlockTable& s = first ? a : b;
    const std::optional<attn::Slot> slot = attn::append_slot(s, pool);
    t.add_row({fmt::format("{}", s.length - 1), first ? "A" : "B", fmt::format("({}, {})", slot->block, slot->offset),
               blocks_of(s), fmt::format("{}", pool.free_blocks()), fmt::format("{}", s.blocks.size() * B - s.length)});
  }
  t.print();
  fmt::print(
      "Token t of a sequence lives at offset t % B of its table's block t / B; a new block is taken from\n"
      "the pool only when the last one is full, so a sequence never holds more than B − 1 slots it does\n"
      "not use, however long it grows. A contiguous cache must reserve the longest length it may reach\n"
      "up front.\n");
}

// --- 2. attention through a block table ----------------------------------------------------------------------------

/// The tokens of K and V (g, n, d) written into a fresh table of \p cache, token by token.
BlockTable fill_table(attn::PagedKVCache& cache, const Tensor3& K, const Tensor3& V) {
  BlockTable table;
  for (std::size_t t = 0; t < K.shape(1); ++t) {
    const attn::Slot slot = *attn::append_slot(table, cache.pool());
    cache.write(0, slot.block, slot.offset, xt::view(K, xt::all(), t, xt::all()), xt::view(V, xt::all(), t, xt::all()));
  }
  return table;
}

// [paged_equals_contiguous]
void print_paged_equals_contiguous(std::uint64_t seed) {
  const std::size_t h = 8, n = 37, d = 16;
  attn::heading(
      fmt::format("Attention through a block table equals contiguous attention (h = {}, n = {}, d_k = {})", h, n, d));
  attn::Rng rng(seed);
  attn::Table t({"g (KV heads)", "B", "blocks", "|paged - contiguous|", "|fast paged - contiguous|"});
  for (std::size_t g : {h, std::size_t{2}, std::size_t{1}})
    for (std::size_t B : {1, 5, 16, 64}) {
      const Tensor3 Q = normal_heads(rng, h, 1, d), K = normal_heads(rng, g, n, d), V = normal_heads(rng, g, n, d);
      attn::PagedKVCache cache({1, g, d, d, B}, 4 * ((n + B - 1) / B) * attn::kv_block_bytes({1, g, d, d, B}, 4));
      for (std::size_t skip = 0; skip < (n + B - 1) / B; ++skip) cache.pool().allocate();  // scatter: not from 0
      const BlockTable table = fill_table(cache, K, V);
      const Matrix q = xt::view(Q, xt::all(), 0, xt::all());             // (h, d_k)
      const Tensor3 whole = attn::grouped_attention(Q, K, V);            // chapter 09: (h, 1, d_v)
      const Matrix expected = xt::view(whole, xt::all(), 0, xt::all());  // (h, d_v)
      const double slow = xt::amax(xt::abs(attn::paged_attention(cache, 0, table, q) - expected))();
      const double fast = xt::amax(xt::abs(ch17::paged_decode(cache, 0, table, q) - expected))();
      t.add_row({fmt::format("{}", g), fmt::format("{}", B), fmt::format("{}", table.blocks.size()),
                 slow < 1e-6 ? "< 1e-6" : attn::sci(slow, 1), fast < 1e-6 ? "< 1e-6" : attn::sci(fast, 1)});
    }
  t.print();
  fmt::print(
      "Against chapter 09's grouped attention over the same keys laid out contiguously: the block size, the\n"
      "blocks' places in the pool and the grouping of heads change where each key is read, not the result.\n");
}
// [paged_equals_contiguous]

// --- 3. split-KV decoding --------------------------------------------------------------------------------------------

void print_split_kv(std::uint64_t seed) {
  const std::size_t h = 32, g = 8, n = 2048, d = 128, B = 16;
  attn::heading(fmt::format("Split-KV decoding: one sequence of {} tokens cut among threads (h = {}, g = {}, d_k = {})",
                            n, h, g, d));
  attn::Rng rng(seed);
  const Tensor3 K = normal_heads(rng, g, n, d), V = normal_heads(rng, g, n, d);
  const Matrix q = rng.normal(h, d);  // (h, d_k)
  attn::PagedKVCache cache({1, g, d, d, B}, (n / B) * attn::kv_block_bytes({1, g, d, d, B}, 4));
  const BlockTable table = fill_table(cache, K, V);
  const Matrix whole = ch17::paged_decode(cache, 0, table, q);  // (h, d_v)
  attn::Table t({"splits", "blocks per split", "|split-KV - unsplit|", "parts merged by merge_splits: |diff|"});
  for (std::size_t splits : {1, 2, 4, 8, 64}) {
    const attn::FlashOutput split = ch17::split_kv_decode(cache, 0, table, q, splits, 2);
    std::vector<attn::FlashOutput> parts;
    for (std::size_t p = 0; p < splits; ++p)
      parts.push_back(ch17::paged_decode_range(cache, 0, table, q, p * n / splits, (p + 1) * n / splits));
    const double by_threads = xt::amax(xt::abs(split.O - whole))();
    const double by_learner = xt::amax(xt::abs(attn::merge_splits(parts).O - whole))();
    t.add_row({fmt::format("{}", splits), fmt::format("{}", n / B / splits), attn::sci(by_threads, 1),
               attn::sci(by_learner, 1)});
  }
  t.print();
  fmt::print(
      "Each split attends over its own keys and returns (O, lse); the merge weights part s by\n"
      "e^(lse_s − lse), its share of the softmax's denominator. At batch 1 a decode step has one sequence\n"
      "to work on: splitting its keys is what lets every core read memory at once. `ch17_serving bench`\n"
      "times it. Published: Flash-Decoding (Dao et al., 2023) reports up to 8× faster decoding of long\n"
      "sequences at batch 1 on a GPU.\n");
}

// --- 4. shared prefixes and copy-on-write ----------------------------------------------------------------------------

void print_copy_on_write() {
  const std::size_t B = 4;
  attn::heading("Two continuations of one prompt: shared blocks, then copy-on-write (B = 4)");
  attn::PagedKVCache cache({1, 1, 2, 2, B}, 8 * attn::kv_block_bytes({1, 1, 2, 2, B}, 4));
  BlockTable a;
  for (std::size_t t = 0; t < 6; ++t) {
    const attn::Slot s = *attn::append_slot(a, cache.pool());
    const Matrix kv = xt::ones<float>({std::size_t{1}, std::size_t{2}}) * static_cast<float>(t);  // (1, 2)
    cache.write(0, s.block, s.offset, kv, kv);
  }
  BlockTable b = attn::share_table(cache.pool(), a);
  attn::Table t({"event", "table A", "table B", "reference counts of A's blocks", "free blocks"});
  t.set_left(0);
  const auto row = [&](const std::string& what) {
    std::vector<std::string> refs;
    for (const attn::BlockId blk : a.blocks) refs.push_back(fmt::format("{}", cache.pool().ref_count(blk)));
    t.add_row({what, blocks_of(a), blocks_of(b), attn::joined(refs), fmt::format("{}", cache.pool().free_blocks())});
  };
  row("A prefilled 6 tokens; B shares them");
  attn::append_slot(b, cache.pool());
  attn::copy_on_write(cache, b, 1);
  row("B appends token 6: copies block 1");
  attn::append_slot(a, cache.pool());
  attn::copy_on_write(cache, a, 1);
  row("A appends token 6: block 1 is its own");
  t.print();
  fmt::print(
      "The full block 0 stays shared for good; the half-full block 1 is copied the first time one of them\n"
      "writes into it, and the other keeps the original, now held alone.\n");
}

/// Blocks held by N requests of prompt P + question U tokens each, without and with the prompt's blocks shared.
void print_prefix_sharing(const attn::Chapter& chapter) {
  const std::size_t B = 16, P = 1024, U = 64;
  attn::heading(fmt::format("N requests on one system prompt of {} tokens + {} of their own (B = {}, Llama-3-8B, bf16)",
                            P, U, B));
  attn::Table t({"N", "blocks, nothing shared", "blocks, prompt shared", "KV memory", "shared", "saved"});
  attn::Series alone{"every request its own blocks", {}, {}, true}, shared{"the prompt's blocks shared", {}, {}, true};
  for (std::size_t N : {1, 2, 4, 8, 16, 32, 64}) {
    attn::BlockAllocator pool(4096, B);
    BlockTable prompt;
    for (std::size_t i = 0; i < P; ++i) attn::append_slot(prompt, pool);  // prefilled once
    std::vector<BlockTable> requests;
    for (std::size_t r = 0; r < N; ++r) {
      requests.push_back(attn::share_table(pool, prompt));
      for (std::size_t i = 0; i < U; ++i) attn::append_slot(requests.back(), pool);  // P is whole blocks: no copy
    }
    attn::release_table(pool, prompt);
    const std::size_t own = N * ((P + U + B - 1) / B), used = pool.used_blocks();
    const double bytes_own = static_cast<double>(own * B * kLlamaBytesPerToken);
    const double bytes_shared = static_cast<double>(used * B * kLlamaBytesPerToken);
    t.add_row({fmt::format("{} requests", N), fmt::format("{}", own), fmt::format("{}", used),
               attn::human_bytes(bytes_own), attn::human_bytes(bytes_shared),
               fmt::format("{} %", fixed(100.0 * (1.0 - bytes_shared / bytes_own), 1))});
    alone.x.push_back(static_cast<double>(N));
    alone.y.push_back(bytes_own / (1 << 30));
    shared.x.push_back(static_cast<double>(N));
    shared.y.push_back(bytes_shared / (1 << 30));
  }
  t.print();
  fmt::print(
      "The prompt's {} blocks are computed and stored once, whatever N; each request adds only its own {}.\n"
      "The saving tends to P / (P + U) = {} % as N grows.\n",
      P / B, U / B, fixed(100.0 * static_cast<double>(P) / static_cast<double>(P + U), 1));
  if (const auto path = chapter.figure_path("ch17_prefix_sharing.svg")) {
    attn::write_svg_plot(*path, {"KV memory of N requests on one system prompt (Llama-3-8B, bf16)",
                                 "requests N",
                                 "GiB",
                                 true,
                                 false,
                                 {alone, shared}});
    chapter.announce_figure(*path);
  }
}

// --- 4b. a prefix cache over shared system prompts and conversations -------------------------------------------

/// What serving a conversation trace through a prefix cache did.
struct PrefixRun {
  std::size_t prompt_tokens = 0, found = 0, evictions = 0;
  double shared = 0.0;  // KV memory the running requests' tables share, averaged over admissions
};

// [prefix_trace]
/// Serves \p prompts (each a request's whole prompt, in arrival order, with the tokens it then generates) through a
/// prefix cache over \p blocks blocks of \p B tokens, at most \p alive requests at once (the oldest leaves first).
PrefixRun serve_with_prefix_cache(const std::vector<std::vector<attn::TokenId>>& prompts,
                                  const std::vector<std::vector<attn::TokenId>>& answers, std::size_t blocks,
                                  std::size_t B, std::size_t alive) {
  attn::BlockAllocator pool(blocks, B);
  attn::PrefixCache cache(pool);
  std::vector<BlockTable> running;  // oldest first
  PrefixRun run;
  std::size_t admissions = 0;
  const auto grow = [&](BlockTable& t, std::size_t tokens) {  // the table's slots for `tokens` more tokens
    for (std::size_t i = 0; i < tokens; ++i, ++t.length) {
      if (t.length % B != 0) continue;
      std::optional<attn::BlockId> b = cache.allocate();
      while (!b && !running.empty()) {  // the pool is full of held blocks: the oldest request leaves
        cache.release(running.front());
        running.erase(running.begin());
        b = cache.allocate();
      }
      t.blocks.push_back(*b);  // one request alone always fits (checked by the caller's sizes)
    }
  };
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    if (running.size() == alive) {
      cache.release(running.front());
      running.erase(running.begin());
    }
    BlockTable t = attn::lookup_prefix(cache, prompts[r]);  // the blocks already computed, taken
    run.prompt_tokens += prompts[r].size();
    run.found += t.length;
    grow(t, prompts[r].size() - t.length);  // the rest is prefilled
    std::vector<attn::TokenId> all = prompts[r];
    all.insert(all.end(), answers[r].begin(), answers[r].end());
    grow(t, answers[r].size());  // and generated
    cache.insert(t, all);        // its full blocks, the answer's included: the next turn starts with them
    running.push_back(std::move(t));
    std::size_t unshared = 0;  // blocks the tables would hold with nothing shared
    for (const BlockTable& x : running) unshared += x.blocks.size();
    run.shared += 1.0 - static_cast<double>(pool.used_blocks() - cache.evictable()) / static_cast<double>(unshared);
    ++admissions;
  }
  run.evictions = cache.evictions();
  run.shared /= static_cast<double>(admissions);
  return run;
}
// [prefix_trace]

void print_prefix_cache(std::uint64_t seed) {
  const std::size_t B = 16, systems = 4, system_len = 512, conversations = 24, turns = 4, alive = 8;
  attn::heading(
      fmt::format("A prefix cache over {} system prompts of {} tokens and {} conversations of {} turns (B = {})",
                  systems, system_len, conversations, turns, B));
  attn::Rng rng(seed);
  std::uniform_int_distribution<attn::TokenId> token(0, 31999);
  std::uniform_int_distribution<std::size_t> user_len(32, 96), answer_len(32, 128);
  const auto words = [&](std::size_t n) {
    std::vector<attn::TokenId> w(n);
    for (auto& x : w) x = token(rng.engine());
    return w;
  };
  std::vector<std::vector<attn::TokenId>> system(systems), history(conversations);
  for (auto& p : system) p = words(system_len);
  for (std::size_t c = 0; c < conversations; ++c) history[c] = system[c % systems];
  std::vector<std::vector<attn::TokenId>> prompts, answers;  // turn by turn, every conversation's turn t together
  for (std::size_t turn = 0; turn < turns; ++turn)
    for (std::size_t c = 0; c < conversations; ++c) {
      const std::vector<attn::TokenId> user = words(user_len(rng.engine()));
      history[c].insert(history[c].end(), user.begin(), user.end());
      prompts.push_back(history[c]);
      answers.push_back(words(answer_len(rng.engine())));
      history[c].insert(history[c].end(), answers.back().begin(), answers.back().end());
    }
  attn::Table t({"pool (blocks)", "evicted", "prompt tokens found cached", "prefill computed", "KV memory shared"});
  for (const std::size_t blocks : {4096, 1024, 512, 256}) {
    const PrefixRun r = serve_with_prefix_cache(prompts, answers, blocks, B, alive);
    t.add_row(
        {fmt::format("{}", blocks), fmt::format("{}", r.evictions),
         fmt::format("{} %", fixed(100.0 * static_cast<double>(r.found) / static_cast<double>(r.prompt_tokens), 1)),
         fmt::format("{} of {}", r.prompt_tokens - r.found, r.prompt_tokens),
         fmt::format("{} %", fixed(100.0 * r.shared, 1))});
  }
  t.print();
  fmt::print(
      "{} requests, at most {} at once. Each request looks its prompt up at admission (lookup_prefix()):\n"
      "the system prompt's blocks, and in later turns the whole conversation so far, are found and not\n"
      "prefilled again. KV memory shared is 1 − blocks held / blocks the running requests' tables list,\n"
      "averaged over admissions. A small pool evicts the least recently used blocks no request holds, and\n"
      "what is evicted is computed again. Published: SGLang's RadixAttention (Zheng et al., 2024) reports\n"
      "up to 6.4× the throughput of earlier systems on workloads of shared prefixes.\n",
      prompts.size(), alive);
}

// --- 5. serving a trace ----------------------------------------------------------------------------------------------

// [serve_trace]
void print_serving(const attn::Chapter& chapter, const Options& o) {
  ch17::TraceSpec spec;
  spec.requests = o.requests;
  spec.seed = o.seed;
  const std::vector<ch17::Request> trace = ch17::request_trace(spec);
  const std::size_t budget_tokens = kBudgetBytes / kLlamaBytesPerToken;
  attn::heading(fmt::format("Serving {} requests under one KV budget: {} of Llama-3-8B's cache = {} tokens",
                            trace.size(), attn::human_bytes(static_cast<double>(kBudgetBytes)), budget_tokens));
  fmt::print(
      "Arrivals: a Poisson process of {} per step; prompts ~ Uniform{{{} … {}}} tokens; outputs ~\n"
      "Geometric with mean {} tokens, at most {}. Reserving schedulers set aside max_len = {} slots\n"
      "per sequence.\n\n",
      spec.arrivals_per_step, spec.prompt_min, spec.prompt_max, spec.output_mean, spec.output_max, kMaxLen);
  struct Run {
    std::string name;
    ch17::ServeStats stats;
  };
  const std::size_t B = o.block_size;
  const std::vector<Run> runs{
      {"static, reserve max", ch17::serve_reserving(trace, ch17::Batching::fixed, budget_tokens, kMaxLen, kMaxRunning)},
      {"continuous, reserve max",
       ch17::serve_reserving(trace, ch17::Batching::continuous, budget_tokens, kMaxLen, kMaxRunning)},
      {fmt::format("continuous, paged B = {}", B), ch17::serve_paged(trace, budget_tokens / B, B, kMaxRunning)},
      {fmt::format("paged, chunks of {}", kChunkTokens),
       ch17::serve_chunked(trace, budget_tokens / B, B, kMaxRunning, kChunkTokens)}};
  attn::Table t({"scheduler", "steps", "tokens/step", "latency", "p90", "most", "KV wasted", "preempted", "prefilled"});
  t.set_left(0);
  for (const Run& r : runs)
    t.add_row({r.name, fmt::format("{}", r.stats.steps), fixed(r.stats.tokens_per_step(), 1),
               fixed(ch17::latency_mean(r.stats.latency), 0),
               fmt::format("{}", ch17::latency_quantile(r.stats.latency, 0.9)), fmt::format("{}", r.stats.most_running),
               fmt::format("{} %", fixed(100.0 * r.stats.waste(), 1)), fmt::format("{}", r.stats.preemptions),
               fmt::format("{}", r.stats.prefilled)});
  t.print();
  double prompt_tokens = 0.0, output_tokens = 0.0;
  for (const ch17::Request& r : trace)
    prompt_tokens += static_cast<double>(r.prompt), output_tokens += static_cast<double>(r.output);
  double most_per_step = 0.0;
  for (const Run& r : runs) most_per_step = std::max(most_per_step, r.stats.tokens_per_step());
  fmt::print(
      "The trace asks for {} tokens a step ({} arrivals a step, {} tokens out each on average); the\n"
      "fastest scheduler here generates {}: every queue grows for the whole trace, so these latencies are\n"
      "mostly waiting, and the trace measures throughput under overload. Prefilled counts the prompt tokens\n"
      "each computed ({} in the trace), recomputed ones included: the step clock charges none of them.\n"
      "Chunked prefill bounds a step's tokens; its effect is in seconds (`ch17_serving bench`). Published:\n"
      "Sarathi-Serve (Agrawal et al., OSDI 2024) reports up to 2.6× the serving capacity of vLLM under a\n"
      "latency target for Mistral-7B on one A100.\n",
      fixed(spec.arrivals_per_step * output_tokens / static_cast<double>(trace.size()), 0), spec.arrivals_per_step,
      fixed(output_tokens / static_cast<double>(trace.size()), 0), fixed(most_per_step, 1), fixed(prompt_tokens, 0));
  fmt::print(
      "Latency (mean and 90th percentile) is in steps from arrival to the last token; most is the largest\n"
      "batch; tokens/step is also the mean batch (each running sequence makes one token per step); KV\n"
      "wasted is the share of the memory held that holds no token, averaged over time. Continuous batching\n"
      "stops waiting for a batch's longest member; paging stops reserving for the longest possible output,\n"
      "so the same budget runs more sequences at once. Published: PagedAttention (Kwon et al., SOSP 2023)\n"
      "found 60–80 % of KV memory wasted in systems that reserve, and under 4 % with paging; Orca (Yu et\n"
      "al., OSDI 2022) introduced scheduling at the granularity of one step.\n");
  // [serve_trace]

  attn::heading("KV memory wasted and sequences running, against the block size (same trace and budget)");
  attn::Table w({"scheduler", "KV wasted", "running (mean)", "most", "tokens/step", "preempted"});
  w.set_left(0);
  attn::Series waste{"paged", {}, {}, true}, reserve{"reserve max", {}, {}, true};
  const ch17::ServeStats& orca = runs[1].stats;
  w.add_row({"reserve max", fmt::format("{} %", fixed(100.0 * orca.waste(), 1)), fixed(orca.mean_running, 1),
             fmt::format("{}", orca.most_running), fixed(orca.tokens_per_step(), 1), "0"});
  for (std::size_t b : {8, 16, 32, 64, 128}) {
    const ch17::ServeStats s = ch17::serve_paged(trace, budget_tokens / b, b, kMaxRunning);
    w.add_row({fmt::format("paged, B = {}", b), fmt::format("{} %", fixed(100.0 * s.waste(), 2)),
               fixed(s.mean_running, 1), fmt::format("{}", s.most_running), fixed(s.tokens_per_step(), 1),
               fmt::format("{}", s.preemptions)});
    waste.x.push_back(static_cast<double>(b));
    waste.y.push_back(100.0 * s.waste());
    reserve.x.push_back(static_cast<double>(b));
    reserve.y.push_back(100.0 * orca.waste());
  }
  w.print();
  fmt::print(
      "Paging wastes at most B − 1 slots per sequence, so the waste grows with B but stays a small share\n"
      "of a sequence hundreds of tokens long; reserving wastes whatever the output did not use of max_len.\n");
  if (const auto path = chapter.figure_path("ch17_kv_waste.svg")) {
    attn::write_svg_plot(*path, {"KV memory held but holding no token",
                                 "block size B (tokens)",
                                 "% of the memory held",
                                 true,
                                 true,
                                 {reserve, waste}});
    chapter.announce_figure(*path);
  }
}

// --- 6. the model as proof ---------------------------------------------------------------------------------------

// [model_proof]
void print_model_proof(const Options& o) {
  ch12::TrainSettings s;  // chapter 12's model and training, shortened: the proof needs a model, not the best one
  s.steps = o.train_steps;
  const ch12::Model model = ch12::train_induction(ch12::Config{}, s).model;
  attn::heading(fmt::format("Chapter 12's model ({} layers of {} heads) served: paged, batched, a shared prefix",
                            model.config.layers, model.config.heads));
  // A system prompt of distinct tokens, then each request's own start of a repeat of it: an induction model copies.
  attn::Rng rng(o.seed);
  std::vector<std::size_t> system(model.config.vocab);
  for (std::size_t i = 0; i < system.size(); ++i) system[i] = i;
  std::shuffle(system.begin(), system.end(), rng.engine());
  system.resize(12);
  std::vector<ch17::Prompt> prompts;
  for (std::size_t r = 0; r < 6; ++r) {
    ch17::Prompt p{system, 3 + (r * 5) % 7};
    for (std::size_t i = 0; i < 2 + r % 3; ++i) p.tokens.push_back(system[(r + i) % system.size()]);
    prompts.push_back(p);
  }
  const std::vector<std::vector<std::size_t>> alone = ch17::generate_one_at_a_time(model, prompts);
  ch17::ModelServeLog log;
  const std::vector<std::vector<std::size_t>> batched =
      ch17::generate_batched(model, prompts, kProofBlockSize, kProofBlocks, /*max_running=*/4, log);
  attn::Table t({"request", "after the shared 12", "generated, batched and paged", "one at a time", "same"});
  t.set_left(1);
  std::size_t same = 0;
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto words = [](const std::vector<std::size_t>& v, std::size_t from) {
      std::vector<std::string> w;
      for (std::size_t i = from; i < v.size(); ++i) w.push_back(fmt::format("{}", v[i]));
      return attn::joined(w);
    };
    same += batched[r] == alone[r];
    t.add_row({fmt::format("{}", r), words(prompts[r].tokens, 12), words(batched[r], 0), words(alone[r], 0),
               batched[r] == alone[r] ? "yes" : "NO"});
  }
  t.print();
  std::vector<std::string> system_words;
  for (const std::size_t x : system) system_words.push_back(fmt::format("{}", x));
  fmt::print(
      "The shared system prompt: {}.\n"
      "{} of {} requests generate the same tokens both ways. The batched run took {} steps with at most {}\n"
      "sequences at once and {} preempted (recomputed), in a pool of {} blocks of {} tokens; the prompt's {}\n"
      "whole blocks were computed once and shared by every request. The model trained for {} steps only:\n"
      "what it says matters less here than that both ways say the same.\n",
      attn::joined(system_words), same, prompts.size(), log.steps, log.most_running, log.preemptions, kProofBlocks,
      kProofBlockSize, log.shared_blocks, o.train_steps);
}
// [model_proof]

void tell_the_story(const attn::Chapter& chapter, const Options& o) {
  print_block_table();
  print_paged_equals_contiguous(o.seed);
  print_split_kv(o.seed + 1);
  print_copy_on_write();
  print_prefix_sharing(chapter);
  print_prefix_cache(o.seed + 2);
  print_serving(chapter, o);
  print_model_proof(o);
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter(
      "ch17_serving", "Chapter 17: serving attention — paged KV cache, continuous batching, split-KV, shared prefixes");
  Options o;
  chapter.cli().add_option("--seed", o.seed, "Seed of the random examples, the trace and the prompts");
  chapter.cli()
      .add_option("--block-size", o.block_size, "Tokens per block of the trace's paged scheduler")
      ->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--requests", o.requests, "Requests in the trace")->check(CLI::Range(1, 100000));
  chapter.cli()
      .add_option("--train-steps", o.train_steps, "Training steps of chapter 12's model, served in the last part")
      ->check(CLI::Range(1, 100000));
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, o); });
}
