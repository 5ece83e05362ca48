// Chapter 01, your exercises. Book page: book/01_intuition.md.
// Check your progress with `./course check 01`; stuck? `./course hint 01`.
// Watch your code run the chapter: `./course run 01 --track exercise`.
#include "01_intuition/intuition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "01_intuition";
}

Vector stable_softmax(const Vector& logits) {
  // TODO(learner): turn the logits (n) into weights (n) that are >= 0 and sum to 1.
  //   - reject NaN and +inf with std::invalid_argument (attn::require_finite does it for you);
  //   - subtract the largest logit before exp, so nothing overflows;
  //   - -inf means "masked": weight 0; all -inf (or n = 0) gives all zeros.
  throw not_implemented("stable_softmax", kChapter,
                        "exp(x - max) is <= 1 for every x, and the max itself gives exp(0) = 1.");
}

Vector attention_weights(const Vector& q, const Matrix& K) {
  // TODO(learner): score q (d_k) against each row of K (n, d_k), divide by sqrt(d_k), softmax.
  //   Check the shapes first: a mismatch, or d_k = 0, is std::invalid_argument naming both (attn::shape_str
  //   helps).
  throw not_implemented("attention_weights", kChapter,
                        "the n scores are K·q, one dot product per row of K (xt::linalg::dot(K, q)).");
}

Vector blend_values(const Vector& weights, const Matrix& V) {
  // TODO(learner): the weighted average of V's rows: out[c] = sum_j weights[j] * V(j, c), shape (d_v).
  //   Check the shapes, and refuse a NaN or infinity in weights or V (attn::require_finite).
  throw not_implemented("blend_values", kChapter, "a weighted sum of rows is a vector-matrix product: wᵀV.");
}

Vector design_pronoun_query() {
  // TODO(learner): return the (d_k = 6) query of 它/it. Its entries are, in order:
  //   noun, animate, human, place, action, pronoun
  // Positive entries attract the pronoun to words that have that feature, negative ones repel it.
  // 它 must land on 猫 (cat) rather than 垫子 (mat) or 小明 (a person), and on 书 (book) rather than 我.
  throw not_implemented("design_pronoun_query", kChapter,
                        "a cat is a noun and animate; Xiaoming is too, but he is also human.");
}

}  // namespace attn
