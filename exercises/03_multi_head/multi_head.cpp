// Chapter 03, your exercises. Book page: book/03_multi_head.md.
// Check your progress with `./course check 03`; stuck? `./course hint 03`.
// Watch your code run the chapter: `./course run 03 --track exercise`.
// Chapter 02's functions are yours to use: attn::project, attn::scaled_dot_product_attention, attn::matmul.
#include "03_multi_head/multi_head.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "03_multi_head";
}

Tensor3 split_heads(const Matrix& X, std::size_t h) {
  // TODO(learner): X is (n, d_model); return (h, n, d_k) with d_k = d_model / h and
  //   heads(i, t, c) = X(t, i·d_k + c). h = 0 or d_model % h != 0 is std::invalid_argument naming
  //   X's shape and h.
  throw not_implemented("split_heads", kChapter,
                        "head i is the block of columns [i·d_k, (i+1)·d_k): copy it for every row t.");
}

Matrix merge_heads(const Tensor3& heads) {
  // TODO(learner): heads is (h, n, d_k); return (n, h·d_k), the heads side by side: the inverse of
  //   split_heads.
  throw not_implemented("merge_heads", kChapter, "the same copy as split_heads, in the other direction.");
}

Matrix multi_head_attention(const Matrix& X, const MultiHeadWeights& W, std::size_t h, const Mask& mask) {
  // TODO(learner): Q, K, V = X·W_Q, X·W_K, X·W_V (full width); split each into h heads; for each head i
  //   run scaled_dot_product_attention(Q_i, K_i, V_i, mask); merge; multiply by W_O.
  //   Check shapes first: every weight (d_model, d_model), d_model % h == 0; then that X and every weight are
  //   finite (attn::require_finite(where, "W_O", W.W_O.data(), W.W_O.size())): a NaN in W_O reaches the output.
  throw not_implemented("multi_head_attention", kChapter,
                        "project, split_heads, chapter 02's attention per head (xt::view(Q, i)), merge_heads, ·W_O.");
}

Matrix multi_head_attention_ablated(const Matrix& X, const MultiHeadWeights& W, const std::vector<bool>& keep_head) {
  // TODO(learner): the same layer with h = keep_head.size() heads, but a head with keep_head[i] == false
  //   contributes zeros (its slice of the merged matrix stays 0 before ·W_O). The same checks as
  //   multi_head_attention, a removed head's weights included.
  throw not_implemented("multi_head_attention_ablated", kChapter,
                        "multi_head_attention, skipping the removed heads: their block of the merge stays zero.");
}

}  // namespace attn
