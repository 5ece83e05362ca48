// Chapter 17's benchmarks (`./course bench 17`, or `ch17_serving bench`), on one attention layer of Llama-3-8B's
// shape (32 query heads, 8 KV heads of d_k = d_v = 128, float32, random keys and values):
//   - the paged decode step (paged_decode.cpp) at block sizes 8 … 128 against the same kernel over one block that
//     holds the whole sequence (contiguous) and chapter 09's one-pass kernel over its contiguous cache, at 32K tokens,
//     on one core: what reading through a block table costs;
//   - split-KV decoding at batch 1 over 1K … 128K tokens on every hardware thread, against the unsplit paged kernel
//     and chapter 09's kernel on one core, and against the bound of the bytes at the triad's bandwidth on as many
//     threads (one of the run's ceilings).
// Every decode step reads the cache once: its bytes, 2 · g · n · d · 4, over its time give its GB/s, set against the
// triad's. Figures from a run are on the measurements page (book/measure_17_serving.md), never in these comments.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "09_mqa_gqa/decode_fast.hpp"
#include "09_mqa_gqa/mqa_gqa.hpp"
#include "17_serving/paged_decode.hpp"
#include "17_serving/serve_sim.hpp"
#include "17_serving/trace.hpp"
#include "attn/bench.hpp"
#include "attn/blas_threads.hpp"
#include "attn/ceilings.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"

namespace {

using attn::Matrix;
using attn::Tensor3;
namespace ch17 = attn::ch17;

const attn::BenchCeilings ceilings_at{1, attn::hardware_threads()};  // one core, and every hardware thread

constexpr std::size_t kH = 32, kG = 8, kD = 128;  // Llama-3-8B's attention: 32 query heads share 8 KV heads of 128
constexpr std::size_t kContiguous = 0;            // the block-size argument that means "one block, the whole cache"

/// Bytes a decode step over n tokens must read: every key and value of the 8 KV heads.
double step_bytes(std::size_t n) { return 2.0 * kG * static_cast<double>(n) * kD * sizeof(float); }

/// A paged cache of one sequence of n tokens in blocks of B (B = kContiguous: one block of n), filled with random
/// keys and values (attn::random_inputs, drawn once per run), and its query. One lives at a time: the largest is 1 GiB.
struct PagedSetup {
  std::size_t n, B;
  attn::PagedKVCache cache;
  attn::BlockTable table;
  Matrix q;  // (h, d_k)
  PagedSetup(std::size_t n_, std::size_t B_)
      : n(n_), B(B_ == kContiguous ? n_ : B_), cache({1, kG, kD, kD, B}, (n_ + B - 1) / B * block_bytes(B)) {
    const attn::RandomInputs& kv = attn::random_inputs(2, kG, n, kD, 17);  // (g, n, d) keys and values
    for (std::size_t t = 0; t < n; ++t) {
      if (t % B == 0) table.blocks.push_back(*cache.pool().allocate());
      ++table.length;
      cache.write(0, table.blocks.back(), t % B, xt::view(kv.tensor(0), xt::all(), t, xt::all()),
                  xt::view(kv.tensor(1), xt::all(), t, xt::all()));
    }
    q = attn::random_inputs(1, 1, kH, kD, 18).head(0, 0);
  }
  static std::size_t block_bytes(std::size_t B) { return attn::kv_block_bytes({1, kG, kD, kD, B}, sizeof(float)); }
};

PagedSetup& paged_setup(std::size_t n, std::size_t B) {
  static std::unique_ptr<PagedSetup> kept;
  const std::size_t want = B == kContiguous ? n : B;
  if (!kept || kept->n != n || kept->B != want) {
    kept.reset();
    kept = std::make_unique<PagedSetup>(n, B);
  }
  return *kept;
}

/// Chapter 09's contiguous cache of the same n tokens, and its one-pass kernel.
struct ContiguousSetup {
  std::size_t n;
  attn::KVCache cache;
  Matrix q;
  explicit ContiguousSetup(std::size_t n_) : n(n_), cache(kG, n_, kD, kD) {
    const attn::RandomInputs& kv = attn::random_inputs(2, kG, n, kD, 17);
    for (std::size_t t = 0; t < n; ++t)
      cache.append(xt::view(kv.tensor(0), xt::all(), t, xt::all()), xt::view(kv.tensor(1), xt::all(), t, xt::all()));
    q = attn::random_inputs(1, 1, kH, kD, 18).head(0, 0);
  }
};

ContiguousSetup& contiguous_setup(std::size_t n) {
  static std::unique_ptr<ContiguousSetup> kept;
  if (!kept || kept->n != n) {
    kept.reset();
    kept = std::make_unique<ContiguousSetup>(n);
  }
  return *kept;
}

void report_bytes(benchmark::State& state, std::size_t n, double seconds, int threads) {
  const double gbs = step_bytes(n) / seconds / 1e9;
  state.counters["KV_MiB"] = step_bytes(n) / (1024.0 * 1024.0);
  state.counters["GB/s"] = gbs;
  state.counters["%triad"] = 100.0 * gbs / attn::ceilings(threads).triad_gbs();
}

/// The triad on one core and on every hardware thread: the ceilings the GB/s are read against.
void BM_Triad(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(attn::ceilings(threads).triad_gbs());
  state.counters["GB/s"] = attn::ceilings(threads).triad_gbs();
}
BENCHMARK(BM_Triad)->Arg(1)->Arg(attn::hardware_threads())->ArgName("threads")->Iterations(1);

// [bench_paged]
/// One decode step over n = 32K cached tokens through a block table of blocks of B tokens (B = 0: one block holding
/// the whole sequence, the same kernel over a contiguous cache), on one core.
void BM_PagedDecode(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)), B = static_cast<std::size_t>(state.range(1));
  PagedSetup& s = paged_setup(n, B);
  const double seconds = attn::time_benchmark_calls(state, [&] {
                           benchmark::DoNotOptimize(ch17::paged_decode(s.cache, 0, s.table, s.q).data());
                         }).wall;
  attn::record(fmt::format("paged B = {}", B), n, seconds);
  report_bytes(state, n, seconds, 1);
}
BENCHMARK(BM_PagedDecode)
    ->ArgsProduct({{32768}, {8, 16, 32, 64, 128, 256, static_cast<long>(kContiguous)}})
    ->ArgNames({"n", "B"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);
// [bench_paged]

/// Chapter 09's one-pass kernel over its contiguous cache, one core: the reference of both benchmarks.
void BM_Chapter09Decode(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  ContiguousSetup& s = contiguous_setup(n);
  const double seconds = attn::time_benchmark_calls(state, [&] {
                           benchmark::DoNotOptimize(attn::ch09::decode_attend_fast(s.cache, s.q).data());
                         }).wall;
  attn::record("chapter 09", n, seconds);
  report_bytes(state, n, seconds, 1);
}
BENCHMARK(BM_Chapter09Decode)
    ->RangeMultiplier(4)
    ->Range(1024, 131072)
    ->Arg(32768)  // the paged rows' length
    ->ArgName("n")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);

/// Chapter 09's kernel's seconds a step over n tokens: this run's BM_Chapter09Decode, or measured here when a filter
/// left it out.
double chapter09_seconds(std::size_t n) {
  return attn::recorded_or_measured("chapter 09", n, [&] {
    ContiguousSetup& c = contiguous_setup(n);
    return attn::time_calls([&] { benchmark::DoNotOptimize(attn::ch09::decode_attend_fast(c.cache, c.q).data()); },
                            {3, 1})
        .wall;
  });
}

// [bench_split]
/// Split-KV decoding at batch 1: the sequence's blocks of 32 tokens (the kernel's stretch: what paging costs is
/// measured above) cut into 4 ranges per hardware thread, merged; its bytes per second against the triad on as many
/// threads.
void BM_SplitKvDecode(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto threads = static_cast<std::size_t>(attn::hardware_threads());
  PagedSetup& s = paged_setup(n, 32);
  const double seconds =
      attn::time_benchmark_calls(state, [&] {
        benchmark::DoNotOptimize(ch17::split_kv_decode(s.cache, 0, s.table, s.q, 4 * threads, threads).O.data());
      }).wall;
  attn::record("split-KV", n, seconds);
  report_bytes(state, n, seconds, attn::hardware_threads());
  state.counters["threads"] = static_cast<double>(threads);
  // Against chapter 09's one-core kernel at the same n: this run's, or measured here when a filter left it out.
  const double ch09 = chapter09_seconds(n);
  state.counters["speedup_vs_ch09"] = ch09 / seconds;
  state.counters["%bound"] = 100.0 * (step_bytes(n) / (attn::ceilings(attn::hardware_threads()).triad_gbs() * 1e9)) /
                             seconds;  // the bound's time over the step's
}
BENCHMARK(BM_SplitKvDecode)
    ->RangeMultiplier(4)
    ->Range(1024, 131072)
    ->ArgName("n")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);
// [bench_split]

/// The serving benchmark, measured as serving is measured: open-loop arrivals in seconds (a Poisson process of a given
/// rate that does not wait for the server) at rising request rates, every step run for real and timed, each
/// request's time to first token (TTFT) and time per output token (TPOT) in seconds. A step runs on kLayers attention
/// layers of Llama-3-8B's shape with random weights: the projections of every token the step computes (a decode's
/// new token, every token of a prompt chunk) through OpenBLAS on every hardware thread, a decode's attention by the
/// paged decode kernel and a chunk's by the paged prefill kernel. So a prefill, and a recompute after a preemption,
/// cost what they compute; the weights (kLayers × 168 MB) are read once per step whatever the batch. Four schedulers
/// under one KV budget (4 sequences of the longest length): static batching and continuous batching reserving the
/// maximum, paged continuous batching (the learner's schedule_step(), each prompt prefilled whole in one step), and
/// paged with chunked prefill under a per-step budget of kChunkBudget tokens. Idle time between arrivals is skipped on
/// the clock (nothing is computed in it), so a run costs the time of its steps. Appending each token's keys and values
/// (8 KiB per layer) is left out.
constexpr std::size_t kLayers = 1, kModel = kH * kD, kKvWidth = kG * kD;  // d_model 4096; K and V 1024 each
constexpr std::size_t kServePromptMax = 256, kServeOutputMax = 64;
constexpr std::size_t kServeMaxLen = kServePromptMax + kServeOutputMax, kServeBlock = 16, kServeRunning = 8;
constexpr std::size_t kServeBudget = 4 * kServeMaxLen;  // KV tokens: 4 sequences of the longest length
constexpr std::size_t kChunkBudget = 32;                // tokens a chunked step computes at most
constexpr std::size_t kServeRequests = 16;
constexpr double kServeRates[] = {0.25, 0.5, 1.0, 2.0, 4.0};  // requests per second, offered
const char* const kSchedulers[] = {"static, reserve max", "continuous, reserve max", "continuous, paged",
                                   "paged, chunked prefill"};

ch17::TraceSpec serve_trace_spec() {
  ch17::TraceSpec spec;
  spec.requests = kServeRequests;
  spec.prompt_min = 32;
  spec.prompt_max = kServePromptMax;
  spec.output_mean = 16.0;
  spec.output_max = kServeOutputMax;
  return spec;
}

/// kLayers layers of weights and a paged cache with room for kServeRunning sequences of the longest length.
struct ServeModel {
  std::vector<Matrix> W_qkv, W_O;  // (kLayers) of (d_model, d_model + 2 · kv width) and (d_model, d_model)
  attn::PagedKVCache cache;
  std::size_t blocks_per_slot = (kServeMaxLen + kServeBlock - 1) / kServeBlock;
  ServeModel()
      : cache({kLayers, kG, kD, kD, kServeBlock},
              kServeRunning * 4 * ((kServeMaxLen + kServeBlock - 1) / kServeBlock) *
                  attn::kv_block_bytes({kLayers, kG, kD, kD, kServeBlock}, sizeof(float))) {
    for (std::size_t l = 0; l < kLayers; ++l) {  // small weights of a cheap pattern: the values do not matter here
      W_qkv.push_back(pattern({kModel, kModel + 2 * kKvWidth}, l));
      W_O.push_back(pattern({kModel, kModel}, l + kLayers));
    }
    while (cache.pool().free_blocks() > 0) cache.pool().allocate();                  // every block a slot's, in order
    const attn::RandomInputs& kv = attn::random_inputs(2, kG, kServeBlock, kD, 19);  // one block's keys and values
    for (std::size_t b = 0; b < cache.pool().total_blocks(); ++b)
      for (std::size_t l = 0; l < kLayers; ++l)
        for (std::size_t t = 0; t < kServeBlock; ++t)
          cache.write(l, static_cast<attn::BlockId>(b), t, xt::view(kv.tensor(0), xt::all(), t, xt::all()),
                      xt::view(kv.tensor(1), xt::all(), t, xt::all()));
  }
  static Matrix pattern(std::vector<std::size_t> shape, std::size_t salt) {
    Matrix W = xt::empty<float>(shape);
    std::uint32_t x = 2654435761u * static_cast<std::uint32_t>(salt + 1);
    for (float& w : W) {
      x = x * 1664525u + 1013904223u;
      w = (static_cast<float>(x >> 9) / 8388608.0f - 1.0f) * 0.02f;
    }
    return W;
  }
  /// The table of the sequence in slot \p slot at \p length tokens: that slot's first blocks.
  attn::BlockTable table(std::size_t slot, std::size_t length) const {
    attn::BlockTable t;
    const std::size_t first = (slot % (4 * kServeRunning)) * blocks_per_slot;
    for (std::size_t b = 0; b < (length + kServeBlock - 1) / kServeBlock; ++b)
      t.blocks.push_back(static_cast<attn::BlockId>(first + b));
    t.length = length;
    return t;
  }
};

/// Runs one step's work on \p m: its tokens' projections, layer by layer, and their attention: each decode's new
/// token over its sequence's cached tokens (paged_decode()), each prefill chunk's tokens over the cached ones and the
/// chunk's before them (paged_prefill()). A step computes one row per decode and one per prompt token of a chunk.
void run_step(ServeModel& m, const ch17::StepWork& work) {
  const std::size_t rows = work.tokens();
  if (rows == 0) return;
  Matrix X = ServeModel::pattern({rows, kModel}, 99);  // (rows, d_model) the step's inputs: decodes, then chunks
  for (std::size_t l = 0; l < kLayers; ++l) {
    const Matrix QKV = attn::matmul(X, m.W_qkv[l]);  // (rows, d_model + 2 · kv width); only Q is used below
    Matrix A = xt::empty<float>({rows, kModel});     // (rows, d_model) each row's attention, heads side by side
    std::size_t row = 0, slot = 0;
    for (const std::size_t n : work.decode_lengths) {
      const Matrix q = xt::reshape_view(xt::view(QKV, row, xt::range(0, kModel)), {kH, kD});  // (h, d_k)
      const Matrix o = ch17::paged_decode(m.cache, l, m.table(slot++, n), q);                 // (h, d_v)
      std::copy(o.begin(), o.end(), A.data() + row++ * kModel);
    }
    for (const ch17::PrefillChunk& c : work.prefills) {
      Tensor3 Q = xt::empty<float>({kH, c.tokens, kD});  // (h, c, d_k): the chunk's rows, by head
      for (std::size_t t = 0; t < c.tokens; ++t)
        for (std::size_t i = 0; i < kH; ++i)
          std::copy_n(QKV.data() + (row + t) * QKV.shape(1) + i * kD, kD, &Q(i, t, 0));
      const Tensor3 O = ch17::paged_prefill(m.cache, l, m.table(slot++, c.cached + c.tokens), Q, c.cached);
      for (std::size_t t = 0; t < c.tokens; ++t)  // (h, c, d_v) back to (rows, d_model)
        for (std::size_t i = 0; i < kH; ++i) std::copy_n(&O(i, t, 0), kD, A.data() + (row + t) * kModel + i * kD);
      row += c.tokens;
    }
    X = attn::matmul(A, m.W_O[l]);  // (rows, d_model)
  }
  benchmark::DoNotOptimize(X.data());
}

// [bench_serve]
/// The scheduler \p which of kSchedulers over the KV budget.
std::unique_ptr<ch17::Scheduler> make_scheduler(int which) {
  switch (which) {
    case 0:
      return std::make_unique<ch17::ReservingScheduler>(ch17::Batching::fixed, kServeBudget, kServeMaxLen,
                                                        kServeRunning);
    case 1:
      return std::make_unique<ch17::ReservingScheduler>(ch17::Batching::continuous, kServeBudget, kServeMaxLen,
                                                        kServeRunning);
    case 2:
      return std::make_unique<ch17::PagedScheduler>(kServeBudget / kServeBlock, kServeBlock, kServeRunning);
    default:
      return std::make_unique<ch17::ChunkedScheduler>(kServeBudget / kServeBlock, kServeBlock, kServeRunning,
                                                      kChunkBudget);
  }
}

/// What one open-loop run measured.
struct ServePoint {
  ch17::ServeStats stats;
  double tokens_per_s, req_per_s, cpu_s, ttft_p50, ttft_p99, tpot_p50, tpot_p99;
};

/// Serves the trace with scheduler \p which at kServeRates[rate_index] requests per second, open loop, every step run
/// on the model and timed: the clock is the steps' seconds. Records its throughput and latencies for the summary.
ServePoint serve_open_loop(int which, std::size_t rate_index) {
  static ServeModel model;
  const std::vector<ch17::Request> trace = ch17::request_trace(serve_trace_spec());
  const std::vector<double> arrivals = ch17::poisson_arrivals(trace.size(), kServeRates[rate_index], 1717);
  attn::BlasThreads blas(attn::hardware_threads());
  double cpu = 0.0;  // CPU seconds of the steps, every thread's
  const ch17::StepClock timed = [&](const ch17::StepWork& work) {
    const attn::CallSeconds t = attn::time_calls([&] { run_step(model, work); }, {1, 0});
    cpu += t.cpu;
    return t.wall;
  };
  const std::unique_ptr<ch17::Scheduler> scheduler = make_scheduler(which);
  ServePoint p{ch17::serve(trace, arrivals, *scheduler, timed), 0, 0, cpu, 0, 0, 0, 0};
  const ch17::TokenLatency lat = ch17::token_latency(p.stats, trace, arrivals);
  const double span = p.stats.elapsed - arrivals.front();  // from the first arrival to the last token
  p.tokens_per_s = static_cast<double>(p.stats.generated) / span;
  p.req_per_s = static_cast<double>(trace.size()) / span;
  p.cpu_s = cpu;
  p.ttft_p50 = ch17::time_quantile(lat.ttft, 0.5);
  p.ttft_p99 = ch17::time_quantile(lat.ttft, 0.99);
  p.tpot_p50 = ch17::time_quantile(lat.tpot, 0.5);
  p.tpot_p99 = ch17::time_quantile(lat.tpot, 0.99);
  const std::string series = kSchedulers[which];
  attn::record(series + " tokens/s", rate_index, p.tokens_per_s);
  attn::record(series + " req/s", rate_index, p.req_per_s);
  attn::record(series + " ttft_p50", rate_index, p.ttft_p50);
  return p;
}

void BM_ServeOpenLoop(benchmark::State& state) {
  const auto which = static_cast<int>(state.range(0));
  const auto rate_index = static_cast<std::size_t>(state.range(1));
  for (auto _ : state) {
    const ServePoint p = serve_open_loop(which, rate_index);
    state.SetIterationTime(p.stats.elapsed);
    state.counters["rate"] = kServeRates[rate_index];
    state.counters["tokens/s"] = p.tokens_per_s;
    state.counters["req/s"] = p.req_per_s;
    state.counters["tokens/cpu_s"] = static_cast<double>(p.stats.generated) / p.cpu_s;
    state.counters["ttft_p50_s"] = p.ttft_p50;
    state.counters["ttft_p99_s"] = p.ttft_p99;
    state.counters["tpot_p50_s"] = p.tpot_p50;
    state.counters["tpot_p99_s"] = p.tpot_p99;
    state.counters["steps"] = static_cast<double>(p.stats.steps);
    state.counters["mean_running"] = p.stats.mean_running;
    state.counters["preempted"] = static_cast<double>(p.stats.preemptions);
    state.counters["recomputed"] = static_cast<double>(p.stats.recomputed);
  }
  state.SetLabel(kSchedulers[which]);
}
BENCHMARK(BM_ServeOpenLoop)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1, 2, 3, 4}})
    ->ArgNames({"scheduler", "rate"})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kSecond);
// [bench_serve]

/// Where BM_BlockSize draws the block-size trade-off (`ch17_serving bench --plot-blocks=FILE.svg`); empty: none.
std::string block_plot_file;
const attn::BenchFlag block_plot_flag{"--plot-blocks", [](const std::string& file) { block_plot_file = file; }};

/// The block size's trade-off, each cost a percentage against B: the paged kernel's time over 32K tokens against
/// chapter 09's contiguous kernel (this run's BM_PagedDecode and BM_Chapter09Decode, or measured here when a filter
/// left them out); the KV memory held but holding no token when the serving trace is served on the step clock
/// under the same budget (paging wastes up to B − 1 slots a sequence); and the block table itself, one BlockId per B
/// tokens, against one layer's keys and values of those tokens (the table serves every layer, so this is its most).
/// Time is measured; waste is counted; the table is arithmetic.
void BM_BlockSize(benchmark::State& state) {
  for (auto _ : state) {
  }
  constexpr std::size_t n = 32768;
  const double ch09 = chapter09_seconds(n);
  const std::vector<ch17::Request> trace = ch17::request_trace(serve_trace_spec());
  attn::Series time{"decode time, % of chapter 09's contiguous kernel", {}, {}, true};
  attn::Series waste{"KV memory wasted, % of what is held", {}, {}, true};
  attn::Series table{"block table, % of the KV memory it indexes", {}, {}, true};
  for (const std::size_t B : {8, 16, 32, 64, 128, 256}) {
    const double paged = attn::recorded_or_measured(fmt::format("paged B = {}", B), n, [&] {
      PagedSetup& s = paged_setup(n, B);
      return attn::time_calls([&] { benchmark::DoNotOptimize(ch17::paged_decode(s.cache, 0, s.table, s.q).data()); },
                              {3, 1})
          .wall;
    });
    const double x = static_cast<double>(B);
    time.x.push_back(x), time.y.push_back(100.0 * paged / ch09);
    waste.x.push_back(x),
        waste.y.push_back(100.0 * ch17::serve_paged(trace, kServeBudget / B, B, kServeRunning).waste());
    table.x.push_back(x), table.y.push_back(100.0 * sizeof(attn::BlockId) / (x * step_bytes(1)));
    state.counters[fmt::format("time_%ch09_B{}", B)] = time.y.back();
    state.counters[fmt::format("%waste_B{}", B)] = waste.y.back();
  }
  if (!block_plot_file.empty()) {
    attn::write_svg_plot(block_plot_file, {"What a block size costs: decode time, wasted memory and the table",
                                           "block size B (tokens)",
                                           "% (log scale)",
                                           true,
                                           true,
                                           {time, waste, table}});
    fmt::print("(plot written: {})\n", block_plot_file);
  }
}
BENCHMARK(BM_BlockSize)->Iterations(1);

/// Where BM_ServeSummary draws the latency-throughput curves (`ch17_serving bench --plot=FILE.svg`); empty: none.
std::string plot_file;
const attn::BenchFlag plot_flag{"--plot", [](const std::string& file) { plot_file = file; }};

/// Each scheduler's saturation: the requests per second it serves at the highest offered rate (past its capacity
/// the queue grows, and TTFT with it), and the latency-throughput curves, TTFT p50 against tokens per second, one
/// point per offered rate. Every figure is this run's BM_ServeOpenLoop's, or measured here when a filter left it out.
void BM_ServeSummary(benchmark::State& state) {
  for (auto _ : state) {
  }
  attn::PlotSpec spec{"Serving on open-loop arrivals: time to first token against throughput",
                      "tokens per second",
                      "TTFT, median (s)",
                      false,
                      true,
                      {}};
  const std::size_t rates = std::size(kServeRates);
  for (int which = 0; which < static_cast<int>(std::size(kSchedulers)); ++which) {
    const std::string name = kSchedulers[which];
    const auto value = [&](const char* what, std::size_t i) {
      return attn::recorded_or_measured(name + what, i, [&] {
        const ServePoint p = serve_open_loop(which, i);
        return std::string(what) == " tokens/s" ? p.tokens_per_s
               : std::string(what) == " req/s"  ? p.req_per_s
                                                : p.ttft_p50;
      });
    };
    state.counters[fmt::format("saturation_req/s_{}", which)] = value(" req/s", rates - 1);
    attn::Series s{name, {}, {}, true};
    for (std::size_t i = 0; i < rates; ++i) {
      s.x.push_back(value(" tokens/s", i));
      s.y.push_back(value(" ttft_p50", i));
    }
    spec.series.push_back(s);
  }
  if (!plot_file.empty()) {
    attn::write_svg_plot(plot_file, spec);
    fmt::print("(plot written: {})\n", plot_file);
  }
}
BENCHMARK(BM_ServeSummary)->Iterations(1);

}  // namespace
