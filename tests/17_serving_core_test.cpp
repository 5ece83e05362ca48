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
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::BlockAllocator;
using attn::BlockTable;
using attn::KvShape;
using attn::Matrix;
using attn::PagedKVCache;
namespace ch17 = attn::ch17;
namespace hostile = attn::test::hostile;

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
        admitted += w.prefills.size();
        finished += w.finished.size();
        for (const std::size_t n : w.decode_lengths) attended += n;
        for (const ch17::PrefillChunk& c : w.prefills) prefilled += c.tokens;
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

  TEST_CASE("the fast paged decode refuses a length whose blocks' ceiling (length + B - 1) / B would wrap, naming it") {
    PagedKVCache cache = cache_of(4);
    attn::Rng rng(1760);
    const Matrix q = rng.normal(4, 4);
    // SIZE_MAX − 1 tokens need 2^62 blocks of 4; (length + 3) / 4 wraps to 0, the table's count, and blocks[0] was
    // read.
    const BlockTable none{{}, std::numeric_limits<std::size_t>::max() - 1};
    CHECK_THROWS_NAMING(ch17::paged_decode_range(cache, 0, none, q, 0, 5), std::invalid_argument,
                        "18446744073709551614");
    CHECK_THROWS_NAMING(ch17::paged_decode(cache, 0, none, q), std::invalid_argument, "18446744073709551614");
    CHECK_THROWS_NAMING(ch17::split_kv_decode(cache, 0, none, q, 2, 2), std::invalid_argument, "18446744073709551614");
  }

  TEST_CASE("the fast paged decode names the values, not a score, when only the values' unnormalised sum overflows") {
    PagedKVCache cache = cache_of(4);
    attn::Rng rng(1761);
    BlockTable t;
    for (std::size_t i = 0; i < 6; ++i) {  // keys N(0, 1), values 2e38 … 3e38: finite, as the cache holds
      if (i % 4 == 0) t.blocks.push_back(*cache.pool().allocate());
      cache.write(0, t.blocks.back(), i % 4, rng.normal(2, 4),
                  xt::ones<float>({2, 3}) * (2e38f + 1e37f * static_cast<float>(i)));
      ++t.length;
    }
    const Matrix q = xt::zeros<float>({4, 4});  // every score 0: no score can overflow, the six weights are 1 each
    const auto message_of = [](const auto& call) -> std::string {
      try {
        call();
      } catch (const std::invalid_argument& e) {
        return e.what();
      }
      return "(answered)";
    };
    for (const std::string& m : {message_of([&] { ch17::paged_decode(cache, 0, t, q); }),
                                 message_of([&] { ch17::paged_decode_range(cache, 0, t, q, 0, 6); }),
                                 message_of([&] { ch17::split_kv_decode(cache, 0, t, q, 2, 2); })}) {
      CAPTURE(m);
      CHECK(attn::test::detail::names_word(m, "values"));
      CHECK(m.find("score") == std::string::npos);
    }
  }

  TEST_CASE("release_table of a table that lists a block twice but holds it once refuses, the pool unchanged") {
    BlockAllocator pool(4, 2);
    const attn::BlockId b = *pool.allocate();
    BlockTable twice{{b, b}, 4};
    CHECK_THROWS_NAMING(attn::release_table(pool, twice), std::invalid_argument, "0", "2", "1");
    CHECK(pool.ref_count(b) == 1);  // released once before the second release refused: the block was freed
    CHECK(pool.free_blocks() == 3);
    CHECK(twice.blocks.size() == 2);
    pool.retain(b);  // held twice now: the table's two entries are two references
    attn::release_table(pool, twice);
    CHECK(pool.free_blocks() == 4);
  }

  TEST_CASE("copy_block says which of its two blocks is free") {
    PagedKVCache cache = cache_of(4);
    const attn::BlockId held = *cache.pool().allocate();
    CHECK_THROWS_WITH_AS(cache.copy_block(2, held, 1), doctest::Contains("from block 2 is free"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(cache.copy_block(held, 3, 1), doctest::Contains("to block 3 is free"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(cache.copy_block(1, 3, 1), doctest::Contains("from block 1 and to block 3 are free"),
                         std::invalid_argument);
  }

  TEST_CASE("request_trace refuses a rate so low that an arrival step would pass SIZE_MAX, and serves a slow one") {
    ch17::TraceSpec s;
    s.requests = 5;
    s.arrivals_per_step = 1e-300;  // arrivals near step 1e300: converted to std::size_t unchecked, every one was 0
    CHECK_THROWS_NAMING(ch17::request_trace(s), std::invalid_argument, "arrivals_per_step");
    s.arrivals_per_step = 1e-12;  // arrivals near step 1e12: valid steps
    const std::vector<ch17::Request> trace = ch17::request_trace(s);
    CHECK(trace.front().arrival > 1000000);
    CHECK(trace.back().arrival >= trace.front().arrival);
  }

  TEST_CASE("the schedulers jump over idle steps: a request arriving at step 2^40 is served at once, the same clock") {
    const std::size_t late = std::size_t{1} << 40;
    // Request 0: admitted at 0, its second token at 1, gone at 2. Request 1: admitted at 2^40, three decodes, gone at
    // 2^40 + 4: its latency is 4 steps, and the run took 2^40 + 4 steps (0 … 2^40 + 3), as stepping one at a time.
    const std::vector<ch17::Request> trace{{0, 0, 3, 2}, {1, late, 5, 4}};
    const hostile::detail::Guard guard("the schedulers over 2^40 idle steps");  // a hang ends the run, naming this
    for (int which = 0; which < 3; ++which) {
      CAPTURE(which);
      std::size_t observed = 0;
      const ch17::StepObserver count = [&](const ch17::StepWork& w) {
        observed += 1 + static_cast<std::size_t>(w.idle_before);
      };
      const ch17::ServeStats st =
          which == 2 ? ch17::serve_paged(trace, 8, 4, 2, count)
                     : ch17::serve_reserving(trace, which == 0 ? ch17::Batching::fixed : ch17::Batching::continuous, 64,
                                             16, 2, count);
      CHECK(st.steps == late + 4);
      CHECK(st.latency == std::vector<std::size_t>{2, 4});
      CHECK(st.generated == 6);
      CHECK(observed == st.steps + 1);  // every step, the idle ones counted by the step after them
    }
  }

  TEST_CASE("serve_paged's waste is the share of slots held unused even when blocks × B passes 2^64") {
    const std::size_t B = std::size_t{1} << 63;
    // Two requests of one prompt token and three tokens out, each in a block of 2^63 slots, for three steps: 12
    // cached token-steps of 3 · 2^64 held; 1 − 12 / (3 · 2^64) rounds to 1 in double. 2 · 2^63 wrapped to 0 held.
    const std::vector<ch17::Request> trace{{0, 0, 1, 3}, {1, 0, 1, 3}};
    const ch17::ServeStats st = ch17::serve_paged(trace, 2, B, 2);
    CHECK(st.reserved_token_steps == 3 * 18446744073709551616.0);
    CHECK(st.waste() == 1.0);
  }

  TEST_CASE("serving chapter 12's model refuses a model whose config and tensors disagree, naming what disagrees") {
    const attn::ch12::Model good = attn::ch12::init_model(attn::ch12::Config{}, 3);  // d_model 32, 2 heads, 2 layers
    const std::vector<ch17::Prompt> prompts{{{1, 2, 3}, 2}, {{1, 2, 4}, 2}};
    ch17::ModelServeLog log;
    attn::ch12::Model m = good;
    m.config.heads = 0;  // d_model / heads: SIGFPE in both
    CHECK_THROWS_NAMING(ch17::generate_batched(m, prompts, 4, 8, 2, log), std::invalid_argument, "heads", "0");
    CHECK_THROWS_NAMING(ch17::generate_one_at_a_time(m, prompts), std::invalid_argument, "heads", "0");
    m = good;
    m.config.layers = 3;  // a third layer read past model.layers
    CHECK_THROWS_NAMING(ch17::generate_batched(m, prompts, 4, 8, 2, log), std::invalid_argument, "layers", "3", "2");
    m = good;
    m.layers[1].W_Q = xt::zeros<float>({32, 16});  // served silently
    CHECK_THROWS_NAMING(ch17::generate_batched(m, prompts, 4, 8, 2, log), std::invalid_argument, "W_Q", "(32, 16)");
    m = good;
    m.layers[0].W_V(3, 5) = std::nanf("");  // reported as a NaN written into the cache
    CHECK_THROWS_NAMING(ch17::generate_batched(m, prompts, 4, 8, 2, log), std::invalid_argument, "W_V");
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

  // --- the prefix cache ---------------------------------------------------------------------------------------

  TEST_CASE("a block's key chains to its parent's: the same tokens after another prefix have another key") {
    const std::vector<attn::TokenId> a{1, 2, 3, 4}, b{5, 6, 7, 8};
    const std::uint64_t ka = attn::block_hash(attn::kNoParent, a, 0, 4);
    CHECK(ka == attn::block_hash(attn::kNoParent, a, 0, 4));
    CHECK(attn::block_hash(ka, b, 0, 4) != attn::block_hash(attn::kNoParent, b, 0, 4));
    CHECK(attn::block_hash(ka, b, 0, 4) != attn::block_hash(attn::block_hash(attn::kNoParent, b, 0, 4), a, 0, 4));
    CHECK_THROWS_NAMING(attn::block_hash(ka, b, 0, 0), std::invalid_argument, "B");
    CHECK_THROWS_NAMING(attn::block_hash(ka, b, 2, 4), std::invalid_argument, "first", "2", "4");
  }

  TEST_CASE("the prefix cache evicts the least recently used block no table holds, only when no block is free") {
    BlockAllocator pool(4, 2);
    attn::PrefixCache cache(pool);
    const std::vector<attn::TokenId> x{1, 2, 3, 4}, y{9, 8, 7, 6};
    const auto table_of = [&](const std::vector<attn::TokenId>& tokens) {
      BlockTable t;
      for (std::size_t i = 0; i < tokens.size(); i += 2) t.blocks.push_back(*cache.allocate());
      t.length = tokens.size();
      cache.insert(t, tokens);
      return t;
    };
    BlockTable tx = table_of(x), ty = table_of(y);  // blocks 0, 1 and 2, 3: the pool is full
    CHECK(cache.cached() == 4);
    CHECK(pool.ref_count(tx.blocks[0]) == 2);  // the table's and the cache's
    const std::vector<attn::BlockId> bx = tx.blocks, by = ty.blocks;
    cache.release(tx);  // x first: least recently used; its last block before its first
    cache.release(ty);
    CHECK(cache.eviction_order() == std::vector<attn::BlockId>{bx[1], bx[0], by[1], by[0]});
    CHECK(pool.free_blocks() == 0);
    // x's first block is used again: taken out of the eviction order, then released: now the most recent.
    const std::uint64_t kx0 = attn::block_hash(attn::kNoParent, x, 0, 2);
    REQUIRE(cache.find(kx0) == bx[0]);
    cache.take(bx[0]);
    CHECK(cache.eviction_order() == std::vector<attn::BlockId>{bx[1], by[1], by[0]});
    BlockTable again{{bx[0]}, 2};
    cache.release(again);
    CHECK(cache.eviction_order() == std::vector<attn::BlockId>{bx[1], by[1], by[0], bx[0]});
    CHECK(cache.allocate() == bx[1]);  // not the last freed (bx[0]): the least recently used
    CHECK(cache.evictions() == 1);
    CHECK(cache.find(attn::block_hash(kx0, x, 2, 2)) == std::nullopt);  // its key is forgotten
    CHECK(cache.find(kx0) == bx[0]);
    CHECK_THROWS_NAMING(cache.take(bx[1]), std::invalid_argument, std::to_string(bx[1]).c_str());
  }

  TEST_CASE("the prefix cache uses free blocks before it evicts, and keeps the first block computed for a key") {
    BlockAllocator pool(6, 2);
    attn::PrefixCache cache(pool);
    const std::vector<attn::TokenId> x{1, 2, 3};
    BlockTable t1{{*cache.allocate(), *cache.allocate()}, 3};
    cache.insert(t1, x);  // one full block cached; the half-full one is not
    CHECK(cache.cached() == 1);
    BlockTable t2{{*cache.allocate(), *cache.allocate()}, 3};
    cache.insert(t2, x);  // the same key: the first block keeps it
    CHECK(cache.cached() == 1);
    CHECK(cache.find(attn::block_hash(attn::kNoParent, x, 0, 2)) == t1.blocks[0]);
    cache.release(t1);
    CHECK(cache.evictable() == 1);
    CHECK(cache.allocate().has_value());  // 2 blocks were free: no eviction
    CHECK(cache.evictions() == 0);
    CHECK_THROWS_NAMING(cache.insert(BlockTable{{0}, 3}, x), std::invalid_argument, "3", "1");
  }

  // --- the clock and chunked prefill -----------------------------------------------------------------------------

  TEST_CASE("the chunked scheduler prefills a prompt in chunks of the budget, its first token after the last chunk") {
    // One request, prompt 10, output 3, budget 4, B = 4: chunks of 4, 4 and 2 tokens over 0, 4 and 8 cached tokens
    // (steps 0-2), the first token at the end of step 2, decodes at steps 3 and 4, gone at step 5.
    const std::vector<ch17::Request> trace{{0, 0, 10, 3}};
    std::vector<ch17::StepWork> steps;
    const ch17::ServeStats st =
        ch17::serve_chunked(trace, 8, 4, 2, 4, [&](const ch17::StepWork& w) { steps.push_back(w); });
    REQUIRE(steps.size() == 6);
    const std::vector<std::pair<std::size_t, std::size_t>> chunks{{0, 4}, {4, 4}, {8, 2}};
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      REQUIRE(steps[i].prefills.size() == 1);
      CHECK(steps[i].prefills[0].cached == chunks[i].first);
      CHECK(steps[i].prefills[0].tokens == chunks[i].second);
      CHECK(steps[i].prefills[0].last == (i == 2));
      CHECK(steps[i].first_token == std::vector<std::size_t>(i == 2 ? 1 : 0, 0));
    }
    CHECK(steps[3].decode_lengths == std::vector<std::size_t>{11});
    CHECK(steps[4].decode_lengths == std::vector<std::size_t>{12});
    CHECK(steps[5].finished == std::vector<std::size_t>{0});
    CHECK(st.first_token_at[0] == 3.0);
    CHECK(st.latency[0] == 5);
    CHECK(st.generated == 3);
    const ch17::TokenLatency lat = ch17::token_latency(st, trace, {0.0});
    CHECK(lat.ttft == std::vector<double>{3.0});
    CHECK(lat.tpot == std::vector<double>{1.0});  // (5 − 3) / (3 − 1)
  }

  TEST_CASE("the chunked scheduler runs decodes first and fills the rest of the budget with a prompt's chunk") {
    // Request 0 (prompt 2, output 6) decodes from step 1; request 1 (prompt 9) arrives at step 1: with a budget of 4
    // each step carries the decode and a chunk of 3, so its prompt takes three steps, never more than 4 tokens.
    const std::vector<ch17::Request> trace{{0, 0, 2, 6}, {1, 1, 9, 2}};
    std::vector<ch17::StepWork> steps;
    ch17::serve_chunked(trace, 16, 4, 4, 4, [&](const ch17::StepWork& w) { steps.push_back(w); });
    REQUIRE(steps.size() >= 4);
    for (std::size_t i = 1; i <= 3; ++i) {
      CAPTURE(i);
      CHECK(steps[i].decode_lengths.size() == 1);
      REQUIRE(steps[i].prefills.size() == 1);
      CHECK(steps[i].prefills[0].id == 1);
      CHECK(steps[i].prefills[0].tokens == 3);
      CHECK(steps[i].prefills[0].cached == 3 * (i - 1));
      CHECK(steps[i].tokens() == 4);
    }
  }

  TEST_CASE("the chunked scheduler keeps every step within its budget and the pool, every request its tokens") {
    ch17::TraceSpec spec;
    spec.requests = 60;
    spec.arrivals_per_step = 0.8;
    spec.prompt_min = 1;
    spec.prompt_max = 70;
    spec.output_mean = 15.0;
    spec.output_max = 50;
    const std::vector<ch17::Request> trace = ch17::request_trace(spec);
    std::size_t outputs = 0, prompts = 0;
    for (const ch17::Request& r : trace) outputs += r.output, prompts += r.prompt;
    for (const std::size_t budget : {1, 5, 16, 64, 1000}) {
      for (const std::size_t blocks : {30, 400}) {  // 30 blocks of 4: preemptions; 400: none
        CAPTURE(budget);
        CAPTURE(blocks);
        std::vector<std::size_t> prefilled(trace.size(), 0), finished(trace.size(), 0), next_cached(trace.size(), 0);
        std::size_t recomputed = 0, most = 0;
        bool contiguous = true;
        const ch17::ServeStats st = ch17::serve_chunked(trace, blocks, 4, 6, budget, [&](const ch17::StepWork& w) {
          most = std::max(most, w.tokens());
          for (const std::size_t id : w.preempted)
            next_cached[id] = 0;  // it starts again from nothing (and may in
                                  // this very step: it is at the queue's front)
          for (const ch17::PrefillChunk& c : w.prefills) {
            contiguous = contiguous && c.cached == next_cached[c.id] && c.tokens > 0;  // the chunks follow each other
            next_cached[c.id] = c.last ? 0 : c.cached + c.tokens;
            prefilled[c.id] += c.tokens;
          }
          for (const std::size_t id : w.finished) ++finished[id];
          recomputed += w.recomputed;
        });
        CHECK(most <= budget);
        CHECK(contiguous);
        CHECK(st.generated == outputs);
        CHECK(finished == std::vector<std::size_t>(trace.size(), 1));
        std::size_t total = 0;
        for (const std::size_t p : prefilled) total += p;
        CHECK(total == prompts + st.recomputed);  // every prompt once, and again what preemptions threw away
        CHECK(st.recomputed == recomputed);
        CHECK(st.most_running <= 6);
        if (blocks == 400) CHECK(st.preemptions == 0);
        if (blocks == 30 && budget >= 16) CHECK(st.preemptions > 0);
      }
    }
  }

  TEST_CASE("with a budget no step reaches, the chunked scheduler schedules as schedule_step does") {
    // Two schedulers written apart (the learner's schedule_step() and the chunked one): the same admissions,
    // preemptions and recomputes when no prompt is ever cut.
    ch17::TraceSpec spec;
    spec.requests = 80;
    spec.arrivals_per_step = 1.5;
    spec.prompt_max = 60;
    spec.output_mean = 20.0;
    spec.output_max = 60;
    const std::vector<ch17::Request> trace = ch17::request_trace(spec);
    for (const std::size_t blocks : {40, 1000}) {
      CAPTURE(blocks);
      const ch17::ServeStats paged = ch17::serve_paged(trace, blocks, 4, 8);
      const ch17::ServeStats chunked =
          ch17::serve_chunked(trace, blocks, 4, 8, std::numeric_limits<std::size_t>::max());
      CHECK(chunked.steps == paged.steps);
      CHECK(chunked.latency == paged.latency);
      CHECK(chunked.first_token_at == paged.first_token_at);
      CHECK(chunked.preemptions == paged.preemptions);
      CHECK(chunked.recomputed == paged.recomputed);
      CHECK(chunked.waste() == paged.waste());
      if (blocks == 40) CHECK(paged.preemptions > 0);
    }
  }

  TEST_CASE(
      "a clock that charges a step for its tokens makes a prefill cost its prompt, where the step clock is free") {
    // Prompt 10, output 3, whole-prompt prefill: on the step clock the first token comes at 1 and the last at 3; on a
    // clock of one unit per token computed, the prefill step takes 10, each decode 1: first token at 10, done at 12.
    const std::vector<ch17::Request> trace{{0, 0, 10, 3}};
    const ch17::ServeStats steps = ch17::serve_paged(trace, 8, 4, 2);
    CHECK(steps.first_token_at[0] == 1.0);
    CHECK(steps.finished_at[0] == 3.0);
    ch17::PagedScheduler paged(8, 4, 2);
    const ch17::ServeStats work =
        ch17::serve(trace, {0.0}, paged, [](const ch17::StepWork& w) { return static_cast<double>(w.tokens()); });
    CHECK(work.first_token_at[0] == 10.0);
    CHECK(work.finished_at[0] == 12.0);
    CHECK(work.elapsed == 12.0);
    CHECK(work.steps == 3);
    // Open loop: a request arriving at 10.5 on that clock waits for the step running then (10 … 11) to end.
    const std::vector<ch17::Request> two{{0, 0, 10, 3}, {1, 0, 2, 1}};
    ch17::PagedScheduler again(8, 4, 1);
    const ch17::ServeStats late =
        ch17::serve(two, {0.0, 10.5}, again, [](const ch17::StepWork& w) { return static_cast<double>(w.tokens()); });
    CHECK(late.first_token_at[1] == 14.0);  // admitted at 12, when request 0 has left: its prefill of 2 ends at 14
  }

  TEST_CASE("the clock refuses arrivals that do not fit the trace and steps that take no time, naming them") {
    const std::vector<ch17::Request> trace{{0, 0, 2, 2}, {1, 0, 2, 2}};
    ch17::PagedScheduler s(8, 4, 2);
    const ch17::StepClock one = [](const ch17::StepWork&) { return 1.0; };
    CHECK_THROWS_NAMING(ch17::serve(trace, {0.0}, s, one), std::invalid_argument, "arrivals", "1", "2");
    CHECK_THROWS_NAMING(ch17::serve(trace, {1.0, 0.5}, s, one), std::invalid_argument, "arrivals", "0.5");
    CHECK_THROWS_NAMING(ch17::serve(trace, {0.0, std::nan("")}, s, one), std::invalid_argument, "arrivals");
    CHECK_THROWS_NAMING(ch17::serve(trace, {0.0, 0.0}, s, [](const ch17::StepWork&) { return -1.0; }),
                        std::invalid_argument, "duration", "-1");
    CHECK_THROWS_NAMING(ch17::serve_chunked(trace, 8, 4, 2, 0), std::invalid_argument, "token_budget");
    CHECK_THROWS_NAMING(ch17::serve_chunked(trace, 8, 4, 0, 4), std::invalid_argument, "max_running");
    CHECK_THROWS_NAMING(ch17::serve_chunked({{0, 0, 30, 5}}, 8, 4, 2, 4), std::invalid_argument, "0", "30");
    CHECK_THROWS_NAMING(ch17::poisson_arrivals(3, 0.0, 1), std::invalid_argument, "rate");
    CHECK_THROWS_NAMING(ch17::poisson_arrivals(0, 1.0, 1), std::invalid_argument, "requests");
    CHECK_THROWS_NAMING(ch17::time_quantile({}, 0.5), std::invalid_argument, "times");
  }

  TEST_CASE("Poisson arrivals are in order with a mean gap of 1 / rate") {
    const std::vector<double> at = ch17::poisson_arrivals(20000, 4.0, 7);
    CHECK(std::is_sorted(at.begin(), at.end()));
    CHECK(at.front() > 0.0);
    // The mean of 20,000 Exponential(4) gaps is 0.25 with a standard deviation of 0.25 / √20000 ≈ 0.0018: 4 of them.
    CHECK(at.back() / 20000.0 == doctest::Approx(0.25).epsilon(0.03));
    CHECK(ch17::time_quantile({3.0, 1.0, 2.0, 4.0}, 0.5) == 2.0);
    CHECK(ch17::time_quantile({3.0, 1.0, 2.0, 4.0}, 0.99) == 4.0);
  }
}

namespace {

/// ⌈n / B⌉ in long double: no wrapping, for the rules below.
long double blocks_of(long double n, long double B) { return std::ceil(n / B); }

/// A trace of requests (ids[i], arrival i, prompts[i], outputs[i]), as long as the shortest of the three lists.
std::vector<ch17::Request> trace_of(const std::vector<std::size_t>& ids, const std::vector<std::size_t>& prompts,
                                    const std::vector<std::size_t>& outputs) {
  std::vector<ch17::Request> trace;
  for (std::size_t i = 0; i < std::min({ids.size(), prompts.size(), outputs.size()}); ++i)
    trace.push_back({ids[i], i, prompts[i], outputs[i]});
  return trace;
}

/// Whether \p trace's ids are its places, every prompt and output at least 1 and prompt + output − 1 ≤ \p max_len.
bool trace_fits(const std::vector<ch17::Request>& trace, long double max_len) {
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const ch17::Request& r = trace[i];
    if (r.id != i || r.prompt == 0 || r.output == 0 ||
        static_cast<long double>(r.prompt) + static_cast<long double>(r.output) - 1 > max_len)
      return false;
  }
  return true;
}

}  // namespace

// The hostile-input battery (tests/support/hostile.hpp) over the chapter's own code: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says. Structs (a
// KvShape, a block table, a trace, a prompt) are battered field by field.
TEST_SUITE("17_serving: hostile battery") {
  TEST_CASE("the block allocator and the paged cache under the hostile battery") {
    // hostile battery: BlockAllocator, retain, release, ref_count, release_table, share_table, kv_block_bytes
    // hostile battery: PagedKVCache, keys, values, write, copy_block
    const auto pool_of = [] {  // 4 blocks of B = 4; blocks 0 and 1 held
      BlockAllocator pool(4, 4);
      pool.allocate();
      pool.allocate();
      return pool;
    };
    hostile::battery(
        "BlockAllocator", {"blocks", "block_size"},
        [](std::size_t blocks, std::size_t block_size) {
          BlockAllocator pool(blocks, block_size);
          return std::vector<std::size_t>{pool.total_blocks(), pool.free_blocks(), pool.block_size()};
        },
        std::size_t{4}, std::size_t{4})
        .fits([](std::size_t blocks, std::size_t block_size) {
          return blocks >= 1 && block_size >= 1 && static_cast<long double>(blocks) * 16 < (1ull << 30);
        })
        .answer([](const std::vector<std::size_t>& r, std::size_t blocks, std::size_t block_size) {
          return r[0] == blocks && r[1] == blocks && r[2] == block_size;
        })
        .exempt("= 2^32",
                "2^32 blocks' counts, 64 GiB: answered or refused by the memory available, past the "
                "battery's 4 GiB")
        .run();
    for (const char* member : {"retain", "release", "ref_count"})
      hostile::battery(
          member, {"block"},
          [&](std::size_t block) {
            BlockAllocator pool = pool_of();
            if (std::string(member) == "retain") pool.retain(block);
            if (std::string(member) == "release") pool.release(block);
            return pool.ref_count(block);
          },
          std::size_t{1})
          .fits([&](std::size_t block) { return std::string(member) == "ref_count" ? block < 4 : block < 2; })
          .run();
    for (const bool share : {false, true})
      hostile::battery(
          share ? "share_table" : "release_table", {"blocks|table", "length|table"},
          [&](const std::vector<std::size_t>& blocks, std::size_t length) {
            BlockAllocator pool = pool_of();
            BlockTable table{blocks, length};
            if (share) {
              const BlockTable copy = attn::share_table(pool, table);
              return std::vector<std::size_t>{copy.blocks.size(), copy.length, pool.used_blocks()};
            }
            attn::release_table(pool, table);
            return std::vector<std::size_t>{table.blocks.size(), table.length, pool.used_blocks()};
          },
          std::vector<std::size_t>{0, 1}, std::size_t{6})
          .fits([share](const std::vector<std::size_t>& blocks, std::size_t) {
            std::vector<int> refs{1, 1, 0, 0};  // release_table releases each block once: a repeat must be held twice
            for (const std::size_t b : blocks) {
              if (b >= 4 || refs[b] == 0) return false;
              if (!share) --refs[b];
            }
            return true;
          })
          .run();
    hostile::battery(
        "kv_block_bytes", {"layers", "kv_heads", "d_k", "d_v", "block_size", "bytes_per_number"},
        [](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t d_v, std::size_t B, std::size_t bytes) {
          return attn::kv_block_bytes(KvShape{layers, g, d_k, d_v, B}, bytes);
        },
        std::size_t{2}, std::size_t{2}, std::size_t{4}, std::size_t{3}, std::size_t{4}, std::size_t{4})
        .fits(
            [](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t d_v, std::size_t B, std::size_t bytes) {
              const long double all =
                  static_cast<long double>(layers) * g * (static_cast<long double>(d_k) + d_v) * B * bytes;
              return layers && g && d_k && d_v && B && bytes && all < 18446744073709551615.0L;
            })
        .answer([](std::size_t r, std::size_t layers, std::size_t g, std::size_t d_k, std::size_t d_v, std::size_t B,
                   std::size_t bytes) { return r == layers * g * (d_k + d_v) * B * bytes; })
        .run();
    const std::size_t block_bytes = attn::kv_block_bytes(KvShape{2, 2, 4, 3, 4}, sizeof(float));
    hostile::battery(
        "PagedKVCache", {"layers", "kv_heads", "d_k", "d_v", "block_size", "budget_bytes"},
        [](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t d_v, std::size_t B, std::size_t budget) {
          const PagedKVCache cache(KvShape{layers, g, d_k, d_v, B}, budget);
          return std::vector<std::size_t>{cache.pool().total_blocks(), cache.bytes()};
        },
        std::size_t{2}, std::size_t{2}, std::size_t{4}, std::size_t{3}, std::size_t{4}, 3 * block_bytes)
        .fits(
            [](std::size_t layers, std::size_t g, std::size_t d_k, std::size_t d_v, std::size_t B, std::size_t budget) {
              const long double block =
                  static_cast<long double>(layers) * g * (static_cast<long double>(d_k) + d_v) * B * 4;
              return layers && g && d_k && d_v && B && block <= budget && budget < (1ull << 30);
            })
        .answer([](const std::vector<std::size_t>& r, std::size_t layers, std::size_t g, std::size_t d_k,
                   std::size_t d_v, std::size_t B, std::size_t budget) {
          const std::size_t block = layers * g * (d_k + d_v) * B * 4;
          return r[0] == budget / block && r[1] == r[0] * block;
        })
        .exempt("budget_bytes = 2^32",
                "a 4 GiB cache: answered or refused by the memory available, past the "
                "battery's 4 GiB")
        .run();
    const auto cache_held = [] {  // 3 blocks; block 0 held by one table, block 1 by two
      PagedKVCache cache = cache_of(3);
      cache.pool().allocate();
      cache.pool().allocate();
      cache.pool().retain(1);
      return cache;
    };
    const PagedKVCache cache = cache_held();
    for (const bool keys : {true, false})
      hostile::battery(
          keys ? "keys" : "values", {"layer", "block", "head"},
          [&](std::size_t layer, std::size_t block, std::size_t head) {
            return keys ? *cache.keys(layer, block, head) : *cache.values(layer, block, head);
          },
          std::size_t{1}, std::size_t{2}, std::size_t{1})
          .fits(
              [](std::size_t layer, std::size_t block, std::size_t head) { return layer < 2 && block < 3 && head < 2; })
          .run();
    attn::Rng rng(1750);
    hostile::battery(
        "write", {"layer", "block", "offset", "k", "v"},
        [&](std::size_t layer, std::size_t block, std::size_t offset, const Matrix& k, const Matrix& v) {
          PagedKVCache c = cache_held();
          c.write(layer, block, offset, k, v);
          return *(c.keys(layer, block, 0) + offset * 4);
        },
        std::size_t{1}, std::size_t{0}, std::size_t{3}, Matrix(rng.normal(2, 4)), Matrix(rng.normal(2, 3)))
        .fits([](std::size_t layer, std::size_t block, std::size_t offset, const Matrix& k, const Matrix& v) {
          return layer < 2 && block == 0 && offset < 4 && k.shape(0) == 2 && k.shape(1) == 4 && v.shape(0) == 2 &&
                 v.shape(1) == 3;
        })
        .run();
    hostile::battery(
        "copy_block", {"from", "to", "rows"},
        [&](std::size_t from, std::size_t to, std::size_t rows) {
          PagedKVCache c = cache_held();
          c.copy_block(from, to, rows);
          return c.pool().used_blocks();
        },
        std::size_t{1}, std::size_t{0}, std::size_t{3})
        .fits([](std::size_t from, std::size_t to, std::size_t rows) {
          return from < 2 && to < 2 && from != to && rows <= 4;
        })
        .run();
  }

  TEST_CASE("the fast paged decode under the hostile battery") {
    // hostile battery: paged_decode_range, paged_decode, split_kv_decode
    PagedKVCache cache = cache_of(4);  // 2 layers, g = 2, d_k = 4, d_v = 3, B = 4
    attn::Rng rng(1751);
    const BlockTable t = filled(cache, 6, rng);
    const auto table_fits = [&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length,
                                const Matrix& q) {
      bool exist = true;
      for (const std::size_t b : blocks) exist = exist && b < cache.pool().total_blocks();
      return layer < 2 && static_cast<long double>(blocks.size()) == blocks_of(length, 4) && exist && q.shape(1) == 4 &&
             q.shape(0) > 0 && q.shape(0) % 2 == 0;
    };
    const Matrix q = rng.normal(4, 4);
    hostile::battery(
        "paged_decode_range", {"layer", "blocks|table", "length|table", "q", "first", "end"},
        [&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& qq,
            std::size_t first, std::size_t end) {
          return ch17::paged_decode_range(cache, layer, BlockTable{blocks, length}, qq, first, end).O;
        },
        std::size_t{0}, t.blocks, t.length, q, std::size_t{1}, std::size_t{5})
        .fits([&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& qq,
                  std::size_t first,
                  std::size_t end) { return table_fits(layer, blocks, length, qq) && first <= end && end <= length; })
        .answer([](const Matrix& O, std::size_t, const std::vector<std::size_t>&, std::size_t, const Matrix& qq,
                   std::size_t, std::size_t) { return O.shape(0) == qq.shape(0) && O.shape(1) == 3; })
        .run();
    hostile::battery(
        "paged_decode", {"layer", "blocks|table", "length|table", "q"},
        [&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& qq) {
          return ch17::paged_decode(cache, layer, BlockTable{blocks, length}, qq);
        },
        std::size_t{0}, t.blocks, t.length, q)
        .fits([&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& qq) {
          return table_fits(layer, blocks, length, qq) && length > 0;
        })
        .answer([](const Matrix& O, std::size_t, const std::vector<std::size_t>&, std::size_t, const Matrix& qq) {
          return O.shape(0) == qq.shape(0) && O.shape(1) == 3;
        })
        .run();
    hostile::battery(
        "split_kv_decode", {"layer", "blocks|table", "length|table", "q", "splits", "threads"},
        [&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& qq,
            std::size_t splits, std::size_t threads) {
          return ch17::split_kv_decode(cache, layer, BlockTable{blocks, length}, qq, splits, threads).O;
        },
        std::size_t{0}, t.blocks, t.length, q, std::size_t{2}, std::size_t{2})
        .fits([&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const Matrix& qq,
                  std::size_t splits, std::size_t threads) {
          return table_fits(layer, blocks, length, qq) && length > 0 && splits >= 1 && threads >= 1;
        })
        .answer([](const Matrix& O, std::size_t, const std::vector<std::size_t>&, std::size_t, const Matrix& qq,
                   std::size_t, std::size_t) { return O.shape(0) == qq.shape(0) && O.shape(1) == 3; })
        .run();
  }

  TEST_CASE("the trace, its statistics and the schedulers under the hostile battery") {
    // hostile battery: request_trace, latency_mean, latency_quantile, serve_reserving, serve_paged
    hostile::battery(
        "request_trace",
        {"requests", "arrivals_per_step", "prompt_min", "prompt_max", "output_mean", "output_max", "seed"},
        [](std::size_t requests, double rate, std::size_t prompt_min, std::size_t prompt_max, double output_mean,
           std::size_t output_max, std::uint64_t seed) {
          const auto trace = ch17::request_trace(
              ch17::TraceSpec{requests, rate, prompt_min, prompt_max, output_mean, output_max, seed});
          std::vector<std::size_t> out{trace.size()};
          for (const ch17::Request& r : trace) out.insert(out.end(), {r.id, r.prompt, r.output});
          return out;
        },
        std::size_t{5}, 2.0, std::size_t{2}, std::size_t{9}, 4.0, std::size_t{6}, std::uint64_t{17})
        .fits([](std::size_t requests, double rate, std::size_t prompt_min, std::size_t prompt_max, double output_mean,
                 std::size_t output_max, std::uint64_t) {
          return requests >= 1 && requests < (1u << 20) && std::isfinite(rate) && rate > 0 && prompt_min >= 1 &&
                 prompt_min <= prompt_max && std::isfinite(output_mean) && output_mean >= 1 && output_mean <= 1e15 &&
                 output_max >= 1;
        })
        .answer([](const std::vector<std::size_t>& r, std::size_t requests, double, std::size_t prompt_min,
                   std::size_t prompt_max, double, std::size_t output_max, std::uint64_t) {
          bool ok = r[0] == requests;
          for (std::size_t i = 0; i < requests && ok; ++i)
            ok = r[1 + 3 * i] == i && r[2 + 3 * i] >= prompt_min && r[2 + 3 * i] <= prompt_max && r[3 + 3 * i] >= 1 &&
                 r[3 + 3 * i] <= output_max;
          return ok;
        })
        .exempt("requests = 2^32",
                "2^32 requests, 128 GiB: answered or refused by the memory available, past the "
                "battery's 4 GiB")
        .exempt("every size", "as requests = 2^32")
        .run();
    hostile::battery(
        "latency_mean", {"latency"}, [](const std::vector<std::size_t>& l) { return ch17::latency_mean(l); },
        std::vector<std::size_t>{3, 1, 2})
        .fits([](const std::vector<std::size_t>& l) { return !l.empty(); })
        .run();
    hostile::battery(
        "latency_quantile", {"latency", "q"},
        [](const std::vector<std::size_t>& l, double q) { return ch17::latency_quantile(l, q); },
        std::vector<std::size_t>{3, 1, 2}, 0.5)
        .fits([](const std::vector<std::size_t>& l, double q) { return !l.empty() && q >= 0 && q <= 1; })
        .answer([](std::size_t r, const std::vector<std::size_t>& l, double) {
          return std::find(l.begin(), l.end(), r) != l.end();
        })
        .run();
    const std::vector<std::size_t> ids{0, 1, 2}, prompts{3, 5, 2}, outputs{2, 4, 3};
    hostile::battery(
        "serve_reserving",
        {"ids|request", "prompts|prompt|request", "outputs|output|request", "batching", "budget_tokens", "max_len",
         "max_running"},
        [](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p, const std::vector<std::size_t>& o,
           ch17::Batching batching, std::size_t budget, std::size_t max_len, std::size_t max_running) {
          const ch17::ServeStats st = ch17::serve_reserving(trace_of(i, p, o), batching, budget, max_len, max_running);
          return std::vector<std::size_t>{st.steps, st.generated};
        },
        ids, prompts, outputs, ch17::Batching::continuous, std::size_t{32}, std::size_t{10}, std::size_t{2})
        .fits([](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p,
                 const std::vector<std::size_t>& o, ch17::Batching batching, std::size_t budget, std::size_t max_len,
                 std::size_t max_running) {
          return trace_fits(trace_of(i, p, o), max_len) && static_cast<int>(batching) <= 1 && max_running >= 1 &&
                 max_len >= 1 && budget >= max_len;
        })
        .answer([](const std::vector<std::size_t>& r, const std::vector<std::size_t>& i,
                   const std::vector<std::size_t>& p, const std::vector<std::size_t>& o, ch17::Batching, std::size_t,
                   std::size_t, std::size_t) {
          std::size_t tokens = 0;
          for (const ch17::Request& q : trace_of(i, p, o)) tokens += q.output;
          return r[1] == tokens && r[0] <= 4 * (tokens + 3);
        })
        .run();
    hostile::battery(
        "serve_paged",
        {"ids|request", "prompts|prompt|request", "outputs|output|request", "blocks", "block_size", "max_running"},
        [](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p, const std::vector<std::size_t>& o,
           std::size_t blocks, std::size_t block_size, std::size_t max_running) {
          const ch17::ServeStats st = ch17::serve_paged(trace_of(i, p, o), blocks, block_size, max_running);
          return std::vector<std::size_t>{st.steps, st.generated};
        },
        ids, prompts, outputs, std::size_t{4}, std::size_t{4}, std::size_t{2})
        .fits([](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p,
                 const std::vector<std::size_t>& o, std::size_t blocks, std::size_t block_size,
                 std::size_t max_running) {
          if (blocks == 0 || block_size == 0 || max_running == 0 ||
              static_cast<long double>(blocks) * 16 >= (1ull << 30))
            return false;
          const std::vector<ch17::Request> trace = trace_of(i, p, o);
          if (!trace_fits(trace, 1e30L)) return false;
          for (const ch17::Request& r : trace)  // each request alone fits in the pool at its longest
            if (blocks_of(static_cast<long double>(r.prompt) + r.output - 1, block_size) > blocks) return false;
          return true;
        })
        .answer([](const std::vector<std::size_t>& r, const std::vector<std::size_t>& i,
                   const std::vector<std::size_t>& p, const std::vector<std::size_t>& o, std::size_t, std::size_t,
                   std::size_t) {
          std::size_t tokens = 0;
          for (const ch17::Request& q : trace_of(i, p, o)) tokens += q.output;
          return r[1] == tokens && r[0] <= 4 * (tokens + 3) * 4;
        })
        .exempt("blocks = 2^32",
                "2^32 blocks' counts, 64 GiB: answered or refused by the memory available, past the "
                "battery's 4 GiB")
        .exempt("every size", "as blocks = 2^32")
        .run();
  }

  TEST_CASE("serving chapter 12's model under the hostile battery") {
    // hostile battery: generate_one_at_a_time, generate_batched
    const attn::ch12::Model model = attn::ch12::init_model(attn::ch12::Config{}, 3);  // vocab 24, context 32
    const auto prompts_of = [](const std::vector<std::size_t>& tokens, std::size_t generate) {
      return std::vector<ch17::Prompt>{{tokens, generate}, {{7, 2}, 2}};
    };
    const auto prompt_fits = [](const std::vector<std::size_t>& tokens, std::size_t generate) {
      bool ok = !tokens.empty() && generate >= 1 &&
                static_cast<long double>(tokens.size()) + static_cast<long double>(generate) - 1 <= 32;
      for (const std::size_t t : tokens) ok = ok && t < 24;
      return ok;
    };
    hostile::battery(
        "generate_one_at_a_time", {"tokens|prompt", "generate|prompt"},
        [&](const std::vector<std::size_t>& tokens, std::size_t generate) {
          return ch17::generate_one_at_a_time(model, prompts_of(tokens, generate))[0];
        },
        std::vector<std::size_t>{5, 9, 2}, std::size_t{3})
        .fits(prompt_fits)
        .answer([](const std::vector<std::size_t>& out, const std::vector<std::size_t>&, std::size_t generate) {
          return out.size() == generate;
        })
        .run();
    hostile::battery(
        "generate_batched", {"tokens|prompt", "generate|prompt", "block_size", "blocks", "max_running"},
        [&](const std::vector<std::size_t>& tokens, std::size_t generate, std::size_t block_size, std::size_t blocks,
            std::size_t max_running) {
          ch17::ModelServeLog log;
          return ch17::generate_batched(model, prompts_of(tokens, generate), block_size, blocks, max_running, log)[0];
        },
        std::vector<std::size_t>{5, 9, 2}, std::size_t{3}, std::size_t{2}, std::size_t{6}, std::size_t{2})
        .fits([&](const std::vector<std::size_t>& tokens, std::size_t generate, std::size_t block_size,
                  std::size_t blocks, std::size_t max_running) {
          // Each prompt alone fits in the pool at its longest; the cache (2 layers, 2 heads, d_k = 16) under 1 GiB.
          const long double bytes = static_cast<long double>(blocks) * block_size * 2 * 2 * 32 * 4;
          return prompt_fits(tokens, generate) && block_size >= 1 && blocks >= 1 && max_running >= 1 &&
                 bytes < (1ull << 30) &&
                 blocks_of(static_cast<long double>(tokens.size()) + generate - 1, block_size) <= blocks &&
                 blocks_of(3, block_size) <= blocks;
        })
        .answer([](const std::vector<std::size_t>& out, const std::vector<std::size_t>&, std::size_t generate,
                   std::size_t, std::size_t, std::size_t) { return out.size() == generate; })
        .run();
  }
  TEST_CASE("the prefill, the prefix cache, the clock and the chunked scheduler under the hostile battery") {
    // hostile battery: paged_prefill, block_hash, PrefixCache, find, take, insert
    // hostile battery: ChunkedScheduler, PagedScheduler, ReservingScheduler, arrive, serve_chunked, serve
    // hostile battery: serve_on_steps, poisson_arrivals, token_latency, time_quantile
    PagedKVCache cache = cache_of(4);  // 2 layers, g = 2, d_k = 4, d_v = 3, B = 4
    attn::Rng rng(1752);
    const BlockTable t = filled(cache, 6, rng);
    const attn::Tensor3 Q = xt::reshape_view(rng.normal(8, 4), {4, 2, 4});  // (h = 4, c = 2, d_k = 4)
    hostile::battery(
        "paged_prefill", {"layer", "blocks|table", "length|table", "Q", "first"},
        [&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const attn::Tensor3& q,
            std::size_t first) {
          return ch17::paged_prefill(cache, layer, BlockTable{blocks, length}, q, first);
        },
        std::size_t{0}, t.blocks, t.length, Q, std::size_t{4})
        .fits([&](std::size_t layer, const std::vector<std::size_t>& blocks, std::size_t length, const attn::Tensor3& q,
                  std::size_t first) {
          bool exist = true;
          for (const std::size_t b : blocks) exist = exist && b < cache.pool().total_blocks();
          return layer < 2 && static_cast<long double>(blocks.size()) == blocks_of(length, 4) && exist &&
                 q.shape(2) == 4 && q.shape(1) > 0 && q.shape(0) > 0 && q.shape(0) % 2 == 0 &&
                 static_cast<long double>(first) + q.shape(1) <= length;
        })
        .answer([](const attn::Tensor3& O, std::size_t, const std::vector<std::size_t>&, std::size_t,
                   const attn::Tensor3& q,
                   std::size_t) { return O.shape(0) == q.shape(0) && O.shape(1) == q.shape(1) && O.shape(2) == 3; })
        .run();
    hostile::battery(
        "block_hash", {"parent", "tokens", "first", "B"},
        [](std::uint64_t parent, const std::vector<std::size_t>& tokens, std::size_t first, std::size_t B) {
          return std::vector<std::size_t>{static_cast<std::size_t>(attn::block_hash(parent, tokens, first, B))};
        },
        std::uint64_t{7}, std::vector<std::size_t>{1, 2, 3, 4, 5}, std::size_t{1}, std::size_t{3})
        .fits([](std::uint64_t, const std::vector<std::size_t>& tokens, std::size_t first, std::size_t B) {
          return B >= 1 && first <= tokens.size() && B <= tokens.size() - first;
        })
        .run();
    // A pool of 6 blocks of 2: a table of tokens 1 … 5 (blocks 0, 1, 2), its two full blocks cached, released.
    const std::vector<attn::TokenId> tokens{1, 2, 3, 4, 5};
    struct Cached {
      BlockAllocator pool{6, 2};
      attn::PrefixCache cache{pool};
      Cached(const std::vector<attn::TokenId>& x, bool release) {
        BlockTable tb{{*cache.allocate(), *cache.allocate(), *cache.allocate()}, 5};
        cache.insert(tb, x);
        if (release) cache.release(tb);
      }
    };
    hostile::battery(
        "PrefixCache", {"blocks", "block_size"},
        [](std::size_t blocks, std::size_t block_size) {
          BlockAllocator pool(blocks, block_size);
          attn::PrefixCache c(pool);
          return std::vector<std::size_t>{c.block_size(), c.cached(), c.evictable()};
        },
        std::size_t{4}, std::size_t{4})
        .fits([](std::size_t blocks, std::size_t block_size) {
          return blocks >= 1 && block_size >= 1 && static_cast<long double>(blocks) * 16 < (1ull << 30);
        })
        .exempt("= 2^32",
                "2^32 blocks' counts, 64 GiB: answered or refused by the memory available, past the "
                "battery's 4 GiB")
        .run();
    hostile::battery(
        "find", {"key"},
        [&](std::uint64_t key) {
          const Cached c(tokens, true);
          const std::optional<attn::BlockId> b = c.cache.find(key);
          return std::vector<std::size_t>{b ? *b : 99};
        },
        attn::block_hash(attn::kNoParent, tokens, 0, 2))
        .answer([](const std::vector<std::size_t>& r, std::uint64_t) { return r[0] == 99 || r[0] < 2; })
        .run();
    hostile::battery(
        "take", {"block"},
        [&](std::size_t block) {
          Cached c(tokens, true);
          c.cache.take(block);
          return std::vector<std::size_t>{c.pool.ref_count(block), c.cache.evictable()};
        },
        std::size_t{1})
        .fits([](std::size_t block) { return block < 2; })  // the two full blocks are cached
        .answer([](const std::vector<std::size_t>& r, std::size_t) { return r[0] == 2 && r[1] == 1; })
        .run();
    hostile::battery(
        "insert", {"blocks|table", "length|table", "tokens"},
        [&](const std::vector<std::size_t>& blocks, std::size_t length, const std::vector<std::size_t>& x) {
          BlockAllocator pool(6, 2);
          attn::PrefixCache c(pool);
          for (int k = 0; k < 3; ++k) c.allocate();  // blocks 0, 1, 2 held
          c.insert(BlockTable{blocks, length}, x);
          return std::vector<std::size_t>{c.cached(), pool.free_blocks()};
        },
        std::vector<std::size_t>{0, 1, 2}, std::size_t{5}, tokens)
        .fits([](const std::vector<std::size_t>& blocks, std::size_t length, const std::vector<std::size_t>& x) {
          bool held = true;
          for (const std::size_t b : blocks) held = held && b < 3;
          return held && static_cast<long double>(blocks.size()) == blocks_of(length, 2) && x.size() >= length;
        })
        .answer([](const std::vector<std::size_t>& r, const std::vector<std::size_t>&, std::size_t length,
                   const std::vector<std::size_t>&) { return r[0] <= length / 2 && r[1] == 3; })
        .run();
    // The schedulers, each built, given a trace (arrive) and served; the trace battered field by field.
    const std::vector<std::size_t> ids{0, 1, 2}, prompts{3, 5, 2}, outputs{2, 4, 3};
    const auto tokens_of = [](const std::vector<ch17::Request>& trace) {
      std::size_t n = 0;
      for (const ch17::Request& q : trace) n += q.output;
      return n;
    };
    const auto pool_fits = [](const std::vector<ch17::Request>& trace, std::size_t blocks, std::size_t block_size) {
      if (blocks == 0 || block_size == 0 || static_cast<long double>(blocks) * 16 >= (1ull << 30)) return false;
      if (!trace_fits(trace, 1e30L)) return false;
      for (const ch17::Request& r : trace)
        if (blocks_of(static_cast<long double>(r.prompt) + r.output - 1, block_size) > blocks) return false;
      return true;
    };
    for (const bool chunked : {false, true})
      hostile::battery(
          chunked ? "ChunkedScheduler" : "PagedScheduler",
          {"ids|request", "prompts|prompt|request", "outputs|output|request", "blocks", "block_size", "max_running"},
          [&](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p, const std::vector<std::size_t>& o,
              std::size_t blocks, std::size_t block_size, std::size_t max_running) {
            const std::vector<ch17::Request> trace = trace_of(i, p, o);
            std::vector<double> at;
            for (const ch17::Request& r : trace) at.push_back(static_cast<double>(r.arrival));
            const ch17::StepClock one = [](const ch17::StepWork&) { return 1.0; };
            if (chunked) {
              ch17::ChunkedScheduler s(blocks, block_size, max_running, 3);
              const ch17::ServeStats st = ch17::serve(trace, at, s, one);
              return std::vector<std::size_t>{st.steps, st.generated};
            }
            ch17::PagedScheduler s(blocks, block_size, max_running);
            if (!trace.empty() && trace[0].id == 0) s.arrive(trace[0]);  // arrive() alone, then the whole trace
            ch17::PagedScheduler fresh(blocks, block_size, max_running);
            const ch17::ServeStats st = ch17::serve(trace, at, fresh, one);
            return std::vector<std::size_t>{st.steps, st.generated};
          },
          ids, prompts, outputs, std::size_t{4}, std::size_t{4}, std::size_t{2})
          .fits([&](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p,
                    const std::vector<std::size_t>& o, std::size_t blocks, std::size_t block_size,
                    std::size_t max_running) {
            return max_running >= 1 && pool_fits(trace_of(i, p, o), blocks, block_size);
          })
          .answer([&](const std::vector<std::size_t>& r, const std::vector<std::size_t>& i,
                      const std::vector<std::size_t>& p, const std::vector<std::size_t>& o, std::size_t, std::size_t,
                      std::size_t) { return r[1] == tokens_of(trace_of(i, p, o)); })
          .run();
    hostile::battery(
        "serve_chunked",
        {"ids|request", "prompts|prompt|request", "outputs|output|request", "blocks", "block_size", "max_running",
         "token_budget"},
        [&](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p, const std::vector<std::size_t>& o,
            std::size_t blocks, std::size_t block_size, std::size_t max_running, std::size_t budget) {
          const ch17::ServeStats st = ch17::serve_chunked(trace_of(i, p, o), blocks, block_size, max_running, budget);
          return std::vector<std::size_t>{st.steps, st.generated};
        },
        ids, prompts, outputs, std::size_t{4}, std::size_t{4}, std::size_t{2}, std::size_t{3})
        .fits([&](const std::vector<std::size_t>& i, const std::vector<std::size_t>& p,
                  const std::vector<std::size_t>& o, std::size_t blocks, std::size_t block_size,
                  std::size_t max_running, std::size_t budget) {
          return max_running >= 1 && budget >= 1 && pool_fits(trace_of(i, p, o), blocks, block_size);
        })
        .answer([&](const std::vector<std::size_t>& r, const std::vector<std::size_t>& i,
                    const std::vector<std::size_t>& p, const std::vector<std::size_t>& o, std::size_t, std::size_t,
                    std::size_t, std::size_t) { return r[1] == tokens_of(trace_of(i, p, o)); })
        .run();
    hostile::battery(
        "ReservingScheduler", {"batching", "budget_tokens", "max_len", "max_running"},
        [&](ch17::Batching batching, std::size_t budget, std::size_t max_len, std::size_t max_running) {
          ch17::ReservingScheduler s(batching, budget, max_len, max_running);
          const ch17::ServeStats st = ch17::serve_on_steps(trace_of(ids, prompts, outputs), s);
          return std::vector<std::size_t>{st.steps, st.generated};
        },
        ch17::Batching::continuous, std::size_t{32}, std::size_t{10}, std::size_t{2})
        .fits([](ch17::Batching batching, std::size_t budget, std::size_t max_len, std::size_t max_running) {
          return static_cast<int>(batching) <= 1 && max_running >= 1 && max_len >= 8 && budget >= max_len;
        })
        .answer([&](const std::vector<std::size_t>& r, ch17::Batching, std::size_t, std::size_t, std::size_t) {
          return r[1] == tokens_of(trace_of(ids, prompts, outputs));
        })
        .run();
    hostile::battery(
        "serve", {"arrivals"},
        [&](const std::vector<double>& at) {
          ch17::PagedScheduler s(16, 4, 2);
          const ch17::ServeStats st =
              ch17::serve(trace_of(ids, prompts, outputs), at, s, [](const ch17::StepWork&) { return 1.0; });
          return std::vector<std::size_t>{st.generated};
        },
        std::vector<double>{0.0, 0.5, 2.0})
        .fits([](const std::vector<double>& at) {
          if (at.size() != 3) return false;
          for (std::size_t k = 0; k < 3; ++k)
            if (!std::isfinite(at[k]) || at[k] < 0 || (k > 0 && at[k] < at[k - 1])) return false;
          return true;
        })
        .answer([](const std::vector<std::size_t>& r, const std::vector<double>&) { return r[0] == 9; })
        .run();
    hostile::battery(
        "poisson_arrivals", {"requests", "rate", "seed"},
        [](std::size_t requests, double rate, std::size_t seed) {
          return ch17::poisson_arrivals(requests, rate, seed);
        },
        std::size_t{5}, 2.0, std::size_t{3})
        .fits([](std::size_t requests, double rate, std::size_t) {
          return requests >= 1 && requests < (1ull << 26) && std::isfinite(rate) && rate > 0;
        })
        .answer([](const std::vector<double>& at, std::size_t requests, double, std::size_t) {
          return at.size() == requests && std::is_sorted(at.begin(), at.end());
        })
        .exempt("= 2^32", "2^32 arrival times, 32 GiB: answered or refused by the memory available")
        .run();
    hostile::battery(
        "token_latency", {"first_token_at|stats", "finished_at|stats", "arrivals"},
        [&](const std::vector<double>& first, const std::vector<double>& finished, const std::vector<double>& at) {
          ch17::ServeStats st;
          st.first_token_at = first;
          st.finished_at = finished;
          const ch17::TokenLatency l = ch17::token_latency(st, trace_of(ids, prompts, outputs), at);
          return std::vector<double>{static_cast<double>(l.ttft.size()), static_cast<double>(l.tpot.size())};
        },
        std::vector<double>{1.0, 2.0, 3.0}, std::vector<double>{2.0, 5.0, 6.0}, std::vector<double>{0.0, 1.0, 2.0})
        .fits([](const std::vector<double>& first, const std::vector<double>& finished, const std::vector<double>& at) {
          bool finite = first.size() == 3 && finished.size() == 3 && at.size() == 3;
          for (std::size_t k = 0; finite && k < 3; ++k)
            finite = std::isfinite(first[k]) && std::isfinite(finished[k]) && std::isfinite(at[k]);
          return finite;
        })
        .run();
    hostile::battery(
        "time_quantile", {"times", "q"},
        [](const std::vector<double>& times, double q) { return std::vector<double>{ch17::time_quantile(times, q)}; },
        std::vector<double>{3.0, 1.0, 2.0}, 0.5)
        .fits([](const std::vector<double>& times, double q) {
          for (const double x : times)
            if (!std::isfinite(x)) return false;
          return !times.empty() && q >= 0 && q <= 1;
        })
        .run();
  }
}
