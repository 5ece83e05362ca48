/// \file
/// Chapter 11's oracle: position encodings from their definitions, and attention with any score
/// modification and mask, in float64 loops.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// PE(p, c) = sin(p·ω) (c even) or cos(p·ω) (c odd), ω = 10000^(−(c − c mod 2)/d): (n, d).
Mat sinusoidal(std::size_t n, std::size_t d);

/// X with each pair of columns (2i, 2i + 1) of row p turned by the angle (first + p)·base^(−2i/d): (n, d).
Mat rope(const Mat& X, std::size_t first, double base);

/// ALiBi's slopes as the paper's code computes them (Press et al. 2022, get_slopes): for h a power of two,
/// start·start^i with start = 2^(−2^−(log₂h − 3)); otherwise those of the closest power of two c below h,
/// followed by the even-indexed slopes of 2c heads, the first h − c of them. (h)
std::vector<double> alibi_slopes(std::size_t h);

/// A score modification in float64: (scaled score, query index, key index) → new score.
using ScoreFn = std::function<double(double, std::size_t, std::size_t)>;
/// A mask: (query index, key index) → may attend.
using MaskFn = std::function<bool(std::size_t, std::size_t)>;

/// softmax_j(score(q_i·k_j / √d_k, i, j)) over the allowed keys, times V; a row with none allowed is 0.
/// Q (n_q, d_k), K (n_kv, d_k), V (n_kv, d_v) → (n_q, d_v).
Mat modified_attention(const Mat& Q, const Mat& K, const Mat& V, const ScoreFn& score, const MaskFn& allowed);

/// log Σ_j exp(score(q_i·k_j / √d_k, i, j)) over the allowed keys of each query (-inf where none): (n_q).
std::vector<double> modified_log_sum_exp(const Mat& Q, const Mat& K, const ScoreFn& score, const MaskFn& allowed);

}  // namespace attn::oracle
