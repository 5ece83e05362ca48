/// \file
/// Numbers the chapters report about their matrices: how far two results are apart, and how a row of
/// attention weights is spread (its entropy, its ranking). One definition each, used by every chapter.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// The median of \p values (the upper one of the two middle values when their count is even): the typical
/// figure of repeated measurements, which the odd disturbed run does not move.
/// \throws std::invalid_argument when \p values is empty.
double median(std::vector<double> values);

/// The largest |a − b| over all entries (0 for empty matrices): how far a result is from its reference.
/// \param a (rows, cols)  \param b (rows, cols)
/// \throws std::invalid_argument naming both shapes when they differ.
double max_abs_diff(const Matrix& a, const Matrix& b);
/// The same for two vectors (a row, a log-sum-exp). \param a (n)  \param b (n)
/// \throws std::invalid_argument naming both shapes when they differ.
double max_abs_diff(const Vector& a, const Vector& b);

/// The mean |a − b| over all entries (0 for empty matrices): the typical error, beside the largest.
/// \param a (rows, cols)  \param b (rows, cols)
/// \throws std::invalid_argument naming both shapes when they differ.
double mean_abs_diff(const Matrix& a, const Matrix& b);

/// ‖approx − exact‖ / ‖exact‖ in the Frobenius norm: the error relative to the size of the answer.
/// \param approx (h, n, d)  \param exact (h, n, d)
/// \throws std::invalid_argument naming both shapes when they differ, or when \p exact is all zeros.
double relative_error(const Tensor3& approx, const Tensor3& exact);

/// The entropy in bits of row \p row of \p A, a row of attention weights summing to 1: 0 when one key
/// takes all the weight, log2(n) when the weights are uniform over n keys. Zero weights contribute 0.
/// \param A (n_q, n_kv)
/// \param row which query's weights
/// \throws std::invalid_argument when \p row is not a row of \p A.
double entropy_bits(const Matrix& A, std::size_t row);

/// The column indices of row \p i of \p A, largest weight first (ties keep their order).
/// \param A (n_q, n_kv)
/// \param i which query's weights
/// \throws std::invalid_argument when \p i is not a row of \p A.
std::vector<std::size_t> ranked(const Matrix& A, std::size_t i);

}  // namespace attn
