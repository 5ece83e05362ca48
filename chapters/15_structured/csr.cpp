// Chapter 15's sparse graph attention over CSR. Per edge the kernel reads one key and one value row (2·d_k
// floats per head) from wherever the sender lives, and does 4·d_k FLOPs with them. So the layout serves the
// gathers: the heads of a node sit side by side in one row (one cache line holds a 16-float head), the sender
// ids are 4 bytes, and each node's senders are sorted. And the arithmetic must be cheap enough to hide behind
// them: with plain loops it was not (book/measure_15_structured.md, "It was the arithmetic after all"), hence
// the vector node kernel below for heads of 16, written once on the course's vector layer (attn/vector.hpp:
// Highway compiles this file again per instruction set).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "15_structured/csr.cpp"
#include "attn/vector.hpp"  // first: it names the instruction sets

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

#include "05_flash_cpu/exp_nonpositive.inl"
#include "15_structured/csr.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <new>

#include <sys/mman.h>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/rng.hpp"

#if HWY_ONCE
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

}  // namespace attn::ch15
#endif  // HWY_ONCE

// What the plain kernel and every instruction set's kernel share: read once, in the first pass over this file.
#ifndef ATTN_CH15_CSR_SHARED
#define ATTN_CH15_CSR_SHARED
namespace attn::ch15 {
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
inline void prefetch(const float* row, std::size_t width) {
  for (std::size_t t = 0; t < width; t += 16) __builtin_prefetch(row + t, 0, 2);
}

}  // namespace
}  // namespace attn::ch15
#endif  // ATTN_CH15_CSR_SHARED

// [csr_node16]
HWY_BEFORE_NAMESPACE();
namespace attn::ch15::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The node for heads of d_k = 16, in groups of four: a key row's four heads are 64 consecutive floats, the
// softmax's exponentials run a vector at a time (chapter 05's ExpNonpositive), and the weighted sum of values
// keeps the group's 64 output floats in registers. The plain loops of attend_node() leave the arithmetic to the
// compiler: it keeps one head's sum in one register and calls std::exp once per score, and on a large graph that
// arithmetic, not the gathers, set the time (the measurements page has both).
// \p scores is group-major here: (heads/4, degree, 4), so that each group's softmax runs over one contiguous
// array, a vector of edges at a time.
void AttendNodeDk16(const float* q, const GatherRows& K, const GatherRows& V, const std::uint32_t* senders,
                    std::size_t degree, std::size_t stream, std::size_t heads, float* scores, float* o) {
  using D = hn::CappedTag<float, 16>;  // at most one head per vector: 16, 8, 4 or 1 lanes
  const D d;
  constexpr std::size_t kL = hn::MaxLanes(d);  // this instruction set's lanes (a power of two, at most 16)
  constexpr std::size_t kChunks = 64 / kL;     // a group's four heads: 64 floats
  const std::size_t groups = heads / 4, per_group = degree * 4;
  HWY_ALIGN float pattern[kL], tail[kL];
  for (std::size_t e = 0; e < degree; ++e) {  // the scores, q_c·k_c / √16 for the four heads c of each group
    if (e + kAhead < stream) prefetch(K.row(senders[e + kAhead]), K.width());
    const float* k = K.row(senders[e]);
    for (std::size_t g = 0; g < groups; ++g) {
      hn::Vec<D> p[4];  // p[c]: head c's products q·k, its 16 features added down to kL lanes
      for (std::size_t c = 0; c < 4; ++c) {
        p[c] = hn::Zero(d);
        for (std::size_t t = 0; t < 16; t += kL)
          p[c] = hn::MulAdd(hn::LoadU(d, q + 64 * g + 16 * c + t), hn::Load(d, k + 64 * g + 16 * c + t), p[c]);
      }
      float* s = scores + g * per_group + 4 * e;  // (4) the group's four scores of this edge
#if HWY_TARGET != HWY_SCALAR                      // whole 128-bit blocks: four lanes or more
      static_assert(kL >= 4, "a 128-bit block holds four floats");
      // The four heads' sums folded together, per 128-bit block: interleaving halves the partial sums of each
      // head and keeps the heads apart, so one block ends as (s0, s1, s2, s3); then the blocks are added.
      const hn::Repartition<std::uint64_t, D> d64;
      const auto a = hn::Add(hn::InterleaveLower(d, p[0], p[1]), hn::InterleaveUpper(d, p[0], p[1]));
      const auto b = hn::Add(hn::InterleaveLower(d, p[2], p[3]), hn::InterleaveUpper(d, p[2], p[3]));
      const auto a64 = hn::BitCast(d64, a), b64 = hn::BitCast(d64, b);
      hn::Store(hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, a64, b64)),
                        hn::BitCast(d, hn::InterleaveUpper(d64, a64, b64))),
                d, pattern);
      for (std::size_t c = 0; c < 4; ++c) {
        float sum = pattern[c];
        for (std::size_t block = 1; block < kL / 4; ++block) sum += pattern[4 * block + c];
        s[c] = sum * 0.25f;
      }
#else  // one lane: the sums are the lanes
      for (std::size_t c = 0; c < 4; ++c) s[c] = hn::GetLane(p[c]) * 0.25f;
#endif
    }
  }
  for (std::size_t g = 0; g < groups; ++g) {
    float* s = scores + g * per_group;  // (degree, 4)
    float m[4], l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (std::size_t c = 0; c < 4; ++c) {
      m[c] = s[c];
      for (std::size_t e = 1; e < degree; ++e) m[c] = std::max(m[c], s[4 * e + c]);
    }
    // p = e^{s − m} with each lane's own head's max (the heads alternate along s), and each head's sum ℓ.
    const auto zero = hn::Zero(d);
    std::size_t j = 0;
    if constexpr (kL % 4 == 0) {  // a vector holds whole edges (four heads each): the heads' maxima repeat
      for (std::size_t t = 0; t < kL; ++t) pattern[t] = m[t % 4];
      const auto m_lanes = hn::Load(d, pattern);
      auto sum = zero;
      for (; j + kL <= per_group; j += kL) {
        const auto p = ch05::HWY_NAMESPACE::ExpNonpositive(d, hn::Sub(hn::LoadU(d, s + j), m_lanes));
        hn::StoreU(p, d, s + j);
        sum = hn::Add(sum, p);
      }
      hn::Store(sum, d, pattern);
      for (std::size_t t = 0; t < kL; ++t) l[t % 4] += pattern[t];
    }
    for (; j < per_group; ++j) {  // the edges past the last whole vector, one score at a time
      hn::Store(hn::Set(d, s[j] - m[j % 4]), d, tail);
      s[j] = hn::GetLane(ch05::HWY_NAMESPACE::ExpNonpositive(d, hn::Load(d, tail)));
      l[j % 4] += s[j];
    }
    // o_c = Σ_e p_ec · v_ec / ℓ_c: the group's 64 output floats in kChunks registers over all its edges.
    hn::Vec<D> acc[kChunks];
    for (auto& a : acc) a = zero;
    for (std::size_t e = 0; e < degree; ++e) {
      if (g == 0 && e + kAhead < stream) prefetch(V.row(senders[e + kAhead]), V.width());
      const float* v = V.row(senders[e]) + 64 * g;
      for (std::size_t u = 0; u < kChunks; ++u)
        acc[u] = hn::MulAdd(hn::Set(d, s[4 * e + u * kL / 16]), hn::Load(d, v + u * kL), acc[u]);
    }
    for (std::size_t u = 0; u < kChunks; ++u)
      hn::StoreU(hn::Mul(acc[u], hn::Set(d, 1.0f / l[u * kL / 16])), d, o + 64 * g + u * kL);
  }
}

}  // namespace attn::ch15::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
// [csr_node16]

#if HWY_ONCE
namespace attn::ch15 {
namespace {

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

HWY_EXPORT(AttendNodeDk16);

void attend_node_dk16(const float* q, const GatherRows& K, const GatherRows& V, const std::uint32_t* senders,
                      std::size_t degree, std::size_t stream, std::size_t heads, float* scores, float* o) {
  ATTN_DISPATCH(AttendNodeDk16)(q, K, V, senders, degree, stream, heads, scores, o);
}

/// The node kernel for \p d_k and \p heads: the vector one where it applies (on every path), else the plain one.
using NodeKernel = void (*)(const float*, const GatherRows&, const GatherRows&, const std::uint32_t*, std::size_t,
                            std::size_t, std::size_t, float*, float*);
NodeKernel node_kernel(std::size_t d_k, std::size_t heads) {
  if (d_k == 16 && heads % 4 == 0) return attend_node_dk16;
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
#endif  // HWY_ONCE
