// Chapter 07, your exercises. Book page: book/07_sparse.md.
// Check your progress with `./course check 07`; stuck? `./course hint 07`.
// Watch your code run the chapter: `./course run 07 --track exercise`.
#include "07_sparse/sparse.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "07_sparse";
}

Mask local_window_mask(std::size_t n, std::size_t w, bool causal) {
  // TODO(learner): an (n, n) mask, true where |i - j| <= w (causal: i - w <= j <= i).
  //   Careful with unsigned arithmetic: i - w wraps around when w > i, and i + w when w is huge (SIZE_MAX
  //   means "the whole sequence"; attn::saturating_add stops at the top instead).
  throw not_implemented("local_window_mask", kChapter,
                        "row i allows the keys from max(0, i - w) to min(n - 1, i + w) (or to i when causal).");
}

Mask global_mask(std::size_t n, const std::vector<std::size_t>& global) {
  // TODO(learner): an (n, n) mask, true on the row AND the column of every global position g.
  //   A position g >= n is std::invalid_argument naming g and n.
  throw not_implemented("global_mask", kChapter,
                        "xt::row(mask, g) = true lets g see everyone; xt::col(mask, g) = true lets everyone see g.");
}

Mask dilated_mask(std::size_t n, std::size_t w, std::size_t dilation, bool causal) {
  // TODO(learner): an (n, n) mask, true where j = i + k * dilation for -w <= k <= w (causal: -w <= k <= 0),
  //   stopping at the ends of the sequence. dilation = 0 is std::invalid_argument.
  throw not_implemented(
      "dilated_mask", kChapter,
      "the diagonal, then k = 1..w steps of `dilation` to the left (and to the right unless causal).");
}

Matrix sliding_window_attention(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t w, bool causal) {
  // TODO(learner): attention of Q (n, d_k) over K (n, d_k), V (n, d_v), looking only inside the window of
  //   each row: scores q_i·k_j/sqrt(d_k) for the window's j, a stable softmax over them, the weighted sum
  //   of those V rows. Never build the (n, n) matrix. Check the shapes first (std::invalid_argument), then
  //   the inputs (attn::require_attention_inputs: NaN, overflow). w may be as large as SIZE_MAX.
  throw not_implemented("sliding_window_attention", kChapter,
                        "per row: the window's first and last key, at most 2w + 1 scores, softmax, blend.");
}

BlockLayout block_layout(const Mask& mask, std::size_t B_r, std::size_t B_c) {
  // TODO(learner): fill a BlockLayout: n_q, n_kv, B_r, B_c; row_start starting with 0; then for every
  //   query tile (rows i0 .. i0 + B_r - 1) and key tile c (columns c·B_c ..), count the allowed pairs of
  //   the tile's piece of the mask (edge tiles are smaller): none → skip it; all → col_tile c with
  //   tile_mask kFull; some → col_tile c, tile_mask = masks.size(), and push the piece onto masks.
  //   After each query tile push col_tile.size() onto row_start. B_r or B_c = 0 is std::invalid_argument.
  throw not_implemented("block_layout", kChapter,
                        "xt::view(mask, xt::range(i0, i1), xt::range(j0, j1)) is a tile's piece; "
                        "attn::allowed_pairs counts it.");
}

}  // namespace attn
