/// \file
/// Chapter 04, the cost of full attention: the contract the learner implements in
/// exercises/04_complexity/complexity.cpp. Book page: book/04_complexity.md.
/// The "full attention" measured here is chapter 02's attn::scaled_dot_product_attention().
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch04 Chapter 04: the O(n²·d) wall
/// Counting what full attention costs (FLOPs and bytes), fitting the exponent of a measured cost, and
/// refusing to start a computation whose matrices cannot fit in memory.
/// @{

/// The floating-point operations of one head of full attention, softmax(Q Kᵀ / √d_k) · V, by stage.
/// A multiply-add counts as 2 FLOPs; exp counts as 1. Counts are exact integers held in doubles
/// (exact while below 2^53 ≈ 9·10^15, far beyond n = 100,000).
struct AttentionFlops {
  double scores = 0;        ///< S = Q Kᵀ: n_q·n_kv dot products of length d_k, 2·n_q·n_kv·d_k
  double softmax = 0;       ///< 5 per score: ×1/√d_k, − row max, exp, + to the row sum, × 1/sum: 5·n_q·n_kv
  double weighted_sum = 0;  ///< O = A V: n_q·d_v dot products of length n_kv, 2·n_q·n_kv·d_v
  /// All three stages: 4·n²·d + 5·n² for self-attention with d_k = d_v = d.
  double total() const { return scores + softmax + weighted_sum; }
};

/// FLOPs of full attention for Q (n_q, d_k), K (n_kv, d_k), V (n_kv, d_v), stage by stage
/// (see AttentionFlops for what each stage counts). Any size may be 0 (the count is then 0 where it
/// multiplies).
AttentionFlops attention_flops(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v);

/// The bytes full attention touches, float32 throughout (4 bytes per number), for Q (n_q, d_k),
/// K (n_kv, d_k), V (n_kv, d_v) with chapter 02's unfused implementation: S is written to memory,
/// softmax reads it and writes A, and A·V reads A.
struct AttentionBytes {
  double inputs = 0;        ///< Q, K and V: 4·(n_q·d_k + n_kv·d_k + n_kv·d_v)
  double output = 0;        ///< O (n_q, d_v): 4·n_q·d_v
  double score_matrix = 0;  ///< one (n_q, n_kv) matrix, S or A: 4·n_q·n_kv
  /// Heap held at once beyond the inputs: S, A and O are all alive when A·V returns, 2·score_matrix + output.
  double peak_extra = 0;
  /// Memory traffic: inputs read, O written, S written and read, A written and read:
  /// inputs + output + 4·score_matrix (a row of S fits in cache, so softmax reads it from memory once).
  double moved = 0;
};

/// The bytes of full attention for Q (n_q, d_k), K (n_kv, d_k), V (n_kv, d_v) (see AttentionBytes).
AttentionBytes attention_bytes(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v);

/// A power law y ≈ coefficient · x^exponent fitted to measurements.
struct PowerLawFit {
  double exponent = 0;     ///< the slope of the line through (log x, log y)
  double coefficient = 0;  ///< e^intercept: y at x = 1
  double r_squared = 0;    ///< fraction of the variance of log y the line explains (1 = a perfect line)
};

/// Least-squares straight line through the points (ln x_i, ln y_i): its slope is the exponent p of
/// y ≈ c · x^p. Doubling x multiplies y by 2^p, so p ≈ 2 says "quadratic".
/// \param x (k) positive abscissae (sequence lengths, widths), at least two different values.
/// \param y (k) positive measurements (seconds, bytes), one per x.
/// \throws std::invalid_argument naming the sizes when x and y differ in length or k < 2, naming the index
///         of a point (x, y) with a value that is not positive and finite, and when every x is the same (no slope
///         to fit).
PowerLawFit fit_power_law(const std::vector<double>& x, const std::vector<double>& y);

/// Thrown by guarded_attention() instead of allocating matrices that cannot fit: its message states the
/// estimate, the limit, and where to go instead (chapter 05 computes the same result in O(n) extra memory).
/// It is an std::invalid_argument: asking for it is a request the machine cannot serve, and a chapter
/// executable reports it with exit status 2.
class memory_refusal : public std::invalid_argument {
 public:
  memory_refusal(std::size_t n_q, std::size_t n_kv, double required_bytes, double limit_bytes)
      : std::invalid_argument(fmt::format(
            "full attention with n_q = {}, n_kv = {} would hold {} at once (S and A, each (n_q, n_kv) "
            "float32 = {}, plus the output), but the memory limit is {}. Refused before allocating anything. "
            "Chapter 05 (flash_cpu) computes the same result tile by tile in O(n) extra memory.",
            n_q, n_kv, human_bytes(required_bytes, false),
            human_bytes(4.0 * static_cast<double>(n_q) * static_cast<double>(n_kv), false),
            human_bytes(limit_bytes, false))),
        required_bytes_(required_bytes),
        limit_bytes_(limit_bytes) {}

  double required_bytes() const noexcept { return required_bytes_; }
  double limit_bytes() const noexcept { return limit_bytes_; }

 private:
  double required_bytes_;
  double limit_bytes_;
};

/// Full attention (chapter 02's scaled_dot_product_attention) behind a memory check: when the heap it
/// would hold beyond its inputs (attention_bytes(...).peak_extra) exceeds \p limit_bytes, it throws
/// memory_refusal *before allocating anything*; otherwise it returns the attention.
/// \param Q (n_q, d_k) queries.
/// \param K (n_kv, d_k) keys.
/// \param V (n_kv, d_v) values.
/// \param limit_bytes the memory it may use, e.g. attn::available_memory_bytes(); a test passes a small one.
/// \return (n_q, d_v) softmax(Q Kᵀ / √d_k) · V.
/// \throws memory_refusal when the matrices would not fit; std::invalid_argument naming the shapes when
///         Q, K and V do not fit together (checked first: a wrong shape gives no meaningful estimate), and naming
///         limit_bytes when it is NaN (which no estimate exceeds).
Matrix guarded_attention(const Matrix& Q, const Matrix& K, const Matrix& V, double limit_bytes);

/// @}

}  // namespace attn
