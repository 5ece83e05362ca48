// Chapter 13 — ring attention across processes with MPI: the same ring_attention_rank() as the chapter's
// tests, one rank per process, the blocks moving by MPI_Isend/MPI_Irecv while each rank computes; and
// DeepSpeed-Ulysses, the second scheme, with two MPI_Alltoallv around ordinary (chapter 05) attention.
//
// What it shows: (1) --check: for several ragged n, causal and not, both splits, the gathered (O, lse)
// equals chapter 05's single-process flash on rank 0, and every rank's counted bytes equal the formula;
// Ulysses likewise (h = P and P + 1 heads, so heads need not be a multiple of P); a mismatch makes every rank
// exit with status 1. (2) the default run: the ring at --n, each rank's compute time and its exposed wait,
// for the contiguous and the zigzag split, against single-process flash with as many threads as ranks (the
// other ranks sleep meanwhile; it may use every core, whatever core mpirun bound rank 0 to), in wall time and
// in CPU-seconds of all ranks; then Ulysses beside the ring on --heads heads, with the bytes each sent.
// (3) --pingpong: latency and bandwidth between ranks 0 and 1, the α and β of the chapter's model.
// What it leaves out: layers, GPUs, any transport but the MPI library's own.
// The program in three parts: transport.hpp (how the ranks reach one another), schedule.hpp (what each rank
// computes and what the runs measure) and this file (the command line and what it prints).
// Run it: ./course run 13 (mpirun -np 4 --oversubscribe), or chapters/13_ring/mpirun.sh NP ch13_ring_mpi ARGS;
// chapters/13_ring/record.sh re-takes the book's recording.
// Book page: book/13_ring.md. A rank that throws prints its message and aborts the whole job (MPI_Abort):
// no rank waits forever for a block that will never come.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "13_ring/schedule.hpp"
#include "13_ring/transport.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/print.hpp"

namespace {

namespace ch13 = attn::ch13;
using attn::fixed;
using attn::sci;
using attn::seconds_str;
using ch13::World;

constexpr const char* kName = "ch13_ring_mpi";

/// The checks' lines on rank 0; true when every one passed on every rank.
bool print_checks(const World& w, const std::vector<ch13::CheckLine>& lines) {
  bool ok = true;
  for (const ch13::CheckLine& l : lines) {
    ok = ok && l.ok;
    if (w.rank != 0) continue;
    const std::string lse = l.lse_diff >= 0 ? fmt::format(", max |dlse| = {}", sci(l.lse_diff, 1)) : "";
    fmt::print("{} P = {}, n = {:>3}, {}: max |dO| = {}{}, bytes {}\n", l.ok ? "ok  " : "FAIL", w.P, l.n, l.what,
               sci(l.O_diff, 1), lse, l.bytes_ok ? "= formula" : "!= formula");
  }
  return ok;
}

/// A time in the unit that reads best, followed by its ratio to \p reference ("= r×") when there is one.
std::string against(double seconds, double reference, const char* unit = "") {
  const std::string t = fmt::format("{}{}", seconds_str(seconds), unit);
  return reference > 0 ? fmt::format("{} = {}×", t, fixed(seconds / reference)) : t;
}

void print_ring(const World& w, const ch13::RingTimes& t, std::size_t n, std::size_t d, bool causal, int repeats,
                bool memory, const std::string& note) {
  if (w.rank != 0) return;
  fmt::print("\nn = {}, d = {}, causal = {:d}, {} ranks, 1 thread each; median of {} runs\n", n, d, causal, w.P,
             repeats);
  fmt::print("{}", attn::wrapped(note, 100, ""));
  if (!memory)
    fmt::print("single-process flash (chapter 05, {} threads): {}, {} CPU\n", w.P, seconds_str(t.single.wall),
               seconds_str(t.single.cpu));
  for (const ch13::SplitTimes& s : t.splits) {
    fmt::print("ring, {:<10}: {}; {}\n", ch13::name_of(s.split), against(s.wall, t.single.wall),
               against(s.cpu, t.single.cpu, " CPU"));
    std::string computing, waiting;
    for (double x : s.computing) computing += " " + seconds_str(x);
    for (double x : s.waiting) waiting += " " + seconds_str(x);
    fmt::print("  computing per rank:{}\n  waiting for a block per rank:{} (all ranks: {} CPU polling)\n", computing,
               waiting, seconds_str(s.polling_cpu));
  }
}

void print_ulysses(const World& w, const ch13::UlyssesTimes& t, std::size_t n, std::size_t d, std::size_t h,
                   bool causal, int repeats) {
  if (w.rank != 0) return;
  fmt::print("\nUlysses beside the ring: h = {} heads, n = {}, d = {}, causal = {:d}, {} ranks; median of {} runs\n", h,
             n, d, causal, w.P, repeats);
  fmt::print("single-process flash (chapter 05, {} threads, all heads): {}, {} CPU\n", w.P, seconds_str(t.single.wall),
             seconds_str(t.single.cpu));
  fmt::print("ring, zigzag, one ring per head: {}, {}\n", against(t.ring.wall, t.single.wall),
             against(t.ring.cpu, t.single.cpu, " CPU"));
  fmt::print("Ulysses, all-to-all over heads:  {}, {}\n", against(t.ulysses.wall, t.single.wall),
             against(t.ulysses.cpu, t.single.cpu, " CPU"));
  fmt::print("bytes rank 0 sent: ring {} (formula {}), Ulysses {} (formula {})\n", t.ring_bytes, t.ring_formula,
             t.ulysses_bytes, t.ulysses_formula);
}

void pingpong(const World& w) {
  const std::string note = ch13::oversubscription_note(w);
  if (w.rank == 0)
    fmt::print("\nping-pong between ranks 0 and 1 (half a round trip, median of 21):\n{}",
               attn::wrapped(note, 100, ""));
  for (std::size_t bytes : {8ul, 1024ul, 65536ul, 1ul << 20, 16ul << 20, 64ul << 20}) {
    const double t = ch13::half_round_trip(w, bytes, 21);
    if (w.rank == 0)
      fmt::print("  {:>9} bytes: {:>10}  {:>10}/s\n", bytes, seconds_str(t),
                 attn::human_bytes(static_cast<double>(bytes) / t, false));
  }
}

/// Peak resident memory of every rank (Linux getrusage), on rank 0.
void print_peak_memory(const World& w) {
  const std::vector<double> all = ch13::gather_on_root({static_cast<double>(attn::peak_rss_bytes())}, w);
  if (w.rank != 0) return;
  std::string line = "peak resident memory per rank:";
  for (double x : all) line += " " + attn::human_bytes(x);
  fmt::print("{}\n", line);
}

}  // namespace

int main(int argc, char** argv) {
  attn::use_best_blas_kernel();  // before MPI starts: the restart replaces this process
  MPI_Init(&argc, &argv);
  const World w = ch13::mpi_world();
  CLI::App app("Chapter 13: ring attention over MPI ranks (launch with mpirun -np P)", kName);
  bool check = false, causal = true, memory = false, ping = false;
  std::size_t n = 8192, d = 64, heads = 4;
  int repeats = 3, fail_on_rank = -1;
  app.add_flag("--check", check, "Check equality with single-process flash and the byte formula, then exit");
  app.add_option("--n", n, "Sequence length of the timed run")->check(CLI::Range(1, 1 << 20));
  app.add_option("--d", d, "Head size of the timed run")->check(CLI::Range(1, 512));
  app.add_flag("--causal,!--no-causal", causal, "Causal timed run (the default; --no-causal for full attention)");
  app.add_flag("--pingpong", ping, "Measure latency and bandwidth between ranks 0 and 1, then exit");
  app.add_flag("--memory", memory,
               "Memory run: zigzag only, one run, no single-process reference (each rank makes only its rows)");
  app.add_option("--heads", heads, "Heads of the timed Ulysses-beside-the-ring run (0: skip it; else at least P)")
      ->check(CLI::Range(0, 256));
  app.add_option("--fail-on-rank", fail_on_rank, "Make this rank throw (tests that the job stops)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "Timed runs (median reported)")->check(CLI::Range(1, 100));
  // Every rank parses alike, by the rules of every chapter's command line; rank 0 says what was wrong.
  if (const std::optional<int> status = attn::parse_command_line(app, kName, argc, argv, w.rank == 0)) {
    MPI_Finalize();
    return *status;
  }
  // Checks every rank makes alike on the parsed values, so that all of them stop with status 2 together.
  const auto refuse = [&](const std::string& message) {
    if (w.rank == 0) fmt::print(stderr, "{}: {}\nRun '{} --help' for the options.\n", kName, message, kName);
    MPI_Finalize();
    return attn::kExitUsage;
  };
  if (ping && w.P < 2)
    return refuse(
        fmt::format("--pingpong: it measures between ranks 0 and 1, so it needs at least 2 ranks "
                    "(mpirun -np 2); this job has {}",
                    w.P));
  if (fail_on_rank >= w.P)
    return refuse(fmt::format("--fail-on-rank {}: there is no such rank in a job of {} (ranks 0 to {})", fail_on_rank,
                              w.P, w.P - 1));
  if (!check && !ping && !memory && heads > 0 && heads < static_cast<std::size_t>(w.P))
    return refuse(
        fmt::format("--heads {}: Ulysses splits the heads over the ranks, so it needs at least P = {} heads "
                    "(or --heads 0 to skip it)",
                    heads, w.P));
  ch13::fail_on_rank(fail_on_rank);
  int status = attn::kExitOk;
  try {
    const attn::BlasThreads one_thread(1);  // one core per rank: OpenBLAS must not start its own threads on top
    if (check) {
      const bool ring_ok = print_checks(w, ch13::check_ring(w)), ulysses_ok = print_checks(w, ch13::check_ulysses(w));
      status = ring_ok && ulysses_ok ? attn::kExitOk : attn::kExitError;
    } else if (ping) {
      pingpong(w);
    } else {
      const std::string note = ch13::oversubscription_note(w);
      print_ring(w, ch13::time_ring(w, n, d, causal, repeats, memory), n, d, causal, repeats, memory, note);
      if (!memory && heads > 0)
        print_ulysses(w, ch13::time_ulysses_beside_ring(w, n, d, heads, causal, repeats), n, d, heads, causal, repeats);
      print_peak_memory(w);
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{} rank {} of {} failed: {}\n(the whole job stops: MPI_Abort)\n", kName, w.rank, w.P, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, attn::kExitError);
  }
  MPI_Finalize();
  return status;
}
