// Chapter 15, reference solutions. Book page: book/15_structured.md.
// Structure enters attention in three places, and each exercise is one of them: in who may send to whom (the
// neighbour lists of message passing, the mask of the GAT layer, the subtree mask of a tree), in how a pair is
// scored (GAT's and GATv2's additive scores), and in what is added to a score (the hop bias). The last
// exercise is the merge of two partial results, written on the packed rows an MPI reduction receives.
#include "15_structured/structured.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "15_structured/graph.hpp"
#include "attn/checks.hpp"

namespace attn::ch15 {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr float kPlusInf = std::numeric_limits<float>::infinity();

template <class T>
T leaky_relu(T x, float slope) {
  return x > T(0) ? x : static_cast<T>(slope) * x;
}

void require_slope(const char* where, float slope) {
  require(slope >= 0.0f && slope < 1.0f, fmt::format("{}: slope = {} is outside [0, 1)", where, slope));
}

}  // namespace

// [message_passing]
Matrix message_passing(const Matrix& Q, const Matrix& K, const Matrix& V, const Neighbours& in) {
  const std::size_t n = Q.shape(0), d_k = Q.shape(1), d_v = V.shape(1);
  require(K.shape(0) == n && V.shape(0) == n && in.size() == n && K.shape(1) == d_k,
          fmt::format("message_passing: Q {}, K {}, V {} and {} neighbour lists must share n, Q and K d_k",
                      shape_str(Q), shape_str(K), shape_str(V), in.size()));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j : in[i])
      require(j < n, fmt::format("message_passing: node {} hears from node {}, but there are n = {} nodes", i, j, n));
  require_attention_inputs("message_passing", Q, K, V);
  // d_k = 0 makes every score 0 (an empty dot product), not 0·∞: the weights are then uniform.
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));
  Matrix out = xt::zeros<float>({n, d_v});  // (n, d_v)
  for (std::size_t i = 0; i < n; ++i) {
    if (in[i].empty()) continue;  // an isolated node hears nothing: its update is zero, not 0/0
    // message: the score of every sender (its key against my query), sent with its value
    std::vector<float> s(in[i].size());  // (|in[i]|)
    for (std::size_t e = 0; e < in[i].size(); ++e) {
      float dot = 0.0f;
      for (std::size_t c = 0; c < d_k; ++c) dot += Q(i, c) * K(in[i][e], c);
      s[e] = dot * scale;
    }
    // aggregate: a softmax over the senders (shifted by their max, so no exp overflows), summing weighted values
    float m = kMinusInf;
    for (float x : s) m = std::max(m, x);
    float sum = 0.0f;
    for (std::size_t e = 0; e < in[i].size(); ++e) {
      const float w = std::exp(s[e] - m);
      sum += w;
      for (std::size_t c = 0; c < d_v; ++c) out(i, c) += w * V(in[i][e], c);
    }
    // update: the weighted mean (a transformer adds the residual and the MLP here)
    for (std::size_t c = 0; c < d_v; ++c) out(i, c) /= sum;
  }
  return out;
}
// [message_passing]

// [gat_scores]
Matrix gat_scores(const Matrix& H, const Vector& a, float slope) {
  require_slope("gat_scores", slope);
  const std::size_t n = H.shape(0), d = H.shape(1);
  require(a.size() == 2 * d,
          fmt::format("gat_scores: a is {} but H is {}: a must be (2·d)", shape_str(a), shape_str(H)));
  // The course's overflow policy: a score is 2d products a_c·h_c, so 2d · max|a| · max|h| must stay in float.
  require_bounded_products("gat_scores", "a", a.data(), a.size(), "H", H.data(), H.size(), 2 * d);
  checked_allocation("gat_scores: the scores, n × n floats", {n, n, sizeof(float)});  // before allocating
  // aᵀ[h_i ‖ h_j] splits into a listener part a_l·h_i and a sender part a_r·h_j, computed once per node.
  std::vector<float> listener(n, 0.0f), sender(n, 0.0f);  // (n) each
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < d; ++c) {
      listener[i] += a(c) * H(i, c);
      sender[i] += a(d + c) * H(i, c);
    }
  Matrix E = Matrix::from_shape({n, n});  // (n, n)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) E(i, j) = leaky_relu(listener[i] + sender[j], slope);
  return E;
}
// [gat_scores]

// [gatv2_scores]
Matrix gatv2_scores(const Matrix& L, const Matrix& R, const Vector& a, float slope) {
  require_slope("gatv2_scores", slope);
  const std::size_t n = L.shape(0), d = L.shape(1);
  require(R.shape(0) == n && R.shape(1) == d && a.size() == d,
          fmt::format("gatv2_scores: L {}, R {} and a {} must be (n, d), (n, d) and (d)", shape_str(L), shape_str(R),
                      shape_str(a)));
  // The course's overflow policy: |e_ij| ≤ d · max|a| · (max|l| + max|r|), so 2d · max|a| times each of max|l| and
  // max|r| must stay in float. l + r itself is added in double, where two floats never overflow (a zero a_c
  // would otherwise meet an infinite l + r and give NaN).
  require_bounded_products("gatv2_scores", "a", a.data(), a.size(), "L", L.data(), L.size(), 2 * d);
  require_bounded_products("gatv2_scores", "a", a.data(), a.size(), "R", R.data(), R.size(), 2 * d);
  checked_allocation("gatv2_scores: the scores, n × n floats", {n, n, sizeof(float)});  // before allocating
  Matrix E = Matrix::from_shape({n, n});                                                // (n, n)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      // The nonlinearity acts on each coordinate of l_i + r_j before a mixes them: i and j interact.
      double e = 0.0;
      for (std::size_t c = 0; c < d; ++c)
        e += static_cast<double>(a(c)) * leaky_relu(static_cast<double>(L(i, c)) + R(j, c), slope);
      E(i, j) = static_cast<float>(e);
    }
  return E;
}
// [gatv2_scores]

// [gat_layer]
Matrix gat_layer(const Matrix& X, const std::vector<GatHead>& heads, const Mask& allowed, float slope) {
  require(!heads.empty(), "gat_layer: no heads; a layer needs at least one");
  const std::size_t n = X.shape(0), d_in = X.shape(1), d_head = heads[0].W.shape(1);
  for (std::size_t k = 0; k < heads.size(); ++k)
    require(heads[k].W.shape(0) == d_in && heads[k].W.shape(1) == d_head && heads[k].a.size() == 2 * d_head,
            fmt::format("gat_layer: head {} has W {} and a {}, X is {}: need W ({}, {}) and a ({})", k,
                        shape_str(heads[k].W), shape_str(heads[k].a), shape_str(X), d_in, d_head, 2 * d_head));
  require(allowed.shape(0) == n && allowed.shape(1) == n,
          fmt::format("gat_layer: the mask is {} but X has n = {} nodes", shape_str(allowed), n));
  // H = X·W must be a finite float before gat_scores() bounds a·H: the same policy on X and each W first.
  for (std::size_t k = 0; k < heads.size(); ++k)
    require_bounded_products("gat_layer", "X", X.data(), X.size(), "W", heads[k].W.data(), heads[k].W.size(), d_in);
  Matrix out = Matrix::from_shape({n, heads.size() * d_head});  // (n, h·d_head)
  for (std::size_t k = 0; k < heads.size(); ++k) {
    const Matrix H = matmul(X, heads[k].W);       // (n, d_head)
    Matrix E = gat_scores(H, heads[k].a, slope);  // (n, n)
    E = xt::where(allowed, E, kMinusInf);         // only the graph's edges remain
    const Matrix A = softmax_rows(E);             // (n, n): a row with no edge is all zeros
    xt::view(out, xt::all(), xt::range(k * d_head, (k + 1) * d_head)) = matmul(A, H);  // (n, d_head)
  }
  return out;
}
// [gat_layer]

// [hop_bias]
Matrix hop_bias(const Hops& hops, const Vector& b) {
  require(b.size() > 0, "hop_bias: the bias table b is empty; it needs at least one entry");
  require(hops.shape(0) == hops.shape(1), fmt::format("hop_bias: hops is {}, not square", shape_str(hops)));
  const std::size_t n = hops.shape(0), last = b.size() - 1;
  Matrix B = Matrix::from_shape({n, n});  // (n, n)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) B(i, j) = b(std::min(hops(i, j), last));  // kUnreachable: the last entry
  return B;
}
// [hop_bias]

// [subtree_mask]
Mask subtree_mask(const std::vector<long>& parent) {
  check_parents(parent);
  const std::size_t n = parent.size();
  checked_allocation("subtree_mask: the mask, n × n bytes", {n, n, sizeof(bool)});  // before allocating
  Mask mask(Mask::shape_type{n, n}, false);                                         // (n, n)
  // j lies in i's subtree when i is on j's path to the root (j itself included): walk up from every j.
  for (std::size_t j = 0; j < n; ++j)
    for (long at = static_cast<long>(j); at != -1; at = parent[static_cast<std::size_t>(at)])
      mask(static_cast<std::size_t>(at), j) = true;
  return mask;
}
// [subtree_mask]

// [merge_packed]
void merge_packed(const float* in, float* inout, std::size_t rows, std::size_t d_v) {
  require(rows == 0 || (in != nullptr && inout != nullptr), "merge_packed: a null pointer with rows > 0");
  // Operands of rows·(d_v + 1) floats that cannot exist are refused before anything is read.
  const std::size_t width = checked_sum("merge_packed: d_v + 1", {d_v, 1});  // lse, then O
  checked_product("merge_packed: the bytes of an operand, rows × (d_v + 1) floats", {rows, width, sizeof(float)});
  // Every row is checked before any is written, so that a refusal leaves inout as it was: an lse is a number
  // or −inf (a part that saw no key), an O is finite.
  for (std::size_t r = 0; r < rows; ++r) {
    for (const auto& [name, lse] : {std::pair{"in", in[r * width]}, std::pair{"inout", inout[r * width]}})
      require(!std::isnan(lse) && lse != kPlusInf,
              fmt::format("merge_packed: row {} of {} has lse = {}; an lse is finite or -inf", r, name, lse));
    require_finite("merge_packed", "in's O", in + r * width + 1, d_v);
    require_finite("merge_packed", "inout's O", inout + r * width + 1, d_v);
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const float* part = in + r * width;  // [lse, O]
    float* running = inout + r * width;  // [lse, O], overwritten with the merge
    // Shift both exponents by the larger lse, so each weight is e^(≤ 0): lse = ±100 neither overflows (e^100 is
    // past float's range) nor vanishes (e^-100 is below its normal numbers, e^-104 is 0).
    const float m = std::max(part[0], running[0]);
    if (m == kMinusInf) {  // neither part saw a key: lse stays −inf and O = 0 (not (−inf) − (−inf) = NaN)
      std::fill(running + 1, running + width, 0.0f);
      continue;
    }
    const float w_part = std::exp(part[0] - m), w_running = std::exp(running[0] - m);  // one of them is 1
    const float l = w_part + w_running;                                                // in [1, 2]
    running[0] = m + std::log(l);  // log(e^lse_part + e^lse_running)
    for (std::size_t c = 1; c < width; ++c) running[c] = (w_part * part[c] + w_running * running[c]) / l;
  }
}
// [merge_packed]

}  // namespace attn::ch15
