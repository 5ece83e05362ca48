/// \file
/// The oracle for chapter 03: multi-head attention as the formula reads, in float64 loops.
/// MultiHead(X) = Concat(head_1, …, head_h) W_O, head_i = Attention(X W_Q[:, cols_i], X W_K[:, cols_i], X W_V[:,
/// cols_i]).
#pragma once

#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// Columns [first, first + count) of \p m: (rows, count).
Mat columns(const Mat& m, std::size_t first, std::size_t count);

/// Head \p i of a layer with \p h heads, before W_O: Attention(X·W_Q_i, X·W_K_i, X·W_V_i) where W_·_i are
/// columns [i·d_k, (i+1)·d_k) of the full projections, d_k = d_model / h.
/// X (n, d_model), W_Q/W_K/W_V (d_model, d_model) → (n, d_k). \p allowed as in attention().
Mat head_output(const Mat& X, const Mat& W_Q, const Mat& W_K, const Mat& W_V, std::size_t h, std::size_t i,
                const std::vector<bool>* allowed = nullptr);

/// The whole layer: Σ over kept heads i of head_output(i) · W_O[rows of head i]: (n, d_model).
/// \p keep has one entry per head (its size is h); a removed head contributes nothing.
Mat multi_head(const Mat& X, const Mat& W_Q, const Mat& W_K, const Mat& W_V, const Mat& W_O,
               const std::vector<bool>& keep, const std::vector<bool>* allowed = nullptr);

}  // namespace attn::oracle
