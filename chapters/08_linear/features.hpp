/// \file
/// Chapter 08's presented code (not exercises): drawing the Performer's random projections, and the
/// quadratic form of linear attention that the associative form is checked against.
#pragma once

#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::ch08 {

/// m independent Gaussian projections: (m, d) with entries ~ N(0, 1).
Matrix gaussian_features(std::size_t m, std::size_t d, Rng& rng);

/// m orthogonal random projections (Performer's "ORF"): (m, d). Rows come in blocks of d mutually
/// orthogonal directions (Gram–Schmidt of a Gaussian block); each row is then given the length of an
/// independent Gaussian vector, so that every row is still distributed as N(0, I) but the rows of a block
/// never point the same way. Same expectation, smaller variance.
Matrix orthogonal_features(std::size_t m, std::size_t d, Rng& rng);

/// Linear attention the slow way, the quadratic form: W = φ(Q) φ(K)ᵀ (n_q, n_kv), zeroed where \p mask
/// (n_q, n_kv) is false (empty = no mask), each row divided by its sum (a zero row stays zero), then W·V.
/// \param phiQ (n_q, m)  \param phiK (n_kv, m)  \param V (n_kv, d_v)  \return (n_q, d_v).
Matrix quadratic_linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V, const Mask& mask = Mask());

/// The weights of the quadratic form itself: φ(Q) φ(K)ᵀ, masked and row-normalised, (n_q, n_kv).
Matrix linear_attention_weights(const Matrix& phiQ, const Matrix& phiK, const Mask& mask = Mask());

}  // namespace attn::ch08
