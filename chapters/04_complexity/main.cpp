// Chapter 04 — The O(n²·d) wall.
//
// What it shows: what full attention (chapter 02's scaled_dot_product_attention) costs as the sequence
// grows. It counts the FLOPs (4·n²·d + 5·n² per head) and the bytes (two n×n float32 matrices), measures
// the time over a doubling series of n and a series of d (median of --repeats runs after a warm-up), and
// the heap the call really holds (a counting allocator, heap_counter.cpp), and fits log-log slopes: ≈ 2 in
// n, ≈ 1 in d. It sets the achieved GFLOP/s against OpenBLAS's sgemm rate on the same shapes, measured in
// the same run. Then the article's n = 100,000: the count, the 40 GB score matrix, the time predicted from
// the measured rate, and the refusal to even start (before allocating anything).
// What it leaves out: how to avoid the n×n matrix (chapter 05 on the CPU, 06 on a GPU), how to avoid the
// n² itself (07 sparse, 08 linear), the decoding cache (09). Several heads: chapter 03 shows they cost
// the same as one wide head.
// Run it: ./course run 04       longer: ./course run 04 -- --max-n 8192 --repeats 7
// Benchmarks (Google Benchmark, with its O(n²) fit): ./course bench 04
// Figures and CSV: ./course run 04 -- --figures out/      Book page: book/04_complexity.md
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "04_complexity/complexity.hpp"
#include "04_complexity/heap_counter.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"

namespace {

using attn::Matrix;

/// What the reader can change on the command line.
struct Options {
  std::size_t min_n = 256;  // the n sweep: min_n, 2·min_n, ..., max_n at width d
  std::size_t max_n = 2048;
  std::size_t d = 64;         // d_k = d_v: one head's width
  std::size_t n_for_d = 512;  // the d sweep: 32, 64, ..., max_d at this n
  std::size_t max_d = 1024;
  int repeats = 5;
  double memory_limit = 0;  // bytes; 0: the machine's available memory (the book: a fixed 16 GB)
};

/// The book's limit: fixed, so that the page is the same on every machine.
constexpr double kBookMemoryLimit = 16e9;
/// The article's long sequence.
constexpr std::size_t kSeedN = 100000;

/// One point of a sweep: the counts, and what was measured.
struct Point {
  std::size_t n = 0, d = 0;
  attn::AttentionFlops flops;
  attn::AttentionBytes bytes;
  std::size_t heap = 0;  // bytes the call held at its peak, counted by the allocator
  double seconds = 0;    // median wall time (0 when not timed: the book)
  double ceiling = 0;    // OpenBLAS sgemm GFLOP/s on (n, d)·(d, n), this run
  double gflops() const { return flops.total() / seconds / 1e9; }
};

using attn::seconds_str;
using attn::si;  // 2.61e12 → "2.61 T": counts read better with SI prefixes

/// Bytes in decimal units (kB, MB, GB), like the article's "40 GB".
std::string decimal_bytes(double b) { return attn::human_bytes(b, /*binary=*/false); }

// [measure_point]
/// Runs full attention at (n, d): first once through the guard, counting the heap it holds; then, unless
/// this is the book, times it (median after a warm-up) and measures the sgemm ceiling on the same shapes.
Point measure_point(std::size_t n, std::size_t d, int repeats, bool timed, double memory_limit) {
  Point p{n, d, attn::attention_flops(n, n, d, d), attn::attention_bytes(n, n, d, d)};
  attn::Rng rng(4);
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  Matrix O;                                                                       // (n, d)
  p.heap = attn::ch04::measure_heap_peak([&] { O = attn::guarded_attention(Q, K, V, memory_limit); });
  if (timed) {
    p.seconds = attn::median_seconds([&] { O = attn::scaled_dot_product_attention(Q, K, V); }, repeats, 1);
    p.ceiling = attn::sgemm_gflops(n, n, d, repeats);  // Q Kᵀ's shape: (n, d)·(d, n)
  }
  return p;
}
// [measure_point]

void print_counts(const std::vector<std::size_t>& ns, std::size_t d) {
  attn::heading(fmt::format("What full attention costs, counted (one head, d_k = d_v = {}, float32)", d));
  attn::Table t(
      {"n", "QKᵀ FLOPs", "softmax", "A·V", "total", "one n×n matrix", "peak heap", "bytes moved", "FLOP/byte"});
  for (std::size_t n : ns) {
    const attn::AttentionFlops f = attn::attention_flops(n, n, d, d);
    const attn::AttentionBytes b = attn::attention_bytes(n, n, d, d);
    t.add_row({fmt::format("{}", n), si(f.scores), si(f.softmax), si(f.weighted_sum), si(f.total()),
               decimal_bytes(b.score_matrix), decimal_bytes(b.peak_extra), decimal_bytes(b.moved),
               fmt::format("{:.1f}", f.total() / b.moved)});
  }
  t.print();
  fmt::print(
      "FLOPs: QKᵀ and A·V are 2·n²·d each (a multiply-add is 2), the softmax 5 per score. Peak heap:\n"
      "S, A and the output alive at once (2·4n² + 4nd bytes). Bytes moved: Q, K, V read, O written, S and A\n"
      "each written once and read once. FLOP/byte stays near d/4 whatever n is: the work and the traffic\n"
      "both grow as n².\n");
}

void print_memory(const std::vector<Point>& points) {
  attn::heading("Memory, measured: the heap full attention holds at its peak (counting allocator)");
  attn::Table t({"n", "S + A = 2·4n² bytes", "+ output = estimate", "measured heap peak", "measured / estimate"});
  for (const Point& p : points)
    t.add_row({fmt::format("{}", p.n), decimal_bytes(2 * p.bytes.score_matrix), decimal_bytes(p.bytes.peak_extra),
               decimal_bytes(static_cast<double>(p.heap)),
               fmt::format("{:.4f}", static_cast<double>(p.heap) / p.bytes.peak_extra)});
  t.print();
}

/// The last \p k points: where the sizes are largest, the asymptotic exponent shows.
std::vector<double> tail(const std::vector<double>& v, std::size_t k) {
  return std::vector<double>(v.end() - static_cast<std::ptrdiff_t>(std::min(k, v.size())), v.end());
}

/// Fits y ≈ c·x^p and prints the result with its R².
attn::PowerLawFit print_fit(const char* what, const std::vector<double>& x, const std::vector<double>& y) {
  const attn::PowerLawFit fit = attn::fit_power_law(x, y);
  fmt::print("{:<44} exponent {:5.2f}   R² = {:.4f}\n", what, fit.exponent, fit.r_squared);
  return fit;
}

void print_times(const std::vector<Point>& points, const char* varying) {
  attn::Table t(
      {varying, "FLOPs", "median time", "× previous", "GFLOP/s", "sgemm ceiling", "% of ceiling", "GB/s moved"});
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    t.add_row({fmt::format("{}", varying[0] == 'n' ? p.n : p.d), si(p.flops.total()), seconds_str(p.seconds),
               i ? fmt::format("{:.2f}", p.seconds / points[i - 1].seconds) : "", fmt::format("{:.1f}", p.gflops()),
               fmt::format("{:.1f}", p.ceiling), fmt::format("{:.0f}%", 100 * p.gflops() / p.ceiling),
               fmt::format("{:.1f}", p.bytes.moved / p.seconds / 1e9)});
  }
  t.print();
}

template <class Get>
std::vector<double> column(const std::vector<Point>& points, Get get) {
  std::vector<double> v;
  for (const Point& p : points) v.push_back(static_cast<double>(get(p)));
  return v;
}

void write_figures(const attn::Chapter& chapter, const std::vector<Point>& by_n, const std::vector<Point>& by_d,
                   bool timed) {
  const auto n_of = [](const Point& p) { return p.n; };
  if (const auto path = chapter.figure_path("ch04_memory_vs_n.svg")) {
    attn::write_svg_plot(
        *path,
        {"Heap held by full attention (d = " + std::to_string(by_n.front().d) + ")",
         "n (tokens)",
         "bytes",
         true,
         true,
         {{"estimate 2·4n² + 4nd", column(by_n, n_of), column(by_n, [](const Point& p) { return p.bytes.peak_extra; })},
          {"measured (counting allocator)", column(by_n, n_of), column(by_n, [](const Point& p) { return p.heap; }),
           false}}});
    chapter.announce_figure(*path);
  }
  if (!timed) return;  // the book has no wall-clock times: the time figures come from the reader's own runs
  const auto secs = [](const Point& p) { return p.seconds; };
  for (const auto& [file, points, label, x_of] :
       {std::tuple{"ch04_time_vs_n.svg", &by_n, "n (tokens)", +[](const Point& p) { return p.n; }},
        std::tuple{"ch04_time_vs_d.svg", &by_d, "d (width of one head)", +[](const Point& p) { return p.d; }}}) {
    const auto path = chapter.figure_path(file);
    if (!path) return;
    const std::vector<double> x = column(*points, x_of), y = column(*points, secs);
    const attn::PowerLawFit fit = attn::fit_power_law(x, y);
    std::vector<double> fitted;
    for (double xi : x) fitted.push_back(fit.coefficient * std::pow(xi, fit.exponent));
    attn::write_svg_plot(
        *path, {fmt::format("Full attention time on {}", attn::cpu_name()),
                label,
                "seconds (median)",
                true,
                true,
                {{"measured", x, y, false},
                 {fmt::format("fit: {:.3g}·x^{:.2f} (R² = {:.3f})", fit.coefficient, fit.exponent, fit.r_squared), x,
                  fitted}}});
    chapter.announce_figure(*path);
  }
  if (const auto csv_path = chapter.figure_path("ch04_sweep.csv")) {
    std::ofstream csv(*csv_path);
    csv << "sweep,n,d,flops,bytes_moved,estimated_peak_bytes,measured_heap_bytes,median_seconds,gflops,sgemm_gflops\n";
    for (const auto& [name, points] : {std::pair{"n", &by_n}, std::pair{"d", &by_d}})
      for (const Point& p : *points)
        csv << fmt::format("{},{},{},{:.0f},{:.0f},{:.0f},{},{:.9g},{:.4g},{:.4g}\n", name, p.n, p.d, p.flops.total(),
                           p.bytes.moved, p.bytes.peak_extra, p.heap, p.seconds, p.gflops(), p.ceiling);
    chapter.announce_figure(*csv_path);
  }
}

// [seed_n]
/// The article's n = 100,000: the arithmetic, the prediction from this run's rate, and the refusal.
void the_seeds_long_sequence(std::size_t d, double measured_gflops, double ceiling_gflops, double memory_limit,
                             bool book) {
  attn::heading("The article's n = 100,000: computed, predicted, refused");
  const attn::AttentionFlops f = attn::attention_flops(kSeedN, kSeedN, d, d);
  const attn::AttentionBytes b = attn::attention_bytes(kSeedN, kSeedN, d, d);
  fmt::print("FLOPs, one head (d = {}):   4·n²·d + 5·n² = {} + {} = {} FLOPs\n", d, si(f.scores + f.weighted_sum),
             si(f.softmax), si(f.total()));
  fmt::print("one score matrix S:        4 bytes · n² = {} ({}); A is another\n", decimal_bytes(b.score_matrix),
             attn::human_bytes(b.score_matrix));
  fmt::print("a layer of 32 such heads:  32 · {} = {} of score matrices, if all were held at once\n",
             decimal_bytes(b.score_matrix), decimal_bytes(32 * b.score_matrix));
  fmt::print("inputs Q, K, V:            {} in all: the n×n matrices, not the data, are the wall\n",
             decimal_bytes(b.inputs));
  if (!book)
    fmt::print(
        "predicted time:            {} at this run's {:.1f} GFLOP/s\n"
        "                           ({} even at the sgemm ceiling of {:.1f})\n",
        seconds_str(f.total() / (measured_gflops * 1e9)), measured_gflops,
        seconds_str(f.total() / (ceiling_gflops * 1e9)), ceiling_gflops);
  else
    fmt::print("predicted time:            FLOPs ÷ the rate measured in a normal run (./course run 04 prints it)\n");

  // Q, K, V of the real size (zeros: their values do not matter), handed to the guard.
  const Matrix Q = xt::zeros<float>({kSeedN, d});  // (n, d)
  const Matrix K = Q, V = Q;                       // (n, d)
  std::string refusal = "(not refused: this machine could hold it)";
  const std::size_t heap = attn::ch04::measure_heap_peak([&] {
    try {
      (void)attn::guarded_attention(Q, K, V, memory_limit);
    } catch (const attn::memory_refusal& e) {
      refusal = e.what();
    }
  });
  fmt::print("\nAsked to run it with a memory limit of {}{}:\n{}", decimal_bytes(memory_limit),
             book ? "\n(the book's fixed limit; a normal run uses the memory available)" : " (available now)",
             attn::wrapped(refusal, 100));
  fmt::print("Heap the refused call allocated: {} (only the message).\n", decimal_bytes(static_cast<double>(heap)));
}
// [seed_n]

void tell_the_story(const attn::Chapter& chapter, Options o) {
  const bool book = chapter.book_mode(), timed = !book;
  if (o.memory_limit <= 0) {
    o.memory_limit = book ? kBookMemoryLimit : static_cast<double>(attn::available_memory_bytes());
    if (o.memory_limit <= 0) o.memory_limit = kBookMemoryLimit;  // /proc/meminfo unreadable: be cautious
  } else if (const double available = static_cast<double>(attn::available_memory_bytes());
             available > 0 && o.memory_limit > available) {
    // A limit the machine cannot honour would let the guard pass what then fails to allocate.
    throw attn::UsageError(fmt::format("--memory-limit {:.3g}: more than the {} this machine has available now",
                                       o.memory_limit, decimal_bytes(available)));
  }
  attn::require_option(o.min_n <= o.max_n, fmt::format("--max-n {} is below --min-n {}", o.max_n, o.min_n));
  // Refuse the whole request up front when its largest point cannot fit: nothing is allocated yet. The options
  // asked for it, so it is a command-line refusal, in the guard's words.
  for (const auto& [n, d] : {std::pair{o.max_n, o.d}, std::pair{o.n_for_d, o.max_d}}) {
    const double need = attn::attention_bytes(n, n, d, d).peak_extra;
    if (need > o.memory_limit) throw attn::UsageError(attn::memory_refusal(n, n, need, o.memory_limit).what());
  }

  fmt::print("Full attention is chapter 02's scaled_dot_product_attention.\n");
  if (!book)
    fmt::print("{}", attn::wrapped(fmt::format("Machine: {}, OpenBLAS for the products; median of {} runs after a "
                                               "warm-up.",
                                               attn::cpu_model(), o.repeats),
                                   100, ""));

  const std::vector<std::size_t> ns = attn::doublings(o.min_n, o.max_n);
  const std::vector<std::size_t> ds = attn::doublings(32, o.max_d);
  print_counts(ns, o.d);

  attn::Progress progress(ns.size() + (timed ? ds.size() : 0), timed);
  std::vector<Point> by_n, by_d;
  for (std::size_t n : ns) {
    progress.update(by_n.size() + 1, fmt::format("n = {}, d = {}", n, o.d));
    by_n.push_back(measure_point(n, o.d, o.repeats, timed, o.memory_limit));
  }
  if (timed) {
    for (std::size_t d : ds) {
      progress.update(by_n.size() + by_d.size() + 1, fmt::format("n = {}, d = {}", o.n_for_d, d));
      by_d.push_back(measure_point(o.n_for_d, d, o.repeats, timed, o.memory_limit));
    }
  }

  print_memory(by_n);
  const auto n_of = [](const Point& p) { return p.n; };
  const auto d_of = [](const Point& p) { return p.d; };
  const auto flops_of = [](const Point& p) { return p.flops.total(); };
  fmt::print("\n");
  print_fit("measured heap against n:", column(by_n, n_of), column(by_n, [](const Point& p) { return p.heap; }));
  print_fit("FLOP count against n:", column(by_n, n_of), column(by_n, flops_of));
  std::vector<double> d_values, d_flops;  // the d sweep's counts, also in the book (no run needed)
  for (std::size_t d : ds) {
    d_values.push_back(static_cast<double>(d));
    d_flops.push_back(attn::attention_flops(o.n_for_d, o.n_for_d, d, d).total());
  }
  print_fit(fmt::format("FLOP count against d (n = {}, d = 32…{}):", o.n_for_d, o.max_d).c_str(), d_values, d_flops);

  if (timed) {
    attn::heading(fmt::format("Time against n (d = {}): median seconds, and the rate against the sgemm ceiling", o.d));
    print_times(by_n, "n");
    const std::vector<double> n_x = column(by_n, n_of), n_t = column(by_n, [](const Point&p) { return p.seconds; });
    print_fit("measured time against n, every point:", n_x, n_t);
    if (n_x.size() > 3) print_fit("measured time against n, largest three:", tail(n_x, 3), tail(n_t, 3));
    attn::heading(fmt::format("Time against d (n = {})", o.n_for_d));
    print_times(by_d, "d");
    const std::vector<double> d_x = column(by_d, d_of), d_t = column(by_d, [](const Point&p) { return p.seconds; });
    print_fit("measured time against d, every point:", d_x, d_t);
    if (d_x.size() > 3) print_fit("measured time against d, largest three:", tail(d_x, 3), tail(d_t, 3));
    fmt::print("Peak resident memory of this process (the OS's view): {}\n",
               decimal_bytes(static_cast<double>(attn::peak_rss_bytes())));
  } else {
    fmt::print(
        "\n(No wall-clock times in the book: they differ from machine to machine and run to run.\n"
        " ./course run 04 measures them, fits the exponents and predicts the n = 100,000 time.)\n");
  }
  write_figures(chapter, by_n, by_d, timed);
  const Point& largest = by_n.back();
  the_seeds_long_sequence(o.d, timed ? largest.gflops() : 0, timed ? largest.ceiling : 0, o.memory_limit, book);
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch04_complexity", "Chapter 04: the O(n²·d) wall, counted and measured");
  Options o;
  auto& cli = chapter.cli();
  cli.add_option("--min-n", o.min_n, "Smallest n of the doubling sweep")->check(CLI::Range(1, 1 << 30));
  cli.add_option("--max-n", o.max_n, "Largest n of the doubling sweep (longer runs: 8192, 16384)")
      ->check(CLI::Range(1, 1 << 30));
  cli.add_option("--d", o.d, "Width d = d_k = d_v of the head in the n sweep")->check(CLI::Range(1, 1 << 16));
  cli.add_option("--n-for-d", o.n_for_d, "Sequence length of the d sweep")->check(CLI::Range(1, 1 << 30));
  cli.add_option("--max-d", o.max_d, "Largest d of the d sweep (32, 64, ..., max-d)")->check(CLI::Range(32, 1 << 16));
  cli.add_option("--repeats", o.repeats, "Timed runs per point (the median is reported), after one warm-up")
      ->check(CLI::Range(1, 1000));
  cli.add_option("--memory-limit", o.memory_limit,
                 "Bytes full attention may hold (default: the memory available now; the book: 16 GB)")
      ->check(CLI::Range(1.0, 1e18));
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, o); });
}
