// Chapter 14, your exercises. Book page: book/14_state_space.md.
// Check your progress with `./course check 14`; stuck? `./course hint 14`.
// Watch your code run the chapter: `./course run 14 --track exercise`.
#include "14_state_space/state_space.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "14_state_space";
}

DiscreteSSM zoh_discretize(const DiagonalSSM& ssm, float delta) {
  // TODO(learner): the zero-order-hold discretisation of every entry, to float32 rounding even for a tiny Δ
  //   (where Ā is within a hair of 1), after the checks state_space.hpp lists (sizes, Δ, finite entries,
  //   Re(A) < 0); and no NaN for a huge Δ (Δ·A in double: its e^{Re} is 0 there, Ā = 0).
  throw not_implemented("zoh_discretize", kChapter,
                        "holding u constant over one step, x(t+Δ) = e^{ΔA} x(t) + (e^{ΔA} − 1)/A · B u: two formulas "
                        "per entry, not Δ·B (that is Euler's first-order guess).");
}

Vector selective_step(Matrix& h, const Vector& x, const Vector& delta, const Matrix& A, const Vector& B,
                      const Vector& C) {
  // TODO(learner): one token of the selective SSM for every channel: the state updated in place, then read
  //   with C; h is untouched when the input is refused (state_space.hpp lists what, overflow included).
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
  //   entry. Check that L is (n, n), C and B are (n, N) and X is (n, p), that all are finite, and that
  //   n·N·max|L|·max|C|·max|B|·max|X| ≤ attn::kMaxScoreBound (no sum can overflow), first.
  throw not_implemented("masked_attention_form", kChapter,
                        "attention's Q Kᵀ with C as queries and B as keys, masked by L instead of a softmax.");
}

}  // namespace attn
