// Chapter 12, your exercises. Book page: book/12_learning.md.
// Check your progress with `./course check 12`; stuck? `./course hint 12`.
// Watch your code run the chapter: `./course run 12 --track exercise`.
// Suggested order: rope_backward, layer_backward, cross_entropy, adamw_step, train_step, induction_score,
// attention_rollout.
#include "12_learning/learning.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "10_backward/backward.hpp"
#include "12_learning/model_backward.hpp"
#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "12_learning";
}

void rope_backward(Matrix& G, std::size_t first_position, float base) {
  // TODO(learner): replace G, the gradient after apply_rope, by the gradient before it (learning.hpp); bad input
  //   refused as the contract says (first_position + n − 1 must not wrap: checked_sum()), G unchanged then.
  throw not_implemented("rope_backward", kChapter,
                        "RoPE is a rotation of each pair: the backward of y = R·x is ∂L/∂x = Rᵀ·∂L/∂y.");
}

LayerGrads layer_backward(const ch12::Model& model, const ch12::Trace& trace, std::size_t layer, const Matrix& dY,
                          const std::vector<bool>& keep) {
  // TODO(learner): the gradients of the layer's four weights and of its input X, given dY at its output Y =
  //   X + heads·W_O, for the heads keep leaves on (learning.hpp); bad input refused as the contract says.
  throw not_implemented("layer_backward", kChapter,
                        "run the forward backwards: W_O, then each head's attention (chapter 10), RoPE, the "
                        "projections — and the residual stream.");
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
  //   are refused (grad, param, m and v finite, v never negative: a NaN moment would spread into the weights).
  throw not_implemented("adamw_step", kChapter,
                        "Adam's step is m̂ / (√v̂ + ε), about ±1 per coordinate; the decay is applied to θ itself.");
}

double train_step(ch12::Model& model, ch12::Model& m, ch12::Model& v, std::size_t t,
                  const std::vector<ch12::Sequence>& batch, const AdamW& settings) {
  // TODO(learner): one optimiser step of the model on the batch, returning the batch's loss before it
  //   (learning.hpp says what the step is made of); bad input refused with nothing changed.
  throw not_implemented("train_step", kChapter,
                        "forward, loss, backward, update: what PyTorch's model(x), loss.backward() and opt.step() do.");
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
