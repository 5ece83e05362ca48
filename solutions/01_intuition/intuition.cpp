// Chapter 01, reference solutions. Book page: book/01_intuition.md.
// Each function is the answer to the exercise of the same name in exercises/01_intuition/intuition.cpp.
#include "01_intuition/intuition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

// [stable_softmax]
Vector stable_softmax(const Vector& logits) {
  require_finite("stable_softmax", "logits", logits.data(), logits.size(), /*allow_minus_inf=*/true);
  Vector p = xt::zeros<float>({logits.size()});  // (n)
  if (logits.size() == 0) return p;
  // std::max_element, not xt::amax: xtensor's reducer starts from the lowest finite float, so an
  // all -inf row would come back as -3.4e38 and the test below would miss it.
  const float m = *std::max_element(logits.begin(), logits.end());
  // Every logit is -inf: nothing may be attended to. Returning zeros (not 0/0 = NaN) lets a caller
  // multiply by V and get a zero output for such a row.
  if (std::isinf(m)) return p;
  // exp(x - m) <= 1 for every entry: no overflow, and at least one term (the max) is exactly 1, so the
  // sum is >= 1 and the division is safe. exp(-inf - m) = 0 gives masked entries their zero weight.
  p = xt::exp(logits - m);
  // Summed in double: over a long row (chapter 02 calls this once per row of scores) a float sum loses digits.
  const float sum = static_cast<float>(xt::sum<double>(p)());
  p /= sum;
  return p;
}
// [stable_softmax]

// [attention_weights]
Vector attention_weights(const Vector& q, const Matrix& K) {
  require(q.size() == K.shape(1), fmt::format("attention_weights: q is {} but K is {}; q needs one entry per "
                                              "column of K (d_k)",
                                              shape_str(q), shape_str(K)));
  require(q.size() > 0, fmt::format("attention_weights: q is {} and K is {}: with d_k = 0 there is nothing to compare",
                                    shape_str(q), shape_str(K)));
  // Finite, and no score can overflow (q = [1e20] against keys of -1e20 would give -inf scores, then all-zero
  // weights that do not sum to 1): the course's overflow policy, attn/checks.hpp.
  require_attention_inputs("attention_weights", q.data(), q.size(), q.size(), K.data(), K.size(), K.shape(1), nullptr,
                           0);
  // One dot product per key: K q is (n, d_k)·(d_k) = (n). Dividing by √d_k keeps the scores' spread
  // independent of d_k (chapter 02 measures why that matters).
  const Vector scores = xt::linalg::dot(K, q) / std::sqrt(static_cast<float>(q.size()));  // (n)
  return stable_softmax(scores);
}
// [attention_weights]

// [blend_values]
Vector blend_values(const Vector& weights, const Matrix& V) {
  require(weights.size() == V.shape(0), fmt::format("blend_values: weights is {} but V is {}; one weight per "
                                                    "row of V is needed",
                                                    shape_str(weights), shape_str(V)));
  require_finite("blend_values", "weights", weights.data(), weights.size());
  require_finite("blend_values", "V", V.data(), V.size());
  // wᵀ V: (n)·(n, d_v) = (d_v), each output feature the weighted average of that feature over the tokens.
  // No rows: the empty sum is 0. BLAS would refuse a product over 0 rows (an illegal leading dimension) and leave
  // the result as it found it.
  if (V.shape(0) == 0) return xt::zeros<float>({V.shape(1)});
  Vector out = xt::linalg::dot(weights, V);  // (d_v)
  return out;
}
// [blend_values]

// [design_pronoun_query]
Vector design_pronoun_query() {
  // Key space: noun, animate, human, place, action, pronoun.
  // 它 is the non-human "it": it wants a noun that is alive (+noun, +animate), not a person (-human
  // outweighs a person's +noun +animate), and not another pronoun (itself). 书 (book) is a noun with
  // no animacy: it still beats every non-noun, so "it" finds the book when no animal is around.
  Vector q = {3.0f, 3.0f, -6.0f, 0.0f, 0.0f, -3.0f};  // (d_k)
  return q;
}
// [design_pronoun_query]

}  // namespace attn
