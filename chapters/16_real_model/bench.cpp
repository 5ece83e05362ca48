// Chapter 16's benchmarks (`./course bench 16`, or `ch16_real_model bench`), recorded on the chapter's
// measurements page (book/measure_16_real_model.md): loading all-MiniLM-L6-v2, and the sentence embeddings of
// the chapter's 200 sentences one by one and batched, on one and two threads. `./course bench 16 --vs-torch` sets
// the 2-thread figures beside sentence-transformers'. Without the model (./course setup fetches it) each
// benchmark says so and is skipped.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "16_real_model/fast_minilm.hpp"
#include "16_real_model/minilm.hpp"
#include "16_real_model/real_model.hpp"
#include "attn/ceilings.hpp"
#include "attn/checks.hpp"
#include "attn/measure.hpp"

namespace {

namespace ch16 = attn::ch16;

const attn::BenchCeilings ceilings_at{1, 2};  // the embeddings run on one thread and on two

/// Runs \p embed_share(t, begin, end) on \p threads threads for every iteration of \p state, thread t taking an
/// equal share [begin, end) of the \p n sentences; counts sentences per second (wall) and per CPU-second of the
/// process.
template <class EmbedShare>
void embed_on_threads(benchmark::State& state, std::size_t n, std::size_t threads, const EmbedShare& embed_share) {
  const attn::CallSeconds s = attn::time_benchmark_calls(state, [&] {
    std::atomic<std::size_t> next_thread{0};
    attn::run_on_threads(threads, [&] {
      const std::size_t t = next_thread.fetch_add(1);
      embed_share(t, t * n / threads, (t + 1) * n / threads);  // thread t's share
    });
  });
  const double sentences = static_cast<double>(state.iterations() * n);
  state.counters["sentences/s"] = benchmark::Counter(sentences, benchmark::Counter::kIsRate);
  state.counters["sentences/cpu_s"] = static_cast<double>(n) / s.cpu;  // s.cpu: the process's, every thread's
  state.counters["sentences"] = static_cast<double>(n);
}

// [bench]
/// Loading the model: config, vocabulary, the mapped file's header checked, 101 tensors copied out.
void BM_load_model(benchmark::State& state) {
  const std::string dir = ch16::default_model_dir();
  if (const std::string why = ch16::model_missing_reason(dir); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(ch16::load_minilm(dir).layers.size());
}
BENCHMARK(BM_load_model)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Sentence embeddings of the chapter's 200 sentences on state.range(1) threads, OpenBLAS single-threaded in
/// each: every thread takes an equal share of the sentences and embeds it state.range(0) at a time, one by one
/// (batch 1, sentence_embedding()) or packed into one batch (sentence_embeddings()). Sentences per second, wall
/// and per CPU-second of the process.
void BM_embed_sentences(benchmark::State& state) {
  const std::string dir = ch16::default_model_dir();
  if (const std::string why = ch16::model_missing_reason(dir); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const attn::SingleThreadedBlas one_blas_thread_each;
  static const ch16::MiniLM m = ch16::load_minilm(dir);
  static const std::vector<std::string> sentences = ch16::read_sentences(ATTN_CH16_SENTENCES);
  const std::size_t batch = static_cast<std::size_t>(state.range(0)),
                    threads = static_cast<std::size_t>(state.range(1));
  const std::size_t n = sentences.size();
  embed_on_threads(state, n, threads, [&](std::size_t, std::size_t begin, std::size_t end) {
    for (std::size_t s = begin; s < end; s += batch) {
      const auto first = sentences.begin() + static_cast<std::ptrdiff_t>(s);
      benchmark::DoNotOptimize(
          ch16::sentence_embeddings(m, {first, first + static_cast<std::ptrdiff_t>(std::min(batch, end - s))}).data());
    }
  });
}
BENCHMARK(BM_embed_sentences)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{1, 32}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The same with the fast forward (fast_minilm.hpp: weights laid out at load, one arena per thread, fused steps):
/// what `./course bench 16 --vs-torch` races against the deployment engines.
void BM_embed_fast(benchmark::State& state) {
  const std::string dir = ch16::default_model_dir();
  if (const std::string why = ch16::model_missing_reason(dir); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const attn::SingleThreadedBlas one_blas_thread_each;
  static const ch16::MiniLM m = ch16::load_minilm(dir);
  static const ch16::FastMiniLM fast(m);
  static const std::vector<std::string> sentences = ch16::read_sentences(ATTN_CH16_SENTENCES);
  const std::size_t batch = static_cast<std::size_t>(state.range(0)),
                    threads = static_cast<std::size_t>(state.range(1));
  std::vector<ch16::ForwardScratch> scratch(threads);  // one arena per thread, kept across iterations
  embed_on_threads(state, sentences.size(), threads, [&](std::size_t t, std::size_t begin, std::size_t end) {
    ch16::ForwardScratch& mine = scratch[t];
    for (std::size_t s = begin; s < end; s += batch) {
      const auto first = sentences.begin() + static_cast<std::ptrdiff_t>(s);
      benchmark::DoNotOptimize(
          fast.embed_sentences({first, first + static_cast<std::ptrdiff_t>(std::min(batch, end - s))}, mine).data());
    }
  });
}
BENCHMARK(BM_embed_fast)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{1, 32}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// [bench]

/// One sentence's latency with the fast forward: the chapter's sentences one at a time on one thread (the forward
/// starts no other), each timed alone (attn::time_calls, one call); counters: the median and the 90th percentile over
/// every sentence of every iteration, in milliseconds. `./course bench 16 --vs-torch` sets it beside the other
/// engines'.
void BM_sentence_latency(benchmark::State& state) {
  const std::string dir = ch16::default_model_dir();
  if (const std::string why = ch16::model_missing_reason(dir); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const attn::SingleThreadedBlas one_blas_thread;
  static const ch16::MiniLM m = ch16::load_minilm(dir);
  static const ch16::FastMiniLM fast(m);
  static const std::vector<std::string> sentences = ch16::read_sentences(ATTN_CH16_SENTENCES);
  ch16::ForwardScratch scratch;
  fast.embed_sentences({sentences.front()}, scratch);  // the arena grown before the timing
  std::vector<double> ms;
  for (auto _ : state)
    for (const std::string& s : sentences) {
      const attn::CallSeconds one =
          attn::time_calls([&] { benchmark::DoNotOptimize(fast.embed_sentences({s}, scratch).data()); },
                           {1, 0});  // one call, no warm-up
      ms.push_back(one.wall * 1e3);
    }
  std::sort(ms.begin(), ms.end());
  state.counters["median_ms"] = ms[ms.size() / 2];
  state.counters["p90_ms"] = ms[ms.size() * 9 / 10];
  state.counters["sentences"] = static_cast<double>(sentences.size());
}
BENCHMARK(BM_sentence_latency)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Where one forward's time goes: the fast forward's steps (ForwardStep), each timed with steady_clock and summed
/// over every iteration, in microseconds per sentence (counters named after the steps, and their total). Batch 1:
/// one sentence of 12 tokens, the first of the chapter's sentences that has 12; batch 32: the first 32 sentences,
/// packed. One thread: the breakdown of one core's work.
void BM_forward_steps(benchmark::State& state) {
  const std::string dir = ch16::default_model_dir();
  if (const std::string why = ch16::model_missing_reason(dir); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const attn::SingleThreadedBlas one_blas_thread;
  static const ch16::MiniLM m = ch16::load_minilm(dir);
  static const ch16::FastMiniLM fast(m);
  static const std::vector<std::string> sentences = ch16::read_sentences(ATTN_CH16_SENTENCES);
  std::vector<std::string> texts;
  if (state.range(0) == 1) {
    for (const std::string& s : sentences)
      if (texts.empty() && ch16::tokenize(s, m.vocab, m.config.max_tokens).size() == 12) texts.push_back(s);
  } else {
    texts.assign(sentences.begin(), sentences.begin() + std::min<std::ptrdiff_t>(state.range(0), sentences.size()));
  }
  if (texts.empty()) {
    state.SkipWithError("no sentence of 12 tokens in sentences.txt");
    return;
  }
  ch16::ForwardScratch scratch;
  fast.embed_sentences(texts, scratch);  // the arena grown before the timing: its growth is once per thread
  ch16::ForwardProfile profile;
  for (auto _ : state) benchmark::DoNotOptimize(fast.embed_sentences(texts, scratch, &profile).data());
  double total = 0.0;
  for (std::size_t i = 0; i < profile.seconds.size(); ++i) {
    const double us = 1e6 * profile.seconds[i] / static_cast<double>(profile.sentences);
    state.counters[std::string(ch16::step_name(static_cast<ch16::ForwardStep>(i))) + "_us"] = us;
    total += us;
  }
  state.counters["steps_total_us"] = total;
  state.counters["tokens_per_sentence"] = static_cast<double>(profile.tokens) / static_cast<double>(profile.sentences);
}
BENCHMARK(BM_forward_steps)->ArgName("batch")->Arg(1)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
