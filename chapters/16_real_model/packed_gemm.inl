// The packed product's micro-kernel, written once for any instruction set `Isa` (see packed_gemm.cpp, which
// includes this file once per instruction set, compiled for it, inside a namespace that defines Isa). No include
// guard on purpose.
//
// Isa gives the vector type V of W floats, the tile's shape (MR rows × NV vectors of columns) and the operations
// zero/load/broadcast/fma/store/prefetch. The weights lie in panels of 16 output columns, (out/16, in, 16)
// (fast_minilm.cpp's pack_linear()): a panel is 16 / W vectors wide, and a tile of NV vectors spans NV·W / 16
// panels.

constexpr std::size_t kPanel = 16;                            // output columns per panel
constexpr int kPerPanel = static_cast<int>(kPanel) / Isa::W;  // vectors per panel (1, 2 or 4)
constexpr int kTilePanels = Isa::NV / kPerPanel;              // panels per tile (1 or 2)
constexpr std::size_t kAhead = 24;  // prefetch distance in rows of a panel (64 bytes each): ~1.5 KiB ahead

/// Asks for the cache line \p ahead floats past \p p. The address may lie past the array (a prefetch never
/// faults), so it is computed as an integer: a pointer past an array's end would be undefined behaviour.
inline void prefetch_ahead(const float* p, std::size_t ahead) {
  Isa::prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + ahead * sizeof(float)));
}

// [packed_kernel]
// Y[r, 0..V·W) = b + Σ_k X[r, k] · panels[k, 0..V·W) for R rows and V vectors of columns (V ≤ NV: the last
// tile may hold fewer panels): R·V accumulators, each starting at the bias, so the bias costs nothing; per input
// k, V loads of weights (a panel's row of 16 is contiguous) and R broadcasts of x(r, k), for R·V multiply-adds.
template <int R, int V>
void rows_times_panels(const float* X, std::size_t in, const float* P, const float* bias, float* Y, std::size_t out) {
  typename Isa::V acc[R][V];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
    const typename Isa::V b = Isa::load(bias + v * Isa::W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][v] = b;
  }
  // Vector v of the tile: panel v / kPerPanel, lanes (v % kPerPanel)·W of its rows of 16.
  const auto at = [&](int v) { return P + (v / kPerPanel) * in * kPanel + (v % kPerPanel) * Isa::W; };
  for (std::size_t k = 0; k < in; ++k) {
    // Each weight is read once per call (at batch 1 from L3 or memory: the layers' 42 MB fit in no cache):
    // asked for kAhead rows ahead, a line per panel, so that its latency hides behind the multiply-adds.
#pragma GCC unroll 2
    for (int p = 0; p < (V + kPerPanel - 1) / kPerPanel; ++p)
      prefetch_ahead(P + p * in * kPanel + k * kPanel, kAhead * kPanel);
    typename Isa::V w[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) w[v] = Isa::load(at(v) + k * kPanel);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const typename Isa::V x = Isa::broadcast(X[static_cast<std::size_t>(r) * in + k]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[r][v] = Isa::fma(x, w[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) Isa::store(Y + static_cast<std::size_t>(r) * out + v * Isa::W, acc[r][v]);
}
// [packed_kernel]

/// rows_times_panels<R, V> with R = rows (1 ≤ rows ≤ Isa::MR), the template argument picked at run time.
template <int V, int R = Isa::MR>
void rows_block(std::size_t rows, const float* X, std::size_t in, const float* P, const float* bias, float* Y,
                std::size_t out) {
  if constexpr (R > 0) {
    if (rows == static_cast<std::size_t>(R)) return rows_times_panels<R, V>(X, in, P, bias, Y, out);
    rows_block<V, R - 1>(rows, X, in, P, bias, Y, out);
  }
}

// [packed_loops]
/// Y (n, out) = X (n, in) · W + b, W as panels (out/16, in, 16). Tiles of panels outside, blocks of up to MR rows
/// inside: a tile's weights (kTilePanels · 64 · in bytes: 96 KiB for two panels of 1536 inputs) come from memory
/// for the first block of rows and from cache for the others, so the weights are streamed once per call whatever
/// n is.
void packed_gemm(const float* X, std::size_t n, std::size_t in, const float* panels, std::size_t out, const float* bias,
                 float* Y) {
  const std::size_t panel_count = out / kPanel, mr = Isa::MR;
  // Rows in blocks of at most MR, as even as possible: 13 rows with MR = 12 make blocks of 7 and 6, not 12 + 1.
  const std::size_t blocks = (n + mr - 1) / mr, block = (n + blocks - 1) / blocks;
  for (std::size_t p = 0; p < panel_count; p += kTilePanels) {
    const float* P = panels + p * in * kPanel;
    const bool whole = panel_count - p >= static_cast<std::size_t>(kTilePanels);  // else one panel is left
    for (std::size_t r = 0; r < n; r += block) {
      const std::size_t rows = n - r < block ? n - r : block;
      const float *x = X + r * in, *b = bias + p * kPanel;
      float* y = Y + r * out + p * kPanel;
      if (whole)
        rows_block<Isa::NV>(rows, x, in, P, b, y, out);
      else
        rows_block<kPerPanel>(rows, x, in, P, b, y, out);
    }
  }
}
// [packed_loops]
