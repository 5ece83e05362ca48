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
