// Chapter 14's selective scans (see scan.hpp). Book page: book/14_state_space.md, "The selective scan".
//
// The state is kept transposed, (N, d), so every inner loop runs over contiguous channels and vectorises:
// one token is N rows of d multiply-adds, after one call of chapter 05's vectorised exponential on the
// (N, d) block of Δ·A. The time-parallel scan does the work of the sequential one plus a correction pass
// over every chunk after the first; that extra work is why it cannot reach T× on T threads (the book measures it).
#include "14_state_space/scan.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/row_ops.hpp"
#include "attn/checks.hpp"
#include "attn/measure.hpp"

namespace attn::ch14 {

namespace {

// As in chapter 05's row_ops.cpp: GCC compiles the hot loops for AVX-512, AVX2 and the baseline and picks one
// at load time.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define ATTN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ATTN_VECTOR_CLONES
#endif

/// The scan's inputs as raw rows, with the state matrix transposed to (N, d).
struct Problem {
  std::size_t n, d, N;
  const float* x;         // (n, d)
  const float* delta;     // (n, d)
  const float* B;         // (n, N)
  const float* C;         // (n, N)
  std::vector<float> AT;  // (N, d) Aᵀ
};

/// Scratch of one thread working on channels [c0, c1): w = c1 − c0 columns.
struct Scratch {
  std::vector<float> E, dx;  // (N, w) the decays of one token, (w) a running sum
  Scratch(std::size_t N, std::size_t w) : E(N * w), dx(w) {}
};

constexpr std::size_t kLanes = 16;  // channels per block: one AVX-512 register of floats
/// 16 floats as one value: GCC's vector extension, compiled to whatever registers the target has.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

// [scan_tokens]
/// Tokens [t0, t1) on channels [c0, c1): the state hT (N, d), row stride d, is updated in place; y (n, d) gets
/// rows t0 … t1−1 of those channels when not null.
ATTN_VECTOR_CLONES void scan_tokens(const Problem& p, std::size_t t0, std::size_t t1, std::size_t c0, std::size_t c1,
                                    float* hT, float* y, Scratch& s) {
  const std::size_t w = c1 - c0, d = p.d, N = p.N;
  float* E = s.E.data();  // (N, w)
  for (std::size_t t = t0; t < t1; ++t) {
    const float* delta = p.delta + t * d + c0;
    const float* x = p.x + t * d + c0;
    const float* B = p.B + t * N;
    const float* C = p.C + t * N;
    for (std::size_t k = 0; k < N; ++k)  // E(k, c) = Δ_c · A(c, k) ≤ 0, then e^E: the decay of every state entry
      for (std::size_t c = 0; c < w; ++c) E[k * w + c] = delta[c] * p.AT[k * d + c0 + c];
    ch05::exp_shift_sum(E, N * w, 0.0f);
    // kLanes channels at a time, down all N rows of the state: Δ·x and the output sum stay in one register each
    // (a GCC vector of 16 floats: one AVX-512 register, or four SSE ones in the baseline build).
    for (std::size_t cb = 0; cb < w; cb += kLanes) {
      const std::size_t lanes = std::min(kLanes, w - cb);
      if (lanes == kLanes) {
        Lanes dx, delta_v, acc = {};
        std::memcpy(&dx, x + cb, sizeof dx);
        std::memcpy(&delta_v, delta + cb, sizeof delta_v);
        dx *= delta_v;
        for (std::size_t k = 0; k < N; ++k) {
          Lanes e, h;
          std::memcpy(&e, E + k * w + cb, sizeof e);
          std::memcpy(&h, hT + k * d + c0 + cb, sizeof h);
          h = e * h + B[k] * dx;
          std::memcpy(hT + k * d + c0 + cb, &h, sizeof h);
          acc += C[k] * h;
        }
        if (y) std::memcpy(y + t * d + c0 + cb, &acc, sizeof acc);
        continue;
      }
      for (std::size_t l = 0; l < lanes; ++l) {  // the last few channels, one at a time
        const float dx = delta[cb + l] * x[cb + l];
        float acc = 0.0f;
        for (std::size_t k = 0; k < N; ++k) {
          float& h = hT[k * d + c0 + cb + l];
          h = E[k * w + cb + l] * h + B[k] * dx;
          acc += C[k] * h;
        }
        if (y) y[t * d + c0 + cb + l] = acc;
      }
    }
  }
}
// [scan_tokens]

// [correct_tokens]
/// The carry of a chunk that started from zero instead of its true state H (N, d): tokens [t0, t1) of a chunk
/// that begins at token \p chunk_start get `y(t, c) += Σ_k C(t, k) · exp(A(c, k) · Σ_{s=chunk_start}^{t} Δ(s, c)) ·
/// H(k, c)`: the true start state, decayed by every step since the chunk began. No recurrence: any token range can go
/// to any thread.
ATTN_VECTOR_CLONES void correct_tokens(const Problem& p, std::size_t chunk_start, std::size_t t0, std::size_t t1,
                                       const float* H, float* y, Scratch& s) {
  const std::size_t d = p.d, N = p.N;
  float* cum = s.dx.data();  // (d) Σ Δ since the chunk began
  float* E = s.E.data();     // (N, d)
  std::fill(cum, cum + d, 0.0f);
  for (std::size_t t = chunk_start; t < t0; ++t)
    for (std::size_t c = 0; c < d; ++c) cum[c] += p.delta[t * d + c];
  for (std::size_t t = t0; t < t1; ++t) {
    for (std::size_t c = 0; c < d; ++c) cum[c] += p.delta[t * d + c];
    for (std::size_t k = 0; k < N; ++k)
      for (std::size_t c = 0; c < d; ++c) E[k * d + c] = cum[c] * p.AT[k * d + c];
    ch05::exp_shift_sum(E, N * d, 0.0f);
    for (std::size_t cb = 0; cb < d; cb += kLanes) {
      const std::size_t lanes = std::min(kLanes, d - cb);
      if (lanes == kLanes) {
        Lanes acc, e, h;
        std::memcpy(&acc, y + t * d + cb, sizeof acc);
        for (std::size_t k = 0; k < N; ++k) {
          std::memcpy(&e, E + k * d + cb, sizeof e);
          std::memcpy(&h, H + k * d + cb, sizeof h);
          acc += p.C[t * N + k] * (e * h);
        }
        std::memcpy(y + t * d + cb, &acc, sizeof acc);
        continue;
      }
      for (std::size_t l = 0; l < lanes; ++l) {
        float acc = 0.0f;
        for (std::size_t k = 0; k < N; ++k) acc += p.C[t * N + k] * (E[k * d + cb + l] * H[k * d + cb + l]);
        y[t * d + cb + l] += acc;
      }
    }
  }
}
// [correct_tokens]

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

/// Rows [t0, t1) of \p M finite (and > 0 when \p positive), else std::invalid_argument naming the entry. The test
/// is a branch-free pass that vectorises (NaN fails every comparison); only a failure looks for the entry.
void check_rows(const Matrix& M, const char* what, std::size_t t0, std::size_t t1, bool positive) {
  constexpr float kMax = std::numeric_limits<float>::max();
  const std::size_t cols = M.shape(1);
  const float* p = M.data();
  int bad = 0;
  for (std::size_t i = t0 * cols; i < t1 * cols; ++i)
    bad |= positive ? !(p[i] > 0.0f && p[i] <= kMax) : !(std::fabs(p[i]) <= kMax);
  if (!bad) return;
  for (std::size_t i = t0 * cols; i < t1 * cols; ++i)
    if (positive ? !(p[i] > 0.0f && p[i] <= kMax) : !(std::fabs(p[i]) <= kMax))
      throw std::invalid_argument(fmt::format("selective_scan: {}({}, {}) = {}; {}", what, i / cols, i % cols, p[i],
                                              positive ? "every step must be finite and > 0" : "it must be finite"));
}

/// The input checks. Shapes, threads and A here; the (n, ·) inputs row range by row range on the scan's threads
/// (a serial check of 10 million numbers would be a fifth of the scan's time, and Amdahl's law would take it off
/// every speed-up). Each message is formatted only when its check fails.
void check(const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B, const Matrix& C, int threads,
           PhaseClock& clock) {
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
  const std::size_t T = std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(threads), n));
  run_on_threads(
      T,
      [&](std::size_t i) {
        const std::size_t t0 = n * i / T, t1 = n * (i + 1) / T;
        check_rows(x, "x", t0, t1, false);
        check_rows(delta, "delta", t0, t1, true);
        check_rows(B, "B", t0, t1, false);
        check_rows(C, "C", t0, t1, false);
      },
      clock);
}

}  // namespace

double selective_scan_bytes(std::size_t n, std::size_t d, std::size_t N) {
  return 4.0 * static_cast<double>(n) * static_cast<double>(3 * d + 2 * N);
}

// [selective_scan]
SelectiveScanOutput selective_scan(const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B,
                                   const Matrix& C, int threads, ScanSplit split, ScanCpuTime* cpu_time) {
  const double start_cpu = attn::thread_cpu_seconds();
  PhaseClock clock;
  check(x, delta, A, B, C, threads, clock);
  const std::size_t n = x.shape(0), d = x.shape(1), N = A.shape(1);
  Problem p{n, d, N, x.data(), delta.data(), B.data(), C.data(), std::vector<float>(N * d)};
  for (std::size_t c = 0; c < d; ++c)
    for (std::size_t k = 0; k < N; ++k) p.AT[k * d + c] = A(c, k);
  // (n, d), not zero-filled: every entry is written by the scan (a serial fill of 16 MiB would be Amdahl's again).
  Matrix y(Matrix::shape_type{n, d});
  std::vector<float> hT(N * d, 0.0f);  // (N, d) the state, transposed

  const std::size_t T = static_cast<std::size_t>(threads);
  if (split == ScanSplit::channels || T == 1) {
    const std::size_t workers = std::max<std::size_t>(1, std::min(T, d));
    run_on_threads(
        workers,
        [&](std::size_t i) {
          const std::size_t c0 = d * i / workers, c1 = d * (i + 1) / workers;
          Scratch s(N, c1 - c0);
          scan_tokens(p, 0, n, c0, c1, hT.data(), y.data(), s);
        },
        clock);
  } else {
    // 1. Every chunk from a zero state, in parallel: chunk 0's result is final, the others miss their carry.
    const std::size_t chunks = std::max<std::size_t>(1, std::min(T, n));
    std::vector<std::vector<float>> local(chunks, std::vector<float>(N * d, 0.0f));  // (N, d) each chunk's end state
    auto start = [&](std::size_t i) { return n * i / chunks; };
    run_on_threads(
        chunks,
        [&](std::size_t i) {
          Scratch s(N, d);
          scan_tokens(p, start(i), start(i + 1), 0, d, local[i].data(), y.data(), s);
        },
        clock);
    // 2. The carries, in order: H_i = exp(A·ΣΔ over chunk i) ∘ H_{i−1} + local_i, entry by entry. This is
    //    scan_combine() applied to whole chunks: (a, b) = (the chunk's total decay, its end state from zero).
    std::vector<std::vector<float>> carry(chunks, std::vector<float>(N * d, 0.0f));  // (N, d) state before chunk i
    for (std::size_t i = 1; i < chunks; ++i) {
      std::vector<float> sum(d, 0.0f);  // (d) ΣΔ over chunk i−1
      for (std::size_t t = start(i - 1); t < start(i); ++t)
        for (std::size_t c = 0; c < d; ++c) sum[c] += p.delta[t * d + c];
      for (std::size_t k = 0; k < N; ++k)
        for (std::size_t c = 0; c < d; ++c)
          carry[i][k * d + c] = std::exp(p.AT[k * d + c] * sum[c]) * carry[i - 1][k * d + c] + local[i - 1][k * d + c];
    }
    {  // the final state: the last chunk's local state plus its decayed carry
      std::vector<float> sum(d, 0.0f);
      for (std::size_t t = start(chunks - 1); t < n; ++t)
        for (std::size_t c = 0; c < d; ++c) sum[c] += p.delta[t * d + c];
      for (std::size_t k = 0; k < N; ++k)
        for (std::size_t c = 0; c < d; ++c)
          hT[k * d + c] =
              std::exp(p.AT[k * d + c] * sum[c]) * carry[chunks - 1][k * d + c] + local[chunks - 1][k * d + c];
    }
    // 3. Correct every chunk after the first with its carry. The tokens are independent now, so all threads
    //    share them evenly, whatever chunk they are in.
    const std::size_t first = start(1), rest = n - first;
    run_on_threads(
        T,
        [&](std::size_t i) {
          Scratch s(N, d);
          std::size_t t = first + rest * i / T;
          const std::size_t end = first + rest * (i + 1) / T;
          while (t < end) {
            std::size_t chunk = 1;
            while (start(chunk + 1) <= t) ++chunk;
            const std::size_t stop = std::min(end, start(chunk + 1));
            correct_tokens(p, start(chunk), t, stop, carry[chunk].data(), y.data(), s);
            t = stop;
          }
        },
        clock);
  }
  Matrix h = xt::zeros<float>({d, N});  // (d, N)
  for (std::size_t c = 0; c < d; ++c)
    for (std::size_t k = 0; k < N; ++k) h(c, k) = hT[k * d + c];
  if (cpu_time) {  // the caller's time outside the parallel phases is serial: on the critical path and in the work
    const double serial = attn::thread_cpu_seconds() - start_cpu - clock.caller;
    *cpu_time = {clock.critical + serial, clock.total + serial};
  }
  return {y, h};
}
// [selective_scan]

ScanInputs scan_inputs(Rng& rng, std::size_t n, std::size_t d, std::size_t N) {
  ScanInputs in{rng.normal(n, d), rng.uniform(n, d, std::log(0.001f), std::log(0.1f)), xt::zeros<float>({d, N}),
                rng.normal(n, N), rng.normal(n, N)};
  in.delta = xt::exp(in.delta);  // log-uniform
  for (std::size_t c = 0; c < d; ++c)
    for (std::size_t k = 0; k < N; ++k) in.A(c, k) = -static_cast<float>(k + 1);
  return in;
}

}  // namespace attn::ch14
