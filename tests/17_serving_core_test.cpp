// Chapter 17's own code on bad input and at its edges: the pool's bookkeeping, the blocks' storage, the fast paged
// decode, split-KV decoding, the request trace and the schedulers that serve it, and the model served on them.
// Solution track only (the chapter's code does not change with the learner's).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "12_learning/model.hpp"
#include "17_serving/model_serving.hpp"
#include "17_serving/paged_decode.hpp"
#include "17_serving/serve_sim.hpp"
#include "17_serving/trace.hpp"
#include "attn/rng.hpp"
#include "support/throws.hpp"

namespace {

using attn::BlockAllocator;
using attn::BlockTable;
using attn::KvShape;
using attn::Matrix;
using attn::PagedKVCache;
namespace ch17 = attn::ch17;

PagedKVCache cache_of(std::size_t blocks, std::size_t B = 4) {
  const KvShape shape{2, 2, 4, 3, B};
  return PagedKVCache(shape, blocks * attn::kv_block_bytes(shape, sizeof(float)));
}

/// A table of n tokens of random keys and values in layer 0 of \p cache.
BlockTable filled(PagedKVCache& cache, std::size_t n, attn::Rng& rng) {
  BlockTable t;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % cache.shape().block_size == 0) t.blocks.push_back(*cache.pool().allocate());
    cache.write(0, t.blocks.back(), i % cache.shape().block_size, rng.normal(2, 4), rng.normal(2, 3));
    ++t.length;
  }
  return t;
}

}  // namespace

TEST_SUITE("17_serving: chapter code") {
  TEST_CASE("the block allocator refuses empty pools, double frees and blocks that do not exist, naming them") {
    CHECK_THROWS_NAMING(BlockAllocator(0, 4), std::invalid_argument, "blocks", "0");
    CHECK_THROWS_NAMING(BlockAllocator(4, 0), std::invalid_argument, "block_size", "0");
    BlockAllocator pool(2, 4);
    const attn::BlockId a = *pool.allocate();
    CHECK(a == 0);
    CHECK_THROWS_NAMING(pool.retain(1), std::invalid_argument, "1");  // free
    CHECK_THROWS_NAMING(pool.ref_count(9), std::invalid_argument, "9");
    pool.retain(a);
    CHECK(pool.ref_count(a) == 2);
    pool.release(a);
    pool.release(a);
    CHECK(pool.free_blocks() == 2);
    CHECK_THROWS_NAMING(pool.release(a), std::invalid_argument, "0");  // a double free
    CHECK(pool.allocate().has_value());
    CHECK(pool.allocate().has_value());
    CHECK_FALSE(pool.allocate().has_value());
  }

  TEST_CASE("release_table and share_table refuse a table that points at a free block, leaving the pool as it was") {
    BlockAllocator pool(4, 2);
    BlockTable t{{*pool.allocate(), *pool.allocate()}, 3};
    BlockTable stale{{t.blocks[0], 3}, 3};  // block 3 was never handed out
    CHECK_THROWS_NAMING(attn::release_table(pool, stale), std::invalid_argument, "3");
    CHECK(pool.ref_count(t.blocks[0]) == 1);
    CHECK_THROWS_NAMING(attn::share_table(pool, stale), std::invalid_argument, "3");
    CHECK(pool.ref_count(t.blocks[0]) == 1);
    BlockTable u = attn::share_table(pool, t);
    CHECK(pool.ref_count(t.blocks[1]) == 2);
    attn::release_table(pool, t);
    CHECK(t.blocks.empty());
    CHECK(t.length == 0);
    CHECK(pool.used_blocks() == 2);
    attn::release_table(pool, u);
    CHECK(pool.free_blocks() == 4);
  }

  TEST_CASE("kv_block_bytes counts a block's keys and values, and refuses a zero or a product past 64 bits") {
    CHECK(attn::kv_block_bytes({32, 8, 128, 128, 16}, 2) == std::size_t{16} * 32 * 8 * 256 * 2);
    CHECK_THROWS_NAMING(attn::kv_block_bytes({1, 0, 4, 4, 4}, 4), std::invalid_argument, "kv_heads");
    const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
    CHECK_THROWS_AS(attn::kv_block_bytes({huge, 4, 4, 4, 4}, 4), std::invalid_argument);
  }

  TEST_CASE("the paged cache refuses a budget that holds no block and sizes too large to allocate, before allocating") {
    const KvShape shape{1, 1, 4, 4, 4};
    CHECK_THROWS_NAMING(PagedKVCache(shape, 10), std::invalid_argument, "10", "128");
    CHECK_THROWS_AS(PagedKVCache(shape, std::size_t{1} << 62), std::invalid_argument);
    CHECK_THROWS_AS(PagedKVCache({0, 1, 4, 4, 4}, 1024), std::invalid_argument);
    const PagedKVCache c(shape, 300);  // two blocks of 128 bytes
    CHECK(c.pool().total_blocks() == 2);
    CHECK(c.bytes() == 256);
  }

  TEST_CASE("the paged cache refuses writes into free or shared blocks, bad offsets, layers and shapes, unchanged") {
    PagedKVCache cache = cache_of(4);
    const attn::BlockId b = *cache.pool().allocate();
    const Matrix k = xt::ones<float>({2, 4}), v = xt::ones<float>({2, 3});
    CHECK_THROWS_NAMING(cache.write(0, 1, 0, k, v), std::invalid_argument, "1", "0");  // free
    cache.pool().retain(b);
    CHECK_THROWS_NAMING(cache.write(0, b, 0, k, v), std::invalid_argument, "0", "2");  // shared: count 2
    cache.pool().release(b);
    CHECK_THROWS_NAMING(cache.write(0, b, 4, k, v), std::invalid_argument, "4");
    CHECK_THROWS_NAMING(cache.write(2, b, 0, k, v), std::invalid_argument, "2");
    CHECK_THROWS_NAMING(cache.write(0, b, 0, xt::ones<float>({2, 5}), v), std::invalid_argument, "5");
    CHECK(cache.keys(0, b, 0)[0] == 0.0f);  // nothing was written
    CHECK_THROWS_NAMING(cache.keys(0, b, 2), std::invalid_argument, "2");
    CHECK_THROWS_NAMING(cache.values(0, 7, 0), std::invalid_argument, "7");
    cache.write(1, b, 3, k, v);
    CHECK(cache.keys(1, b, 1)[3 * 4] == 1.0f);
    CHECK(cache.values(1, b, 1)[3 * 3 + 2] == 1.0f);
  }

  TEST_CASE("copy_block copies the rows asked for, every layer and head, and refuses free, equal or missing blocks") {
    PagedKVCache cache = cache_of(4);
    attn::Rng rng(1);
    const BlockTable t = filled(cache, 3, rng);
    const attn::BlockId to = *cache.pool().allocate();
    cache.copy_block(t.blocks[0], to, 2);
    for (std::size_t c = 0; c < 2 * 4; ++c) CHECK(cache.keys(0, to, 1)[c] == cache.keys(0, t.blocks[0], 1)[c]);
    CHECK(cache.keys(0, to, 1)[2 * 4] == 0.0f);  // row 2 was not asked for
    CHECK_THROWS_NAMING(cache.copy_block(t.blocks[0], t.blocks[0], 1), std::invalid_argument, "0");
    CHECK_THROWS_NAMING(cache.copy_block(t.blocks[0], 3, 1), std::invalid_argument, "3");
    CHECK_THROWS_NAMING(cache.copy_block(t.blocks[0], 9, 1), std::invalid_argument, "9");
    CHECK_THROWS_NAMING(cache.copy_block(t.blocks[0], to, 5), std::invalid_argument, "5");
  }

  TEST_CASE("the fast paged decode refuses bad shapes, groups, ranges, tables and a NaN query, naming them") {
    PagedKVCache cache = cache_of(4);
    attn::Rng rng(2);
    const BlockTable t = filled(cache, 6, rng);
    CHECK_THROWS_NAMING(ch17::paged_decode(cache, 0, t, rng.normal(4, 5)), std::invalid_argument, "5");
    CHECK_THROWS_NAMING(ch17::paged_decode(cache, 0, t, rng.normal(3, 4)), std::invalid_argument, "3", "2");
    CHECK_THROWS_NAMING(ch17::paged_decode(cache, 0, BlockTable{}, rng.normal(4, 4)), std::invalid_argument, "0");
    CHECK_THROWS_NAMING(ch17::paged_decode(cache, 5, t, rng.normal(4, 4)), std::invalid_argument, "5");
    CHECK_THROWS_NAMING(ch17::paged_decode_range(cache, 0, t, rng.normal(4, 4), 4, 2), std::invalid_argument, "4", "2");
    CHECK_THROWS_NAMING(ch17::paged_decode_range(cache, 0, t, rng.normal(4, 4), 0, 7), std::invalid_argument, "7");
    BlockTable short_table{{t.blocks[0]}, 6};
    CHECK_THROWS_NAMING(ch17::paged_decode_range(cache, 0, short_table, rng.normal(4, 4), 0, 1), std::invalid_argument,
                        "6", "1");
    Matrix q = rng.normal(4, 4);
    q(1, 1) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(ch17::paged_decode(cache, 0, t, q), std::invalid_argument, "q");
    CHECK_THROWS_NAMING(ch17::split_kv_decode(cache, 0, t, rng.normal(4, 4), 0, 2), std::invalid_argument, "splits");
    CHECK_THROWS_NAMING(ch17::split_kv_decode(cache, 0, t, rng.normal(4, 4), 2, 0), std::invalid_argument, "threads");
    // An error inside a worker thread reaches the caller.
    CHECK_THROWS_NAMING(ch17::split_kv_decode(cache, 0, t, q, 2, 2), std::invalid_argument, "q");
  }

  TEST_CASE("request_trace is the same every run, within its distributions' ranges, and refuses bad fields") {
    ch17::TraceSpec s;
    s.requests = 500;
    const auto a = ch17::request_trace(s), b = ch17::request_trace(s);
    REQUIRE(a.size() == 500);
    double prompts = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].arrival == b[i].arrival);
      CHECK(a[i].prompt == b[i].prompt);
      CHECK(a[i].output == b[i].output);
      CHECK(a[i].prompt >= s.prompt_min);
      CHECK(a[i].prompt <= s.prompt_max);
      CHECK(a[i].output >= 1);
      CHECK(a[i].output <= s.output_max);
      if (i > 0) CHECK(a[i].arrival >= a[i - 1].arrival);
      prompts += static_cast<double>(a[i].prompt);
    }
    CHECK(prompts / 500.0 == doctest::Approx(528.0).epsilon(0.05));  // Uniform{32 … 1024}: mean 528
    ch17::TraceSpec bad = s;
    bad.requests = 0;
    CHECK_THROWS_NAMING(ch17::request_trace(bad), std::invalid_argument, "requests");
    bad = s;
    bad.arrivals_per_step = -1;
    CHECK_THROWS_NAMING(ch17::request_trace(bad), std::invalid_argument, "arrivals_per_step");
    bad = s;
    bad.prompt_min = 2000;
    CHECK_THROWS_NAMING(ch17::request_trace(bad), std::invalid_argument, "prompt_min", "2000");
    bad = s;
    bad.output_mean = 0.5;
    CHECK_THROWS_NAMING(ch17::request_trace(bad), std::invalid_argument, "output_mean");
  }

  TEST_CASE("latency statistics refuse no latencies and a quantile outside [0, 1]") {
    CHECK(ch17::latency_mean({1, 2, 6}) == doctest::Approx(3.0));
    CHECK(ch17::latency_quantile({5, 1, 3, 2, 4}, 0.9) == 5);
    CHECK(ch17::latency_quantile({5, 1, 3, 2, 4}, 0.0) == 1);
    CHECK_THROWS_AS(ch17::latency_mean({}), std::invalid_argument);
    CHECK_THROWS_AS(ch17::latency_quantile({}, 0.5), std::invalid_argument);
    CHECK_THROWS_NAMING(ch17::latency_quantile({1}, 1.5), std::invalid_argument, "1.5");
  }

  TEST_CASE("the schedulers refuse budgets that hold no sequence and requests that cannot fit, naming them") {
    const std::vector<ch17::Request> trace{{0, 0, 10, 5}, {1, 1, 100, 100}};
    CHECK_THROWS_NAMING(ch17::serve_reserving(trace, ch17::Batching::fixed, 1000, 150, 4), std::invalid_argument, "1");
    CHECK_THROWS_NAMING(ch17::serve_reserving(trace, ch17::Batching::fixed, 100, 200, 4), std::invalid_argument, "100",
                        "200");
    CHECK_THROWS_NAMING(ch17::serve_reserving(trace, ch17::Batching::continuous, 1000, 200, 0), std::invalid_argument,
                        "max_running");
    CHECK_THROWS_NAMING(ch17::serve_paged(trace, 10, 4, 4), std::invalid_argument, "1");  // 199 tokens: 50 blocks
    CHECK_THROWS_AS(ch17::serve_paged(trace, 0, 4, 4), std::invalid_argument);
    // Static batching never overlaps two batches; a continuous scheduler ends no later.
    const ch17::ServeStats fixed = ch17::serve_reserving(trace, ch17::Batching::fixed, 400, 200, 1);
    CHECK(fixed.generated == 105);
    CHECK(fixed.most_running == 1);
  }

  TEST_CASE("each scheduler's steps, as its observer sees them, add up to the tokens it generated") {
    // Every token generated is a decode (one per running sequence per step) or a prefill's first token (one per
    // admission), and every request finishes once: the timed benchmark runs exactly this work.
    ch17::TraceSpec spec;
    spec.requests = 30;
    spec.prompt_min = 4;
    spec.prompt_max = 40;
    spec.output_mean = 12.0;
    spec.output_max = 40;
    const std::vector<ch17::Request> trace = ch17::request_trace(spec);
    for (int which = 0; which < 3; ++which) {
      CAPTURE(which);
      std::size_t decoded = 0, admitted = 0, prefilled = 0, finished = 0, steps = 0, attended = 0;
      const ch17::StepObserver count = [&](const ch17::StepWork& w) {
        ++steps;
        decoded += w.decode_lengths.size();
        admitted += w.prefill_prompts.size();
        finished += w.finished.size();
        for (const std::size_t n : w.decode_lengths) attended += n;
        for (const std::size_t p : w.prefill_prompts) prefilled += p;
      };
      const ch17::ServeStats st =
          which == 2 ? ch17::serve_paged(trace, 400 / 8, 8, 6, count)
                     : ch17::serve_reserving(trace, which == 0 ? ch17::Batching::fixed : ch17::Batching::continuous,
                                             400, 80, 6, count);
      CHECK(decoded + admitted == st.generated);
      CHECK(finished == trace.size());
      CHECK(steps == st.steps + 1);  // the last step only saw the last sequences leave
      CHECK(decoded > 0);
      CHECK(attended > decoded);  // a decode attends to its cached tokens and its own
      std::size_t prompts = 0;
      for (const ch17::Request& r : trace) prompts += r.prompt;
      CHECK(prefilled >= prompts);  // more after a preemption: its tokens are prefilled again
    }
  }

  TEST_CASE("serving chapter 12's model refuses empty prompts, zero tokens and prompts past its context") {
    const attn::ch12::Model model = attn::ch12::init_model(attn::ch12::Config{}, 3);
    ch17::ModelServeLog log;
    const std::vector<ch17::Prompt> empty{{{}, 2}};
    CHECK_THROWS_NAMING(ch17::generate_one_at_a_time(model, empty), std::invalid_argument, "0");
    CHECK_THROWS_NAMING(ch17::generate_batched(model, empty, 4, 8, 2, log), std::invalid_argument, "0");
    const std::vector<ch17::Prompt> none{{{1, 2}, 0}};
    CHECK_THROWS_AS(ch17::generate_batched(model, none, 4, 8, 2, log), std::invalid_argument);
    const std::vector<ch17::Prompt> too_long{{std::vector<std::size_t>(30, 1), 5}};  // 34 of a context of 32
    CHECK_THROWS_NAMING(ch17::generate_one_at_a_time(model, too_long), std::invalid_argument, "30", "5");
    const std::vector<ch17::Prompt> fine{{{1, 2, 3}, 2}, {{1, 2, 4}, 3}};
    CHECK_THROWS_AS(ch17::generate_batched(model, fine, 4, 1, 2, log), std::invalid_argument);  // a block too few
    CHECK(ch17::generate_batched(model, fine, 4, 8, 2, log) == ch17::generate_one_at_a_time(model, fine));
  }
}
