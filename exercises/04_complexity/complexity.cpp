// Chapter 04, your exercises. Book page: book/04_complexity.md.
// Check your progress with `./course check 04`; stuck? `./course hint 04`.
// Watch your code run the chapter: `./course run 04 --track exercise`.
#include "04_complexity/complexity.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "04_complexity";
}

AttentionFlops attention_flops(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
  // TODO(learner): fill the three stages of AttentionFlops for Q (n_q, d_k), K (n_kv, d_k), V (n_kv, d_v):
  //   scores (Q Kᵀ), softmax (5 FLOPs per score), weighted_sum (A V). A multiply-add is 2 FLOPs.
  //   Convert the sizes to double before multiplying: n_q·n_kv·d_k overflows 32-bit integers early.
  (void)n_q, (void)n_kv, (void)d_k, (void)d_v;
  throw not_implemented("attention_flops", kChapter,
                        "S has n_q·n_kv entries and each is a dot product of length d_k: d_k multiplies, d_k adds.");
}

AttentionBytes attention_bytes(std::size_t n_q, std::size_t n_kv, std::size_t d_k, std::size_t d_v) {
  // TODO(learner): fill every field of AttentionBytes (float32: 4 bytes per number). The header's comments
  //   on each field are the definitions: inputs, output, score_matrix, peak_extra, moved.
  (void)n_q, (void)n_kv, (void)d_k, (void)d_v;
  throw not_implemented("attention_bytes", kChapter,
                        "one (n_q, n_kv) float32 matrix is 4·n_q·n_kv bytes; S and A both exist when A·V runs.");
}

PowerLawFit fit_power_law(const std::vector<double>& x, const std::vector<double>& y) {
  // TODO(learner): fit the straight line v = a + p·u through u = ln x, v = ln y by least squares;
  //   return p (the exponent), e^a (the coefficient) and R². Reject with std::invalid_argument: sizes that
  //   differ or fewer than 2 points, a value <= 0 or not finite (name its index), all x equal.
  (void)x, (void)y;
  throw not_implemented("fit_power_law", kChapter,
                        "if y = c·x^p then ln y = ln c + p·ln x: a straight line whose slope is p.");
}

Matrix guarded_attention(const Matrix& Q, const Matrix& K, const Matrix& V, double limit_bytes) {
  // TODO(learner): check the shapes (std::invalid_argument naming Q, K and V) and that limit_bytes is not NaN
  //   (std::invalid_argument naming it: NaN > x is false for every x), estimate the bytes with your
  //   attention_bytes(), throw memory_refusal(n_q, n_kv, required, limit_bytes) when peak_extra exceeds the
  //   limit, and only then return chapter 02's scaled_dot_product_attention(Q, K, V).
  (void)Q, (void)K, (void)V, (void)limit_bytes;
  throw not_implemented("guarded_attention", kChapter,
                        "decide from the shapes alone, before anything of size n_q·n_kv is allocated.");
}

}  // namespace attn
