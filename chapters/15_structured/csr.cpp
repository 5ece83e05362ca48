// Chapter 15's sparse graph attention over CSR. Per edge the kernel reads one key and one value row (2·d_k
// floats per head) from wherever the sender lives, and does 4·d_k FLOPs with them. So the layout serves the
// gathers: the heads of a node sit side by side in one row (one cache line holds a 16-float head), the sender
// ids are 4 bytes, and each node's senders are sorted. And the arithmetic must be cheap enough to hide behind
// them: with plain loops it was not (book/measure_15_structured.md, "It was the arithmetic after all"), hence
// the AVX-512 node kernel below for heads of 16.
#include "15_structured/csr.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <new>

#include <sys/mman.h>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/isa.hpp"
#include "attn/rng.hpp"

namespace attn::ch15 {

namespace {

constexpr std::size_t kMaxNodes = std::numeric_limits<std::uint32_t>::max();

/// Checks \p g and returns its largest in-degree (the scores a node needs).
std::size_t check_csr(const char* where, const Csr& g) {
  require(g.row_start.size() == g.n + 1 && g.row_start.front() == 0 && g.row_start.back() == g.cols.size(),
          fmt::format("{}: row_start has {} entries for n = {} (need n + 1, from 0 to E = {})", where,
                      g.row_start.size(), g.n, g.cols.size()));
  // The message is formatted only for the node or edge at fault: formatting one per edge would cost more than
  // the attention itself.
  std::size_t max_degree = 0;
  for (std::size_t i = 0; i < g.n; ++i) {
    if (g.row_start[i] > g.row_start[i + 1])
      throw std::invalid_argument(
          fmt::format("{}: row_start decreases at node {} ({} > {})", where, i, g.row_start[i], g.row_start[i + 1]));
    max_degree = std::max(max_degree, g.row_start[i + 1] - g.row_start[i]);
  }
  for (std::size_t e = 0; e < g.cols.size(); ++e)
    if (g.cols[e] >= g.n)
      throw std::invalid_argument(fmt::format("{}: edge {} names sender {}, but n = {}", where, e, g.cols[e], g.n));
  return max_degree;
}

}  // namespace

Csr csr_of(const Neighbours& in) {
  require(in.size() < kMaxNodes, fmt::format("csr_of: {} nodes do not fit 32-bit sender ids", in.size()));
  Csr g{in.size(), {0}, {}};
  for (std::size_t i = 0; i < in.size(); ++i) {
    for (std::size_t j : in[i]) {
      require(j < in.size(), fmt::format("csr_of: node {} hears node {}, but n = {}", i, j, in.size()));
      g.cols.push_back(static_cast<std::uint32_t>(j));
    }
    g.row_start.push_back(g.cols.size());
  }
  return g;
}

Csr random_csr(std::size_t n, std::size_t degree, std::uint64_t seed) {
  require(n < kMaxNodes, fmt::format("random_csr: n = {} does not fit 32-bit sender ids", n));
  // degree + 1 could wrap to 0 (degree = SIZE_MAX), and then nothing would be allocated for the ids written below.
  const std::size_t per_node = checked_sum("random_csr: degree + 1", {degree, 1});
  const std::size_t edges = checked_product("random_csr: n·(degree + 1)", {n, per_node});
  checked_allocation("random_csr: the sender ids, n·(degree + 1) × 4 bytes", {edges, sizeof(std::uint32_t)});
  checked_allocation("random_csr: row_start, (n + 1) × 8 bytes", {n + 1, sizeof(std::size_t)});
  Csr g{n, std::vector<std::size_t>(n + 1), std::vector<std::uint32_t>(edges)};
  Rng rng(seed);
  std::uniform_int_distribution<std::uint32_t> sender(0, n ? static_cast<std::uint32_t>(n - 1) : 0);
  for (std::size_t i = 0; i < n; ++i) {
    g.row_start[i] = i * (degree + 1);
    std::uint32_t* row = g.cols.data() + g.row_start[i];
    row[0] = static_cast<std::uint32_t>(i);  // the self-loop
    for (std::size_t e = 1; e <= degree; ++e) row[e] = sender(rng.engine());
    std::sort(row, row + degree + 1);
  }
  g.row_start[n] = edges;
  return g;
}

GatherRows::GatherRows(const Matrix& M, const char* name) : rows_(M.shape(0)), width_(M.shape(1)) {
  require_finite("GatherRows", name, M.data(), M.size());
  constexpr std::size_t kLine = 64 / sizeof(float), kHugePage = std::size_t{2} << 20;
  stride_ = (width_ + kLine - 1) / kLine * kLine;
  // Rows padded to whole lines: a narrow matrix grows (one column becomes 16), so the size is checked against
  // the memory available, not only for overflow.
  const std::size_t bytes = checked_allocation("GatherRows: rows × stride × 4 bytes", {rows_, stride_, sizeof(float)});
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  data_.reset(static_cast<float*>(std::aligned_alloc(kHugePage, rounded)));
  if (!data_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(data_.get(), rounded, MADV_HUGEPAGE);  // a hint: where huge pages are off, the table works as well
#endif
  // Each row's padding is zeroed: the table is then one array of rows_ × stride_ defined floats, which
  // csr_attention() scans whole for the course's overflow policy (zeros change no maximum).
  // Rows of width 0 hold nothing to copy or pad (2^63 of them were a loop of 2^63 empty copies: a hang).
  for (std::size_t j = 0; stride_ > 0 && j < rows_; ++j) {
    std::copy_n(M.data() + j * width_, width_, data_.get() + j * stride_);
    std::fill(data_.get() + j * stride_ + width_, data_.get() + (j + 1) * stride_, 0.0f);
  }
}

namespace {

/// How far ahead, in edges, the kernel asks the memory for a sender's rows. A random sender's row is a trip to
/// memory (~100 ns): asked for a few edges before it is needed, the trips overlap one another and the arithmetic
/// instead of following it. The edges are one stream across nodes, so the last edges of a node ask for the
/// first rows of the next. On the Intel machine of the measurements page, 16 and 32 were best of 4 … 32 (4: a fifth
/// slower, 8: a tenth).
constexpr std::size_t kAhead = 16;

/// Asks for \p width floats from \p row on without waiting for them, a cache line (16 floats) at a time, into
/// the L2 cache only (prefetcht1): a request for L1 holds one of its few line-fill buffers until the line
/// arrives, and 16 edges ahead there are more lines in flight than L1 has buffers (at 8 ahead, 15% faster there).
void prefetch(const float* row, std::size_t width) {
  for (std::size_t t = 0; t < width; t += 16) __builtin_prefetch(row + t, 0, 2);
}

/// q·k of one head: four partial sums, so that the additions do not wait on one another in a single chain (the
/// compiler may not reorder a float sum by itself).
float dot(const float* q, const float* k, std::size_t d_k) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::size_t t = 0;
  for (; t + 4 <= d_k; t += 4)
    for (std::size_t u = 0; u < 4; ++u) s[u] += q[t + u] * k[t + u];
  for (; t < d_k; ++t) s[0] += q[t] * k[t];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/// One node's attention over its senders, every head at once, in three passes over its edges: the scores of all
/// heads (one gather of the sender's key row, the heads side by side), the softmax per head (a node has few
/// senders, so a plain max-then-exp softmax beats the online one's rescaling per edge), then the weighted sum of
/// the value rows (one gather each).
/// \param q (heads·d_k) the node's query row.
/// \param senders (degree) the node's sender ids, followed by \p stream − degree more of the edge stream (the
///        next nodes' senders in this work item), whose rows are asked for early.
/// \param scores (degree·heads) scratch: the scores, then the softmax weights, edge-major.
/// \param o (heads·d_k) the node's output row, written.
void attend_node(const float* q, const GatherRows& K, const GatherRows& V, const std::uint32_t* senders,
                 std::size_t degree, std::size_t stream, std::size_t heads, float* scores, float* o) {
  const std::size_t width = K.width(), d_k = width / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::size_t>(d_k, 1)));  // d_k = 0: scores 0
  for (std::size_t e = 0; e < degree; ++e) {
    if (e + kAhead < stream) prefetch(K.row(senders[e + kAhead]), width);
    const float* k = K.row(senders[e]);
    for (std::size_t c = 0; c < heads; ++c) scores[e * heads + c] = dot(q + c * d_k, k + c * d_k, d_k) * scale;
  }
  for (std::size_t c = 0; c < heads; ++c) {
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    for (std::size_t e = 0; e < degree; ++e) m = std::max(m, scores[e * heads + c]);
    for (std::size_t e = 0; e < degree; ++e) l += scores[e * heads + c] = std::exp(scores[e * heads + c] - m);
    for (std::size_t e = 0; e < degree; ++e) scores[e * heads + c] /= l;
  }
  std::fill(o, o + width, 0.0f);
  for (std::size_t e = 0; e < degree; ++e) {
    if (e + kAhead < stream) prefetch(V.row(senders[e + kAhead]), width);
    const float* v = V.row(senders[e]);
    for (std::size_t c = 0; c < heads; ++c) {
      const float p = scores[e * heads + c];
      for (std::size_t t = 0; t < d_k; ++t) o[c * d_k + t] += p * v[c * d_k + t];
    }
  }
}

#if ATTN_X86_KERNELS
#define ATTN_CSR_AVX512 1
ATTN_BEGIN_AVX512
// The same node for heads of d_k = 16, in groups of four, with AVX-512: one head of a row is one 16-float
// register, so a key row's four heads are four loads and four products, and the softmax's exponentials run 16
// at a time. The plain loops above leave the arithmetic to the compiler: it keeps one head's sum in one
// register and calls std::exp once per score, and on a large graph that arithmetic, not the gathers, set the
// time (the measurements page has both).
namespace avx512 {

// e^x for x ≤ 0, 16 at a time: chapter 05's (exp_nonpositive, the one its exp_shift_sum runs).
#include "05_flash_cpu/exp_avx512.inl"

/// The sum of each 128-bit quarter of \p x: (4) sums, lane c of the result = Σ over the quarters of lane c.
__m128 sum_quarters(__m512 x) {
  x = _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(1, 0, 3, 2)));  // halves swapped
  x = _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(2, 3, 0, 1)));  // quarters swapped
  return _mm512_castps512_ps128(x);
}

/// The four dot products q_c·k_c of four 16-float heads (q: 4 registers, k: 64 floats, 64-byte aligned), as
/// (4) scores in one 128-bit register: each fold halves the partial sums per head and keeps the heads apart.
__m128 four_dots(const __m512 q[4], const float* k) {
  const __m512 p0 = _mm512_mul_ps(q[0], _mm512_load_ps(k)), p1 = _mm512_mul_ps(q[1], _mm512_load_ps(k + 16));
  const __m512 p2 = _mm512_mul_ps(q[2], _mm512_load_ps(k + 32)), p3 = _mm512_mul_ps(q[3], _mm512_load_ps(k + 48));
  const __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(p0, p1), _mm512_unpackhi_ps(p0, p1));  // p0 p1 p0 p1 per quarter
  const __m512 b = _mm512_add_ps(_mm512_unpacklo_ps(p2, p3), _mm512_unpackhi_ps(p2, p3));  // p2 p3 p2 p3
  return sum_quarters(_mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),      // p0 p1 p2 p3
                                    _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2))));
}

/// attend_node() for d_k = 16 and heads a multiple of 4. \p scores is group-major here: (heads/4, degree, 4),
/// so that each group's softmax runs over one contiguous array, four edges per register.
void attend_node_dk16(const float* q, const GatherRows& K, const GatherRows& V, const std::uint32_t* senders,
                      std::size_t degree, std::size_t stream, std::size_t heads, float* scores, float* o) {
  const std::size_t groups = heads / 4, per_group = degree * 4;
  const __m128 scale = _mm_set1_ps(0.25f);  // 1/√16
  for (std::size_t e = 0; e < degree; ++e) {
    if (e + kAhead < stream) prefetch(K.row(senders[e + kAhead]), K.width());
    const float* k = K.row(senders[e]);
    for (std::size_t g = 0; g < groups; ++g) {
      const __m512 q4[4] = {_mm512_loadu_ps(q + 64 * g), _mm512_loadu_ps(q + 64 * g + 16),
                            _mm512_loadu_ps(q + 64 * g + 32), _mm512_loadu_ps(q + 64 * g + 48)};
      _mm_storeu_ps(scores + g * per_group + 4 * e, _mm_mul_ps(four_dots(q4, k + 64 * g), scale));
    }
  }
  for (std::size_t g = 0; g < groups; ++g) {
    float* s = scores + g * per_group;  // (degree, 4)
    __m128 m = _mm_loadu_ps(s);
    for (std::size_t e = 1; e < degree; ++e) m = _mm_max_ps(m, _mm_loadu_ps(s + 4 * e));
    const __m512 m16 = _mm512_broadcast_f32x4(m);  // each head's max, four times: four edges per register
    __m512 sum = _mm512_setzero_ps();
    for (std::size_t j = 0; j < per_group; j += 16) {
      const __mmask16 lanes =
          per_group - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (per_group - j)) - 1);
      const __m512 p =
          _mm512_maskz_mov_ps(lanes, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, s + j), m16)));
      _mm512_mask_storeu_ps(s + j, lanes, p);
      sum = _mm512_add_ps(sum, p);
    }
    const __m128 inv_l = _mm_div_ps(_mm_set1_ps(1.0f), sum_quarters(sum));  // (4) one division per head
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (std::size_t e = 0; e < degree; ++e) {
      if (g == 0 && e + kAhead < stream) prefetch(V.row(senders[e + kAhead]), V.width());
      const float* v = V.row(senders[e]) + 64 * g;
      for (int c = 0; c < 4; ++c)
        acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(s[4 * e + c]), _mm512_load_ps(v + 16 * c), acc[c]);
    }
    alignas(16) float inv[4];
    _mm_store_ps(inv, inv_l);
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + 64 * g + 16 * c, _mm512_mul_ps(acc[c], _mm512_set1_ps(inv[c])));
  }
}

}  // namespace avx512
ATTN_END_ISA
#else
#define ATTN_CSR_AVX512 0
#endif

/// The node kernel for \p d_k and \p heads on this CPU: the AVX-512 one where it applies, else the plain one.
using NodeKernel = void (*)(const float*, const GatherRows&, const GatherRows&, const std::uint32_t*, std::size_t,
                            std::size_t, std::size_t, float*, float*);
NodeKernel node_kernel(std::size_t d_k, std::size_t heads) {
#if ATTN_CSR_AVX512
  if (d_k == 16 && heads % 4 == 0 && __builtin_cpu_supports("avx512f")) return avx512::attend_node_dk16;
#endif
  (void)d_k;
  (void)heads;
  return attend_node;
}

}  // namespace

void csr_attention_into(const Matrix& Q, const GatherRows& K, const GatherRows& V, const Csr& g, std::size_t heads,
                        std::size_t threads, Matrix& O) {
  const std::size_t n = Q.shape(0), width = Q.shape(1);
  require(heads > 0 && width % heads == 0 && threads > 0,
          fmt::format("csr_attention: {} heads for Q {} (heads must divide its columns), threads = {}", heads,
                      shape_str(Q), threads));
  require(K.rows() == n && K.width() == width && V.rows() == n && V.width() == width && g.n == n,
          fmt::format("csr_attention: Q {}, K ({}, {}), V ({}, {}) and a graph of {} nodes do not fit", shape_str(Q),
                      K.rows(), K.width(), V.rows(), V.width(), g.n));
  require(O.shape(0) == n && O.shape(1) == width,
          fmt::format("csr_attention_into: O is {}, Q is {}; O needs Q's shape", shape_str(O), shape_str(Q)));
  // Only a non-empty O can be Q itself: two empty matrices may share a null data pointer.
  require(O.size() == 0 || O.data() != Q.data(),
          "csr_attention_into: O is Q itself; the kernel reads every query after writing rows");
  const std::size_t max_degree = check_csr("csr_attention", g);
  // The course's overflow policy, as every kernel that takes Q, K, V: finite, and d_k · max|q| · max|k| within
  // float's range / 4 (each score is one head's d_k products). K and V are scanned whole, padding included (zeros).
  require_attention_inputs("csr_attention", Q.data(), Q.size(), width / heads, K.data(), K.padded_size(), width / heads,
                           V.data(), V.padded_size(), threads);
  constexpr std::size_t kChunk = 512;  // nodes per work item: enough to amortise the atomic
  // No more threads than work items: a thread without one would only cost its start (and a huge count, its
  // failure to start after the others had written rows).
  const std::size_t used = std::min(threads, std::max<std::size_t>(1, n / kChunk + (n % kChunk != 0 ? 1 : 0)));
  // Each thread's scores, (max_degree·heads), allocated before any row of O is written: a throw leaves O as it was.
  const std::size_t per_thread = checked_product("csr_attention: max in-degree × heads", {max_degree, heads});
  std::vector<float> scratch(
      checked_allocation("csr_attention: threads × max in-degree × heads floats", {used, per_thread, sizeof(float)}) /
      sizeof(float));
  const NodeKernel kernel = node_kernel(width / heads, heads);
  std::atomic<std::size_t> next{0}, thread_id{0};
  run_on_threads(used, [&] {
    float* scores = scratch.data() + thread_id++ * per_thread;  // (degree·heads) of the node at hand
    for (std::size_t begin = next.fetch_add(kChunk); begin < n; begin = next.fetch_add(kChunk)) {
      const std::size_t end = std::min(n, begin + kChunk);
      for (std::size_t e = g.row_start[begin]; e < std::min(g.row_start[end], g.row_start[begin] + kAhead); ++e) {
        prefetch(K.row(g.cols[e]), width);
        prefetch(V.row(g.cols[e]), width);
      }
      // [csr_walk]
      for (std::size_t i = begin; i < end; ++i) {
        // Node i's senders are cols[row_start[i]] … cols[row_start[i + 1] − 1]: no search, no (n, n) mask.
        const std::size_t degree = g.row_start[i + 1] - g.row_start[i];
        float* o = O.data() + i * width;  // (heads·d_k)
        if (degree == 0) {
          std::fill(o, o + width, 0.0f);  // no sender: zeros, whatever O held
          continue;
        }
        kernel(Q.data() + i * width, K, V, g.cols.data() + g.row_start[i], degree, g.row_start[end] - g.row_start[i],
               heads, scores, o);
      }
      // [csr_walk]
    }
  });
}

Matrix csr_attention(const Matrix& Q, const GatherRows& K, const GatherRows& V, const Csr& g, std::size_t heads,
                     std::size_t threads) {
  Matrix O = xt::empty<float>(Q.shape());  // (n, heads·d_k), every row written by the kernel
  csr_attention_into(Q, K, V, g, heads, threads, O);
  return O;
}

Matrix csr_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Csr& g, std::size_t heads,
                     std::size_t threads) {
  require(K.shape() == Q.shape() && V.shape() == Q.shape(),
          fmt::format("csr_attention: Q {}, K {} and V {} differ in shape", shape_str(Q), shape_str(K), shape_str(V)));
  return csr_attention(Q, GatherRows(K, "K"), GatherRows(V, "V"), g, heads, threads);
}

}  // namespace attn::ch15
