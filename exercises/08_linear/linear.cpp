// Chapter 08, your exercises. Book page: book/08_linear.md.
// Check your progress with `./course check 08`; stuck? `./course hint 08`.
// Watch your code run the chapter: `./course run 08 --track exercise`.
#include "08_linear/linear.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "08_linear";
}

Matrix elu_plus_one(const Matrix& X) {
  // TODO(learner): entry by entry, x + 1 where x > 0 and exp(x) elsewhere, shape (n, d) like X.
  //   A NaN or infinite entry is std::invalid_argument naming its index (attn::require_finite).
  throw not_implemented("elu_plus_one", kChapter, "copy X, then map every entry: x > 0 ? x + 1 : exp(x).");
}

Matrix positive_random_features(const Matrix& X, const Matrix& Omega) {
  // TODO(learner): (n, m) with entry (i, r) = exp(ω_r·x̂_i − ‖x̂_i‖²/2) / √m, where x̂ = x / d_k^{1/4} and ω_r is
  //   row r of Omega (m, d_k). X and Omega must agree in d_k; X and Omega must be finite; a row whose features all
  //   underflow to 0 (or overflow) is refused, naming it.
  throw not_implemented("positive_random_features", kChapter,
                        "attn::matmul(X, Omega, true, 1/d_k^{1/4}) gives every ω_r·x̂ at once; then one exp per entry.");
}

Matrix linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V) {
  // TODO(learner): O(i, :) = φ(q_i)(φ(K)ᵀV) / (φ(q_i)·φ(K)ᵀ1), shape (n_q, d_v), WITHOUT the (n_q, n_kv) matrix.
  //   Check the shapes first, then the inputs (attn::require_attention_inputs: NaN/Inf; and every feature ≥ 0).
  //   Stay safe when the features
  //   are tiny (1e-30): scaling all of φ(K), or one row of φ(Q), by a constant does not change the answer. A zero
  //   denominator gives a row of zeros. V near float's limit (3e38) must still give a finite answer: scale it too.
  throw not_implemented("linear_attention", kChapter,
                        "first KV = φ(K)ᵀV (m, d_v) and z = φ(K)ᵀ1 (m); then every query needs only those two.");
}

Vector recurrent_step(RecurrentState& state, const Vector& phi_q, const Vector& phi_k, const Vector& v, float decay) {
  // TODO(learner): S ← λS + φ(k)ᵀv (outer product, (m, d_v)), z ← λz + φ(k), then return φ(q)S / (φ(q)·z).
  //   Check the shapes and that λ is in (0, 1], the inputs, and the state before changing it (finite, and the new
  //   state small enough not to overflow: the contract's bound). A zero denominator reads a row of zeros.
  throw not_implemented("recurrent_step", kChapter,
                        "update the state first (the current token sees itself), then read it with the query.");
}

Matrix causal_linear_attention(const Matrix& phiQ, const Matrix& phiK, const Matrix& V, float decay) {
  // TODO(learner): start from RecurrentState::zeros(m, d_v) and take one step per token t = 0 .. n-1;
  //   row t of the result is that step's output. Same shape checks and the same care with tiny features.
  throw not_implemented("causal_linear_attention", kChapter,
                        "a loop over t calling your recurrent_step(), or the same update on raw rows.");
}

}  // namespace attn
