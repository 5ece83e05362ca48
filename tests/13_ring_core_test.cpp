// Chapter 13's given code (no exercise in it), tested on the solution track only: DeepSpeed-Ulysses in one
// process (chapters/13_ring/ulysses.cpp), against the float64 oracle head by head, and its counted bytes against
// the formula. Tolerance as in tests/13_ring_test.cpp: float32 flash over n = 37 keys, a few ulp beyond
// n·2^-24 relative; 1e-5 absolute and relative.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "13_ring/local_link.hpp"
#include "13_ring/ulysses.hpp"
#include "attn/rng.hpp"
#include "oracle/05_flash_cpu_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile_ch13.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::test::to_oracle;
namespace ch13 = attn::ch13;
namespace oracle = attn::oracle;

constexpr double kAtol = 1e-5, kRtol = 1e-5;

}  // namespace

TEST_SUITE("13_ring") {
  TEST_CASE("Ulysses (all-to-all over heads) equals attention head by head, and each rank sends the formula's bytes") {
    attn::Rng rng(77);
    const std::size_t h = 4, n = 37, d_k = 8, d_v = 6;
    attn::Tensor3 Q(attn::Tensor3::shape_type{h, n, d_k}), K(attn::Tensor3::shape_type{h, n, d_k});  // (h, n, d_k)
    attn::Tensor3 V(attn::Tensor3::shape_type{h, n, d_v});                                           // (h, n, d_v)
    for (auto* T : {&Q, &K, &V}) {
      const Matrix flat = rng.normal(T->shape(0) * n, T->shape(2));
      std::copy(flat.begin(), flat.end(), T->begin());
    }
    for (bool causal : {false, true})
      for (std::size_t P : {1ul, 2ul, 3ul, 4ul}) {  // P = 3: heads 1, 1, 2 per rank (h = 4 is not a multiple)
        const ch13::UlyssesRun run = ch13::ulysses_in_one_process(Q, K, V, P, causal);
        for (std::size_t head = 0; head < h; ++head) {
          const Matrix Qh = xt::view(Q, head, xt::all(), xt::all()), Kh = xt::view(K, head, xt::all(), xt::all());
          const Matrix Vh = xt::view(V, head, xt::all(), xt::all()), Oh = xt::view(run.O, head, xt::all(), xt::all());
          const std::vector<bool> mask = oracle::causal_allowed(n, n);
          INFO("P = ", P, ", causal = ", causal, ", head ", head);
          CHECK_ALLCLOSE(Oh, oracle::attention(to_oracle(Qh), to_oracle(Kh), to_oracle(Vh), causal ? &mask : nullptr),
                         kAtol, kRtol);
        }
        for (std::size_t r = 0; r < P; ++r)
          CHECK_MESSAGE(run.bytes_sent[r] == ch13::ulysses_bytes_sent(r, P, n, h, d_k, d_v),
                        "P = " << P << ", rank " << r);
      }
    // More ranks than heads: a rank would own no head. Refused, naming both sizes.
    CHECK_THROWS_WITH_AS(ch13::ulysses_in_one_process(Q, K, V, 5, false), doctest::Contains("P = 5 ranks, h = 4"),
                         std::invalid_argument);
    CHECK_THROWS_AS(ch13::ulysses_bytes_sent(0, 5, n, h, d_k, d_v), std::invalid_argument);
  }

  TEST_CASE("the ring's size helpers refuse counts past 64 bits and chunks that end before they begin, never wrap") {
    const std::size_t max = std::numeric_limits<std::size_t>::max(), big = std::size_t{1} << 40;
    CHECK_THROWS_AS(ch13::even_chunk(1, 3, max), std::invalid_argument);  // index·n wraps
    CHECK(ch13::even_chunk(1, 3, 9).begin == 3);
    CHECK_THROWS_AS(ch13::rows_of({{0, 5}, {7, 2}}), std::invalid_argument);
    CHECK_THROWS_AS(ch13::rows_of({{0, max}, {0, 2}}), std::invalid_argument);
    // Σ_{i<n} (i + 1) = n(n + 1)/2: exact at n = 2^32 (2^63 + 2^31), refused where it does not fit.
    const std::size_t n32 = std::size_t{1} << 32;
    CHECK(ch13::pairs_computed({{0, n32}}, n32, true) == (std::size_t{1} << 63) + (std::size_t{1} << 31));
    CHECK_THROWS_AS(ch13::pairs_computed({{0, max}}, max, true), std::invalid_argument);
    CHECK_THROWS_AS(ch13::pairs_computed({{0, big}}, big, false), std::invalid_argument);
    CHECK_THROWS_AS(ch13::ring_bytes_sent(0, {max, 1}, 8, 8), std::invalid_argument);
    CHECK_THROWS_AS(ch13::ring_bytes_sent(0, {std::size_t{1} << 60, 1}, 64, 64), std::invalid_argument);
    CHECK_THROWS_AS(ch13::ulysses_bytes_sent(0, 2, big, 4, big, big), std::invalid_argument);
    // A chunk past X's rows is refused before the (2^40, 2) result is allocated.
    CHECK_THROWS_WITH_AS(ch13::gather_rows(Matrix(Matrix::shape_type{4, 2}, 1.0f), {{0, big}}),
                         doctest::Contains("reaches past X (4, 2)"), std::invalid_argument);
  }

  TEST_CASE(
      "ring_in_one_process refuses P = 0, more ranks than positions, and keys or values that are not Q's length") {
    attn::Rng rng(78);
    const Matrix Q = rng.normal(4, 8), K = rng.normal(4, 8), V = rng.normal(4, 6);
    CHECK_THROWS_WITH_AS(ch13::ring_in_one_process(Q, K, V, 0, ch13::Split::contiguous, false),
                         doctest::Contains("P = 0"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch13::ring_in_one_process(Q, K, V, 100000, ch13::Split::zigzag, true),
                         doctest::Contains("P = 100000"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        ch13::ring_in_one_process(Q, rng.normal(9, 8), rng.normal(9, 6), 2, ch13::Split::contiguous, false),
        doctest::Contains("(9, 8)"), std::invalid_argument);
  }
}

// Bad input, one case per function of ring.hpp and local_link.hpp that had none (cmake/check_bad_input.py).
TEST_SUITE("13_ring: bad input") {
  TEST_CASE("LocalLink refuses a rank outside the ring, and a start() off the ring's schedule, naming the rank") {
    const std::vector<ch13::KVBlock> blocks{{Matrix{{1.0f}}, Matrix{{2.0f}}}, {Matrix{{3.0f}}, Matrix{{4.0f}}}};
    CHECK_THROWS_NAMING(ch13::LocalLink(blocks, 2), std::invalid_argument, "rank 2", "2 ranks");
    ch13::LocalLink link(blocks, 0);
    // Rank 0 holds its own block at step 0 and receives rank 1's (1 row).
    CHECK_THROWS_NAMING(link.start(blocks[1], 1), std::invalid_argument, "rank 0", "not the one it holds");
    CHECK_THROWS_NAMING(link.start(blocks[0], 5), std::invalid_argument, "expects 5 rows");
    CHECK(link.bytes_sent() == 0);  // nothing counted for a refused start
    link.start(blocks[0], 1);
    CHECK_THROWS_NAMING(link.start(blocks[0], 1), std::invalid_argument, "start() twice");
    link.finish();
    CHECK_THROWS_NAMING(link.start(blocks[1], 1), std::invalid_argument, "only 1 transfers");  // P − 1 steps
  }

  TEST_CASE("rank_chunks refuses no ranks and a rank outside the ring, for either split") {
    for (const ch13::Split split : {ch13::Split::contiguous, ch13::Split::zigzag}) {
      CHECK_THROWS_AS(ch13::rank_chunks(0, 0, 8, split), std::invalid_argument);
      CHECK_THROWS_AS(ch13::rank_chunks(2, 2, 8, split), std::invalid_argument);
    }
    CHECK_THROWS_AS(ch13::rank_chunks(0, std::numeric_limits<std::size_t>::max(), 8, ch13::Split::zigzag),
                    std::invalid_argument);  // 2P wraps
  }

  TEST_CASE("scatter_rows refuses a part that does not fit its chunks or a chunk past X, and leaves X unchanged") {
    Matrix X = xt::zeros<float>({4, 2});          // (4, 2)
    const Matrix part = xt::ones<float>({2, 2});  // (2, 2)
    CHECK_THROWS_NAMING(ch13::scatter_rows(X, part, {{0, 3}}), std::invalid_argument, "(2, 2)", "3 rows", "(4, 2)");
    CHECK_THROWS_NAMING(ch13::scatter_rows(X, Matrix(xt::ones<float>({2, 3})), {{0, 2}}), std::invalid_argument,
                        "(2, 3)");
    CHECK_THROWS_NAMING(ch13::scatter_rows(X, part, {{0, 1}, {4, 5}}), std::invalid_argument, "[4, 5)");
    CHECK_THROWS_AS(ch13::scatter_rows(X, part, {{3, 1}}), std::invalid_argument);  // ends before it begins
    CHECK(X == Matrix(xt::zeros<float>({4, 2})));
  }
}

// The hostile-input battery (tests/support/hostile.hpp) over the chapter's own code: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says. Chunks are
// battered as their positions (a flat list begin, end, …), a KVBlock matrix by matrix (support/hostile_ch13.hpp).
namespace {

namespace hostile = attn::test::hostile;

constexpr long double kSizeMax = 18446744073709551615.0L;

/// Whether every chunk of \p flat begins before it ends and ends within \p rows.
bool chunks_within(const std::vector<std::size_t>& flat, std::size_t rows) {
  for (const ch13::Chunk& c : hostile::chunks_of(flat))
    if (c.begin > c.end || c.end > rows) return false;
  return true;
}

}  // namespace

TEST_SUITE("13_ring: hostile battery") {
  TEST_CASE("the ring's layout helpers under the hostile battery") {
    // hostile battery: even_chunk, rank_chunks, rows_of, gather_rows, scatter_rows, pairs_computed, ring_bytes_sent
    // hostile battery: ulysses_bytes_sent
    hostile::battery(
        "even_chunk", {"index", "parts", "n"},
        [](std::size_t index, std::size_t parts, std::size_t n) {
          const ch13::Chunk c = ch13::even_chunk(index, parts, n);
          return std::vector<std::size_t>{c.begin, c.end};
        },
        std::size_t{1}, std::size_t{3}, std::size_t{10})
        .fits([](std::size_t index, std::size_t parts, std::size_t n) {
          return parts > 0 && index < parts && static_cast<long double>(parts) * n <= kSizeMax;
        })
        .answer([](const std::vector<std::size_t>& c, std::size_t, std::size_t, std::size_t n) {
          return c[0] <= c[1] && c[1] <= n;
        })
        .run();
    hostile::battery(
        "rank_chunks", {"rank", "P", "n", "split"},
        [](std::size_t rank, std::size_t P, std::size_t n, ch13::Split split) {
          return ch13::rows_of(ch13::rank_chunks(rank, P, n, split));
        },
        std::size_t{1}, std::size_t{3}, std::size_t{10}, ch13::Split::zigzag)
        .fits([](std::size_t rank, std::size_t P, std::size_t n, ch13::Split split) {
          const long double parts = split == ch13::Split::zigzag ? 2.0L * P : static_cast<long double>(P);
          return P > 0 && rank < P && static_cast<int>(split) <= 1 && parts * n <= kSizeMax;
        })
        .answer([](std::size_t rows, std::size_t, std::size_t, std::size_t n, ch13::Split) { return rows <= n; })
        .run();
    const std::vector<std::size_t> chunks{0, 2, 5, 8};
    hostile::battery(
        "rows_of", {"chunks"}, [](const std::vector<std::size_t>& c) { return ch13::rows_of(hostile::chunks_of(c)); },
        chunks)
        .fits([](const std::vector<std::size_t>& c) {
          const long double rows = hostile::rows_in(c);
          return rows >= 0 && rows <= kSizeMax;
        })
        .run();
    attn::Rng rng(1393);
    hostile::battery(
        "gather_rows", {"X", "chunks"},
        [](const Matrix& X, const std::vector<std::size_t>& c) { return ch13::gather_rows(X, hostile::chunks_of(c)); },
        Matrix(rng.normal(8, 3)), chunks)
        .fits([](const Matrix& X, const std::vector<std::size_t>& c) { return chunks_within(c, X.shape(0)); })
        .answer([](const Matrix& part, const Matrix& X, const std::vector<std::size_t>& c) {
          return static_cast<long double>(part.shape(0)) == hostile::rows_in(c) && part.shape(1) == X.shape(1);
        })
        .non_finite_passes("rows are copied, not computed with: a NaN in X is copied as it is")
        .run();
    hostile::battery(
        "scatter_rows", {"X", "part", "chunks"},
        [](Matrix& X, const Matrix& part, const std::vector<std::size_t>& c) {
          ch13::scatter_rows(X, part, hostile::chunks_of(c));
          return X;
        },
        Matrix(rng.normal(8, 3)), Matrix(rng.normal(5, 3)), chunks)
        .fits([](const Matrix& X, const Matrix& part, const std::vector<std::size_t>& c) {
          return chunks_within(c, X.shape(0)) && static_cast<long double>(part.shape(0)) == hostile::rows_in(c) &&
                 part.shape(1) == X.shape(1);
        })
        .non_finite_passes("rows are copied, not computed with: a NaN in part or X is copied as it is")
        .run();
    hostile::battery(
        "pairs_computed", {"q_chunks|chunks", "n", "causal"},
        [](const std::vector<std::size_t>& c, std::size_t n, bool causal) {
          return ch13::pairs_computed(hostile::chunks_of(c), n, causal);
        },
        chunks, std::size_t{8}, true)
        .fits([](const std::vector<std::size_t>& c, std::size_t n, bool causal) {
          long double pairs = 0;
          for (const ch13::Chunk& k : hostile::chunks_of(c)) {
            if (k.begin > k.end) return false;
            const long double b = k.begin, e = k.end;
            pairs += causal ? (e * (e + 1) - b * (b + 1)) / 2 : (e - b) * n;
          }
          return pairs <= kSizeMax;
        })
        .run();
    hostile::battery(
        "ring_bytes_sent", {"rank", "rows", "d_k", "d_v"},
        [](std::size_t rank, const std::vector<std::size_t>& rows, std::size_t d_k, std::size_t d_v) {
          return ch13::ring_bytes_sent(rank, rows, d_k, d_v);
        },
        std::size_t{1}, std::vector<std::size_t>{3, 3, 2}, std::size_t{4}, std::size_t{2})
        .fits([](std::size_t rank, const std::vector<std::size_t>& rows, std::size_t d_k, std::size_t d_v) {
          if (rank >= rows.size()) return false;
          long double n = 0;
          for (const std::size_t r : rows) n += r;
          const long double sent = (n - rows[(rank + 1) % rows.size()]) * (static_cast<long double>(d_k) + d_v) * 4;
          return n <= kSizeMax && static_cast<long double>(d_k) + d_v <= kSizeMax && sent <= kSizeMax;
        })
        .run();
    hostile::battery(
        "ulysses_bytes_sent", {"rank", "P", "n", "h", "d_k", "d_v"},
        [](std::size_t rank, std::size_t P, std::size_t n, std::size_t h, std::size_t d_k, std::size_t d_v) {
          return ch13::ulysses_bytes_sent(rank, P, n, h, d_k, d_v);
        },
        std::size_t{1}, std::size_t{2}, std::size_t{8}, std::size_t{4}, std::size_t{3}, std::size_t{2})
        .fits([](std::size_t rank, std::size_t P, std::size_t n, std::size_t h, std::size_t d_k, std::size_t d_v) {
          if (!(rank < P && P <= h) || static_cast<long double>(P) * n > kSizeMax ||
              static_cast<long double>(P) * h > kSizeMax)
            return false;
          const long double rows_r = static_cast<long double>(ch13::even_chunk(rank, P, n).size());
          const long double g_r = static_cast<long double>(ch13::even_chunk(rank, P, h).size());
          const long double bytes =
              ((h - g_r) * rows_r * (2.0L * d_k + d_v) + g_r * (static_cast<long double>(n) - rows_r) * d_v) * 4;
          return bytes <= kSizeMax;
        })
        .run();
  }

  TEST_CASE("the ring and Ulysses in one process under the hostile battery") {
    // hostile battery: LocalLink, start, ring_in_one_process, ulysses_in_one_process
    attn::Rng rng(1394);
    const std::vector<ch13::KVBlock> blocks{{rng.normal(3, 4), rng.normal(3, 2)},
                                            {rng.normal(3, 4), rng.normal(3, 2)},
                                            {rng.normal(2, 4), rng.normal(2, 2)}};
    hostile::battery(
        "LocalLink", {"blocks", "rank"},
        [](const std::vector<ch13::KVBlock>& b, std::size_t rank) {
          const ch13::LocalLink link(b, rank);
          return link.transfers();
        },
        blocks, std::size_t{1})
        .fits([](const std::vector<ch13::KVBlock>& b, std::size_t rank) { return rank < b.size(); })
        .non_finite_passes("the link carries blocks: their values are checked by the kernel that folds them")
        .run();
    hostile::battery(
        "start", {"outgoing", "incoming_rows"},
        [&](const ch13::KVBlock& outgoing, std::size_t incoming_rows) {
          ch13::LocalLink link(blocks, 0);  // rank 0 at step 0: holds its own block, receives rank 2's
          link.start(outgoing, incoming_rows);
          return link.finish().K;
        },
        blocks[0], std::size_t{2})
        .fits([&](const ch13::KVBlock& outgoing, std::size_t incoming_rows) {
          return outgoing.K.shape() == blocks[0].K.shape() && outgoing.V.shape() == blocks[0].V.shape() &&
                 incoming_rows == 2;
        })
        .run();
    const Matrix Q = rng.normal(6, 4), K = rng.normal(6, 4), V = rng.normal(6, 2);
    hostile::battery(
        "ring_in_one_process", {"Q", "K", "V", "P", "split", "B_r|tiles", "B_c|tiles", "threads|tiles"},
        [](const Matrix& q, const Matrix& k, const Matrix& v, std::size_t P, ch13::Split split, std::size_t B_r,
           std::size_t B_c, int threads) {
          return ch13::ring_in_one_process(q, k, v, P, split, true, ch13::Tiles{B_r, B_c, threads}).out.O;
        },
        Q, K, V, std::size_t{2}, ch13::Split::zigzag, std::size_t{2}, std::size_t{2}, 1)
        .fits([](const Matrix& q, const Matrix& k, const Matrix& v, std::size_t P, ch13::Split split, std::size_t B_r,
                 std::size_t B_c, int threads) {
          const std::size_t n = q.shape(0);
          return k.shape(0) == n && v.shape(0) == n && k.shape(1) == q.shape(1) && P >= 1 &&
                 P <= std::max<std::size_t>(n, 1) && P <= ch13::kMaxRanksInOneProcess && static_cast<int>(split) <= 1 &&
                 B_r >= 1 && B_c >= 1 && threads >= 1 &&  // score tiles, one per thread with work (≤ n rows)
                 static_cast<long double>(B_r) * std::min<std::size_t>(B_c, n) *
                         std::min<long double>(threads, std::max<std::size_t>(n, 1)) * 4 <
                     (1ull << 30);
        })
        .answer([](const Matrix& O, const Matrix& q, const Matrix&, const Matrix& v, std::size_t, ch13::Split,
                   std::size_t, std::size_t, int) { return O.shape(0) == q.shape(0) && O.shape(1) == v.shape(1); })
        .exempt("B_r = 2^32",
                "score tiles of 32 GiB: answered or refused by the memory available, past the battery's "
                "4 GiB")
        .exempt("every size", "as B_r = 2^32")
        .run();
    hostile::battery(
        "ulysses_in_one_process", {"Q", "K", "V", "P"},
        [](const attn::Tensor3& q, const attn::Tensor3& k, const attn::Tensor3& v, std::size_t P) {
          return ch13::ulysses_in_one_process(q, k, v, P, true).O;
        },
        hostile::filled<attn::Tensor3>({4, 5, 3}), hostile::filled<attn::Tensor3>({4, 5, 3}),
        hostile::filled<attn::Tensor3>({4, 5, 2}), std::size_t{2})
        .fits([](const attn::Tensor3& q, const attn::Tensor3& k, const attn::Tensor3& v, std::size_t P) {
          const std::size_t h = q.shape(0);
          return k.shape(0) == h && v.shape(0) == h && k.shape(1) == q.shape(1) && v.shape(1) == q.shape(1) &&
                 k.shape(2) == q.shape(2) && P >= 1 && P <= h;
        })
        .answer([](const attn::Tensor3& O, const attn::Tensor3& q, const attn::Tensor3&, const attn::Tensor3& v,
                   std::size_t) {
          return O.shape(0) == q.shape(0) && O.shape(1) == q.shape(1) && O.shape(2) == v.shape(2);
        })
        .run();
  }
}
