// Chapter 16's product for weights laid out in panels (fast_minilm.cpp's pack_linear()), for AVX-512: compiled with
// -mavx512f and without the precompiled header, like gelu_avx512.cpp, and called only where the CPU has AVX-512.
#include <immintrin.h>

#include <cstddef>

namespace attn::ch16 {

namespace {

constexpr std::size_t kPrefetch = 24;
constexpr std::size_t kMaxRows = 12;  // 2 × 12 accumulators, two weight registers and a broadcast: 27 of 32 zmm  //
                                      // rows of 16 weights (64 bytes each) ahead: past the end is harmless

// R rows (R ≤ kMaxRows) of X times two panels (32 output columns): 2·R accumulators, each starting at the bias, so the
// bias costs nothing; per input k, two loads of 16 weights and 2·R fused multiply-adds against x(r, k) broadcast.
template <int R>
void rows_times_two_panels(const float* X, std::size_t in, const float* P0, const float* P1, const float* b0, float* Y,
                           std::size_t out) {
  __m512 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = _mm512_loadu_ps(b0), a1[r] = _mm512_loadu_ps(b0 + 16);
  for (std::size_t k = 0; k < in; ++k) {
    // The weights are read once per call, from L3 at batch 1 (the layers' 42 MB do not fit in L2): asked for
    // kPrefetch rows ahead, so that their latency hides behind the multiply-adds.
    _mm_prefetch(reinterpret_cast<const char*>(P0 + (k + kPrefetch) * 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(P1 + (k + kPrefetch) * 16), _MM_HINT_T0);
    const __m512 w0 = _mm512_loadu_ps(P0 + k * 16), w1 = _mm512_loadu_ps(P1 + k * 16);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(X[r * in + k]);
      a0[r] = _mm512_fmadd_ps(x, w0, a0[r]);
      a1[r] = _mm512_fmadd_ps(x, w1, a1[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(Y + r * out, a0[r]), _mm512_storeu_ps(Y + r * out + 16, a1[r]);
}

// The same for one panel (16 columns): the last one when out / 16 is odd.
template <int R>
void rows_times_one_panel(const float* X, std::size_t in, const float* P0, const float* b0, float* Y, std::size_t out) {
  __m512 a0[R];
  for (int r = 0; r < R; ++r) a0[r] = _mm512_loadu_ps(b0);
  for (std::size_t k = 0; k < in; ++k) {
    const __m512 w0 = _mm512_loadu_ps(P0 + k * 16);
    for (int r = 0; r < R; ++r) a0[r] = _mm512_fmadd_ps(_mm512_set1_ps(X[r * in + k]), w0, a0[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(Y + r * out, a0[r]);
}

using TwoPanels = void (*)(const float*, std::size_t, const float*, const float*, const float*, float*, std::size_t);
using OnePanel = void (*)(const float*, std::size_t, const float*, const float*, float*, std::size_t);
constexpr TwoPanels kTwo[13] = {nullptr,
                                rows_times_two_panels<1>,
                                rows_times_two_panels<2>,
                                rows_times_two_panels<3>,
                                rows_times_two_panels<4>,
                                rows_times_two_panels<5>,
                                rows_times_two_panels<6>,
                                rows_times_two_panels<7>,
                                rows_times_two_panels<8>,
                                rows_times_two_panels<9>,
                                rows_times_two_panels<10>,
                                rows_times_two_panels<11>,
                                rows_times_two_panels<12>};
constexpr OnePanel kOne[13] = {nullptr,
                               rows_times_one_panel<1>,
                               rows_times_one_panel<2>,
                               rows_times_one_panel<3>,
                               rows_times_one_panel<4>,
                               rows_times_one_panel<5>,
                               rows_times_one_panel<6>,
                               rows_times_one_panel<7>,
                               rows_times_one_panel<8>,
                               rows_times_one_panel<9>,
                               rows_times_one_panel<10>,
                               rows_times_one_panel<11>,
                               rows_times_one_panel<12>};

}  // namespace

// Y (n, out) = X (n, in) · W + b, W as panels (out/16, in, 16). Panel pairs outside, blocks of up to kMaxRows rows
// inside: a pair's weights (128·in bytes: 192 KiB for 1536 inputs) come from memory for the first block of rows
// and from cache for the others, so the weights are streamed once per call whatever n is.
void packed_gemm_avx512(const float* X, std::size_t n, std::size_t in, const float* panels, std::size_t out,
                        const float* bias, float* Y) {
  const std::size_t panel_count = out / 16;
  // Rows in blocks of at most kMaxRows, as even as possible: 12 rows make one block of 12, not 8 + 4.
  const std::size_t blocks = (n + kMaxRows - 1) / kMaxRows, block = (n + blocks - 1) / blocks;
  for (std::size_t p = 0; p < panel_count; p += 2) {
    const float* P0 = panels + p * in * 16;
    for (std::size_t r = 0; r < n; r += block) {
      const std::size_t rows = n - r < block ? n - r : block;
      if (p + 1 < panel_count)
        kTwo[rows](X + r * in, in, P0, P0 + in * 16, bias + p * 16, Y + r * out + p * 16, out);
      else
        kOne[rows](X + r * in, in, P0, bias + p * 16, Y + r * out + p * 16, out);
    }
  }
}

}  // namespace attn::ch16
