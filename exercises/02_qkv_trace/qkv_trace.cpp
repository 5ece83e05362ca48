// Chapter 02, your exercises. Book page: book/02_qkv_trace.md.
// Check your progress with `./course check 02`; stuck? `./course hint 02`.
// Watch your code run the chapter: `./course run 02 --track exercise`.
#include "02_qkv_trace/qkv_trace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "01_intuition/intuition.hpp"  // chapter 01's stable_softmax, for softmax_rows
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "02_qkv_trace";
}

Matrix project(const Matrix& X, const Matrix& W) {
  // TODO(learner): X (n, d_in) times W (d_in, d_out). Check the inner sizes first (std::invalid_argument
  //   naming both shapes, e.g. with attn::require and attn::shape_str).
  throw not_implemented("project", kChapter, "one matrix product: attn::matmul(X, W) or xt::linalg::dot(X, W).");
}

Matrix scaled_scores(const Matrix& Q, const Matrix& K) {
  // TODO(learner): S = Q Kᵀ / sqrt(d_k), shape (n_q, n_kv). Q and K must agree in d_k.
  throw not_implemented("scaled_scores", kChapter,
                        "attn::matmul(Q, K, true, alpha) computes alpha·Q·Kᵀ without copying the transpose.");
}

Matrix softmax_rows(const Matrix& S) {
  // TODO(learner): softmax of every row of S, stable (subtract the row's max), -inf = weight 0,
  //   a row of all -inf stays all zeros; NaN or +inf is std::invalid_argument (attn::require_finite).
  throw not_implemented("softmax_rows", kChapter, "chapter 01's stable softmax, once per row.");
}

Mask causal_mask(std::size_t n_q, std::size_t n_kv) {
  // TODO(learner): (n_q, n_kv), true where query i may see key j: j <= i + (n_kv - n_q).
  //   n_q > n_kv is std::invalid_argument; so is a mask too big to hold: check its size first with
  //   attn::checked_allocation("causal_mask: the mask n_q × n_kv", {n_q, n_kv}).
  throw not_implemented("causal_mask", kChapter, "a lower-triangular pattern, shifted right by n_kv - n_q.");
}

Matrix scaled_dot_product_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Mask& mask) {
  // TODO(learner): softmax(Q Kᵀ / sqrt(d_k)) V with your functions above. Where the mask (if not empty)
  //   is false, set the score to -inf before the softmax. Check every shape first (the mask's with
  //   attn::require_mask_fits), and the inputs with attn::require_attention_inputs (NaN, overflow).
  throw not_implemented("scaled_dot_product_attention", kChapter,
                        "scores, then mask (-inf), then softmax_rows, then one more product with V.");
}

}  // namespace attn
