/// \file
/// Chapter 14's "attention vs memory" experiment: a state-space layer asked to store m key → value pairs and
/// read them back. Chapter code, not an exercise: it builds the inputs; the recall itself runs through the
/// contract's attn::masked_attention_form().
#pragma once

#include <cstddef>

#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::ch14 {

/// \p m rows of length \p d that are orthonormal (Gram–Schmidt on Gaussian rows), m ≤ d.
/// \return (m, d).
/// \throws std::invalid_argument when m > d (at most d vectors of length d can be orthogonal), or when m·d floats
///         would not fit in memory (naming the estimate, before allocating).
Matrix orthonormal_rows(Rng& rng, std::size_t m, std::size_t d);

/// The recall task as a sequence of 2m tokens for an SSM with state width N = d_k: tokens 0 … m−1 write pair j
/// (B_j = k_j, X_j = v_j, C_j = 0), tokens m … 2m−1 ask for key j (C = k_j, B = 0, X = 0). With no decay the
/// state after the writes is Σ_j k_jᵀ v_j, chapter 08's (d_k, d_v) memory, and token m + j reads k_j · that.
struct RecallTask {
  Matrix C;  ///< (2m, d_k) zeros, then the keys asked for
  Matrix B;  ///< (2m, d_k) the keys written, then zeros
  Matrix X;  ///< (2m, d_v) the values written, then zeros
};

/// \param K (m, d_k) keys. \param V (m, d_v) values. \return the task's C, B, X.
/// \throws std::invalid_argument naming both shapes when K and V differ in rows, naming the first NaN/Inf of K or V,
///         or when the task's 2m × (2·d_k + d_v) floats do not fit in memory (naming the estimate, before allocating).
RecallTask recall_task(const Matrix& K, const Matrix& V);

/// ‖V̂ − V‖_F / ‖V‖_F: the relative error of recalled values \p recalled (m, d_v) against \p V (m, d_v). Against
/// V = 0 (or no values) it is 0 when \p recalled is 0 as well, and +∞ otherwise.
/// \throws std::invalid_argument naming both shapes when they differ, or the first NaN/Inf of either.
double relative_error(const Matrix& recalled, const Matrix& V);

}  // namespace attn::ch14
