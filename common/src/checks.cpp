// The checks every kernel shares (see attn/checks.hpp): sizes, attention inputs, threads, OpenBLAS.
#include "attn/checks.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "attn/format.hpp"
#include "attn/measure.hpp"

namespace attn {

std::size_t checked_product(const char* what, std::initializer_list<std::size_t> factors) {
  if (std::find(factors.begin(), factors.end(), std::size_t{0}) != factors.end()) return 0;
  std::size_t product = 1;
  for (std::size_t f : factors) {
    if (product > std::numeric_limits<std::size_t>::max() / f) {
      std::string list;
      for (std::size_t g : factors) list += (list.empty() ? "" : " × ") + std::to_string(g);
      throw std::invalid_argument(
          fmt::format("{}: {} does not fit in 64 bits (more than 1.8e19); the sizes are impossible", what, list));
    }
    product *= f;
  }
  return product;
}

std::size_t checked_sum(const char* what, std::initializer_list<std::size_t> terms) {
  std::size_t sum = 0;
  for (std::size_t t : terms) {
    if (t > std::numeric_limits<std::size_t>::max() - sum) {
      std::string list;
      for (std::size_t u : terms) list += (list.empty() ? "" : " + ") + std::to_string(u);
      throw std::invalid_argument(
          fmt::format("{}: {} does not fit in 64 bits (more than 1.8e19); the sizes are impossible", what, list));
    }
    sum += t;
  }
  return sum;
}

std::size_t checked_allocation(const char* what, std::initializer_list<std::size_t> factors) {
  const std::size_t bytes = checked_product(what, factors);
  const std::size_t available = available_memory_bytes();
  if (available > 0 && bytes > available) {
    std::string list;
    for (std::size_t f : factors) list += (list.empty() ? "" : " × ") + std::to_string(f);
    throw std::invalid_argument(
        fmt::format("{}: {} bytes = {}, more than the {} available now; refused before "
                    "allocating",
                    what, list, human_bytes(static_cast<double>(bytes), false),
                    human_bytes(static_cast<double>(available), false)));
  }
  return bytes;
}

namespace {

/// The largest magnitude among \p x's values, and the index of the first non-finite one (size if none).
struct Scan {
  float max_abs = 0.0f;
  std::size_t first_bad;
};

Scan scan_values(const float* x, std::size_t size) {
  // One integer maximum answers both questions. With the sign bit cleared, the bits of finite floats order as
  // their magnitudes do, and every NaN or ±∞ has bits at least those of ∞. A maximum of integers vectorises on
  // any instruction set; a maximum of floats does not without -ffast-math (GCC kept this loop scalar when it
  // took the float maximum and a sum of x - x: 2 cycles a value, 3% of chapter 05's forward).
  constexpr std::uint32_t kMagnitude = 0x7fffffffu, kInfinityBits = 0x7f800000u;
  std::uint32_t top = 0;
  for (std::size_t i = 0; i < size; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    top = std::max(top, bits & kMagnitude);
  }
  if (top < kInfinityBits) {
    float max_abs;
    std::memcpy(&max_abs, &top, sizeof max_abs);
    return {max_abs, size};
  }
  // A NaN or an infinity is there: find the first, slowly, for the message (the magnitude no longer matters).
  const float* bad = std::find_if(x, x + size, [](float v) { return !std::isfinite(v); });
  return {std::numeric_limits<float>::infinity(), static_cast<std::size_t>(bad - x)};
}

void require_finite_at(const char* where, const char* what, const float* x, const Scan& scan, std::size_t size) {
  require(scan.first_bad == size, fmt::format("{}: {}[{}] is {} (only finite values are allowed)", where, what,
                                              scan.first_bad, scan.first_bad < size ? x[scan.first_bad] : 0.0f));
}

/// The scans of \p count arrays, each cut into \p parts consecutive pieces that \p threads threads take from a
/// shared counter, then joined in order: the largest magnitude of all pieces, and the first bad index of the first
/// piece that has one. The same answer as one scan per array, since a maximum does not depend on the order.
std::vector<Scan> scan_in_parts(const float* const* x, const std::size_t* size, std::size_t count, std::size_t parts,
                                std::size_t threads) {
  std::vector<Scan> piece(count * parts);                         // (count, parts)
  const auto begin = [&](std::size_t a, std::size_t i) {          // piece i of array a starts here
    return i * (size[a] / parts) + std::min(i, size[a] % parts);  // the first size % parts pieces one longer
  };
  std::atomic<std::size_t> next{0};
  run_on_threads(threads, [&] {
    for (std::size_t t = next++; t < piece.size(); t = next++) {
      const std::size_t a = t / parts, i = t % parts, b = begin(a, i);
      piece[t] = x[a] == nullptr ? Scan{0.0f, 0} : scan_values(x[a] + b, begin(a, i + 1) - b);
      piece[t].first_bad += b;
    }
  });
  std::vector<Scan> whole(count);
  for (std::size_t a = 0; a < count; ++a) {
    whole[a] = {0.0f, size[a]};
    for (std::size_t i = parts; i-- > 0;) {  // backwards, so the first bad piece is the one that stays
      const Scan& p = piece[a * parts + i];
      whole[a].max_abs = std::max(whole[a].max_abs, p.max_abs);
      if (p.first_bad < begin(a, i + 1)) whole[a].first_bad = p.first_bad;
    }
  }
  return whole;
}

}  // namespace

void require_attention_inputs(const char* where, const float* Q, std::size_t q_size, std::size_t q_row, const float* K,
                              std::size_t k_size, std::size_t k_row, const float* V, std::size_t v_size,
                              std::size_t threads) {
  // Below ~64K floats a thread's start costs more than the scan it would take over.
  const std::size_t total = q_size + k_size + v_size,
                    used = total < (std::size_t{1} << 16) ? 1 : std::max<std::size_t>(threads, 1);
  const float* const x[] = {Q, K, V};
  const std::size_t size[] = {q_size, k_size, v_size};
  const std::vector<Scan> scans = scan_in_parts(x, size, 3, used == 1 ? 1 : 4 * used, used);
  const Scan &q = scans[0], &k = scans[1], &v = scans[2];
  require_finite_at(where, "Q", Q, q, q_size);
  require_finite_at(where, "K", K, k, k_size);
  require_finite_at(where, "V", V, v, v_size);
  const double d_k = static_cast<double>(std::max(q_row, k_row));
  const double bound = d_k * static_cast<double>(q.max_abs) * static_cast<double>(k.max_abs);
  require(bound <= kMaxScoreBound,
          fmt::format("{}: d_k = {} times max|q| = {:.3g} times max|k| = {:.3g} is {:.3g}, beyond {:.3g}: a score q·k "
                      "could overflow float. Scale Q or K down (every function that takes Q, K, V refuses this; see "
                      "attn/checks.hpp)",
                      where, std::max(q_row, k_row), q.max_abs, k.max_abs, bound, kMaxScoreBound));
}

void require_bounded_products(const char* where, const char* x_name, const float* x, std::size_t x_size,
                              const char* y_name, const float* y, std::size_t y_size, std::size_t terms) {
  const Scan sx = scan_values(x, x_size), sy = scan_values(y, y_size);
  require_finite_at(where, x_name, x, sx, x_size);
  require_finite_at(where, y_name, y, sy, y_size);
  const double bound = static_cast<double>(terms) * static_cast<double>(sx.max_abs) * static_cast<double>(sy.max_abs);
  require(
      bound <= kMaxScoreBound,
      fmt::format("{}: {} terms times max|{}| = {:.3g} times max|{}| = {:.3g} is {:.3g}, beyond {:.3g}: a score could "
                  "overflow float. Scale {} or {} down (see attn/checks.hpp)",
                  where, terms, x_name, sx.max_abs, y_name, sy.max_abs, bound, kMaxScoreBound, x_name, y_name));
}

void require_mask_shape(const char* where, const Mask& mask, std::size_t n_q, std::size_t n_kv,
                        const std::string& operands) {
  const bool no_mask = mask.shape(0) == 0 && mask.shape(1) == 0;
  require(no_mask || (mask.shape(0) == n_q && mask.shape(1) == n_kv),
          fmt::format("{}: the mask is {} but {}; it must be (n_q, n_kv) = ({}, {}), or (0, 0) for no mask", where,
                      shape_str(mask), operands, n_q, n_kv));
}

void run_on_threads(std::size_t threads, const std::function<void()>& work) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto guarded = [&] {
    try {
      work();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(guarded);
  } catch (...) {  // a thread could not start: the ones that did still finish the work
    const std::lock_guard<std::mutex> lock(failure_mutex);
    if (!failure) failure = std::current_exception();
  }
  guarded();  // the calling thread is one of the workers
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace attn
