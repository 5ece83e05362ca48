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
  // TODO(learner): the mean cross-entropy over the counted rows and its gradient (learning.hpp says which
  //   rows count), finite for logits of any size. Bad input is refused as the contract says.
  throw not_implemented("cross_entropy", kChapter,
                        "−log softmax(z)[y] = logsumexp(z) − z_y; its gradient is softmax(z) − onehot(y), over C.");
}

void adamw_step(Matrix& param, const Matrix& grad, Matrix& m, Matrix& v, std::size_t t, const AdamW& settings) {
  // TODO(learner): one AdamW step on every element, as learning.hpp writes it, to float32 rounding of the
  //   float64 formula (mind 1 − β2 in float); nothing changes when the shapes, t, the settings or the values
  //   are refused.
  throw not_implemented("adamw_step", kChapter,
                        "Adam's step is m̂ / (√v̂ + ε), about ±1 per coordinate; the decay is applied to θ itself.");
}

double induction_score(const Matrix& A, const std::vector<std::size_t>& tokens) {
  // TODO(learner): the head's induction score, as learning.hpp defines it; A must be (n, n) for n tokens, and finite.
  throw not_implemented("induction_score", kChapter,
                        "An induction head at token t looks one step past t's earlier occurrence: at what came next.");
}

Matrix attention_rollout(const std::vector<Matrix>& layers) {
  // TODO(learner): attention rollout over the layers, the residual stream counted as learning.hpp says;
  //   an empty list, mismatched shapes and NaN/Inf are refused.
  throw not_implemented("attention_rollout", kChapter,
                        "Position i after layer 2 mixes positions after layer 1, which mix the inputs: multiply.");
}

}  // namespace attn
