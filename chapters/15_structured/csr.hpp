/// \file
/// Chapter 15's sparse graph attention: the graph in compressed sparse rows (CSR) and a multi-head kernel that
/// touches only the edges, O(E·d) work and memory instead of the dense mask's O(n²·d). Chapter code (not an
/// exercise); its benchmark against dense masked attention is in bench.cpp (`./course bench 15`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "15_structured/structured.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// A graph in compressed sparse rows: node i hears the senders cols[row_start[i]] … cols[row_start[i + 1] − 1].
struct Csr {
  std::size_t n = 0;                   ///< nodes
  std::vector<std::size_t> row_start;  ///< (n + 1), row_start[0] = 0, non-decreasing
  std::vector<std::uint32_t> cols;     ///< (E) sender ids, 4 bytes each: half the index traffic of size_t
};

/// The CSR form of \p in (node i hears in[i]).
/// \throws std::invalid_argument naming the node when a sender id is ≥ n, or when n ≥ 2³².
Csr csr_of(const Neighbours& in);

/// A random graph for the benchmark: every node hears itself and \p degree senders drawn uniformly (repeats
/// possible), sorted so that the gathers walk memory forwards.
/// \throws std::invalid_argument when degree + 1 or n·(degree + 1) overflows, n ≥ 2³², or naming the estimate
///         when the graph would not fit in memory, before allocating.
Csr random_csr(std::size_t n, std::size_t degree, std::uint64_t seed);

/// A matrix laid out for random gathers of its rows: each row starts on a cache line (64 bytes; a plain
/// allocation starts 16 bytes past one, so every 256-byte row would touch 5 lines instead of 4) and the table
/// is advised for huge pages (2 MiB), so that a gather seldom waits for an address translation as well. The
/// kernel gathers the key and value rows of random senders: these two facts are most of its speed on a large
/// graph (measured on the chapter's measurements page).
class GatherRows {
 public:
  /// A copy of \p M (n, width), row by row; \p name names it in errors.
  /// \throws std::invalid_argument naming the entry when \p M holds a NaN or an infinity.
  explicit GatherRows(const Matrix& M, const char* name = "M");
  std::size_t rows() const { return rows_; }
  std::size_t width() const { return width_; }
  /// Row \p j: width() floats, 64-byte aligned.
  const float* row(std::size_t j) const { return data_.get() + j * stride_; }
  /// The whole table, rows() × the padded width, the padding zero: padded_size() floats.
  const float* data() const { return data_.get(); }
  /// The floats data() holds, padding included.
  std::size_t padded_size() const { return rows_ * stride_; }

 private:
  std::size_t rows_ = 0, width_ = 0, stride_ = 0;                     // stride_: width rounded up to whole cache lines
  std::unique_ptr<float, void (*)(void*)> data_{nullptr, std::free};  // from std::aligned_alloc
};

/// Multi-head attention over the edges of \p g: for node i and head c, the softmax over i's senders j of
/// q_i·k_j / √d_k (columns [c·d_k, (c+1)·d_k) of Q and K) weights the same columns of V. Per node, all heads
/// at once: the scores of its few senders, their softmax, the weighted sum of their value rows; a node with no
/// sender gets zeros. \p threads split the nodes; the result does not depend on their number.
/// \param Q (n, heads·d_k) queries of all heads, side by side.
/// \param K (n, heads·d_k) keys, laid out for gathering.
/// \param V (n, heads·d_k) values (d_v = d_k), laid out for gathering.
/// \param g the graph, g.n = n.
/// \param heads the number of heads; it divides Q's columns.
/// \param threads worker threads, ≥ 1.
/// \return (n, heads·d_k).
/// \throws std::invalid_argument naming the shapes when Q, K, V and g do not fit, heads does not divide the
///         columns, the CSR is malformed (row_start not (n + 1) non-decreasing from 0 to E, a sender ≥ n),
///         or threads is 0; and as the course's overflow policy says (attn/checks.hpp's
///         require_attention_inputs(), with d_k = the columns / heads): naming the first NaN/Inf of Q, or when
///         d_k · max|q| · max|k| is past float's range / 4 (a score could overflow).
Matrix csr_attention(const Matrix& Q, const GatherRows& K, const GatherRows& V, const Csr& g, std::size_t heads,
                     std::size_t threads = 1);

/// The same, writing into \p O (n, heads·d_k), which a caller reuses from call to call as a layer reuses its
/// activation buffer: a fresh output of a large graph is mostly page faults (measured on the chapter's
/// measurements page). Every row of \p O is written; on a throw it is left unchanged.
/// \throws std::invalid_argument as csr_attention(), and when \p O is not (n, heads·d_k) or is \p Q itself.
void csr_attention_into(const Matrix& Q, const GatherRows& K, const GatherRows& V, const Csr& g, std::size_t heads,
                        std::size_t threads, Matrix& O);

/// The same with \p K and \p V as plain matrices (n, heads·d_k), laid out for gathering first.
Matrix csr_attention(const Matrix& Q, const Matrix& K, const Matrix& V, const Csr& g, std::size_t heads,
                     std::size_t threads = 1);

/// @}

}  // namespace attn::ch15
