// Chapter 13 — Longer than one machine: ring attention.
//
// What it shows: the sequence split over P ranks, each keeping its queries while the key/value blocks go
// around a ring; the schedule (which block each rank holds at each step); why a contiguous split wastes
// most ranks under the causal mask and how the zigzag split balances them (pairs counted per rank); the
// bytes each rank sends, counted by the link and equal to the formula; and the ring run rank by rank in one
// process, equal to chapter 05's single-process flash (O and lse).
// The same ranks as real processes: ch13_ring_mpi, launched by `./course run 13` with
// `mpirun -np 4 --oversubscribe` (chapters/13_ring/ring_mpi.cpp): non-blocking sends overlap the flash work,
// each rank's compute time per step is measured, and the result is checked against single-process flash.
// DeepSpeed-Ulysses runs here in one process (ulysses.cpp, its bytes counted); ch13_ring_mpi runs it across processes.
// What it leaves out: the backward pass, several layers, GPUs and their interconnects.
// Run it: ./course run 13      Your code: ./course run 13 --track exercise      Book page: book/13_ring.md
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "13_ring/local_link.hpp"
#include "13_ring/ring.hpp"
#include "13_ring/ulysses.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

// The values of the recording book/recorded/ch13_ring_mpi.txt (a 2-core Intel Xeon; read them there): the rate is
// one rank's per CPU-second in the non-causal zigzag ring at n = 16384, P = 2 (its 4·n²·d FLOPs over both ranks' CPU
// time: the rate of a rank that has its core to itself); α the 8-byte and the bandwidth the 16 MiB ping-pong.
constexpr double kMeasuredGflops = 100.9, kMeasuredAlphaUs = 0.44, kMeasuredLinkGBs = 11.56;

namespace ch13 = attn::ch13;
using attn::Matrix;
using ch13::Split;

std::string chunks_str(const ch13::Chunks& chunks) {
  std::vector<std::string> parts;
  for (const ch13::Chunk& c : chunks) parts.push_back(fmt::format("{}–{}", c.begin, c.end - 1));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// [schedule_table]
void print_schedule(std::size_t P) {
  attn::heading(fmt::format("The ring schedule: the key/value block each rank holds, P = {}", P));
  std::vector<std::string> header{"rank"};
  for (std::size_t s = 0; s < P; ++s) header.push_back(fmt::format("step {}", s));
  attn::Table t(header);
  for (std::size_t r = 0; r < P; ++r) {
    std::vector<std::string> row{fmt::format("{}", r)};
    for (std::size_t s = 0; s < P; ++s) row.push_back(fmt::format("KV {}", ch13::ring_source(r, s, P)));
    t.add_row(row);
  }
  t.print();
  fmt::print(
      "At every step each rank sends the block it holds to rank + 1 and receives from rank - 1;\n"
      "after P steps every rank has seen every block once, and sent P - 1 of them.\n");
}
// [schedule_table]

void print_splits(std::size_t P, std::size_t n_small, std::size_t n) {
  attn::heading(fmt::format("Who owns which positions: n = {}, P = {}", n_small, P));
  attn::Table t({"rank", "contiguous", "zigzag"});
  t.set_left(1).set_left(2);
  for (std::size_t r = 0; r < P; ++r)
    t.add_row({fmt::format("{}", r), chunks_str(ch13::rank_chunks(r, P, n_small, Split::contiguous)),
               chunks_str(ch13::rank_chunks(r, P, n_small, Split::zigzag))});
  t.print();

  attn::heading(fmt::format("Causal work per rank (query–key pairs, counted), n = {}, P = {}", n, P));
  const double mean = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0 / static_cast<double>(P);
  attn::Table w({"rank", "contiguous", "÷ mean", "zigzag", "÷ mean "});
  double worst_c = 0, worst_z = 0;
  for (std::size_t r = 0; r < P; ++r) {
    const auto c = static_cast<double>(ch13::pairs_computed(ch13::rank_chunks(r, P, n, Split::contiguous), n, true));
    const auto z = static_cast<double>(ch13::pairs_computed(ch13::rank_chunks(r, P, n, Split::zigzag), n, true));
    worst_c = std::max(worst_c, c / mean);
    worst_z = std::max(worst_z, z / mean);
    w.add_row({fmt::format("{}", r), fmt::format("{}", c), fmt::format("{:.3f}", c / mean), fmt::format("{}", z),
               fmt::format("{:.3f}", z / mean)});
  }
  w.print();
  fmt::print(
      "The ring advances at the pace of its busiest rank: contiguous takes {:.2f}× the balanced time,\n"
      "zigzag {:.4f}×.\n",
      worst_c, worst_z);
}

void print_bytes(std::size_t n, std::size_t d, std::size_t h) {
  attn::heading(fmt::format("Bytes each rank sends per attention: n = {}, d = {}, h = {} heads, float32", n, d, h));
  attn::Table t({"P", "ring, per rank", "Ulysses, per rank", "ring ÷ Ulysses"});
  for (std::size_t p : {2ul, 4ul, 8ul, 16ul, 64ul}) {
    std::vector<std::size_t> rows;
    for (std::size_t r = 0; r < p; ++r) rows.push_back(ch13::rows_of(ch13::rank_chunks(r, p, n, Split::zigzag)));
    const double ring = static_cast<double>(ch13::ring_bytes_sent(0, rows, d, d) * h);
    // Ulysses: all-to-all of Q, K, V before attention and of O after (chapters/13_ring/ulysses.cpp counts it).
    if (p > h) {  // Ulysses splits the heads: no more ranks than heads
      t.add_row({fmt::format("{}", p), fmt::format("{:.1f} MiB", ring / 1048576.0), "— (P > h)", "—"});
      continue;
    }
    const auto ulysses = static_cast<double>(ch13::ulysses_bytes_sent(0, p, n, h, d, d));
    t.add_row({fmt::format("{}", p), fmt::format("{:.1f} MiB", ring / 1048576.0),
               fmt::format("{:.1f} MiB", ulysses / 1048576.0), fmt::format("{:.1f}", ring / ulysses)});
  }
  t.print();
  fmt::print(
      "The ring sends (P-1)/P of all keys and values from every rank, whatever P: its traffic per rank\n"
      "does not shrink. Ulysses' all-to-all shrinks as 1/P but needs h ≥ P heads to split.\n");
}

void print_equality(std::size_t n, std::size_t d, std::uint64_t seed) {
  attn::heading(fmt::format("The ring in one process against chapter 05's flash: n = {}, d = {}", n, d));
  attn::Rng rng(seed);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  attn::Table t({"P", "split", "causal", "max |ΔO|", "max |Δlse|", "bytes sent (rank 0)", "formula"});
  double worst = 0.0;  // the largest difference, relative to the size of what it is a difference of
  for (bool causal : {false, true}) {
    const attn::FlashOutput ref = attn::ch05::flash_attention_fast(Q, K, V, causal, attn::ch05::default_tiles_on(1));
    for (std::size_t P : {1ul, 2ul, 3ul, 4ul})
      for (Split split : {Split::contiguous, Split::zigzag}) {
        const ch13::RingRun run = ch13::ring_in_one_process(Q, K, V, P, split, causal);
        const double dO = attn::max_abs_diff(run.out.O, ref.O), dl = attn::max_abs_diff(run.out.lse, ref.lse);
        const double O_size = std::max(1.0, static_cast<double>(xt::amax(xt::abs(ref.O))()));
        const double lse_size = std::max(1.0, static_cast<double>(xt::amax(xt::abs(ref.lse))()));
        worst = std::max({worst, dO / O_size, dl / lse_size});
        t.add_row({fmt::format("{}", P), split == Split::zigzag ? "zigzag" : "contiguous", causal ? "yes" : "no",
                   fmt::format("{:.1e}", dO), fmt::format("{:.1e}", dl), fmt::format("{}", run.bytes_sent[0]),
                   fmt::format("{}", ch13::ring_bytes_sent(0, run.rows, d, d))});
      }
  }
  t.print();
  // Float32 rounding of sums over n keys of d-wide products, summed in another order: a few (n + d)·2⁻²⁴
  // of the values' size. A missed, doubled or wrongly masked block moves them by a good fraction of it.
  const double rounding = 4.0 * static_cast<double>(n + d) * std::ldexp(1.0, -24);
  if (worst <= rounding) {
    fmt::print(
        "Differences are float32 rounding: at most {:.1e} of the values' size, where sums over n keys\n"
        "taken in another order (the blocks are summed, then merged) allow {:.1e}.\n",
        worst, rounding);
    return;
  }
  fmt::print(
      "The ring does NOT equal chapter 05's flash: differences reach {:.1e} of the values' size, far\n"
      "beyond the {:.1e} of float32 rounding: a block missed, folded twice, or masked wrongly.\n",
      worst, rounding);
  throw std::runtime_error(
      fmt::format("the ring differs from single-process flash by {:.1e} (rounding: {:.1e})", worst, rounding));
}

// [alpha_beta]
/// A machine in the α–β model: compute rate, and the link between neighbouring ranks.
struct System {
  std::string name;
  double flops;        ///< attention FLOP/s of one rank
  double alpha_s;      ///< latency of one message
  double bytes_per_s;  ///< link bandwidth, one direction
  double elem_bytes;   ///< bytes per K or V element (4: float32, 2: bf16)
};

/// One ring step of a causal layer (zigzag, so every rank does the mean work): its computation and its
/// transfer, for P ranks, n tokens, h heads of size d.
struct StepTimes {
  double compute_s, transfer_s;
};
StepTimes ring_step(const System& sys, double n, double P, double h, double d) {
  const double b = n / P;  // rows per rank
  // 4·b²·d FLOPs per head for a full block pair (QKᵀ and PV); the causal mask halves the mean.
  return {2.0 * b * b * d * h / sys.flops, sys.alpha_s + 2.0 * b * d * h * sys.elem_bytes / sys.bytes_per_s};
}

/// The first step computes on the rank's own block; each of the P - 1 others waits for the slower of the
/// step's computation and the transfer that runs beside it.
double layer_seconds(const StepTimes& t, double P) {
  return t.compute_s + (P - 1.0) * std::max(t.compute_s, t.transfer_s);
}
// [alpha_beta]

void print_alpha_beta(const attn::Chapter& chapter, const System& cpu) {
  const double n = 1048576, h = 32, d = 128;
  attn::heading("Past one machine, on paper: the α–β model of one causal layer, n = 2²⁰, h = 32, d = 128");
  const std::vector<System> systems{
      cpu,
      {"GPU, 100 Gb/s link", 400e12, 5e-6, 12.5e9, 2},
      {"GPU, NVLink-class", 400e12, 2e-6, 450e9, 2},
  };
  fmt::print(
      "Inputs: {}: {:.1f} GFLOP/s per rank, α = {:.1f} µs, {:.2f} GB/s\n"
      "  (measured here, see the page);\n"
      "GPU: 400 TFLOP/s per rank, bf16 K and V; links 12.5 GB/s with α = 5 µs,\n"
      "  450 GB/s with α = 2 µs (stated).\n",
      cpu.name, cpu.flops / 1e9, cpu.alpha_s * 1e6, cpu.bytes_per_s / 1e9);
  attn::Table t({"system", "P", "rows/rank", "compute/step", "transfer/step", "layer", "transfer hidden"});
  std::vector<attn::Series> series;
  for (const System& sys : systems) {
    attn::Series line{sys.name, {}, {}, true};
    for (double P : {8.0, 64.0, 256.0, 1024.0}) {
      const StepTimes st = ring_step(sys, n, P, h, d);
      const double T = layer_seconds(st, P);
      // Durations a reader takes in at a glance: three significant digits in the unit that reads best.
      t.add_row({sys.name, fmt::format("{:.0f}", P), fmt::format("{:.0f}", n / P), attn::seconds_str(st.compute_s, 3),
                 attn::seconds_str(st.transfer_s, 3), attn::seconds_str(T, 3),
                 st.compute_s >= st.transfer_s ? "yes" : "no"});
    }
    for (double P = 2; P <= 4096; P *= 2) {
      line.x.push_back(P);
      line.y.push_back(layer_seconds(ring_step(sys, n, P, h, d), P));
    }
    series.push_back(line);
    attn::Series ideal{sys.name + ": compute only", {}, {}, true};
    for (double P = 2; P <= 4096; P *= 2) {
      ideal.x.push_back(P);
      ideal.y.push_back(P * ring_step(sys, n, P, h, d).compute_s);
    }
    series.push_back(ideal);
  }
  t.print();
  fmt::print(
      "A step's transfer hides while its computation outlasts it: 2b²·d·h/R ≥ α + 2b·d·h·s/B, so, α aside,\n"
      "b ≥ R·s/B rows per rank (the Ring Attention paper's condition): {:.0f} on the CPU, {:.0f} for the GPU on\n"
      "100 Gb/s, {:.0f} on NVLink. Once P pushes b below that, more ranks stop shortening the layer.\n",
      cpu.flops * cpu.elem_bytes / cpu.bytes_per_s, 400e12 * 2 / 12.5e9, 400e12 * 2 / 450e9);
  if (const auto path = chapter.figure_path("ch13_alpha_beta.svg")) {
    attn::write_svg_plot(*path, {"Ring attention, one causal layer, n = 2^20, h = 32, d = 128", "ranks P",
                                 "seconds per layer", true, true, series});
    chapter.announce_figure(*path);
  }
}

void tell_the_story(const attn::Chapter& chapter, std::size_t P, std::size_t n, std::size_t d, std::uint64_t seed,
                    const System& cpu) {
  print_schedule(P);
  print_splits(P, 2 * P * 2 + 3, 16384);
  print_bytes(131072, 64, 32);
  print_equality(n, d, seed);
  print_alpha_beta(chapter, cpu);
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch13_ring", "Chapter 13: ring attention, longer than one machine");
  std::size_t P = 4, n = 1000, d = 64;
  std::uint64_t seed = 13;
  chapter.cli()
      .add_option("--ranks", P, "Ranks in the tables (the MPI program's are set by mpirun -np)")
      ->check(CLI::Range(1, 64));
  chapter.cli().add_option("--n", n, "Sequence length of the one-process ring")->check(CLI::Range(1, 1 << 16));
  chapter.cli().add_option("--d", d, "Head size")->check(CLI::Range(1, 512));
  chapter.cli().add_option("--seed", seed, "Seed of the random Q, K, V");
  // The α–β model's CPU inputs; the defaults were measured on the course's machine (book/13_ring.md says how).
  System cpu{"CPU core, shared memory", 0, 0, 0, 4};
  double gflops = kMeasuredGflops, alpha_us = kMeasuredAlphaUs, link_gbs = kMeasuredLinkGBs;
  chapter.cli()
      .add_option("--cpu-gflops", gflops, "Attention GFLOP/s of one rank (α–β model)")
      ->check(CLI::Range(1e-3, 1e9));  // a thousandth of a GFLOP/s to an exaFLOP/s: finite times, never inf
  chapter.cli()
      .add_option("--alpha-us", alpha_us, "Latency between ranks, µs (α–β model)")
      ->check(CLI::Range(0.0, 1e9));  // up to a quarter of an hour per message
  chapter.cli()
      .add_option("--link-gbs", link_gbs, "Bandwidth between ranks, GB/s (α–β model)")
      ->check(CLI::Range(1e-6, 1e9));
  return chapter.run(argc, argv, [&] {
    cpu.flops = gflops * 1e9;
    cpu.alpha_s = alpha_us * 1e-6;
    cpu.bytes_per_s = link_gbs * 1e9;
    tell_the_story(chapter, P, n, d, seed, cpu);
  });
}
