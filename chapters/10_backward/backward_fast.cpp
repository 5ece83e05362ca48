// Chapter 10's fast CPU FlashAttention backward. Book page: book/10_backward.md (section "A fast backward").
//
// The algorithm is solutions/10_backward/backward.cpp's flash_backward(); what changes is how the work is laid
// out, after chapter 05's fast forward:
//   1. Work items are (head, lane). Lane l of a head takes the key blocks j = l, l + lanes, l + 2·lanes, ... in
//      order; a key block owns its rows of dK and dV, so no two items ever write the same dK or dV row.
//   2. dQ_i gets a contribution from every key block. Each lane adds its contributions into its own dQ
//      (lane 0 into the output itself), and the lanes' dQs are summed in lane order at the end: every float
//      is added in an order fixed by the lanes alone, so 1, 2 or 16 threads give the same bits, and no two
//      threads ever write the same memory (nothing to race on, nothing to lock).
//   3. S = Q_i K_jᵀ / √d_k is recomputed by chapter 05's own micro-kernel (tile_kernels.inl) on keys packed
//      once per call, as the fast forward computed it: every score is the same FMA chain over d_k followed by
//      the same multiplication by 1/√d_k, so it has the forward's bits whatever the tile sizes, and exp(S − lse)
//      is the forward's P exactly (one dominant key gives P = 1, hence dV = dO, as PyTorch's backward does).
//      An OpenBLAS product of other tile shapes rounds the sums differently (P = 1.000015 in the test, d_k = 64).
//      dP = dO_i V_jᵀ has the shape of S (a row of dO against every key's row of V), so the same kernel computes
//      it from V packed as K is: as an OpenBLAS call it was a large share of the backward's profile (perf, n = 4096;
//      the measurements page, book/measure_10_backward.md, has the figures). Likewise dQ_i += dS K_j has the shape
//      of O += P V, and chapter 05's P·V kernel computes it, in less time than OpenBLAS's call took. The two
//      products that read a tile transposed, dV += Pᵀ dO and dK += dSᵀ Q, are sgemm calls, OpenBLAS
//      single-threaded inside each thread. The 1/√d_k of dQ and dK is folded into dS where it is made.
//      Without the micro-kernels (no AVX2, or a B_c that is no whole number of key panels: the fast forward then
//      falls back to OpenBLAS too) S and dP are sgemm calls on copies of Kᵀ and Vᵀ (OpenBLAS's small kernels
//      take a product whose operands both run along d only by packing them, on every call), and S agrees with
//      the forward's to rounding only.
//   4. P is recomputed with chapter 05's vectorised exp (row_ops.cpp) as exp(S − lse), and dS = P ∘ (dP − D)
//      is one vectorised loop (grad_row.cpp). Causal: query blocks that cannot see a key block are never visited, the
//      tile the diagonal crosses is cut at its last row's last visible key, and row by row inside.
// Measured by `ch10_backward bench` (numbers and load in book/recorded/ch10_bench.txt and on the book page).
#include "10_backward/backward_fast.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "10_backward/grad_row.hpp"
#include "attn/cblas.hpp"
#include "attn/checks.hpp"

namespace attn::ch10 {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// One problem: h heads of contiguous (n, d) matrices.
struct Problem {
  const float *Q, *K, *V, *O, *dO, *lse;
  float* D;                  // (h, n_q): rowsum(dO ∘ O), written by prepare_head()
  float *Kt, *Vt;            // (h, d_k, n_kv) and (h, d_v, n_kv): Kᵀ and Vᵀ by prepare_head(), only without keys
  ch05::PackedKeys* keys;    // K packed for chapter 05's score kernel; keys->used() false: S from Kt by sgemm
  ch05::PackedKeys* values;  // V packed the same way, for dP = dO Vᵀ (used exactly when keys are)
  float *dQ, *dQ_lanes, *dK, *dV;  // dQ_lanes: (lanes − 1, h, n_q, d_k), the other lanes' dQ
  std::size_t h, n_q, n_kv, d_k, d_v;
  bool causal;
};

int i(std::size_t v) { return static_cast<int>(v); }

/// at (cols, rows) ← aᵀ for a (rows, cols), a block of 16 rows at a time: the rows being read stay in cache
/// while every column of theirs is written.
void transpose(const float* a, std::size_t rows, std::size_t cols, float* at) {
  constexpr std::size_t kBlock = 16;
  for (std::size_t r0 = 0; r0 < rows; r0 += kBlock) {
    const std::size_t r1 = std::min(rows, r0 + kBlock);
    for (std::size_t c = 0; c < cols; ++c)
      for (std::size_t r = r0; r < r1; ++r) at[c * rows + r] = a[r * cols + c];
  }
}

/// Before the tiles, one head's share of the passes over whole matrices: D = rowsum(dO ∘ O) for its rows, its
/// Kᵀ and Vᵀ (without the micro-kernels), and its dQ, dK, dV and lanes' dQ set to zero. Done head by head on every
/// thread, where a single thread would leave the other idle for some percent of the backward.
void prepare_head(const Problem& p, const BackwardConfig& cfg, std::size_t head) {
  for (std::size_t r = 0; r < p.n_q; ++r) {
    const float* o = p.O + (head * p.n_q + r) * p.d_v;
    const float* g = p.dO + (head * p.n_q + r) * p.d_v;
    float sum = 0.0f;
    for (std::size_t c = 0; c < p.d_v; ++c) sum += g[c] * o[c];
    p.D[head * p.n_q + r] = sum;
  }
  if (!p.keys->used()) {
    transpose(p.K + head * p.n_kv * p.d_k, p.n_kv, p.d_k, p.Kt + head * p.d_k * p.n_kv);
    transpose(p.V + head * p.n_kv * p.d_v, p.n_kv, p.d_v, p.Vt + head * p.d_v * p.n_kv);
  }
  std::fill_n(p.dQ + head * p.n_q * p.d_k, p.n_q * p.d_k, 0.0f);
  std::fill_n(p.dK + head * p.n_kv * p.d_k, p.n_kv * p.d_k, 0.0f);
  std::fill_n(p.dV + head * p.n_kv * p.d_v, p.n_kv * p.d_v, 0.0f);
  for (std::size_t lane = 1; lane < cfg.lanes; ++lane)
    std::fill_n(p.dQ_lanes + ((lane - 1) * p.h + head) * p.n_q * p.d_k, p.n_q * p.d_k, 0.0f);
}

/// After the tiles: one head's lanes' dQs added into dQ in lane order, the same additions whatever the threads.
void sum_lanes(const Problem& p, const BackwardConfig& cfg, std::size_t head) {
  const std::size_t size = p.n_q * p.d_k;
  float* dQ = p.dQ + head * size;
  for (std::size_t lane = 1; lane < cfg.lanes; ++lane) {
    const float* extra = p.dQ_lanes + ((lane - 1) * p.h + head) * size;
    for (std::size_t e = 0; e < size; ++e) dQ[e] += extra[e];
  }
}

/// work(0) … work(count − 1), each once, on \p threads threads taking the next from one counter.
void parallel_for(std::size_t threads, std::size_t count, const std::function<void(std::size_t)>& work) {
  std::atomic<std::size_t> next{0};
  run_on_threads(threads, [&] {
    for (std::size_t i = next++; i < count; i = next++) work(i);
  });
}

/// What one thread owns: the P tile and the dP tile (which becomes dS).
struct Scratch {
  std::vector<float> P;   // (B_r, B_c)
  std::vector<float> dS;  // (B_r, B_c)
};

// [fast_tile]
/// One tile: query rows [r0, r0 + rows) against the key block at c0 (cols keys) of one head.
void backward_tile(const Problem& p, const BackwardConfig& cfg, std::size_t head, std::size_t r0, std::size_t rows,
                   std::size_t c0, std::size_t cols, float* dQ, Scratch& w) {
  const std::size_t ld = cfg.B_c, offset = p.n_kv - p.n_q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(p.d_k, 1)));
  const float* Q_i = p.Q + (head * p.n_q + r0) * p.d_k;    // (rows, d_k)
  const float* dO_i = p.dO + (head * p.n_q + r0) * p.d_v;  // (rows, d_v)
  const float* K_j = p.K + (head * p.n_kv + c0) * p.d_k;   // (cols, d_k)
  float* dK_j = p.dK + (head * p.n_kv + c0) * p.d_k;       // (cols, d_k), owned by this lane
  float* dV_j = p.dV + (head * p.n_kv + c0) * p.d_v;       // (cols, d_v), owned by this lane
  float* dQ_i = dQ + (head * p.n_q + r0) * p.d_k;          // (rows, d_k), this lane's dQ
  const float* lse = p.lse + head * p.n_q + r0;
  const float* D = p.D + head * p.n_q + r0;
  // P = exp(scale · Q_i K_jᵀ − lse), rows × cols, leading dimension B_c; S by the forward's own kernel (point 3)
  const std::size_t width = ch05::key_panel_width(), panels = width > 0 ? (cols + width - 1) / width : 0;
  if (p.keys->used()) {
    ch05::scores_tile(Q_i, rows, p.d_k, p.d_k, p.keys->head(head) + (c0 / width) * p.d_k * width, panels, scale,
                      w.P.data(), ld);
  } else {
    const float* Kt_j = p.Kt + head * p.d_k * p.n_kv + c0;  // (d_k, cols), leading dimension n_kv
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(rows), i(cols), i(p.d_k), scale, Q_i, i(p.d_k), Kt_j,
                i(p.n_kv), 0.0f, w.P.data(), i(ld));
  }
  for (std::size_t r = 0; r < rows; ++r) {
    float* s = w.P.data() + r * ld;
    const std::size_t horizon = r0 + r + offset + 1;  // causal: row r sees keys [0, horizon)
    std::size_t visible = !p.causal ? cols : horizon <= c0 ? 0 : std::min(cols, horizon - c0);
    if (lse[r] == kMinusInf) visible = 0;  // the row saw no key in the forward: P = 0
    // A probability is at most 1: exp_shift_sum() takes a score above lse (lse rounded below a huge score, or not the
    // forward's) as lse, so its P is exp(0) = 1, not infinite (flash_backward's rule).
    ch05::exp_shift_sum(s, visible, lse[r]);
    std::fill(s + visible, s + cols, 0.0f);
  }
  // dV_j += Pᵀ dO_i  (cols, d_v)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(cols), i(p.d_v), i(rows), 1.0f, w.P.data(), i(ld), dO_i,
              i(p.d_v), 1.0f, dV_j, i(p.d_v));
  // dP = dO_i V_jᵀ  (rows, cols), then dS = P ∘ (dP − D) in place. dP has the shape of S (a row of dO against
  // every key's row of V), so the score kernel computes it from V packed as K is (point 3), scale 1.
  if (p.values->used()) {
    ch05::scores_tile(dO_i, rows, p.d_v, p.d_v, p.values->head(head) + (c0 / width) * p.d_v * width, panels, 1.0f,
                      w.dS.data(), ld);
  } else {
    const float* Vt_j = p.Vt + head * p.d_v * p.n_kv + c0;  // (d_v, cols), leading dimension n_kv
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(rows), i(cols), i(p.d_v), 1.0f, dO_i, i(p.d_v), Vt_j,
                i(p.n_kv), 0.0f, w.dS.data(), i(ld));
  }
  for (std::size_t r = 0; r < rows; ++r)
    detail::softmax_grad_row(w.P.data() + r * ld, w.dS.data() + r * ld, cols, D[r], scale);  // dS holds scale · dS
  // dQ_i += scale · dS K_j  (rows, d_k): the shape of O += P V, so chapter 05's P·V kernel where it runs
  if (p.keys->used())
    ch05::accumulate_pv(w.dS.data(), rows, cols, ld, K_j, p.d_k, p.d_k, dQ_i, p.d_k);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(rows), i(p.d_k), i(cols), 1.0f, w.dS.data(), i(ld), K_j,
                i(p.d_k), 1.0f, dQ_i, i(p.d_k));
  // dK_j += scale · dSᵀ Q_i  (cols, d_k)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i(cols), i(p.d_k), i(rows), 1.0f, w.dS.data(), i(ld), Q_i,
              i(p.d_k), 1.0f, dK_j, i(p.d_k));
}
// [fast_tile]

// [fast_lane]
/// One work item: every key block of lane \p lane of head \p head, each against the query blocks that see it.
void backward_lane(const Problem& p, const BackwardConfig& cfg, std::size_t head, std::size_t lane, Scratch& w) {
  const std::size_t offset = p.n_kv - p.n_q, T_c = (p.n_kv + cfg.B_c - 1) / cfg.B_c;
  float* dQ = lane == 0 ? p.dQ : p.dQ_lanes + (lane - 1) * p.h * p.n_q * p.d_k;
  for (std::size_t j = lane; j < T_c; j += cfg.lanes) {
    const std::size_t c0 = j * cfg.B_c, cols = std::min(cfg.B_c, p.n_kv - c0);
    // Causal: query i sees key c0 only when i + offset ≥ c0; earlier query blocks are never visited.
    const std::size_t first_row = p.causal && c0 > offset ? c0 - offset : 0;
    for (std::size_t r0 = first_row / cfg.B_r * cfg.B_r; r0 < p.n_q; r0 += cfg.B_r) {
      const std::size_t rows = std::min(cfg.B_r, p.n_q - r0);
      // Causal: the block's last row sees keys up to r0 + rows − 1 + offset; the tile is cut there.
      const std::size_t seen = p.causal ? std::min(cols, r0 + rows + offset - c0) : cols;
      backward_tile(p, cfg, head, r0, rows, c0, seen, dQ, w);
    }
  }
}
// [fast_lane]

// [fast_threads]
void run(const Problem& p, const BackwardConfig& cfg) {
  const std::size_t threads = static_cast<std::size_t>(cfg.threads);
  const SingleThreadedBlas blas;  // our threads are the parallelism; OpenBLAS must not add its own on top
  parallel_for(threads, p.h, [&](std::size_t head) { prepare_head(p, cfg, head); });
  // Every thread's tiles, allocated here rather than inside the threads: the memory held does not depend on
  // when each thread starts.
  std::vector<Scratch> scratch(threads,
                               Scratch{std::vector<float>(cfg.B_r * cfg.B_c), std::vector<float>(cfg.B_r * cfg.B_c)});
  std::atomic<std::size_t> slot{0}, next{0};
  const std::size_t items = p.h * cfg.lanes;
  run_on_threads(threads, [&] {
    Scratch& w = scratch[slot++];  // one per thread
    for (std::size_t t = next++; t < items; t = next++) backward_lane(p, cfg, t / cfg.lanes, t % cfg.lanes, w);
  });
  parallel_for(threads, p.h, [&](std::size_t head) { sum_lanes(p, cfg, head); });
}
// [fast_threads]

}  // namespace

HeadsGrads flash_backward_fast(const Tensor3& Q, const Tensor3& K, const Tensor3& V, const Tensor3& O,
                               const Matrix& lse, const Tensor3& dO, bool causal, const BackwardConfig& config) {
  constexpr const char* where = "flash_backward_fast";
  const std::size_t h = Q.shape(0), n_q = Q.shape(1), n_kv = K.shape(1), d_k = Q.shape(2), d_v = V.shape(2);
  require(K.shape(0) == h && V.shape(0) == h && K.shape(2) == d_k && V.shape(1) == n_kv && O.shape(0) == h &&
              O.shape(1) == n_q && O.shape(2) == d_v && dO.shape() == O.shape() && lse.shape(0) == h &&
              lse.shape(1) == n_q,
          fmt::format("{}: Q is {}, K is {}, V is {}, O is {}, lse is {} and dO is {}; they need the same heads, Q and "
                      "K the same d_k, V one row per key, O and dO one row per query and V's width, lse (h, n_q)",
                      where, shape_str(Q), shape_str(K), shape_str(V), shape_str(O), shape_str(lse), shape_str(dO)));
  require(config.B_r > 0 && config.B_c > 0 && config.lanes > 0 && config.threads > 0,
          fmt::format("{}: B_r = {}, B_c = {}, lanes = {}, threads = {}; all must be positive", where, config.B_r,
                      config.B_c, config.lanes, config.threads));
  require(!causal || n_q <= n_kv,
          fmt::format("{}: causal with {} queries but only {} keys; n_q <= n_kv", where, n_q, n_kv));
  require_attention_inputs(where, Q, K, V);  // finite, and no score can overflow
  // dP = dO Vᵀ and D = rowsum(dO ∘ O) are sums of d_v products: the same policy, or ∞ − ∞ = NaN in dS.
  require_bounded_products(where, "dO", dO.data(), dO.size(), "V", V.data(), V.size(), d_v);
  require_bounded_products(where, "dO", dO.data(), dO.size(), "O", O.data(), O.size(), d_v);
  require_finite(where, "lse", lse.data(), lse.size(), /*allow_minus_inf=*/true);  // -inf: a row that saw no key

  // Tiles larger than the sequence and lanes beyond the key blocks would only hold memory: one tile covers
  // the whole sequence either way, and a lane with no key block adds exact zeros to dQ. So the same bits.
  BackwardConfig cfg = config;
  cfg.B_r = std::min(cfg.B_r, std::max<std::size_t>(n_q, 1));
  // B_c only down to whole key panels: the packed score kernel (bit for bit the forward's) needs them.
  const std::size_t panel = std::max<std::size_t>(ch05::key_panel_width(), 1);
  cfg.B_c = std::min(cfg.B_c, std::max<std::size_t>((n_kv + panel - 1) / panel * panel, 1));
  cfg.lanes = std::min(cfg.lanes, std::max<std::size_t>(n_kv / cfg.B_c + (n_kv % cfg.B_c != 0 ? 1 : 0), 1));
  // Every buffer, before any is allocated: the gradients, D, Kᵀ and Vᵀ (or K and V packed: as large, give or take a
  // panel of padding, which PackedKeys checks itself), the other lanes' dQ, the tiles.
  const std::size_t floats =
      checked_sum(where, {checked_product(where, {h, n_q, d_k}), checked_product(where, {2, h, n_kv, d_k}),
                          checked_product(where, {2, h, n_kv, d_v}), checked_product(where, {h, n_q}),
                          checked_product(where, {cfg.lanes - 1, h, n_q, d_k}),
                          checked_product(where, {static_cast<std::size_t>(cfg.threads), 2, cfg.B_r, cfg.B_c})});
  checked_allocation("flash_backward_fast: dQ, dK, dV, D, Kᵀ, Vᵀ, the lanes' dQ and the tiles",
                     {floats, sizeof(float)});

  // Not initialised here: prepare_head() zeroes them head by head on every thread (see run()).
  HeadsGrads g{Tensor3::from_shape({h, n_q, d_k}), Tensor3::from_shape({h, n_kv, d_k}),
               Tensor3::from_shape({h, n_kv, d_v})};
  std::unique_ptr<float[]> D(new float[h * n_q]);  // (h, n_q)
  // Keys packed as the fast forward packs them, when it runs its micro-kernels on tiles of whole panels too.
  const bool packed = ch05::key_panel_width() > 0 && cfg.B_c % ch05::key_panel_width() == 0;
  ch05::PackedKeys keys(K.data(), h, n_kv, d_k, packed), values(V.data(), h, n_kv, d_v, packed);
  std::unique_ptr<float[]> Kt(new float[packed ? 0 : h * d_k * n_kv]), Vt(new float[packed ? 0 : h * d_v * n_kv]);
  std::unique_ptr<float[]> dQ_lanes(new float[(cfg.lanes - 1) * h * n_q * d_k]);  // (lanes − 1, h, n_q, d_k)
  if (h * n_q * n_kv > 0)
    run({Q.data(), K.data(), V.data(), O.data(),    dO.data(),      lse.data(),  D.get(),     Kt.get(),
         Vt.get(), &keys,    &values,  g.dQ.data(), dQ_lanes.get(), g.dK.data(), g.dV.data(), h,
         n_q,      n_kv,     d_k,      d_v,         causal},
        cfg);
  else
    for (Tensor3* t : {&g.dQ, &g.dK, &g.dV}) t->fill(0.0f);  // no pair of query and key: zero gradients
  return g;
}

}  // namespace attn::ch10
