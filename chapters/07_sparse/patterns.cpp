// Chapter 07, presented code: pattern arithmetic (union, random keys, counts, receptive field) and the
// window's block layout built without an (n, n) mask. Book page: book/07_sparse.md.
// The mask builders themselves (window, global, dilated) are the learner's: see sparse.hpp.
#include <algorithm>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "07_sparse/patterns.hpp"

namespace attn {

Mask mask_union(const Mask& a, const Mask& b) {
  require(a.shape() == b.shape(),
          fmt::format("mask_union: the masks are {} and {}; a union needs one shape", shape_str(a), shape_str(b)));
  Mask u = a;  // (n_q, n_kv)
  for (std::size_t i = 0; i < u.size(); ++i) u.data()[i] = a.data()[i] || b.data()[i];
  return u;
}

// [random_mask]
Mask random_mask(std::size_t n, std::size_t r, std::uint64_t seed) {
  checked_allocation("random_mask: the (n, n) mask", {n, n, sizeof(bool)});  // before allocating it
  std::mt19937_64 engine(seed);
  Mask mask = xt::zeros<bool>({n, n});  // (n, n)
  std::vector<std::size_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) {
    // A partial Fisher-Yates shuffle: the first r entries become r distinct keys, each set equally likely.
    std::iota(keys.begin(), keys.end(), std::size_t{0});
    for (std::size_t k = 0; k < std::min(r, n); ++k) {
      std::uniform_int_distribution<std::size_t> pick(k, n - 1);
      std::swap(keys[k], keys[pick(engine)]);
      mask(i, keys[k]) = true;
    }
  }
  return mask;
}
// [random_mask]

std::size_t allowed_pairs(const Mask& mask) {
  return static_cast<std::size_t>(std::count(mask.data(), mask.data() + mask.size(), true));
}

double mask_density(const Mask& mask) {
  return mask.size() == 0 ? 0.0 : static_cast<double>(allowed_pairs(mask)) / static_cast<double>(mask.size());
}

// [receptive_field]
Mask receptive_field(const Mask& mask, std::size_t layers) {
  require(mask.shape(0) == mask.shape(1),
          fmt::format("receptive_field: the mask is {}; layers stack only when queries and keys are the same "
                      "positions (n, n)",
                      shape_str(mask)));
  require(layers <= kMaxReceptiveLayers,
          fmt::format("receptive_field: {} layers; at most {} (each costs n³ steps)", layers, kMaxReceptiveLayers));
  const std::size_t n = mask.shape(0);
  Mask R = xt::zeros<bool>({n, n});  // (n, n) layer 0: each position knows only itself
  for (std::size_t i = 0; i < n; ++i) R(i, i) = true;
  for (std::size_t layer = 0; layer < layers; ++layer) {
    // One more layer: i hears k through any j it attends to, if j had already heard k.
    Mask next = xt::zeros<bool>({n, n});  // (n, n)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (mask(i, j))
          for (std::size_t k = 0; k < n; ++k) next(i, k) = next(i, k) || R(j, k);
    if (next == R) break;  // nothing new reached: every later layer gives the same (within n layers on a window)
    R = next;
  }
  return R;
}
// [receptive_field]

std::size_t BlockLayout::computed_pairs() const {
  std::size_t pairs = 0;
  for (std::size_t r = 0; r + 1 < row_start.size(); ++r) {
    const std::size_t rows = std::min(B_r, n_q - r * B_r);
    for (std::size_t t = row_start[r]; t < row_start[r + 1]; ++t)
      pairs += rows * std::min(B_c, n_kv - col_tile[t] * B_c);
  }
  return pairs;
}

// [window_block_layout]
BlockLayout window_block_layout(std::size_t n, std::size_t w, bool causal, std::size_t B_r, std::size_t B_c) {
  require(B_r > 0 && B_c > 0, fmt::format("window_block_layout: tiles of {} x {}; both sizes must be >= 1", B_r, B_c));
  // Before building anything, bounds on what the layout will hold: the band of a row of tiles spans B_r + w keys
  // (+ 2w without the causal rule), so at most that / B_c + 2 tiles (16 bytes of indices each); of those, only
  // the ones its two edges cross are partial, at most 2·(B_r/B_c + 2), each with a mask of up to B_r × B_c bytes.
  const std::size_t T_r = n / B_r + (n % B_r != 0 ? 1 : 0), T_c = n / B_c + (n % B_c != 0 ? 1 : 0);
  const std::size_t band = saturating_add(B_r, causal ? w : saturating_add(w, w));
  const std::size_t crossed = saturating_add(B_r / B_c, 2);  // tiles one edge of the band crosses in a row of tiles
  const std::size_t kept = std::min(T_c, saturating_add(band / B_c, 2)),
                    partial = std::min(kept, saturating_add(crossed, crossed));
  // (Each names n, the size that makes the tiles many: ⌈n / B_r⌉ rows of them.)
  checked_allocation(fmt::format("window_block_layout: the tiles' indices for n = {}, 16 bytes per tile", n).c_str(),
                     {T_r, kept, 16});
  checked_allocation(
      fmt::format("window_block_layout: the partial tiles' masks for n = {}, B_r × B_c bytes each", n).c_str(),
      {T_r, partial, std::min(B_r, n), std::min(B_c, n)});
  BlockLayout L;
  L.n_q = L.n_kv = n;
  L.B_r = B_r;
  L.B_c = B_c;
  L.row_start.push_back(0);
  const auto allowed = [&](std::size_t i, std::size_t j) { return (j <= i ? i - j <= w : !causal && j - i <= w); };
  for (std::size_t i0 = 0; i0 < n; i0 += B_r) {
    const std::size_t i1 = std::min(i0 + B_r, n);  // rows i0 .. i1-1
    // The band's keys for these rows: from (first row - w) to (last row + w), clipped to the sequence.
    const std::size_t j_lo = i0 > w ? i0 - w : 0;
    const std::size_t j_hi = causal ? i1 - 1 : std::min(n - 1, saturating_add(i1 - 1, w));  // w may be SIZE_MAX
    for (std::size_t c = j_lo / B_c; c <= j_hi / B_c; ++c) {
      const std::size_t j0 = c * B_c, j1 = std::min(j0 + B_c, n);
      // Full when the tile's two far corners are inside the band: its top-right and bottom-left pairs.
      const bool full = allowed(i0, j1 - 1) && allowed(i1 - 1, j0);
      L.col_tile.push_back(c);
      if (full) {
        L.tile_mask.push_back(BlockLayout::kFull);
        continue;
      }
      Mask piece = xt::zeros<bool>({i1 - i0, j1 - j0});  // (rows of the tile, columns of the tile)
      for (std::size_t i = i0; i < i1; ++i)
        for (std::size_t j = j0; j < j1; ++j) piece(i - i0, j - j0) = allowed(i, j);
      L.tile_mask.push_back(L.masks.size());
      L.masks.push_back(std::move(piece));
    }
    L.row_start.push_back(L.col_tile.size());
  }
  return L;
}
// [window_block_layout]

}  // namespace attn
