// The fixture chapter's benchmark (tests/fixture_chapter/): one score, timed.
#include <benchmark/benchmark.h>

#include "@NN@_fixture/fixture.hpp"

namespace {
void BM_ScaledScore(benchmark::State& state) {
  const attn::Vector q = {1.0f, 2.0f, 3.0f, 4.0f}, k = {1.0f, 1.0f, 1.0f, 1.0f};  // (d_k) each
  for (auto _ : state) benchmark::DoNotOptimize(attn::fixture::scaled_score(q, k));
}
BENCHMARK(BM_ScaledScore);
}  // namespace
