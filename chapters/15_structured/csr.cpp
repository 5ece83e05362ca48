// Chapter 15's sparse graph attention over CSR. The kernel is gather-bound: per edge it reads one key and one
// value row (2·d_k floats per head) from wherever the sender lives, and does 4·d_k FLOPs with them. So the
// layout serves the gathers: the heads of a node sit side by side in one row (one cache line holds a 16-float
// head), the sender ids are 4 bytes, and each node's senders are sorted.
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

namespace attn::ch15 {

namespace {

constexpr std::size_t kMaxNodes = std::numeric_limits<std::uint32_t>::max();

void check_csr(const char* where, const Csr& g) {
  require(g.row_start.size() == g.n + 1 && g.row_start.front() == 0 && g.row_start.back() == g.cols.size(),
          fmt::format("{}: row_start has {} entries for n = {} (need n + 1, from 0 to E = {})", where,
                      g.row_start.size(), g.n, g.cols.size()));
  // The message is formatted only for the node or edge at fault: formatting one per edge would cost more than
  // the attention itself.
  for (std::size_t i = 0; i < g.n; ++i)
    if (g.row_start[i] > g.row_start[i + 1])
      throw std::invalid_argument(
          fmt::format("{}: row_start decreases at node {} ({} > {})", where, i, g.row_start[i], g.row_start[i + 1]));
  for (std::size_t e = 0; e < g.cols.size(); ++e)
    if (g.cols[e] >= g.n)
      throw std::invalid_argument(fmt::format("{}: edge {} names sender {}, but n = {}", where, e, g.cols[e], g.n));
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
  const std::size_t edges = checked_product("random_csr: n·(degree + 1)", {n, degree + 1});
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
  for (std::size_t j = 0; j < rows_; ++j) std::copy_n(M.data() + j * width_, width_, data_.get() + j * stride_);
}

namespace {

/// How far ahead, in edges, the kernel asks the memory for a sender's rows. A random sender's row is a trip to
/// memory (~100 ns): asked for a few edges before it is needed, the trips overlap one another and the arithmetic
/// instead of following it. The edges are one stream across nodes, so the last edges of a node ask for the
/// first rows of the next. 8 was the best of 2 … 32 on the machines the course was measured on.
constexpr std::size_t kAhead = 8;

/// Asks for \p width floats from \p row on without waiting for them, a cache line (16 floats) at a time.
void prefetch(const float* row, std::size_t width) {
  for (std::size_t t = 0; t < width; t += 16) __builtin_prefetch(row + t);
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
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_k));
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

}  // namespace

// [csr_attention]
Matrix csr_attention(const Matrix& Q, const GatherRows& K, const GatherRows& V, const Csr& g, std::size_t heads,
                     std::size_t threads) {
  const std::size_t n = Q.shape(0), width = Q.shape(1);
  require(heads > 0 && width % heads == 0 && threads > 0,
          fmt::format("csr_attention: {} heads for Q {} (heads must divide its columns), threads = {}", heads,
                      shape_str(Q), threads));
  require(K.rows() == n && K.width() == width && V.rows() == n && V.width() == width && g.n == n,
          fmt::format("csr_attention: Q {}, K ({}, {}), V ({}, {}) and a graph of {} nodes do not fit", shape_str(Q),
                      K.rows(), K.width(), V.rows(), V.width(), g.n));
  check_csr("csr_attention", g);
  require_finite("csr_attention", "Q", Q.data(), Q.size());
  Matrix O = xt::zeros<float>({n, width});  // (n, heads·d_k); a node with no sender keeps its zeros
  std::atomic<std::size_t> next{0};
  constexpr std::size_t kChunk = 512;  // nodes per work item: enough to amortise the atomic
  run_on_threads(threads, [&] {
    std::vector<float> scores;  // (degree·heads) of the node at hand
    for (std::size_t begin = next.fetch_add(kChunk); begin < n; begin = next.fetch_add(kChunk)) {
      const std::size_t end = std::min(n, begin + kChunk);
      for (std::size_t e = g.row_start[begin]; e < std::min(g.row_start[end], g.row_start[begin] + kAhead); ++e) {
        prefetch(K.row(g.cols[e]), width);
        prefetch(V.row(g.cols[e]), width);
      }
      for (std::size_t i = begin; i < end; ++i) {
        const std::size_t degree = g.row_start[i + 1] - g.row_start[i];
        if (degree == 0) continue;
        scores.resize(std::max(scores.size(), degree * heads));
        attend_node(Q.data() + i * width, K, V, g.cols.data() + g.row_start[i], degree,
                    g.row_start[end] - g.row_start[i], heads, scores.data(), O.data() + i * width);
      }
    }
  });
  return O;
}
// [csr_attention]

Matrix csr_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Csr& g, std::size_t heads,
                     std::size_t threads) {
  require(K.shape() == Q.shape() && V.shape() == Q.shape(),
          fmt::format("csr_attention: Q {}, K {} and V {} differ in shape", shape_str(Q), shape_str(K), shape_str(V)));
  return csr_attention(Q, GatherRows(K, "K"), GatherRows(V, "V"), g, heads, threads);
}

}  // namespace attn::ch15
