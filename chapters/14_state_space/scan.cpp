// Chapter 14's selective scans (see scan.hpp). Book page: book/14_state_space.md, "The selective scan".
//
// The loops over tokens live in scan_kernels.inl, compiled per instruction set; this file shares the work between
// threads. Sequential and channel-split scans give each thread its own channels: they never interact. The
// time-parallel scan cuts the sequence into one chunk per thread, scans every chunk from a zero state, combines the
// chunk-end states in order (scan_combine() on whole chunks), and fixes up each later chunk's outputs with its true
// start state: y(t) += C(t)·(e^{A·ΣΔ} ∘ H). That fix-up is the extra work that keeps T threads below T×; it ends
// where e^{A·ΣΔ} underflows float32, so its size is the model's memory, not the chunk's length (the book measures
// both).
//
// The kernels run on the course's vector layer (scan_kernels.cpp: Highway's vectors and exponential, compiled per
// instruction set). The sequential scan's time with each (n = 65,536, d = 64, N = 16, `ch14_state_space bench`,
// BM_ScanKernel) is in the recording book/recorded/ch14_bench.txt, which the measurements page
// (book/measure_14_state_space.md) reads; that recording was made with the kernels before the layer (a portable
// copy on 4-float GCC vectors and chapter 05's exponential, and AVX2+FMA and AVX-512 copies with SLEEF's).
#include "14_state_space/scan.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "14_state_space/scan_kernels.hpp"
#include "attn/checks.hpp"
#include "attn/measure.hpp"
#include "attn/vector.hpp"

namespace attn::ch14 {

namespace {

// [choose_kernels]
/// The kernels \p wanted names ("AVX-512", "AVX2+FMA", "NEON" or "portable": a vector path's name), if this CPU
/// runs them ("auto": those of the vector path in use, attn/vector.hpp), else empty ones.
ScanKernels choose_kernels(const std::string& wanted) {
  if (wanted == "auto") return detail::scan_kernels_of(vector_path());
  for (const VectorPath path : vector_paths_available())
    if (wanted == vector_path_name(path)) return detail::scan_kernels_of(path);
  return {};
}
// [choose_kernels]

ScanKernels& kernels() {
  static ScanKernels chosen = choose_kernels("auto");  // thread-safe initialisation (C++11 statics)
  return chosen;
}

/// One thread's share of a scan: channels [c0, c0 + w) in rows of wp floats (w rounded up to whole vectors).
struct Lanes {
  std::size_t c0, w, wp, N;
  std::vector<float> AT;       // (N, wp) Aᵀ of these channels, padding −1
  std::vector<float> hT;       // (N, wp) the state, transposed
  std::vector<float> sum;      // (wp) Σ Δ over the tokens scanned
  std::vector<float> scratch;  // (N + kScanScratchRows, wp)
  Lanes(const Matrix& A, std::size_t first, std::size_t count, std::size_t lanes)
      : c0(first),
        w(count),
        wp((count + lanes - 1) / lanes * lanes),
        N(A.shape(1)),
        AT(N * wp, -1.0f),
        hT(N * wp, 0.0f),
        sum(wp, 0.0f),
        scratch((N + kScanScratchRows) * wp, 0.0f) {
    for (std::size_t k = 0; k < N; ++k)
      for (std::size_t c = 0; c < w; ++c) AT[k * wp + c] = A(c0 + c, k);
  }
  /// The part of a (d, N) matrix M these lanes hold, transposed into a padded (N, wp) one.
  std::vector<float> slice(const Matrix& M) const {
    std::vector<float> out(N * wp, 0.0f);
    for (std::size_t k = 0; k < N; ++k)
      for (std::size_t c = 0; c < w; ++c) out[k * wp + c] = M(c0 + c, k);
    return out;
  }
  /// Writes the state into rows c0 … c0 + w − 1 of h (d, N).
  void state_to(Matrix& h) const {
    for (std::size_t c = 0; c < w; ++c)
      for (std::size_t k = 0; k < N; ++k) h(c0 + c, k) = hT[k * wp + c];
  }
};

/// CPU time of the parallel phases so far: the busiest thread's, everyone's, and the calling thread's.
struct PhaseClock {
  double critical = 0, total = 0, caller = 0;
};

/// Runs work(0) … work(T−1) on T threads with common/'s attn::run_on_threads (an exception in any of them reaches
/// the caller), and adds each thread's CPU time to \p clock.
template <class Work>
void run_on_threads(std::size_t T, const Work& work, PhaseClock& clock) {
  std::vector<double> spent(T, 0.0);  // (T) CPU seconds per thread
  std::atomic<std::size_t> next{0};
  const std::thread::id caller = std::this_thread::get_id();
  double caller_spent = 0.0;  // the calling thread's share, written by that thread only
  attn::run_on_threads(T, [&] {
    const std::size_t i = next++;  // which part this thread takes
    const double start = attn::thread_cpu_seconds();
    work(i);
    spent[i] = attn::thread_cpu_seconds() - start;
    if (std::this_thread::get_id() == caller) caller_spent = spent[i];
  });
  clock.critical += *std::max_element(spent.begin(), spent.end());
  for (double s : spent) clock.total += s;
  clock.caller += caller_spent;
}

/// Rows [t0, t1) of \p M finite (and > 0 when \p positive), else std::invalid_argument naming the first bad entry.
void check_rows(const Matrix& M, const char* what, std::size_t t0, std::size_t t1, bool positive) {
  constexpr float kMax = std::numeric_limits<float>::max();
  const std::size_t cols = M.shape(1);
  const float* p = M.data();
  for (std::size_t i = t0 * cols; i < t1 * cols; ++i)
    if (positive ? !(p[i] > 0.0f && p[i] <= kMax) : !(std::fabs(p[i]) <= kMax))
      throw std::invalid_argument(fmt::format("selective_scan: {}({}, {}) = {}; {}", what, i / cols, i % cols, p[i],
                                              positive ? "every step must be finite and > 0" : "it must be finite"));
}

/// Called when a kernel found a bad value in tokens [t0, t1): throws std::invalid_argument naming the entry.
[[noreturn]] void name_bad_entry(const Matrix& x, const Matrix& delta, const Matrix& B, const Matrix& C, std::size_t t0,
                                 std::size_t t1) {
  check_rows(x, "x", t0, t1, false);
  check_rows(delta, "delta", t0, t1, true);
  check_rows(B, "B", t0, t1, false);
  check_rows(C, "C", t0, t1, false);
  throw std::logic_error(
      fmt::format("selective_scan: a kernel reported a bad value in tokens [{}, {}) that the "
                  "check cannot find",
                  t0, t1));
}

/// The checks made before the scan: shapes, threads and A. The (n, ·) inputs are checked by the kernels as they
/// read them (a separate pass would read 4·n·(2d + 2N) bytes more, and serially it would cost every speed-up by
/// Amdahl's law); a kernel that finds a bad value makes its thread throw, naming the entry.
void check(const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B, const Matrix& C, int threads) {
  const std::size_t n = x.shape(0), d = x.shape(1), N = A.shape(1);
  if (!(delta.shape(0) == n && delta.shape(1) == d && A.shape(0) == d && B.shape(0) == n && B.shape(1) == N &&
        C.shape(0) == n && C.shape(1) == N))
    throw std::invalid_argument(
        fmt::format("selective_scan: x is {}, delta {}, A {}, B {} and C {}; they must be (n, d), (n, d), (d, N), "
                    "(n, N) and (n, N)",
                    shape_str(x), shape_str(delta), shape_str(A), shape_str(B), shape_str(C)));
  if (!(threads >= 1))
    throw std::invalid_argument(fmt::format("selective_scan: threads = {}; at least 1 is needed", threads));
  for (std::size_t i = 0; i < A.size(); ++i)
    if (!(A.data()[i] < 0.0f && A.data()[i] >= -std::numeric_limits<float>::max()))
      throw std::invalid_argument(fmt::format("selective_scan: A({}, {}) = {}; a stable state needs a finite A < 0",
                                              i / N, i % N, A.data()[i]));
}

}  // namespace

const char* scan_kernel_isa() { return kernels().isa; }

const char* scan_kernel_exp() { return kernels().exp; }

bool use_scan_kernels(const std::string& isa) {
  const ScanKernels wanted = choose_kernels(isa);
  if (wanted.scan == nullptr) return false;
  kernels() = wanted;
  return true;
}

void vector_exp(const float* from, float* to, std::size_t n) {
  // The kernels write 16 lanes at a time: any other n would write past the end of `to`.
  if (n % 16 != 0) throw std::invalid_argument(fmt::format("vector_exp: n = {} is not a multiple of 16", n));
  kernels().exp_to(from, to, n);
}

double selective_scan_bytes(std::size_t n, std::size_t d, std::size_t N) {
  // In double from the start: 3d + 2N in size_t wraps for d near 2^62 and gives a small count.
  return 4.0 * static_cast<double>(n) * (3.0 * static_cast<double>(d) + 2.0 * static_cast<double>(N));
}

namespace {

/// Throws when y (n, d) or h (d, N) holds an entry that is not finite, naming the first.
void require_no_overflow(const Matrix& y, const Matrix& h) {
  for (const Matrix* m : {&y, &h}) {
    const auto bad = std::find_if(m->begin(), m->end(), [](float v) { return !std::isfinite(v); });
    if (bad == m->end()) continue;
    const auto at = static_cast<std::size_t>(bad - m->begin()), cols = std::max<std::size_t>(m->shape(1), 1);
    throw std::invalid_argument(fmt::format(
        "selective_scan: {}({}, {}) overflowed float32 although every input is finite: scale x, B or C down",
        m == &y ? "y" : "the state h", at / cols, at % cols));
  }
}

}  // namespace

SelectiveScanOutput selective_scan(const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B,
                                   const Matrix& C, int threads, ScanSplit split, ScanStats* stats) {
  const double start_cpu = attn::thread_cpu_seconds();
  check(x, delta, A, B, C, threads);
  require(split == ScanSplit::time || split == ScanSplit::channels,
          fmt::format("selective_scan: split = {} is neither ScanSplit::time nor ScanSplit::channels",
                      static_cast<int>(split)));
  const ScanKernels& kernel = kernels();
  const std::size_t n = x.shape(0), d = x.shape(1), N = A.shape(1), T = static_cast<std::size_t>(threads);
  if (N == 0) {  // no state: nothing is remembered, every output is the empty sum 0 (the kernels need N ≥ 1)
    require_finite("selective_scan", "x", x.data(), x.size());
    require_finite("selective_scan", "delta", delta.data(), delta.size());
    return {Matrix(xt::zeros<float>({n, d})), Matrix(xt::zeros<float>({d, N}))};
  }
  // (n, d), not zero-filled: every entry is written by the scan (a serial fill of 16 MiB would be Amdahl's again).
  Matrix y(Matrix::shape_type{n, d});
  Matrix h = xt::zeros<float>({d, N});  // (d, N) the final state
  // Channels [c0, c0 + w), tokens [t0, t1) as the kernels see them, writing into y itself or into out (rows of
  // ld_out floats, the first for token t0).
  const auto slice = [&](const Lanes& lanes, std::size_t t0, std::size_t t1, float* out = nullptr,
                         std::size_t ld_out = 0) {
    float* first = out ? out : y.data() + t0 * d + lanes.c0;
    return ScanSlice{x.data(), delta.data(), B.data(), C.data(), first, out ? ld_out : d, d, N,
                     lanes.c0, lanes.w,      lanes.wp, t0,       t1};
  };
  const auto scan = [&](Lanes& lanes, std::size_t t0, std::size_t t1, float* out = nullptr, std::size_t ld_out = 0) {
    if (!kernel.scan(slice(lanes, t0, t1, out, ld_out), lanes.AT.data(), lanes.hT.data(), lanes.sum.data(),
                     lanes.scratch.data()))
      name_bad_entry(x, delta, B, C, t0, t1);
  };
  PhaseClock clock;
  double fixup = 0;
  std::size_t fixup_tokens = 0;
  if (split == ScanSplit::channels || T == 1) {
    const std::size_t workers = std::max<std::size_t>(1, std::min(T, d));
    const auto first = [&](std::size_t i) { return d * i / workers; };  // worker i's channels: [first(i), first(i+1))
    // With several workers, each writes its outputs into a tile of its own, and the tiles are copied into y by
    // token ranges afterwards. Written straight into y, the workers would share a cache line (64 bytes) in every
    // token's row — y's rows are 4·d bytes and rarely start on a line — and that line would travel between the
    // cores on every token: false sharing, which made two threads no faster than one in the book's recording.
    std::vector<std::vector<float>> tiles(workers > 1 ? workers : 0);  // (workers) (n, channels of worker i)
    run_on_threads(
        workers,
        [&](std::size_t i) {
          Lanes lanes(A, first(i), first(i + 1) - first(i), kernel.lanes);
          if (workers == 1) {
            scan(lanes, 0, n);
          } else {
            tiles[i].resize(n * lanes.w);
            scan(lanes, 0, n, tiles[i].data(), lanes.w);
          }
          lanes.state_to(h);
        },
        clock);
    if (workers > 1)
      run_on_threads(
          workers,
          [&](std::size_t i) {  // tokens [n·i/workers, n·(i+1)/workers) of every tile
            for (std::size_t t = n * i / workers; t < n * (i + 1) / workers; ++t)
              for (std::size_t j = 0; j < workers; ++j) {
                const std::size_t w = first(j + 1) - first(j);
                std::copy_n(tiles[j].data() + t * w, w, y.data() + t * d + first(j));
              }
          },
          clock);
  } else {
    // [selective_scan]
    // 1. Every chunk from a zero state, in parallel: chunk 0's outputs are final, the others miss their carry.
    const std::size_t chunks = std::max<std::size_t>(1, std::min(T, n));
    const auto start = [&](std::size_t i) { return n * i / chunks; };
    std::vector<Lanes> local(chunks, Lanes(A, 0, d, kernel.lanes));  // each chunk's end state from zero, and ΣΔ
    run_on_threads(
        chunks, [&](std::size_t i) { scan(local[i], start(i), start(i + 1)); }, clock);
    // 2. The carries, in order: H_i = exp(A·ΣΔ over chunk i−1) ∘ H_{i−1} + local_{i−1}, entry by entry. This is
    //    scan_combine() applied to whole chunks: (a, b) = (the chunk's total decay, its end state from zero).
    std::vector<Matrix> carry(chunks + 1, Matrix(xt::zeros<float>({d, N})));  // (d, N) the state before chunk i
    for (std::size_t i = 1; i <= chunks; ++i) {
      const Lanes& before = local[i - 1];
      for (std::size_t c = 0; c < d; ++c)
        for (std::size_t k = 0; k < N; ++k)
          carry[i](c, k) = std::exp(A(c, k) * before.sum[c]) * carry[i - 1](c, k) + before.hT[k * before.wp + c];
    }
    h = carry[chunks];  // the state after the last chunk
    // 3. Fix up every chunk after the first with its carry, channels split between the threads (they are
    //    independent); each slice stops where its carry has decayed to nothing.
    const double before_fixup = clock.total;
    const std::size_t workers = std::max<std::size_t>(1, std::min(T, d));
    std::vector<std::size_t> corrected(workers * chunks, 0);  // (workers, chunks) tokens each slice corrected
    run_on_threads(
        workers,
        [&](std::size_t i) {
          Lanes lanes(A, d * i / workers, d * (i + 1) / workers - d * i / workers, kernel.lanes);
          for (std::size_t chunk = 1; chunk < chunks; ++chunk) {
            const std::vector<float> H = lanes.slice(carry[chunk]);  // (N, wp)
            corrected[i * chunks + chunk] = kernel.correct(slice(lanes, start(chunk), start(chunk + 1)),
                                                           lanes.AT.data(), H.data(), lanes.scratch.data());
          }
        },
        clock);
    // [selective_scan]
    fixup = clock.total - before_fixup;
    for (std::size_t chunk = 1; chunk < chunks; ++chunk) {  // per chunk, the slice whose carry lasted longest
      std::size_t longest = 0;
      for (std::size_t i = 0; i < workers; ++i) longest = std::max(longest, corrected[i * chunks + chunk]);
      fixup_tokens += longest;
    }
  }
  // Every input was finite (check()), so an infinite or NaN output or state means float32 overflowed on the way:
  // say so rather than return it. One pass over y and h, cheap beside the scan's N multiply-adds per output.
  require_no_overflow(y, h);
  if (stats) {  // the caller's time outside the parallel phases is serial: on the critical path and in the work
    const double serial = attn::thread_cpu_seconds() - start_cpu - clock.caller;
    *stats = {clock.critical + serial, clock.total + serial, fixup, fixup_tokens};
  }
  return {std::move(y), std::move(h)};  // not a copy: y is 4·n·d bytes
}

ScanInputs scan_inputs(Rng& rng, std::size_t n, std::size_t d, std::size_t N) {
  checked_allocation("scan_inputs: A, d × N floats", {d, N, sizeof(float)});  // Rng checks x, Δ, B and C
  ScanInputs in{rng.normal(n, d), rng.uniform(n, d, std::log(0.001f), std::log(0.1f)), xt::zeros<float>({d, N}),
                rng.normal(n, N), rng.normal(n, N)};
  in.delta = xt::exp(in.delta);  // log-uniform
  for (std::size_t c = 0; c < d; ++c)
    for (std::size_t k = 0; k < N; ++k) in.A(c, k) = -static_cast<float>(k + 1);
  return in;
}

}  // namespace attn::ch14
