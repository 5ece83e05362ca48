// Chapter 12, your exercises. Book page: book/12_learning.md.
// Check your progress with `./course check 12`; stuck? `./course hint 12`.
// Watch your code run the chapter: `./course run 12 --track exercise`.
// Suggested order: cross_entropy, adamw_step, induction_score, attention_rollout.
#include "12_learning/learning.hpp"

#include <cmath>

#include <fmt/format.h>

#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "12_learning";
}

LossAndGrad cross_entropy(const Matrix& logits, const std::vector<std::size_t>& targets) {
  // TODO(learner): count the rows whose target is < vocab (C); for each, log-sum-exp with the row's maximum
  //   subtracted, loss += (logZ − logit of the target) / C, and dlogits = (softmax − onehot) / C. Rows with a
  //   target ≥ vocab are skipped and keep a zero gradient. Reject a targets vector of the wrong length.
  throw not_implemented("cross_entropy", kChapter,
                        "−log softmax(z)[y] = logsumexp(z) − z_y; its gradient is softmax(z) − onehot(y), over C.");
}

void adamw_step(Matrix& param, const Matrix& grad, Matrix& m, Matrix& v, std::size_t t, const AdamW& settings) {
  // TODO(learner): check the four shapes, t ≥ 1, the settings' ranges (lr ≥ 0, β1 and β2 in [0, 1), ε > 0,
  //   weight_decay ≥ 0, all finite) and a finite grad and param before touching anything; then per element update
  //   m and v (in double: β1 and β2 are doubles, and 1 − β2 as a float would be 1.3e-5 off), correct their bias
  //   by 1 − β1ᵗ and 1 − β2ᵗ, and step θ −= lr·(m̂ / (√v̂ + ε) + weight_decay·θ).
  throw not_implemented("adamw_step", kChapter,
                        "Adam's step is m̂ / (√v̂ + ε), about ±1 per coordinate; the decay is applied to θ itself.");
}

double induction_score(const Matrix& A, const std::vector<std::size_t>& tokens) {
  // TODO(learner): check that A is (n, n) for n tokens and finite; for each query i, search backwards for the latest
  //   j < i with the same token; if there is one, add A(i, j + 1). Average over the queries that had one.
  throw not_implemented("induction_score", kChapter,
                        "An induction head at token t looks one step past t's earlier occurrence: at what came next.");
}

Matrix attention_rollout(const std::vector<Matrix>& layers) {
  // TODO(learner): start from the identity (n, n); for each layer, mix ½·A + ½·I (the residual stream) and
  //   multiply it onto the left of the running product. Reject an empty list, mismatched shapes and NaN/Inf.
  throw not_implemented("attention_rollout", kChapter,
                        "Position i after layer 2 mixes positions after layer 1, which mix the inputs: multiply.");
}

}  // namespace attn
