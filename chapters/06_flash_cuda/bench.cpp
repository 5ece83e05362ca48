// Chapter 06's benchmarks (`ch06_flash_cuda bench`, on a machine with a GPU): the rungs at n = 4096, d = 128,
// bh = 64 (manual time from CUDA events), and the GPU ceilings they are judged against. Without a GPU, or in a
// build without CUDA, each benchmark says so and is skipped. Recorded GPU runs are in book/recorded/.
#include <benchmark/benchmark.h>

#include <cstddef>

#include "06_flash_cuda/flash_cuda.hpp"
#include "06_flash_cuda/ladder.hpp"
#include "06_flash_cuda/rungs.hpp"

namespace {

namespace ch06 = attn::ch06;

void BM_rung(benchmark::State& state) {
#if ATTN_HAVE_CUDA
  const ch06::DeviceInfo device = ch06::query_device();
  if (!device.present) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const auto rung = ch06::ladder()[static_cast<std::size_t>(state.range(0))];
  const ch06::Shape shape{64, 4096, 4096, 128, state.range(1) != 0};
  ch06::GpuWorkspace workspace(shape, rung.materialises_S);
  workspace.fill_normal(67);
  for (auto _ : state)
    state.SetIterationTime(workspace.median_ms([&] { rung.launch(shape, workspace.tensors()); }, 1, 0) * 1e-3);
  state.SetLabel(rung.name);
  state.counters["TFLOP/s"] =
      benchmark::Counter(ch06::attention_flops(shape), benchmark::Counter::kIsIterationInvariantRate);
#else
  state.SkipWithError("built without CUDA");
#endif
}
BENCHMARK(BM_rung)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
    ->ArgNames({"rung", "causal"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_ceilings(benchmark::State& state) {
#if ATTN_HAVE_CUDA
  if (!ch06::query_device().present) {
    state.SkipWithError("no CUDA device");
    return;
  }
  ch06::Ceilings c;
  for (auto _ : state) c = ch06::measure_ceilings();
  state.counters["fp32_TFLOPs"] = c.fp32_tflops;
  state.counters["bf16_TFLOPs"] = c.bf16_tflops;
  state.counters["copy_GBs"] = c.copy_gbs;
#else
  state.SkipWithError("built without CUDA");
#endif
}
BENCHMARK(BM_ceilings)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
