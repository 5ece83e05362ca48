// Chapter 14, your exercises. Book page: book/14_state_space.md.
// Check your progress with `./course check 14`; stuck? `./course hint 14`.
// Watch your code run the chapter: `./course run 14 --track exercise`.
#include "14_state_space/state_space.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "14_state_space";
}

DiscreteSSM zoh_discretize(const DiagonalSSM& ssm, float delta) {
  // TODO(learner): for every entry k, Ā_k = exp(Δ·A_k) and B̄_k = (e^{Δ·A_k} − 1) / A_k · B_k (std::complex does
  //   the arithmetic); C is copied. Compute e^{ΔA} − 1 without subtracting 1 from Ā: at Δ = 0.001, Ā is within
  //   5e-4 of 1 and Ā − 1 keeps only its last bits (std::expm1 exists for real numbers; `./course hint 14`).
  //   First check: A, B, C of one size N; Δ finite and > 0; every entry finite and every Re(A_k) < 0
  //   (std::invalid_argument naming k and the value otherwise).
  throw not_implemented("zoh_discretize", kChapter,
                        "holding u constant over one step, x(t+Δ) = e^{ΔA} x(t) + (e^{ΔA} − 1)/A · B u: two formulas "
                        "per entry, not Δ·B (that is Euler's first-order guess).");
}

Vector selective_step(Matrix& h, const Vector& x, const Vector& delta, const Matrix& A, const Vector& B,
                      const Vector& C) {
  // TODO(learner): for every channel c and state entry k: h(c, k) = exp(Δ_c A(c, k)) h(c, k) + Δ_c B(k) x_c, then
  //   y_c = Σ_k C(k) h(c, k) with the UPDATED state. Check shapes, Δ > 0, A < 0 and finiteness (h too) before
  //   touching h, and refuse finite inputs that could overflow: every new |h| ≤ max|h| + max(Δ|x|)·max|B| and
  //   |y| ≤ N·max|C| times that, which must stay below float's largest value.
  throw not_implemented("selective_step", kChapter,
                        "decay the state, add the token's input, then read it with C: the token sees itself.");
}

ScanPair scan_combine(ScanPair earlier, ScanPair later) {
  // TODO(learner): the pair of the map h ↦ later.a · (earlier.a · h + earlier.b) + later.b.
  throw not_implemented("scan_combine", kChapter,
                        "expand later(earlier(h)) and read off the factor of h and the constant; the order matters.");
}

Matrix semiseparable_mask(const Vector& a) {
  // TODO(learner): (n, n) with L(i, j) = a_{j+1} · … · a_i for j ≤ i (1 on the diagonal) and 0 for j > i.
  //   Every a_t must be finite and in [0, 1] (std::invalid_argument naming t and the value otherwise), and an
  //   (n, n) that cannot fit is refused before allocating (attn::checked_allocation).
  throw not_implemented("semiseparable_mask", kChapter,
                        "token j's input meets the decays of the tokens AFTER it, j+1 … i; a_j itself is not one of "
                        "them.");
}

Matrix masked_attention_form(const Matrix& L, const Matrix& C, const Matrix& B, const Matrix& X) {
  // TODO(learner): Y = (L ∘ C Bᵀ) X, shape (n, p): attn::matmul(C, B, true) is C Bᵀ, `*=` multiplies entry by
  //   entry. Check that L is (n, n), C and B are (n, N) and X is (n, p), and that all are finite, first.
  throw not_implemented("masked_attention_form", kChapter,
                        "attention's Q Kᵀ with C as queries and B as keys, masked by L instead of a softmax.");
}

}  // namespace attn
