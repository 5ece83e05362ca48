// Chapter 07, presented code: the two kernels that compute attention over allowed pairs only.
//
//   1. row_sparse_attention   per-row index lists (CSR): exactly the allowed pairs, one scalar dot
//                             product each. Any pattern, no waste, but no matrix products either.
//   2. block_sparse_attention tiles of B_r × B_c with the online softmax: two matrix products per kept
//                             tile (chapter 05's micro-kernels, or OpenBLAS where they do not run), a mask
//                             only inside partial tiles. Wastes the disallowed pairs of partial tiles,
//                             gains the speed of the products. A run of consecutive full tiles in a
//                             row is folded as one wider tile. With every tile full it is dense tiled
//                             (flash) attention: `ch07_sparse bench` times it so, next to chapter 05's
//                             flash kernel, the dense baseline.
//
// Both equal chapter 02's scaled_dot_product_attention(Q, K, V, mask); the tests check it.
// Book page: book/07_sparse.md.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "07_sparse/patterns.hpp"
#include "attn/cblas.hpp"
#include "attn/checks.hpp"

namespace attn {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
/// Up to this many consecutive full tiles of a query row are folded as one wider tile: the passes per score
/// row (max, exp, rescale) and the output block's load and store then come once per 8·B_c keys, as in
/// chapter 05's kernel with its 512-key tiles, instead of once per B_c.
constexpr std::size_t kMaxRun = 8;

void require_qkv(const char* where, const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t n_q,
                 std::size_t n_kv) {
  require(Q.shape(1) == K.shape(1) && K.shape(0) == V.shape(0) && Q.shape(0) == n_q && K.shape(0) == n_kv,
          fmt::format("{}: Q is {}, K is {}, V is {} but the pattern is ({}, {}); Q needs n_q rows, K and V n_kv "
                      "rows, Q and K one d_k",
                      where, shape_str(Q), shape_str(K), shape_str(V), n_q, n_kv));
}

int blas_int(std::size_t v) { return static_cast<int>(v); }

}  // namespace

SparseRows sparse_rows(const Mask& mask) {
  SparseRows rows;
  rows.n_q = mask.shape(0);
  rows.n_kv = mask.shape(1);
  rows.row_start.push_back(0);
  for (std::size_t i = 0; i < rows.n_q; ++i) {
    for (std::size_t j = 0; j < rows.n_kv; ++j)
      if (mask(i, j)) rows.cols.push_back(j);
    rows.row_start.push_back(rows.cols.size());
  }
  return rows;
}

// [row_sparse_attention]
Matrix row_sparse_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const SparseRows& rows) {
  require_qkv("row_sparse_attention", Q, K, V, rows.n_q, rows.n_kv);
  require(rows.row_start.size() == rows.n_q + 1 && rows.row_start[0] == 0 && rows.cols.size() == rows.row_start.back(),
          fmt::format("row_sparse_attention: the index lists are inconsistent: row_start has {} entries (n_q + 1 = "
                      "{} needed, from 0 to cols.size() = {})",
                      rows.row_start.size(), rows.n_q + 1, rows.cols.size()));
  for (std::size_t i = 0; i < rows.n_q; ++i)
    require(rows.row_start[i] <= rows.row_start[i + 1],
            fmt::format("row_sparse_attention: row_start decreases at row {} ({} then {})", i, rows.row_start[i],
                        rows.row_start[i + 1]));
  for (std::size_t t = 0; t < rows.cols.size(); ++t)
    require(rows.cols[t] < rows.n_kv,
            fmt::format("row_sparse_attention: cols[{}] = {} is not a key (n_kv = {})", t, rows.cols[t], rows.n_kv));
  require_attention_inputs("row_sparse_attention", Q, K, V);
  const std::size_t d_k = Q.shape(1), d_v = V.shape(1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));
  Matrix O = xt::zeros<float>({rows.n_q, d_v});  // (n_q, d_v)
  std::vector<float> s;                          // (keys of row i) scores, then weights
  for (std::size_t i = 0; i < rows.n_q; ++i) {
    const std::size_t first = rows.row_start[i], count = rows.row_start[i + 1] - first;
    if (count == 0) continue;  // nothing allowed: the row stays zero, as with the dense mask
    const float* q = Q.data() + i * d_k;
    s.assign(count, 0.0f);
    for (std::size_t t = 0; t < count; ++t) {  // scores for the listed keys only
      const float* k = K.data() + rows.cols[first + t] * d_k;
      float dot = 0.0f;
      for (std::size_t c = 0; c < d_k; ++c) dot += q[c] * k[c];
      s[t] = dot * scale;
    }
    const float m = *std::max_element(s.begin(), s.end());  // stable softmax over the listed keys
    float sum = 0.0f;
    for (float& x : s) sum += (x = std::exp(x - m));
    float* o = O.data() + i * d_v;
    for (std::size_t t = 0; t < count; ++t) {
      const float* v = V.data() + rows.cols[first + t] * d_v;
      const float p = s[t] / sum;
      for (std::size_t c = 0; c < d_v; ++c) o[c] += p * v[c];
    }
  }
  return O;
}
// [row_sparse_attention]

namespace {

/// One query tile's state in the online softmax, and its scratch: m and ℓ per row, the unnormalised output.
struct TileState {
  std::vector<float> m, l;  // (B_r) running max and running sum of exp(s - m)
  std::vector<float> S;     // (B_r, run_max·B_c) scores of the current key tiles, then P = exp(S - m)
  std::vector<float> acc;   // (B_r, d_v) Σ P·V so far, scaled to the current m
};

// [online_softmax_tile]
/// Folds one key tile (columns j0 .. j0 + cols - 1) into the state of query rows i0 .. i0 + rows - 1. The two
/// products are chapter 05's: its micro-kernels on \p K_panels (K packed once per call), or OpenBLAS when
/// \p K_panels is null (a CPU without AVX2, or tiles that are not whole panels).
void fold_key_tile(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t i0, std::size_t rows, std::size_t j0,
                   std::size_t cols, const Mask* piece, float scale, std::size_t ld, const float* K_panels,
                   TileState& st) {
  const std::size_t d_k = Q.shape(1), d_v = V.shape(1), width = ch05::key_panel_width();
  // S = scale · Q_tile · K_tileᵀ   (rows, cols), leading dimension ld
  if (K_panels)
    ch05::scores_tile(Q.data() + i0 * d_k, rows, d_k, d_k, K_panels + (j0 / width) * d_k * width,
                      (cols + width - 1) / width, scale, st.S.data(), ld);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows), blas_int(cols), blas_int(d_k), scale,
                Q.data() + i0 * d_k, blas_int(d_k), K.data() + j0 * d_k, blas_int(d_k), 0.0f, st.S.data(),
                blas_int(ld));
  // The softmax passes between the two products are chapter 05's vectorised ones (05_flash_cpu/row_ops.hpp).
  for (std::size_t a = 0; a < rows; ++a) {
    float* s = st.S.data() + a * ld;
    const bool* allowed = piece ? piece->data() + a * cols : nullptr;  // row a of the (rows, cols) piece
    if (allowed)  // a partial tile: its disallowed pairs score -inf (a select per entry, no branch)
      for (std::size_t b = 0; b < cols; ++b) s[b] = allowed[b] ? s[b] : kMinusInf;
    const float m_new = std::max(st.m[a], ch05::row_max(s, cols));
    if (m_new == kMinusInf) {  // nothing allowed in this row so far: P = 0, nothing to rescale
      std::fill(s, s + cols, 0.0f);
      continue;
    }
    const float alpha = st.m[a] == kMinusInf ? 0.0f : std::exp(st.m[a] - m_new);  // 0: nothing summed yet
    const float row_sum = ch05::exp_shift_sum(s, cols, m_new);  // a disallowed pair's −inf gives exactly 0
    st.l[a] = alpha * st.l[a] + row_sum;
    st.m[a] = m_new;
    if (alpha != 1.0f) ch05::scale_row(st.acc.data() + a * d_v, d_v, alpha);
  }
  // acc += P · V_tile   (rows, d_v), the second product.
  if (K_panels)
    ch05::accumulate_pv(st.S.data(), rows, cols, ld, V.data() + j0 * d_v, d_v, d_v, st.acc.data(), d_v);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows), blas_int(d_v), blas_int(cols), 1.0f,
                st.S.data(), blas_int(ld), V.data() + j0 * d_v, blas_int(d_v), 1.0f, st.acc.data(), blas_int(d_v));
}
// [online_softmax_tile]

/// K (n_kv, d_k) packed for chapter 05's scores_tile() (panels of key_panel_width() keys), by every thread:
/// the panels are independent, so each thread packs chunks of whole panels with chapter 05's pack_keys() and
/// the result is what one call over all the keys gives. One thread packing 65,536 keys while the other waited
/// cost about a tenth of the window's time at that length.
std::unique_ptr<float[]> pack_keys_on_threads(const Matrix& K, std::size_t threads) {
  const std::size_t n_kv = K.shape(0), d_k = K.shape(1), width = ch05::key_panel_width();
  const std::size_t panels = ch05::key_panels(n_kv), chunk = 64;  // panels per work item
  std::unique_ptr<float[]> packed(
      new float[checked_product("block_sparse_attention: packed keys", {panels, d_k, width})]);
  std::atomic<std::size_t> next{0};
  run_on_threads(std::min(threads, (panels + chunk - 1) / chunk), [&] {
    for (std::size_t c = next++; c * chunk < panels; c = next++) {
      const std::size_t first = c * chunk * width, keys = std::min(chunk * width, n_kv - first);
      ch05::pack_keys(K.data() + first * d_k, keys, d_k, packed.get() + c * chunk * d_k * width);
    }
  });
  return packed;
}

/// A bad layout (a hand-made one, or an unfinished exercise) is an error, never a read out of bounds.
void require_layout_fits(const BlockLayout& layout) {
  require(layout.B_r > 0 && layout.B_c > 0,
          fmt::format("block_sparse_attention: tiles of {} x {}; both sizes must be >= 1", layout.B_r, layout.B_c));
  const std::size_t T_r = (layout.n_q + layout.B_r - 1) / layout.B_r;
  require(layout.row_start.size() == T_r + 1 && layout.row_start[0] == 0 && layout.row_start.back() == layout.tiles() &&
              layout.tile_mask.size() == layout.tiles(),
          fmt::format("block_sparse_attention: the layout is inconsistent: row_start needs {} entries from 0 to the "
                      "number of tiles, and tile_mask one entry per tile",
                      T_r + 1));
  // Every row_start checked before any is used: a later one that decreases would let an earlier row run past the
  // tiles. A key tile is compared with their count, not by its first column (col_tile · B_c may wrap to 0).
  for (std::size_t r = 0; r < T_r; ++r)
    require(layout.row_start[r] <= layout.row_start[r + 1],
            fmt::format("block_sparse_attention: row_start decreases at row {} ({} then {})", r, layout.row_start[r],
                        layout.row_start[r + 1]));
  const std::size_t T_c = layout.n_kv / layout.B_c + (layout.n_kv % layout.B_c != 0);
  for (std::size_t r = 0; r < T_r; ++r) {
    for (std::size_t t = layout.row_start[r]; t < layout.row_start[r + 1]; ++t) {
      require(layout.col_tile[t] < T_c,
              fmt::format("block_sparse_attention: col_tile[{}] = {}: key tile {} lies past n_kv = {} ({} tiles of {})",
                          t, layout.col_tile[t], layout.col_tile[t], layout.n_kv, T_c, layout.B_c));
      const std::size_t j0 = layout.col_tile[t] * layout.B_c;
      if (layout.tile_mask[t] == BlockLayout::kFull) continue;
      const std::size_t rows = std::min(layout.B_r, layout.n_q - r * layout.B_r);
      const std::size_t cols = std::min(layout.B_c, layout.n_kv - j0);
      require(layout.tile_mask[t] < layout.masks.size() && layout.masks[layout.tile_mask[t]].shape(0) == rows &&
                  layout.masks[layout.tile_mask[t]].shape(1) == cols,
              fmt::format("block_sparse_attention: tile ({}, {}) needs a ({}, {}) piece of the mask; its "
                          "tile_mask[{}] = {} does not point to one of the {} masks",
                          r, layout.col_tile[t], rows, cols, t, layout.tile_mask[t], layout.masks.size()));
    }
  }
}

}  // namespace

// [block_sparse_attention]
Matrix block_sparse_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const BlockLayout& layout,
                              std::size_t threads) {
  require_qkv("block_sparse_attention", Q, K, V, layout.n_q, layout.n_kv);
  require_layout_fits(layout);
  require(threads >= 1, "block_sparse_attention: threads must be at least 1");
  // A run is at most kMaxRun tiles and at most the key tiles there are: the score tile holds B_r × run_max·B_c.
  const std::size_t T_c = layout.n_kv / layout.B_c + (layout.n_kv % layout.B_c != 0);
  const std::size_t run_max = std::max<std::size_t>(1, std::min(kMaxRun, T_c));
  checked_product("block_sparse_attention: the score tile B_r × B_c × (tiles per run) floats",
                  {layout.B_r, layout.B_c, run_max, sizeof(float)});
  require_attention_inputs("block_sparse_attention", Q, K, V);
  const std::size_t T_r = layout.row_start.size() - 1;  // query tiles
  const std::size_t d_k = Q.shape(1), d_v = V.shape(1), B_r = layout.B_r, B_c = layout.B_c;
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));
  // (n_q, d_v), not zeroed here: every row is written by the thread that computes it, in parallel, zeros
  // included (a zeroing pass here would take the fresh memory's page faults on one thread).
  Matrix O = xt::empty<float>({layout.n_q, d_v});
  if (O.size() == 0) return O;

  // K packed once for chapter 05's micro-kernels, when the tiles are whole panels of them (else OpenBLAS).
  const std::size_t width = ch05::key_panel_width();
  const std::unique_ptr<float[]> K_panels =
      width > 0 && B_c % width == 0 && d_k > 0 ? pack_keys_on_threads(K, threads) : nullptr;
  std::atomic<std::size_t> next_tile{0};  // query tiles are handed out one at a time: rows cost unequal work
  // The score tile's leading dimension: room for the longest run, but never wider than the keys there are (rounded
  // up to whole panels, which the micro-kernels write): a tile of B_c = 2^33 over 4 keys asked for 32 GiB. Its
  // rows likewise no more than the queries. Checked against the memory before any thread starts.
  const std::size_t key_cover = width > 0 ? std::max(ch05::key_panels(layout.n_kv) * width, layout.n_kv) : layout.n_kv;
  const std::size_t ld = std::min(run_max * B_c, key_cover), tile_rows = std::min(B_r, layout.n_q);
  checked_allocation("block_sparse_attention: each thread's score tile, rows × (tiles per run × B_c) floats",
                     {std::min(threads, T_r), tile_rows, ld, sizeof(float)});
  const auto worker = [&] {
    TileState st{std::vector<float>(tile_rows), std::vector<float>(tile_rows), std::vector<float>(tile_rows * ld),
                 std::vector<float>(tile_rows * d_v)};
    for (std::size_t r = next_tile++; r < T_r; r = next_tile++) {
      const std::size_t i0 = r * B_r, rows = std::min(B_r, layout.n_q - i0);
      std::fill(st.m.begin(), st.m.end(), kMinusInf);
      std::fill(st.l.begin(), st.l.end(), 0.0f);
      std::fill(st.acc.begin(), st.acc.end(), 0.0f);
      const std::size_t end = layout.row_start[r + 1];
      for (std::size_t t = layout.row_start[r], run = 1; t < end; t += run) {
        const Mask* piece = layout.tile_mask[t] == BlockLayout::kFull ? nullptr : &layout.masks[layout.tile_mask[t]];
        run = 1;  // a full tile takes the full tiles right after it along: they are one tile of more keys
        while (!piece && run < run_max && t + run < end && layout.tile_mask[t + run] == BlockLayout::kFull &&
               layout.col_tile[t + run] == layout.col_tile[t] + run)
          ++run;
        const std::size_t j0 = layout.col_tile[t] * B_c, cols = std::min(run * B_c, layout.n_kv - j0);
        fold_key_tile(Q, K, V, i0, rows, j0, cols, piece, scale, ld, K_panels.get(), st);
      }
      for (std::size_t a = 0; a < rows; ++a) {  // O = acc / ℓ; a row that saw no allowed key is zero
        const float inv = st.l[a] == 0.0f ? 0.0f : 1.0f / st.l[a];
        for (std::size_t c = 0; c < d_v; ++c) O(i0 + a, c) = st.acc[a * d_v + c] * inv;
      }
    }
  };
  const SingleThreadedBlas blas;  // our threads are the parallelism; OpenBLAS must not add its own on top
  run_on_threads(std::min(threads, T_r), worker);  // a worker's exception (say, bad_alloc) reaches the caller
  return O;
}
// [block_sparse_attention]

}  // namespace attn
