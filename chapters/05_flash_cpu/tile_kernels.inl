// The tile micro-kernels, written once for any instruction set `Isa` (see tile_kernels.cpp, which includes
// this file once per instruction set, compiled for it, inside a namespace that defines Isa). No include
// guard on purpose. Book page: book/05_flash_cpu.md, "A fast kernel".
//
// Both kernels have the classic GEMM micro-kernel shape: a block of the result (R rows × a few vectors) lives
// in registers for the whole reduction; each step loads a few vectors and broadcasts one value per row, so
// every value loaded from memory feeds several FMAs.

constexpr int kLineFloats = 16;  // floats per 64-byte cache line: one prefetch each

/// Asks for the cache line \p ahead floats past \p p. The address may lie past the array (a prefetch never
/// faults), so it is computed as an integer: a pointer past an array's end would be undefined behaviour.
inline void prefetch_ahead(const float* p, std::size_t ahead) {
  Isa::prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + ahead * sizeof(float)));
}

// [scores_kernel]
// S[r, 0..2W) = scale · Σ_k Q[r, k] · panel[k, 0..2W), for R rows: 2R accumulators; per k, two loads of the
// panel (contiguous, as pack_keys laid it out) and R broadcasts of one query value. With \p m, the row maxima
// too, while the block is still in registers: m[r] ← max(m[r], S[r, c]) over the columns c < seen[r] (the
// keys row r may see in this panel, 0 to 2W): the softmax then needs no pass of its own to find them.
template <int R>
void scores_block(const float* Q, std::size_t ld_q, std::size_t d_k, const float* panel, float scale, float* S,
                  std::size_t ld_s, const std::size_t* seen, float* m) {
  using V = Isa::V;
  V acc0[R], acc1[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = Isa::zero();
  for (std::size_t k = 0; k < d_k; ++k, panel += 2 * Isa::W) {
    const V b0 = Isa::load(panel), b1 = Isa::load(panel + Isa::W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const V a = Isa::broadcast(Q[static_cast<std::size_t>(r) * ld_q + k]);
      acc0[r] = Isa::fma(a, b0, acc0[r]);
      acc1[r] = Isa::fma(a, b1, acc1[r]);
    }
  }
  const V s = Isa::broadcast(scale);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* S_r = S + static_cast<std::size_t>(r) * ld_s;
    const V s0 = Isa::mul(acc0[r], s), s1 = Isa::mul(acc1[r], s);
    Isa::store(S_r, s0);
    Isa::store(S_r + Isa::W, s1);
    if (m == nullptr) continue;
    if (seen[r] == 2 * Isa::W)  // the whole panel visible: the common case, in registers
      m[r] = std::max(m[r], Isa::reduce_max(Isa::max(s0, s1)));
    else  // the panel a causal cut or the last key crosses: the few visible columns, from S
      for (std::size_t c = 0; c < seen[r]; ++c) m[r] = std::max(m[r], S_r[c]);
  }
}
// [scores_kernel]

/// Runs scores_block<R> with R = rows (1 ≤ rows ≤ Isa::MR), the template argument picked at run time.
template <int R = Isa::MR>
void scores_rows(std::size_t rows, const float* Q, std::size_t ld_q, std::size_t d_k, const float* panel, float scale,
                 float* S, std::size_t ld_s, const std::size_t* seen, float* m) {
  if constexpr (R > 0) {
    if (rows == R) return scores_block<R>(Q, ld_q, d_k, panel, scale, S, ld_s, seen, m);
    scores_rows<R - 1>(rows, Q, ld_q, d_k, panel, scale, S, ld_s, seen, m);
  }
}

void scores_tile(const float* Q, std::size_t rows, std::size_t ld_q, std::size_t d_k, const float* K_panels,
                 std::size_t panels, float scale, float* S, std::size_t ld_s, const std::size_t* visible, float* m) {
  if (rows == 0) return;  // no row blocks to share the prefetches among
  const std::size_t width = 2 * Isa::W;
  std::size_t seen[Isa::MR] = {};  // per row of a block: its visible keys within panel p
  // The next panel comes from L3 or memory (a head's packed keys outgrow L2): each row block asks for its share
  // of that panel's cache lines, so that they are in L1 when its first block starts. Past the last panel the
  // addresses lead nowhere, which a prefetch allows (it never faults).
  const std::size_t panel_lines = d_k * width / kLineFloats, blocks = (rows + Isa::MR - 1) / Isa::MR,
                    share = (panel_lines + blocks - 1) / blocks;
  // A panel (d_k, 2W) stays in L1 while every row block uses it; the blocks are of nearly equal height, as in
  // accumulate_pv.
  for (std::size_t p = 0; p < panels; ++p)
    for (std::size_t b = 0, r = 0; b < blocks; ++b) {
      const std::size_t block = (rows - r + (blocks - b) - 1) / (blocks - b);
      const std::size_t next = ((p + 1) * panel_lines + b * share) * kLineFloats;
      for (std::size_t l = 0; l < share; ++l) prefetch_ahead(K_panels, next + l * kLineFloats);
      for (std::size_t i = 0; m != nullptr && i < block; ++i)
        seen[i] = visible[r + i] <= p * width ? 0 : std::min(width, visible[r + i] - p * width);
      scores_rows(block, Q + r * ld_q, ld_q, d_k, K_panels + p * d_k * width, scale, S + r * ld_s + p * width, ld_s,
                  seen, m == nullptr ? nullptr : m + r);
      r += block;
    }
}

// [pv_kernel]
// O[r, 0..NVO·W) += Σ_j P[r, j] · V[j, 0..NVO·W), for R rows: R·NVO accumulators; per key j, NVO loads of
// V's row (contiguous in V as it is: no packing) and R broadcasts of one weight.
template <int R>
void pv_block(const float* P, std::size_t ld_p, std::size_t cols, const float* V, std::size_t ld_v, float* O,
              std::size_t ld_o) {
  using Vec = Isa::V;
  constexpr int N = Isa::NVO;
  Vec acc[R][N];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) acc[r][c] = Isa::load(O + static_cast<std::size_t>(r) * ld_o + c * Isa::W);
  for (std::size_t j = 0; j < cols; ++j, V += ld_v) {
    // V's rows stream from L2 (or from L3 for the first block of rows): the row 8 keys ahead is asked for now.
    Vec v[N];
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) v[c] = Isa::load(V + c * Isa::W);
#pragma GCC unroll 8
    for (int c = 0; c < N * Isa::W; c += kLineFloats) prefetch_ahead(V, 8 * ld_v + static_cast<std::size_t>(c));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec p = Isa::broadcast(P[static_cast<std::size_t>(r) * ld_p + j]);
#pragma GCC unroll 8
      for (int c = 0; c < N; ++c) acc[r][c] = Isa::fma(p, v[c], acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) Isa::store(O + static_cast<std::size_t>(r) * ld_o + c * Isa::W, acc[r][c]);
}
// [pv_kernel]

template <int R = Isa::MRO>
void pv_rows(std::size_t rows, const float* P, std::size_t ld_p, std::size_t cols, const float* V, std::size_t ld_v,
             float* O, std::size_t ld_o) {
  if constexpr (R > 0) {
    if (rows == R) return pv_block<R>(P, ld_p, cols, V, ld_v, O, ld_o);
    pv_rows<R - 1>(rows, P, ld_p, cols, V, ld_v, O, ld_o);
  }
}

void accumulate_pv(const float* P, std::size_t rows, std::size_t cols, std::size_t ld_p, const float* V,
                   std::size_t ld_v, std::size_t d_v, float* O, std::size_t ld_o) {
  const std::size_t chunk = Isa::NVO * Isa::W, full = d_v - d_v % chunk;
  // The rows in ⌈rows / MRO⌉ blocks of nearly equal height (128 = 18 × 6 + 4 × 5, not 21 × 6 + 2): a block of
  // two rows keeps 8 accumulators and loads 4 V vectors for 8 FMAs, at a third of the speed of the full blocks.
  const std::size_t blocks = (rows + Isa::MRO - 1) / Isa::MRO;
  for (std::size_t c0 = 0; c0 < full; c0 += chunk)
    for (std::size_t b = 0, r = 0; b < blocks; ++b) {
      const std::size_t height = (rows - r + (blocks - b) - 1) / (blocks - b);  // the rows left, shared evenly
      pv_rows(height, P + r * ld_p, ld_p, cols, V + c0, ld_v, O + r * ld_o + c0, ld_o);
      r += height;
    }
  for (std::size_t r = 0; r < rows; ++r)  // the columns of O past the last full chunk, plainly
    for (std::size_t j = 0; j < cols; ++j)
      for (std::size_t c = full; c < d_v; ++c) O[r * ld_o + c] += P[r * ld_p + j] * V[j * ld_v + c];
}
