// Chapter 05's slow/fast memory model: a counter with a capacity, and the two attention schedules run
// through it. Book page: book/05_flash_cpu.md (section "Counting what moves").
#include "05_flash_cpu/io_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "attn/tensor.hpp"

namespace attn::ch05 {

FastMemory::FastMemory(std::size_t capacity) : capacity_(capacity) {}

void FastMemory::hold(std::size_t floats) {
  require(floats <= capacity_ - resident_,  // not resident_ + floats ≤ capacity_: the sum could wrap
          fmt::format("FastMemory: {} floats resident, {} more do not fit in M = {}", resident_, floats, capacity_));
  resident_ += floats;
  peak_ = std::max(peak_, resident_);
}

/// Refuses \p floats more on a counter of transfers when they would wrap it.
void require_countable(std::uint64_t counter, std::size_t floats, const char* what) {
  require(floats <= std::numeric_limits<std::uint64_t>::max() - counter,
          fmt::format("FastMemory: {} {} floats more would wrap the count of {}", what, floats, counter));
}

void FastMemory::load(std::size_t floats) {
  require_countable(count_.reads, floats, "loading");  // both checks before any change: a refused load changes nothing
  hold(floats);
  count_.reads += floats;
}

void FastMemory::allocate(std::size_t floats) { hold(floats); }

void FastMemory::store(std::size_t floats) {
  require_countable(count_.writes, floats, "storing");
  count_.writes += floats;
}

void FastMemory::release(std::size_t floats) {
  require(floats <= resident_,
          fmt::format("FastMemory: releasing {} floats but only {} are resident", floats, resident_));
  resident_ -= floats;
}

namespace {

// In double: a plan's sizes may be anything the caller passes, and the size_t sum would wrap to "it fits".
double tiled_working_set(std::size_t d, std::size_t B_r, std::size_t B_c) {
  const double d_ = static_cast<double>(d), r = static_cast<double>(B_r), c = static_cast<double>(B_c);
  return 2 * r * d_ + 2 * r + 2 * c * d_ + r * c;  // Q_i, O_i; m, ℓ; K_j, V_j; the score tile
}

// The model's sizes: M within kMaxFastMemory (the plans' loops step one block size at a time), and no more than
// kMaxModelSteps transfers simulated one by one.
void require_model_sizes(const char* where, std::size_t M, double steps, std::size_t n = 0) {
  require(M <= kMaxFastMemory, fmt::format("{}: M = {} floats; the model takes at most {} (far beyond any cache)",
                                           where, M, kMaxFastMemory));
  require(steps <= kMaxModelSteps,
          fmt::format("{}: n = {} needs {:.3g} transfers to simulate one by one; at most {:.0e}", where, n, steps,
                      kMaxModelSteps));
}

// ⌈n / b⌉ in double.
double blocks(std::size_t n, std::size_t b) { return std::ceil(static_cast<double>(n) / static_cast<double>(b)); }

// The largest square block b with a (b, d) panel, a second (b, d) panel and a (b, b) tile in fast memory:
// what a blocked matrix product of standard attention keeps resident.
std::size_t product_block(std::size_t d, std::size_t M) {
  require(d <= M, fmt::format("simulate_standard: M = {} cannot hold two rows of d = {}", M, d));  // no wrap below
  std::size_t b = 1;
  while (2 * (b + 1) * d + (b + 1) * (b + 1) <= M) ++b;
  require(2 * b * d + b * b <= M, fmt::format("simulate_standard: M = {} cannot hold two rows of d = {}", M, d));
  return b;
}

}  // namespace

// [plan_tiles]
TilePlan plan_tiles(std::size_t d, std::size_t M) {
  require_model_sizes("plan_tiles", M, 0.0);
  require(tiled_working_set(d, 1, 1) <= static_cast<double>(M),
          fmt::format("plan_tiles: M = {} floats cannot hold even one row of "
                      "Q, K, V and O at d = {}",
                      M, d));
  TilePlan plan{1, 1};
  for (std::size_t B_r = 2;; ++B_r) {
    const std::size_t B_c = std::max<std::size_t>(1, std::min(B_r, d));  // d = 0: still one key per block
    if (tiled_working_set(d, B_r, B_c) > static_cast<double>(M)) break;
    plan = {B_r, B_c};
  }
  return plan;
}
// [plan_tiles]

// [simulate_standard]
IoCount simulate_standard(std::size_t n, std::size_t d, std::size_t M) {
  require_model_sizes("simulate_standard", M, 0.0);
  FastMemory fast(M);
  const std::size_t b = product_block(d, M);
  require_model_sizes("simulate_standard", M,
                      2 * blocks(n, b) * blocks(n, b) +
                          2 * static_cast<double>(n) * blocks(n, std::max<std::size_t>(1, std::min(n, M))),
                      n);
  // 1. S = Q Kᵀ: a block of Q rows stays while blocks of K stream past; every S tile goes to slow memory.
  for (std::size_t r0 = 0; r0 < n; r0 += b) {
    const std::size_t rows = std::min(b, n - r0);
    fast.load(rows * d);  // Q block
    for (std::size_t c0 = 0; c0 < n; c0 += b) {
      const std::size_t cols = std::min(b, n - c0);
      fast.load(cols * d);         // K block
      fast.allocate(rows * cols);  // S tile
      fast.store(rows * cols);
      fast.release(cols * d + rows * cols);
    }
    fast.release(rows * d);
  }
  // 2. P = softmax(S), one row at a time: a row that fits is read once; one that does not is read twice
  //    (max and sum in one streaming pass, then normalise), and P's row is written.
  const bool row_fits = n <= M;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t chunk = row_fits ? n : M;
    for (int pass = 0; pass < (row_fits ? 1 : 2); ++pass)
      for (std::size_t c0 = 0; c0 < n; c0 += chunk) {
        fast.load(std::min(chunk, n - c0));
        fast.release(std::min(chunk, n - c0));
      }
    fast.store(n);
  }
  // 3. O = P V: an accumulator block of O stays while blocks of P and V stream past; O is written once.
  for (std::size_t r0 = 0; r0 < n; r0 += b) {
    const std::size_t rows = std::min(b, n - r0);
    fast.allocate(rows * d);  // O block
    for (std::size_t c0 = 0; c0 < n; c0 += b) {
      const std::size_t cols = std::min(b, n - c0);
      fast.load(rows * cols + cols * d);  // P tile, V block
      fast.release(rows * cols + cols * d);
    }
    fast.store(rows * d);
    fast.release(rows * d);
  }
  return fast.count();
}
// [simulate_standard]

// [simulate_tiled]
IoCount simulate_tiled(std::size_t n, std::size_t d, std::size_t M, TilePlan plan) {
  require(plan.B_r > 0 && plan.B_c > 0 && tiled_working_set(d, plan.B_r, plan.B_c) <= static_cast<double>(M),
          fmt::format("simulate_tiled: B_r = {}, B_c = {} at d = {} need {} floats of fast memory, M = {}", plan.B_r,
                      plan.B_c, d, tiled_working_set(d, plan.B_r, plan.B_c), M));
  require_model_sizes("simulate_tiled", M, blocks(n, plan.B_r) * blocks(n, plan.B_c), n);
  FastMemory fast(M);
  for (std::size_t r0 = 0; r0 < n; r0 += plan.B_r) {
    const std::size_t rows = std::min(plan.B_r, n - r0);
    fast.load(rows * d);                 // Q_i
    fast.allocate(rows * d + 2 * rows);  // O_i, m, ℓ: live in fast memory for the whole inner loop
    for (std::size_t c0 = 0; c0 < n; c0 += plan.B_c) {
      const std::size_t cols = std::min(plan.B_c, n - c0);
      fast.load(2 * cols * d);     // K_j, V_j
      fast.allocate(rows * cols);  // S_ij, then P_ij: never leaves fast memory
      fast.release(2 * cols * d + rows * cols);
    }
    fast.store(rows * d + rows);  // O_i and its log-sum-exp, once
    fast.release(2 * rows * d + 2 * rows);
  }
  return fast.count();
}
// [simulate_tiled]

}  // namespace attn::ch05
