// Chapter 10, reference solutions. Book page: book/10_backward.md.
// Written to be read beside the FlashAttention-2 paper's Algorithm 2 (the backward pass): the names are the
// paper's (Q_i, K_j, V_j, dO_i, P_ij, dP_ij, dS_ij, D_i, B_r, B_c), the products are OpenBLAS
// (attn::matmul, attn::matmul_transpose_a), the rest is plain loops.
// The fast, multithreaded version of the same algorithm is chapters/10_backward/backward_fast.cpp.
#include "10_backward/backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "attn/checks.hpp"

namespace attn {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

float inverse_sqrt_dk(std::size_t d_k) { return 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1))); }

/// Rows [r0, r0 + rows) of \p m, as a matrix of their own.
Matrix rows_of(const Matrix& m, std::size_t r0, std::size_t rows) {
  return xt::view(m, xt::range(r0, r0 + rows), xt::all());
}

Vector rows_of(const Vector& v, std::size_t r0, std::size_t rows) { return xt::view(v, xt::range(r0, r0 + rows)); }

}  // namespace

// [softmax_backward]
Matrix softmax_backward(const Matrix& P, const Matrix& dP) {
  require(P.shape() == dP.shape(),
          fmt::format("softmax_backward: P is {} but dP is {}; they need the same shape", shape_str(P), shape_str(dP)));
  const std::size_t rows = P.shape(0), cols = P.shape(1);
  require_finite("softmax_backward", "P", P.data(), P.size());
  // A key with p = 0 (masked) takes no part: its dP may be anything but NaN, even ±inf, and its ds is 0.
  for (std::size_t e = 0; e < P.size(); ++e)
    require(std::isfinite(dP.data()[e]) || (P.data()[e] == 0.0f && !std::isnan(dP.data()[e])),
            fmt::format("softmax_backward: dP[{}] is {} where P[{}] = {}; only a key with p = 0 may have an infinite "
                        "dP",
                        e, dP.data()[e], e, P.data()[e]));
  Matrix dS = xt::zeros<float>({rows, cols});  // (rows, cols)
  for (std::size_t r = 0; r < rows; ++r) {
    // J g = diag(p) g − p (pᵀ g): the Jacobian is never formed, only the one number pᵀ g per row.
    float p_dot_g = 0.0f;
    for (std::size_t c = 0; c < cols; ++c)
      if (P(r, c) != 0.0f) p_dot_g += P(r, c) * dP(r, c);
    for (std::size_t c = 0; c < cols; ++c)
      if (P(r, c) != 0.0f) dS(r, c) = P(r, c) * (dP(r, c) - p_dot_g);
  }
  return dS;
}
// [softmax_backward]

// [attention_backward]
AttentionGrads attention_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& dO,
                                  const Mask& mask) {
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_v = V.shape(1);
  require(Q.shape(1) == K.shape(1) && V.shape(0) == n_kv && dO.shape(0) == n_q && dO.shape(1) == d_v,
          fmt::format("attention_backward: Q is {}, K is {}, V is {} and dO is {}; Q and K need the same d_k, V one "
                      "row per key, dO one row per query and V's width",
                      shape_str(Q), shape_str(K), shape_str(V), shape_str(dO)));
  // (0, 0) is "no mask"; a mask with one dimension 0 and the other not is a mistake, not "no mask".
  require_mask_fits("attention_backward", mask, Q, K);
  require_attention_inputs("attention_backward", Q, K, V);  // finite, and no score can overflow
  require_finite("attention_backward", "dO", dO.data(), dO.size());
  // S, P, dP and dS are (n_q, n_kv) each: refused with the estimate before any is allocated.
  checked_allocation("attention_backward: S, P, dP and dS, 4 × n_q × n_kv floats (flash_backward holds none of them)",
                     {4, n_q, n_kv, sizeof(float)});
  const float scale = inverse_sqrt_dk(Q.shape(1));
  // The forward, keeping what the backward needs: P, the (n_q, n_kv) matrix flash_backward will not store.
  Matrix S = scaled_scores(Q, K);                          // (n_q, n_kv)
  if (mask.size() > 0) S = xt::where(mask, S, kMinusInf);  // masked: weight exactly 0
  const Matrix P = softmax_rows(S);                        // (n_q, n_kv)
  AttentionGrads g;
  // Each product's last argument names it, so a product whose sizes do not fit says which one it is.
  g.dV = matmul_transpose_a(P, dO, 1.0f, "dV = Pᵀ·dO");                       // (n_kv, d_v): O = P·V
  const Matrix dP = matmul(dO, V, /*transpose_b=*/true, 1.0f, "dP = dO·Vᵀ");  // (n_q, n_kv)
  const Matrix dS = softmax_backward(P, dP);                                  // (n_q, n_kv): through the softmax
  g.dQ = matmul(dS, K, /*transpose_b=*/false, scale, "dQ = dS·K");            // (n_q, d_k): S = Q·Kᵀ/√d_k
  g.dK = matmul_transpose_a(dS, Q, scale, "dK = dSᵀ·Q");                      // (n_kv, d_k)
  return g;
}
// [attention_backward]

// [flash_backward_tile]
void flash_backward_tile(const Matrix& Q_i, const Matrix& K_j, const Matrix& V_j, const Matrix& dO_i,
                         const Vector& lse_i, const Vector& D_i, Matrix& dQ_i, Matrix& dK_j, Matrix& dV_j,
                         const Mask& allowed) {
  const std::size_t B_r = Q_i.shape(0), B_c = K_j.shape(0), d_k = Q_i.shape(1), d_v = V_j.shape(1);
  require(
      K_j.shape(1) == d_k && V_j.shape(0) == B_c && dO_i.shape(0) == B_r && dO_i.shape(1) == d_v &&
          lse_i.shape(0) == B_r && D_i.shape(0) == B_r,
      fmt::format("flash_backward_tile: Q_i is {}, K_j is {}, V_j is {}, dO_i is {}, lse_i is {} and D_i is {}; "
                  "they do not fit together",
                  shape_str(Q_i), shape_str(K_j), shape_str(V_j), shape_str(dO_i), shape_str(lse_i), shape_str(D_i)));
  require(
      dQ_i.shape(0) == B_r && dQ_i.shape(1) == d_k && dK_j.shape(0) == B_c && dK_j.shape(1) == d_k &&
          dV_j.shape(0) == B_c && dV_j.shape(1) == d_v,
      fmt::format("flash_backward_tile: dQ_i is {}, dK_j is {} and dV_j is {}, but Q_i is {}, K_j is {}, V_j is {}",
                  shape_str(dQ_i), shape_str(dK_j), shape_str(dV_j), shape_str(Q_i), shape_str(K_j), shape_str(V_j)));
  // (0, 0) is "every pair allowed"; (0, 3) is a mistake, not "no mask".
  require_mask_shape("flash_backward_tile", allowed, B_r, B_c, fmt::format("the tile is ({}, {})", B_r, B_c));
  require_attention_inputs("flash_backward_tile", Q_i, K_j, V_j);
  // dP = dO_i V_jᵀ is a sum of d_v products: the scores' overflow policy for it, or ∞ − ∞ = NaN in dS.
  require_bounded_products("flash_backward_tile", "dO_i", dO_i.data(), dO_i.size(), "V_j", V_j.data(), V_j.size(), d_v);
  require_finite("flash_backward_tile", "lse_i", lse_i.data(), lse_i.size(), /*allow_minus_inf=*/true);  // -inf: no key
  require_finite("flash_backward_tile", "D_i", D_i.data(), D_i.size());

  const float scale = inverse_sqrt_dk(d_k);
  // P_ij recomputed from the forward's log-sum-exp: exp(s − lse) = exp(s) / Σ exp, the softmax without a sum.
  Matrix P = matmul(Q_i, K_j, /*transpose_b=*/true, scale);  // (B_r, B_c): S_ij, overwritten by P_ij
  for (std::size_t r = 0; r < B_r; ++r)
    for (std::size_t c = 0; c < B_c; ++c) {
      const bool hidden = lse_i(r) == kMinusInf || (allowed.size() > 0 && !allowed(r, c));
      // A probability is at most 1: the min keeps an lse rounded below a huge score (or not the forward's) from
      // making P infinite, and dS NaN.
      P(r, c) = hidden ? 0.0f : std::min(1.0f, std::exp(P(r, c) - lse_i(r)));
    }
  dV_j += matmul_transpose_a(P, dO_i);                  // (B_c, d_v)
  Matrix dS = matmul(dO_i, V_j, /*transpose_b=*/true);  // (B_r, B_c): dP_ij, overwritten by dS_ij
  for (std::size_t r = 0; r < B_r; ++r)
    for (std::size_t c = 0; c < B_c; ++c) dS(r, c) = P(r, c) * (dS(r, c) - D_i(r));  // D_i replaces rowsum(dP ∘ P)
  dQ_i += matmul(dS, K_j, /*transpose_b=*/false, scale);                             // (B_r, d_k)
  dK_j += matmul_transpose_a(dS, Q_i, scale);                                        // (B_c, d_k)
}
// [flash_backward_tile]

// [flash_backward]
AttentionGrads flash_backward(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& O, const Vector& lse,
                              const Matrix& dO, bool causal, std::size_t B_r, std::size_t B_c) {
  const std::size_t n_q = Q.shape(0), n_kv = K.shape(0), d_k = Q.shape(1), d_v = V.shape(1);
  require(K.shape(1) == d_k && V.shape(0) == n_kv && O.shape(0) == n_q && O.shape(1) == d_v &&
              dO.shape() == O.shape() && lse.shape(0) == n_q,
          fmt::format("flash_backward: Q is {}, K is {}, V is {}, O is {}, lse is {} and dO is {}; Q and K need the "
                      "same d_k, V one row per key, O and dO one row per query and V's width, lse one entry per query",
                      shape_str(Q), shape_str(K), shape_str(V), shape_str(O), shape_str(lse), shape_str(dO)));
  require(B_r > 0 && B_c > 0,
          fmt::format("flash_backward: tile sizes must be positive, got B_r = {}, B_c = {}", B_r, B_c));
  require(!causal || n_q <= n_kv,
          fmt::format("flash_backward: causal with {} queries but only {} keys; n_q <= n_kv", n_q, n_kv));
  require_attention_inputs("flash_backward", Q, K, V);  // finite, and no score can overflow
  // dP = dO Vᵀ and D = rowsum(dO ∘ O) are sums of d_v products: the same policy, or ∞ − ∞ = NaN in dS.
  require_bounded_products("flash_backward", "dO", dO.data(), dO.size(), "V", V.data(), V.size(), d_v);
  require_bounded_products("flash_backward", "dO", dO.data(), dO.size(), "O", O.data(), O.size(), d_v);
  require_finite("flash_backward", "lse", lse.data(), lse.size(), /*allow_minus_inf=*/true);  // -inf: saw no key

  // D_i = rowsum(dO ∘ O) = rowsum(dP ∘ P): one number per query row, O(n_q), computed once.
  const Vector D = xt::sum(dO * O, {1});  // (n_q)
  AttentionGrads g{Matrix(xt::zeros<float>({n_q, d_k})), Matrix(xt::zeros<float>({n_kv, d_k})),
                   Matrix(xt::zeros<float>({n_kv, d_v}))};
  const std::size_t offset = n_kv - std::min(n_q, n_kv);  // query i sits at position i + offset
  for (std::size_t c0 = 0; c0 < n_kv; c0 += B_c) {        // outer loop: one block of keys, which owns dK_j, dV_j
    const std::size_t cols = std::min(B_c, n_kv - c0);
    const Matrix K_j = rows_of(K, c0, cols), V_j = rows_of(V, c0, cols);  // (cols, d_k), (cols, d_v)
    Matrix dK_j = xt::zeros<float>({cols, d_k});                          // (cols, d_k)
    Matrix dV_j = xt::zeros<float>({cols, d_v});                          // (cols, d_v)
    for (std::size_t r0 = 0; r0 < n_q; r0 += B_r) {                       // inner loop: the query blocks stream past it
      const std::size_t rows = std::min(B_r, n_q - r0);
      // Causal: the block's last row sees keys up to r0 + rows − 1 + offset; a key block after that is skipped.
      if (causal && c0 > r0 + rows - 1 + offset) continue;
      const bool crosses_diagonal = causal && c0 + cols - 1 > r0 + offset;
      Mask allowed;
      if (crosses_diagonal) {
        allowed = xt::zeros<bool>({rows, cols});  // (rows, cols)
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < cols && c0 + c <= r0 + r + offset; ++c) allowed(r, c) = true;
      }
      Matrix dQ_i = rows_of(g.dQ, r0, rows);  // (rows, d_k): this block's running dQ
      flash_backward_tile(rows_of(Q, r0, rows), K_j, V_j, rows_of(dO, r0, rows), rows_of(lse, r0, rows),
                          rows_of(D, r0, rows), dQ_i, dK_j, dV_j, allowed);
      xt::view(g.dQ, xt::range(r0, r0 + rows), xt::all()) = dQ_i;
    }
    xt::view(g.dK, xt::range(c0, c0 + cols), xt::all()) = dK_j;
    xt::view(g.dV, xt::range(c0, c0 + cols), xt::all()) = dV_j;
  }
  return g;
}
// [flash_backward]

}  // namespace attn
