// Chapter 13's bookkeeping around the ring: which positions a piece holds, moving rows in and out of a
// rank's local matrices, and the closed forms the chapter checks its counts against (pairs computed,
// bytes sent). Given code, not an exercise. Book page: book/13_ring.md.
#include <algorithm>

#include <fmt/format.h>

#include "13_ring/ring.hpp"
#include "attn/checks.hpp"

namespace attn::ch13 {

Chunk even_chunk(std::size_t index, std::size_t parts, std::size_t n) {
  require(parts > 0 && index < parts,
          fmt::format("even_chunk: piece {} of {} does not exist (need parts ≥ 1 and index < parts)", index, parts));
  // index·n/parts rounds down, so the pieces differ by at most one position and cover [0, n) exactly.
  checked_product("even_chunk: parts × n", {parts, n});  // then (index + 1)·n cannot wrap either
  return Chunk{index * n / parts, (index + 1) * n / parts};
}

std::size_t rows_of(const Chunks& chunks) {
  std::size_t rows = 0;
  for (const Chunk& c : chunks) {
    require(c.begin <= c.end, fmt::format("rows_of: chunk [{}, {}) ends before it begins", c.begin, c.end));
    rows = checked_sum("rows_of: the chunks' positions", {rows, c.size()});
  }
  return rows;
}

Matrix gather_rows(const Matrix& X, const Chunks& chunks) {
  const std::size_t d = X.shape(1);
  for (const Chunk& c : chunks)  // every chunk inside X before anything is allocated
    require(c.begin <= c.end && c.end <= X.shape(0),
            fmt::format("gather_rows: chunk [{}, {}) reaches past X {}", c.begin, c.end, shape_str(X)));
  Matrix part(Matrix::shape_type{rows_of(chunks), d});  // (rows of chunks, d)
  std::size_t row = 0;
  for (const Chunk& c : chunks) {
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
  constexpr const char* what = "pairs_computed: the pairs";  // refused, never wrapped
  std::size_t pairs = 0;
  for (const Chunk& c : q_chunks) {
    require(c.begin <= c.end, fmt::format("pairs_computed: chunk [{}, {}) ends before it begins", c.begin, c.end));
    if (!causal) {
      pairs = checked_sum(what, {pairs, checked_product(what, {c.size(), n})});
      continue;
    }
    // Query at position i sees keys 0 … i: Σ_{i=b}^{e-1} (i + 1) = (e(e+1) - b(b+1)) / 2, halved before the
    // product (one of two consecutive numbers is even) so that only the true count has to fit.
    const auto half_product = [&](std::size_t x) {
      return x % 2 == 0 ? checked_product(what, {x / 2, x + 1}) : checked_product(what, {x, x / 2 + 1});
    };
    pairs = checked_sum(what, {pairs, half_product(c.end) - half_product(c.begin)});
  }
  return pairs;
}

std::size_t ring_bytes_sent(std::size_t rank, const std::vector<std::size_t>& rows, std::size_t d_k, std::size_t d_v) {
  const std::size_t P = rows.size();
  require(rank < P, fmt::format("ring_bytes_sent: rank {} of {} ranks", rank, P));
  // Refused, never wrapped, each naming what it adds up.
  std::size_t n = 0;
  for (std::size_t r : rows) n = checked_sum("ring_bytes_sent: n, the sum of rows", {n, r});
  // Steps 0 … P-2 pass on the blocks of ranks r, r-1, …, r-P+2: all but the block of r+1 (mod P).
  return checked_product(
      "ring_bytes_sent: the bytes, (n - rows of rank + 1) × (d_k + d_v) × 4",
      {n - rows[(rank + 1) % P], checked_sum("ring_bytes_sent: d_k + d_v", {d_k, d_v}), sizeof(float)});
}

}  // namespace attn::ch13
