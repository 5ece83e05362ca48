// Chapter 12's benchmarks (`./course bench 12`, or `ch12_learning bench`): the two training runs with the
// chapter's defaults on one thread, the steps they took and the held-out accuracy they reached, and the sgemm
// rate of the model's largest product beside them. Figures from a run belong in recordings (book/recorded/),
// never in these comments.
#include <benchmark/benchmark.h>

#include "12_learning/learning.hpp"
#include "12_learning/pronoun.hpp"
#include "12_learning/setup.hpp"
#include "12_learning/train.hpp"
#include "attn/ceilings.hpp"
#include "attn/measure.hpp"

namespace {

namespace ch12 = attn::ch12;

const attn::BenchCeilings ceilings_at{1};  // training runs on one thread

// [bench]
/// The whole training run with the chapter's defaults (one thread): its wall time, and the counters record the
/// steps and the held-out accuracy it reached.
void train_to_target(benchmark::State& state) {
  const attn::BlasThreads blas(1);
  ch12::Setup setup;
  setup.config.context = setup.train.length;
  double acc = 0.0;
  for (auto _ : state) {
    const ch12::TrainResult r = ch12::train_induction(setup.config, setup.train);
    state.PauseTiming();
    acc = ch12::induction_accuracy(r.model, setup.train.length, ch12::kEvalCount, ch12::kEvalSeed);
    state.ResumeTiming();
  }
  // A reference in the same run: one sgemm of a projection with the batch stacked, (batch·n, d)·(d, d), one thread
  // (the model itself runs one sequence at a time, (n, d)·(d, d), smaller still), beside the run's ceilings.
  // Training runs far below it: its matrices are tiny, so overheads, not flops, set its pace.
  state.counters["sgemm_ceiling_GFLOPS"] =
      attn::sgemm_gflops(setup.train.batch * setup.train.length, setup.config.d_model, setup.config.d_model);
  state.counters["steps"] = static_cast<double>(setup.train.steps);
  state.counters["accuracy_pct"] = 100.0 * acc;
}

BENCHMARK(train_to_target)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

/// The pronoun task's training run with the chapter's defaults (one thread), and the held-out accuracy it reached.
void train_pronoun(benchmark::State& state) {
  const attn::BlasThreads blas(1);
  const ch12::Setup setup;
  double acc = 0.0;
  for (auto _ : state) {
    const ch12::TrainResult r = ch12::train_pronoun(ch12::pronoun_config(), setup.pronoun);
    state.PauseTiming();
    acc = ch12::pronoun_accuracy(r.model, ch12::kEvalCount, ch12::kEvalSeed);
    state.ResumeTiming();
  }
  state.counters["steps"] = static_cast<double>(setup.pronoun.steps);
  state.counters["accuracy_pct"] = 100.0 * acc;
}

BENCHMARK(train_pronoun)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
// [bench]

}  // namespace
