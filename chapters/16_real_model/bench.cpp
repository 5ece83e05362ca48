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

#include "16_real_model/minilm.hpp"
#include "16_real_model/real_model.hpp"
#include "attn/ceilings.hpp"
#include "attn/checks.hpp"

namespace {

namespace ch16 = attn::ch16;

const attn::BenchCeilings ceilings_at{1, 2};  // the embeddings run on one thread and on two

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
/// (batch 1, sentence_embedding()) or packed into one batch (sentence_embeddings()). Sentences per second;
/// `./course bench 16 --vs-torch` sets the 2-thread figures beside sentence-transformers'.
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
  for (auto _ : state) {
    std::atomic<std::size_t> next_thread{0};
    attn::run_on_threads(threads, [&] {
      const std::size_t t = next_thread.fetch_add(1), end = (t + 1) * n / threads;  // this thread's share
      for (std::size_t s = t * n / threads; s < end; s += batch) {
        const auto first = sentences.begin() + static_cast<std::ptrdiff_t>(s);
        benchmark::DoNotOptimize(
            ch16::sentence_embeddings(m, {first, first + static_cast<std::ptrdiff_t>(std::min(batch, end - s))})
                .data());
      }
    });
  }
  state.counters["sentences/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n), benchmark::Counter::kIsRate);
  state.counters["sentences"] = static_cast<double>(n);
}
BENCHMARK(BM_embed_sentences)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{1, 32}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// [bench]

}  // namespace
