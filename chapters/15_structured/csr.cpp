// Chapter 15's sparse graph attention over CSR. The kernel is gather-bound: per edge it reads one key and one
// value row (2·d_k floats per head) from wherever the sender lives, and does 4·d_k FLOPs with them. So the
// layout serves the gathers: the heads of a node sit side by side in one row (one cache line holds a 16-float
// head), the sender ids are 4 bytes, and each node's senders are sorted.
#include "15_structured/csr.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

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
  for (std::size_t i = 0; i < g.n; ++i)
    require(g.row_start[i] <= g.row_start[i + 1],
            fmt::format("{}: row_start decreases at node {} ({} > {})", where, i, g.row_start[i], g.row_start[i + 1]));
  for (std::size_t e = 0; e < g.cols.size(); ++e)
    require(g.cols[e] < g.n, fmt::format("{}: edge {} names sender {}, but n = {}", where, e, g.cols[e], g.n));
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

// [csr_attention]
Matrix csr_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Csr& g, std::size_t heads,
                     std::size_t threads) {
  const std::size_t n = Q.shape(0), width = Q.shape(1);
  require(heads > 0 && width % heads == 0 && threads > 0,
          fmt::format("csr_attention: {} heads for Q {} (heads must divide its columns), threads = {}", heads,
                      shape_str(Q), threads));
  require(K.shape() == Q.shape() && V.shape() == Q.shape() && g.n == n,
          fmt::format("csr_attention: Q {}, K {}, V {} and a graph of {} nodes do not fit", shape_str(Q), shape_str(K),
                      shape_str(V), g.n));
  check_csr("csr_attention", g);
  require_attention_inputs("csr_attention", Q, K, V);
  const std::size_t d_k = width / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_k));
  Matrix O = xt::zeros<float>({n, width});  // (n, heads·d_k)
  std::atomic<std::size_t> next{0};
  constexpr std::size_t kChunk = 512;  // nodes per work item: enough to amortise the atomic
  run_on_threads(threads, [&] {
    std::vector<float> acc(d_k);  // (d_k) one head's running Σ exp(s − m)·v
    for (std::size_t begin = next.fetch_add(kChunk); begin < n; begin = next.fetch_add(kChunk))
      for (std::size_t i = begin; i < std::min(n, begin + kChunk); ++i)
        for (std::size_t c = 0; c < heads; ++c) {
          const float* q = Q.data() + i * width + c * d_k;
          float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (std::size_t e = g.row_start[i]; e < g.row_start[i + 1]; ++e) {
            const std::size_t j = g.cols[e];
            const float* k = K.data() + j * width + c * d_k;
            const float* v = V.data() + j * width + c * d_k;
            float s = 0.0f;
            for (std::size_t t = 0; t < d_k; ++t) s += q[t] * k[t];
            s *= scale;
            // Online softmax (chapter 05): rescale what was summed when the max moves.
            const float m_new = std::max(m, s), rescale = std::exp(m - m_new), p = std::exp(s - m_new);
            l = l * rescale + p;
            for (std::size_t t = 0; t < d_k; ++t) acc[t] = acc[t] * rescale + p * v[t];
            m = m_new;
          }
          if (l == 0.0f) continue;  // no sender: the row stays zero
          float* o = O.data() + i * width + c * d_k;
          for (std::size_t t = 0; t < d_k; ++t) o[t] = acc[t] / l;
        }
  });
  return O;
}
// [csr_attention]

}  // namespace attn::ch15
