// Chapter 13's bookkeeping around the ring: which positions a piece holds, moving rows in and out of a
// rank's local matrices, and the closed forms the chapter checks its counts against (pairs computed,
// bytes sent). Given code, not an exercise. Book page: book/13_ring.md.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "13_ring/ring.hpp"

namespace attn::ch13 {

Chunk even_chunk(std::size_t index, std::size_t parts, std::size_t n) {
  require(parts > 0 && index < parts,
          fmt::format("even_chunk: piece {} of {} does not exist (need parts ≥ 1 and index < parts)", index, parts));
  // index·n/parts rounds down, so the pieces differ by at most one position and cover [0, n) exactly.
  return Chunk{index * n / parts, (index + 1) * n / parts};
}

std::size_t rows_of(const Chunks& chunks) {
  std::size_t rows = 0;
  for (const Chunk& c : chunks) rows += c.size();
  return rows;
}

Matrix gather_rows(const Matrix& X, const Chunks& chunks) {
  const std::size_t d = X.shape(1);
  Matrix part(Matrix::shape_type{rows_of(chunks), d});  // (rows of chunks, d)
  std::size_t row = 0;
  for (const Chunk& c : chunks) {
    require(c.begin <= c.end && c.end <= X.shape(0),
            fmt::format("gather_rows: chunk [{}, {}) reaches past X {}", c.begin, c.end, shape_str(X)));
    std::copy(X.data() + c.begin * d, X.data() + c.end * d, part.data() + row * d);
    row += c.size();
  }
  return part;
}

void scatter_rows(Matrix& X, const Matrix& part, const Chunks& chunks) {
  const std::size_t d = X.shape(1);
  require(part.shape(0) == rows_of(chunks) && part.shape(1) == d,
          fmt::format("scatter_rows: part {} does not fit {} rows of X {}", shape_str(part), rows_of(chunks),
                      shape_str(X)));
  for (const Chunk& c : chunks)
    require(c.begin <= c.end && c.end <= X.shape(0),
            fmt::format("scatter_rows: chunk [{}, {}) reaches past X {}", c.begin, c.end, shape_str(X)));
  std::size_t row = 0;
  for (const Chunk& c : chunks) {
    std::copy(part.data() + row * d, part.data() + (row + c.size()) * d, X.data() + c.begin * d);
    row += c.size();
  }
}

std::size_t pairs_computed(const Chunks& q_chunks, std::size_t n, bool causal) {
  std::size_t pairs = 0;
  for (const Chunk& c : q_chunks) {
    if (!causal) {
      pairs += c.size() * n;
      continue;
    }
    // Query at position i sees keys 0 … i: Σ_{i=b}^{e-1} (i + 1) = (e(e+1) - b(b+1)) / 2.
    pairs += (c.end * (c.end + 1) - c.begin * (c.begin + 1)) / 2;
  }
  return pairs;
}

std::size_t ring_bytes_sent(std::size_t rank, const std::vector<std::size_t>& rows, std::size_t d_k, std::size_t d_v) {
  const std::size_t P = rows.size();
  require(rank < P, fmt::format("ring_bytes_sent: rank {} of {} ranks", rank, P));
  const std::size_t n = std::accumulate(rows.begin(), rows.end(), std::size_t{0});
  // Steps 0 … P-2 pass on the blocks of ranks r, r-1, …, r-P+2: all but the block of r+1 (mod P).
  return (n - rows[(rank + 1) % P]) * (d_k + d_v) * sizeof(float);
}

}  // namespace attn::ch13
