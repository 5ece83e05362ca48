// Chapter 09, reference solutions. Book page: book/09_mqa_gqa.md.
// Each head's attention is chapter 02's; what this chapter adds is which K/V head a query head reads, and
// the cache that decoding reads at every step. The decode step reads the cache where it lies: copying it
// into a fresh matrix for every step would more than double the bytes a memory-bound step moves.
#include "09_mqa_gqa/mqa_gqa.hpp"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/cblas.hpp"

namespace attn {

namespace {

/// Throws unless g is a positive divisor of h; \p where names the caller, \p heads (when given) the argument that
/// holds the h query heads and its shape ("Q is (5, 3, 2): ").
void require_groups(const char* where, std::size_t h, std::size_t g, const std::string& heads = "") {
  require(g > 0 && h % g == 0, fmt::format("{}: {}h = {} query heads cannot be shared evenly by g = {} key/value "
                                           "heads; g must divide h (g = h: MHA, g = 1: MQA)",
                                           where, heads, h, g));
}

/// Head i of a head-major tensor as its own (n, d) matrix (a copy: chapter 02's attention takes matrices).
Matrix head_of(const Tensor3& T, std::size_t i) { return xt::view(T, i, xt::all(), xt::all()); }

}  // namespace

// [kv_group_of]
std::size_t kv_group_of(std::size_t head, std::size_t h, std::size_t g) {
  require_groups("kv_group_of", h, g);
  require(head < h, fmt::format("kv_group_of: head {} does not exist; there are h = {} query heads", head, h));
  const std::size_t heads_per_group = h / g;  // h/g consecutive query heads share one K/V head
  return head / heads_per_group;
}
// [kv_group_of]

// [grouped_attention]
Tensor3 grouped_attention(const Tensor3& Q, const Tensor3& K, const Tensor3& V, bool causal) {
  const std::size_t h = Q.shape(0), n_q = Q.shape(1), g = K.shape(0), n_kv = K.shape(1);
  require(
      V.shape(0) == g && V.shape(1) == n_kv,
      fmt::format("grouped_attention: K is {} and V is {}; they need the same (g, n_kv)", shape_str(K), shape_str(V)));
  require(Q.shape(2) == K.shape(2),
          fmt::format("grouped_attention: Q is {} and K is {}; they need the same d_k", shape_str(Q), shape_str(K)));
  require_groups("grouped_attention", h, g, "Q is " + shape_str(Q) + ": ");
  require_attention_inputs("grouped_attention", Q, K, V);      // finite, and no score can overflow
  const Mask mask = causal ? causal_mask(n_q, n_kv) : Mask();  // (n_q, n_kv), or empty: no mask
  Tensor3 O = xt::zeros<float>({h, n_q, V.shape(2)});          // (h, n_q, d_v)
  for (std::size_t i = 0; i < h; ++i) {
    const std::size_t j = kv_group_of(i, h, g);  // the K/V head query head i shares with its group
    xt::view(O, i, xt::all(), xt::all()) =
        scaled_dot_product_attention(head_of(Q, i), head_of(K, j), head_of(V, j), mask);  // (n_q, d_v)
  }
  return O;
}
// [grouped_attention]

// [kv_cache_bytes]
std::size_t kv_cache_bytes(std::size_t layers, std::size_t g, std::size_t d_k, std::size_t n,
                           std::size_t bytes_per_element) {
  // K and V (the 2), per layer, per KV head, per token, d_k numbers each. The query heads h do not appear:
  // queries are used once and thrown away, only keys and values are kept for later tokens.
  return checked_product("kv_cache_bytes", {2, layers, g, d_k, n, bytes_per_element});  // refused, not wrapped
}
// [kv_cache_bytes]

// [mean_pool_kv_heads]
Tensor3 mean_pool_kv_heads(const Tensor3& heads, std::size_t g) {
  const std::size_t h = heads.shape(0);
  require(h > 0,
          fmt::format("mean_pool_kv_heads: heads is {}: no head to pool (the mean of none is 0/0)", shape_str(heads)));
  require_groups("mean_pool_kv_heads", h, g);
  const std::size_t r = h / g;                                             // heads per group
  Tensor3 pooled = xt::zeros<float>({g, heads.shape(1), heads.shape(2)});  // (g, n, d)
  for (std::size_t i = 0; i < h; ++i) xt::view(pooled, i / r, xt::all(), xt::all()) += head_of(heads, i);
  pooled /= static_cast<float>(r);
  return pooled;
}
// [mean_pool_kv_heads]

// [append]
void KVCache::append(const Matrix& k, const Matrix& v) {
  const std::size_t g = kv_heads();
  require(k.shape(0) == g && k.shape(1) == d_k() && v.shape(0) == g && v.shape(1) == d_v(),
          fmt::format("KVCache::append: k is {} and v is {}, but this cache holds g = {} heads of d_k = {}, d_v = {}; "
                      "they must be ({}, {}) and ({}, {})",
                      shape_str(k), shape_str(v), g, d_k(), d_v(), g, d_k(), g, d_v()));
  require(length_ < capacity(),
          fmt::format("KVCache::append: the cache is full ({} of capacity {} tokens); size it for the longest "
                      "context you will decode",
                      length_, capacity()));
  xt::view(K_, xt::all(), length_, xt::all()) = k;  // row `length_` of every KV head
  xt::view(V_, xt::all(), length_, xt::all()) = v;
  ++length_;
}
// [append]

namespace {

// [attend_cache]
/// The new token's attention over every cached token (the cache already holds it): (h, d_v).
Matrix attend_cache(const KVCache& cache, const Matrix& q) {
  const std::size_t h = q.shape(0), g = cache.kv_heads(), d_k = cache.d_k(), d_v = cache.d_v();
  const std::size_t n = cache.length(), r = h / g;
  const int n_i = static_cast<int>(n), r_i = static_cast<int>(r);
  const int dk_i = static_cast<int>(d_k), dv_i = static_cast<int>(d_v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_k));
  Matrix O = xt::zeros<float>({h, d_v});  // (h, d_v)
  for (std::size_t j = 0; j < g; ++j) {
    // The r query heads of group j are rows j·r … j·r + r - 1 of q: one product serves them all, so the
    // group's n cached keys and values are read once per step, not once per query head.
    const float* Q_j = q.data() + j * r * d_k;                              // (r, d_k)
    const float* K_j = cache.keys().data() + j * cache.capacity() * d_k;    // (n, d_k), rows in place
    const float* V_j = cache.values().data() + j * cache.capacity() * d_v;  // (n, d_v)
    float* O_j = O.data() + j * r * d_v;                                    // (r, d_v), rows j·r … of O
    Matrix S = xt::empty<float>({r, n});                                    // (r, n) = Q_j K_jᵀ / √d_k
    if (r == 1) {
      // MHA: one query per K/V head. A matrix-vector product streams K_j at memory speed; OpenBLAS's
      // sgemm would first repack K_j for a one-row product, and lose half the bandwidth doing so.
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n_i, dk_i, scale, K_j, dk_i, Q_j, 1, 0.0f, S.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r_i, n_i, dk_i, scale, Q_j, dk_i, K_j, dk_i, 0.0f, S.data(),
                  n_i);
    }
    const Matrix A = softmax_rows(S);  // (r, n), chapter 02's softmax; no mask: every cached token is past
    if (r == 1) {
      cblas_sgemv(CblasRowMajor, CblasTrans, n_i, dv_i, 1.0f, V_j, dv_i, A.data(), 1, 0.0f, O_j, 1);  // V_jᵀ a
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r_i, dv_i, n_i, 1.0f, A.data(), n_i, V_j, dv_i, 0.0f, O_j,
                  dv_i);  // (r, d_v) = A · V_j
    }
  }
  return O;
}
// [attend_cache]

}  // namespace

// [decode_step]
Matrix decode_step(KVCache& cache, const Matrix& q, const Matrix& k, const Matrix& v) {
  const std::size_t h = q.shape(0), g = cache.kv_heads(), d_k = cache.d_k();
  require(q.shape(1) == d_k,
          fmt::format("decode_step: q is {} but the cache holds keys of d_k = {}", shape_str(q), d_k));
  require_groups("decode_step", h, g, "q is " + shape_str(q) + ": ");
  require_attention_inputs("decode_step", q, k, v);  // before the cache changes
  cache.append(k, v);                                // the new token sees itself: append first, then attend
  try {
    return attend_cache(cache, q);
  } catch (...) {
    cache.truncate(cache.length() - 1);  // a step that fails leaves the cache as it found it
    throw;
  }
}
// [decode_step]

}  // namespace attn
