/// \file
/// Chapter 09, multi-query and grouped-query attention and the KV cache: the contract the learner
/// implements in exercises/09_mqa_gqa/mqa_gqa.cpp. Book page: book/09_mqa_gqa.md.
///
/// Heads are head-major tensors: queries (h, n_q, d_k), keys (g, n_kv, d_k), values (g, n_kv, d_v), with g
/// key/value heads shared by h query heads (g divides h). g = h is multi-head attention (MHA), g = 1
/// multi-query attention (MQA), anything between grouped-query attention (GQA). Each head's attention is
/// chapter 02's attn::scaled_dot_product_attention().
#pragma once

#include <cstddef>
#include <string>

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// \defgroup ch09 Chapter 09: multi-query and grouped-query attention, the KV cache
/// One attention with h query heads and g key/value heads; the cache autoregressive decoding keeps; what
/// that cache weighs for real model shapes; and turning a multi-head layer into a grouped one.
/// @{

/// The key/value head that query head \p head reads: the h query heads are cut into g groups of h/g
/// consecutive heads, and group j shares key/value head j. So head i reads KV head i / (h/g).
/// \param head a query head, 0 ≤ head < h.
/// \param h the number of query heads.
/// \param g the number of key/value heads; g = h gives every head its own (MHA), g = 1 one for all (MQA).
/// \return the KV head (group) in [0, g).
/// \throws std::invalid_argument naming h and g when g is 0 or does not divide h, or when head ≥ h.
std::size_t kv_group_of(std::size_t head, std::size_t h, std::size_t g);

/// Grouped-query attention: query head i attends with chapter 02's scaled dot-product attention over the
/// keys and values of its group, K[kv_group_of(i, h, g)] and V[kv_group_of(i, h, g)].
/// \param Q (h, n_q, d_k) queries, one (n_q, d_k) matrix per query head.
/// \param K (g, n_kv, d_k) keys, one matrix per key/value head; g divides h.
/// \param V (g, n_kv, d_v) values.
/// \param causal when true, query i may attend only to keys j ≤ i + (n_kv - n_q) (attn::causal_mask()).
/// \return (h, n_q, d_v): head i's attention output.
/// \throws std::invalid_argument naming Q's shape, h and g when g does not divide h; naming the shapes when d_k
///         differs between Q and K, K and V differ in g or n_kv, or (causal) n_q > n_kv; naming the tensor
///         (Q, K or V) that holds a NaN or an infinity.
Tensor3 grouped_attention(const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal = false);

/// Bytes of a KV cache: keys and values (the 2), for every layer, every KV head, every cached token:
/// `2 · layers · g · d_k · n · bytes_per_element` (d_v = d_k, as in the models the chapter lists).
/// \param layers transformer layers, each with its own cache.
/// \param g key/value heads per layer.
/// \param d_k width of one key (and one value).
/// \param n cached tokens (the context length).
/// \param bytes_per_element 2 for bf16/fp16, 4 for fp32, 1 for 8-bit caches.
/// \return the exact number of bytes.
/// \throws std::invalid_argument naming the sizes when the product does not fit in 64 bits (attn::checked_product()).
std::size_t kv_cache_bytes(std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n,
                           std::size_t bytes_per_element);

/// Multi-head → grouped-query: each group's key (or value) head becomes the mean of the h/g heads of that
/// group, the GQA paper's starting point before a short uptraining. Mean-pooling the heads of K = X·W_K is
/// the same as mean-pooling the projections W_K, because the projection is linear.
/// \param heads (h, n, d) the keys (or values) of a multi-head layer, one matrix per head.
/// \param g the number of groups to keep; g divides h.
/// \return (g, n, d): group j is the mean of heads j·(h/g) … (j+1)·(h/g) - 1.
/// \throws std::invalid_argument naming h and g when g is 0 or does not divide h, and heads' shape when h is 0 (the
///         mean of no heads is 0/0).
Tensor3 mean_pool_kv_heads(const Tensor3& heads, std::size_t g);

/// The KV cache of one attention layer during autoregressive decoding: the keys and values of every token
/// seen so far, one (capacity, d) block per KV head, allocated once. Row t of each block holds token t;
/// rows [0, length()) are valid. A new token adds one key and one value row per KV head (append); nothing
/// already cached is ever recomputed.
class KVCache {
 public:
  /// An empty cache for \p g KV heads and at most \p capacity tokens.
  /// \param g key/value heads (≥ 1).
  /// \param capacity tokens it can hold (the context length it was sized for).
  /// \param d_k width of a key (≥ 1).
  /// \param d_v width of a value (≥ 1).
  /// \throws std::invalid_argument when g, d_k or d_v is 0, or when the bytes of K and V do not fit in
  ///         64 bits or in the memory available now (naming the sizes and the estimate), before allocating.
  KVCache(std::size_t g, std::size_t capacity, std::size_t d_k, std::size_t d_v);

  std::size_t kv_heads() const { return K_.shape(0); }  ///< g
  std::size_t capacity() const { return K_.shape(1); }  ///< tokens it can hold
  std::size_t d_k() const { return K_.shape(2); }       ///< width of a key
  std::size_t d_v() const { return V_.shape(2); }       ///< width of a value
  std::size_t length() const { return length_; }        ///< tokens cached so far
  /// The keys, (g, capacity, d_k); rows [0, length()) of each head are valid.
  const Tensor3& keys() const { return K_; }
  /// The values, (g, capacity, d_v); rows [0, length()) of each head are valid.
  const Tensor3& values() const { return V_; }
  /// Bytes the cache allocated: K and V at full capacity, float32.
  std::size_t bytes() const { return (K_.size() + V_.size()) * sizeof(float); }

  /// Appends one token: row length() of KV head j becomes k(j, :) and v(j, :); length() grows by one.
  /// \param k (g, d_k) the new token's key for each KV head.
  /// \param v (g, d_v) the new token's value for each KV head.
  /// \throws std::invalid_argument when the cache is full (naming its capacity) or the shapes do not fit
  ///         (naming them); the cache is unchanged then.
  void append(const Matrix& k, const Matrix& v);

  /// Forgets every token from position \p new_length on (what speculative decoding does with rejected
  /// tokens). The bench uses it to repeat one decode step at a fixed cache length.
  /// \throws std::invalid_argument when \p new_length > length().
  void truncate(std::size_t new_length);

 private:
  Tensor3 K_;               // (g, capacity, d_k)
  Tensor3 V_;               // (g, capacity, d_v)
  std::size_t length_ = 0;  // tokens cached
};

/// One step of autoregressive decoding: appends the new token's keys and values to \p cache, then
/// attends its h queries over every cached token (the past and itself: causal by construction). Query
/// head i reads KV head kv_group_of(i, h, g). The result equals the new token's row of causal
/// grouped_attention over the whole sequence so far.
/// \param cache the layer's cache; one token longer afterwards.
/// \param q (h, d_k) the new token's query, one row per query head; g = cache.kv_heads() divides h.
/// \param k (g, d_k) the new token's key, one row per KV head.
/// \param v (g, d_v) the new token's value, one row per KV head.
/// \return (h, d_v): the new token's attention output for each query head.
/// \throws std::invalid_argument naming the shapes when they do not fit the cache, q's shape, h and g when g
///         does not divide h, the first NaN/Inf of q, k or v, and the capacity when the cache is full. Whatever
///         fails, the cache is left as it was (a failure after the append takes the token back out).
Matrix decode_step(KVCache& cache, const Matrix& q, const Matrix& k, const Matrix& v);

/// @}

// The cache's bookkeeping is given, not an exercise: allocation, sizes, rollback.
// The sizes are checked before anything is allocated: g · capacity · d floats must not wrap around, and the keys and
// the values together must fit in the memory available (attn::checked_allocation, with the estimate).
inline KVCache::KVCache(std::size_t g, std::size_t capacity, std::size_t d_k, std::size_t d_v)
    : K_((checked_allocation("KVCache: the keys and values g × capacity × (d_k + d_v) × 4",
                             {g, capacity, checked_sum("KVCache: d_k + d_v", {d_k, d_v}), sizeof(float)}),
          xt::zeros<float>({g, capacity, d_k}))),
      V_(xt::zeros<float>({g, capacity, d_v})) {
  require(g > 0 && d_k > 0 && d_v > 0, "KVCache: g = " + std::to_string(g) + ", d_k = " + std::to_string(d_k) +
                                           ", d_v = " + std::to_string(d_v) + "; each must be at least 1");
}

inline void KVCache::truncate(std::size_t new_length) {
  require(new_length <= length_, "KVCache::truncate: cannot grow the cache from " + std::to_string(length_) + " to " +
                                     std::to_string(new_length) + " tokens (append adds tokens)");
  length_ = new_length;
}

}  // namespace attn
