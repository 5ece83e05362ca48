/// \file
/// Chapter 08's presented code (not exercises): drawing the Performer's random projections, and the
/// quadratic form of linear attention that the associative form is checked against.
#pragma once

#include "attn/checks.hpp"
#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::ch08 {

/// m independent Gaussian projections, entries ~ N(0, 1).
/// \param m number of features (rows).
/// \param d width of the vectors they project, d_k.
/// \param rng the seeded source they are drawn from.
/// \return (m, d). \throws std::invalid_argument when m·d floats would not fit in memory (Rng's check).
Matrix gaussian_features(std::size_t m, std::size_t d, Rng& rng);

/// m orthogonal random projections (Performer's "ORF"): (m, d). Rows come in blocks of d mutually
/// orthogonal directions (Gram–Schmidt of a Gaussian block); each row is then given the length of an
/// independent Gaussian vector, so that every row is still distributed as N(0, I) but the rows of a block
/// never point the same way. Same expectation, smaller variance.
/// \param m number of features (rows); any m, in blocks of d.
/// \param d width of the vectors they project, d_k (≥ 1 when m > 0).
/// \param rng the seeded source they are drawn from.
/// \return (m, d).
/// \throws std::invalid_argument when d = 0 and m > 0 (no direction to draw).
Matrix orthogonal_features(std::size_t m, std::size_t d, Rng& rng);

/// Linear attention the slow way, the quadratic form: the weights of linear_attention_weights(), then W·V.
/// \param phiQ (n_q, m) features of the queries.
/// \param phiK (n_kv, m) features of the keys.
/// \param V (n_kv, d_v) values.
/// \param mask (n_q, n_kv), true = may attend; empty (the default) = every pair.
/// \return (n_q, d_v).
/// \throws std::invalid_argument naming the shapes when they do not fit, or naming the first NaN/Inf of V, and as
///         linear_attention_weights() does.
Matrix quadratic_linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V, const Mask& mask = Mask());

/// The weights of the quadratic form: W = φ(Q) φ(K)ᵀ, zeroed where \p mask is false, each row divided by
/// its sum (a row summing to 0 stays 0).
/// \param phiQ (n_q, m) features of the queries.
/// \param phiK (n_kv, m) features of the keys.
/// \param mask (n_q, n_kv), true = may attend; empty (the default) = every pair.
/// \return (n_q, n_kv).
/// \throws std::invalid_argument naming the shapes when the features or the mask do not fit, or naming the first
///         feature that is NaN, infinite or negative (features are weights), or when m · max φ(q) · max φ(k) is
///         beyond attn::kMaxScoreBound (a weight could overflow float: attn::require_bounded_products()).
Matrix linear_attention_weights(const Matrix& phiQ, const Matrix& phiK, const Mask& mask = Mask());

/// FLOPs of softmax attention over n tokens of width d: Q Kᵀ and A·V, and the n² exponentials (features.cpp).
/// \throws std::invalid_argument naming n and d unless both are finite and ≥ 0.
double softmax_flops(double n, double d);
/// FLOPs of linear attention over n tokens with m features and values of width d_v (features.cpp); the causal
/// recurrence does the same work.
/// \throws std::invalid_argument naming n, m and d_v unless all are finite and ≥ 0.
double linear_flops(double n, double m, double d_v);

}  // namespace attn::ch08
