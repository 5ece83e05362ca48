// Chapter 07, reference solutions. Book page: book/07_sparse.md.
// The masks are built row by row from the rule that defines them; the kernel touches only the window.
#include "07_sparse/sparse.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

// [local_window_mask]
Mask local_window_mask(std::size_t n, std::size_t w, bool causal) {
  checked_allocation("local_window_mask: the (n, n) mask", {n, n, sizeof(bool)});  // before allocating it
  Mask mask = xt::zeros<bool>({n, n});                                             // (n, n)
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t first = i > w ? i - w : 0;                                  // i - w, clipped at the start
    const std::size_t last = causal ? i : std::min(n - 1, saturating_add(i, w));  // i + w, clipped at the end
    for (std::size_t j = first; j <= last; ++j) mask(i, j) = true;
  }
  return mask;
}
// [local_window_mask]

// [global_mask]
Mask global_mask(std::size_t n, const std::vector<std::size_t>& global) {
  checked_allocation("global_mask: the (n, n) mask", {n, n, sizeof(bool)});
  Mask mask = xt::zeros<bool>({n, n});  // (n, n)
  for (std::size_t g : global) {
    require(g < n, fmt::format("global_mask: global position {} does not exist in a sequence of n = {}", g, n));
    xt::row(mask, g) = true;  // g sees everyone
    xt::col(mask, g) = true;  // everyone sees g
  }
  return mask;
}
// [global_mask]

// [dilated_mask]
Mask dilated_mask(std::size_t n, std::size_t w, std::size_t dilation, bool causal) {
  require(dilation >= 1, "dilated_mask: the dilation must be at least 1 (1 is the plain window)");
  checked_allocation("dilated_mask: the (n, n) mask", {n, n, sizeof(bool)});
  Mask mask = xt::zeros<bool>({n, n});  // (n, n)
  for (std::size_t i = 0; i < n; ++i) {
    mask(i, i) = true;
    // k = 1 .. w steps of `dilation` each way, stopping at the ends of the sequence.
    // (k ≤ i / dilation, not k · dilation ≤ i: the product could wrap for a huge dilation)
    for (std::size_t k = 1; k <= w && k <= i / dilation; ++k) mask(i, i - k * dilation) = true;
    if (causal) continue;
    for (std::size_t k = 1; k <= w && k <= (n - 1 - i) / dilation; ++k) mask(i, i + k * dilation) = true;
  }
  return mask;
}
// [dilated_mask]

// [sliding_window_attention]
Matrix sliding_window_attention(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t w, bool causal) {
  const std::size_t n = Q.shape(0), d_k = Q.shape(1), d_v = V.shape(1);
  require(K.shape(0) == n && V.shape(0) == n && K.shape(1) == d_k,
          fmt::format("sliding_window_attention: Q is {}, K is {}, V is {}; self-attention needs n rows in each "
                      "and one d_k for Q and K",
                      shape_str(Q), shape_str(K), shape_str(V)));
  require_attention_inputs("sliding_window_attention", Q, K, V);  // finite, and no score can overflow
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));
  Matrix O = xt::zeros<float>({n, d_v});  // (n, d_v)
  std::vector<float> p;                   // (keys in the window) scores, then weights
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t first = i > w ? i - w : 0;
    const std::size_t last = causal ? i : std::min(n - 1, saturating_add(i, w));  // w may be SIZE_MAX
    p.assign(last - first + 1, 0.0f);
    for (std::size_t j = first; j <= last; ++j) {  // scores q_i·k_j/√d_k inside the window only
      float dot = 0.0f;
      for (std::size_t c = 0; c < d_k; ++c) dot += Q(i, c) * K(j, c);
      p[j - first] = dot * scale;
    }
    const float m = *std::max_element(p.begin(), p.end());  // the window holds i itself: never empty
    float sum = 0.0f;
    for (float& x : p) sum += (x = std::exp(x - m));
    for (std::size_t j = first; j <= last; ++j)
      for (std::size_t c = 0; c < d_v; ++c) O(i, c) += p[j - first] / sum * V(j, c);
  }
  return O;
}
// [sliding_window_attention]

// [block_layout]
BlockLayout block_layout(const Mask& mask, std::size_t B_r, std::size_t B_c) {
  require(B_r > 0 && B_c > 0, fmt::format("block_layout: tiles of {} x {}; both sizes must be >= 1", B_r, B_c));
  BlockLayout L;
  L.n_q = mask.shape(0);
  L.n_kv = mask.shape(1);
  L.B_r = B_r;
  L.B_c = B_c;
  L.row_start.push_back(0);
  for (std::size_t i0 = 0; i0 < L.n_q; i0 += B_r) {
    for (std::size_t j0 = 0; j0 < L.n_kv; j0 += B_c) {
      const std::size_t rows = std::min(B_r, L.n_q - i0), cols = std::min(B_c, L.n_kv - j0);
      const Mask piece = xt::view(mask, xt::range(i0, i0 + rows), xt::range(j0, j0 + cols));  // (rows, cols)
      const std::size_t allowed = allowed_pairs(piece);
      if (allowed == 0) continue;  // nothing to compute: the tile is skipped, the whole point
      L.col_tile.push_back(j0 / B_c);
      if (allowed == rows * cols) {
        L.tile_mask.push_back(BlockLayout::kFull);  // every pair allowed: no mask needed inside
      } else {
        L.tile_mask.push_back(L.masks.size());
        L.masks.push_back(piece);
      }
    }
    L.row_start.push_back(L.col_tile.size());
  }
  return L;
}
// [block_layout]

}  // namespace attn
