// Chapter 09, your exercises. Book page: book/09_mqa_gqa.md.
// Check your progress with `./course check 09`; stuck? `./course hint 09`.
// Watch your code run the chapter: `./course run 09 --track exercise`.
#include "09_mqa_gqa/mqa_gqa.hpp"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/cblas.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "09_mqa_gqa";
}

std::size_t kv_group_of(std::size_t head, std::size_t h, std::size_t g) {
  // TODO(learner): the h query heads form g groups of h/g consecutive heads; return the group of `head`.
  //   g == 0, h % g != 0 or head >= h is std::invalid_argument naming h and g (attn::require, fmt::format).
  throw not_implemented("kv_group_of", kChapter, "one integer division, after checking that g divides h.");
}

Tensor3 grouped_attention(const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal) {
  // TODO(learner): for every query head i, chapter 02's scaled_dot_product_attention of Q[i] against
  //   K[j] and V[j] with j = kv_group_of(i, h, g), masked with causal_mask(n_q, n_kv) when `causal`.
  //   Check the shapes first: (h, n_q, d_k), (g, n_kv, d_k), (g, n_kv, d_v), g divides h (a refusal naming
  //   Q's shape, h and g).
  throw not_implemented("grouped_attention", kChapter,
                        "a loop over query heads; Matrix Q_i = xt::view(Q, i, xt::all(), xt::all()) copies one head.");
}

std::size_t kv_cache_bytes(std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n,
                           std::size_t bytes_per_element) {
  // TODO(learner): keys and values, for every layer, KV head and token, d_k numbers of bytes_per_element.
  //   A product that would pass 64 bits must be refused, not wrapped (attn::checked_product does both).
  throw not_implemented("kv_cache_bytes", kChapter, "a product of the arguments, and one more factor.");
}

Tensor3 mean_pool_kv_heads(const Tensor3& heads, std::size_t g) {
  // TODO(learner): (h, n, d) → (g, n, d); group j is the mean of heads j·(h/g) … (j+1)·(h/g) - 1.
  //   g == 0 or h % g != 0 is std::invalid_argument naming h and g; h == 0 (no head to pool) naming heads' shape.
  throw not_implemented("mean_pool_kv_heads", kChapter, "add every head into its group's slot, then divide by h/g.");
}

void KVCache::append(const Matrix& k, const Matrix& v) {
  // TODO(learner): check k is (g, d_k) and v is (g, d_v) and that length_ < capacity() (std::invalid_argument
  //   naming the shapes, or the capacity, leaving the cache unchanged); then write row length_ of every head of
  //   K_ and V_, and count the token.
  throw not_implemented("KVCache::append", kChapter,
                        "xt::view(K_, xt::all(), length_, xt::all()) = k; is row length_ of every KV head.");
}

Matrix decode_step(KVCache& cache, const Matrix& q, const Matrix& k, const Matrix& v) {
  // TODO(learner): append k and v (the new token attends to itself), then attend each query head i
  //   (row i of q) over the first cache.length() rows of its group's keys and values: (h, d_v).
  //   Check q's d_k against the cache, that g divides h (naming q's shape, h and g), and q, k, v
  //   (attn::require_attention_inputs) before changing the cache; if attending still fails, take the token back out
  //   (cache.truncate).
  throw not_implemented("decode_step", kChapter,
                        "append, then grouped attention of one query per head over the cached rows (no mask).");
}

}  // namespace attn
