// Chapter 13's given code (no exercise in it), tested on the solution track only: DeepSpeed-Ulysses in one
// process (chapters/13_ring/ulysses.cpp), against the float64 oracle head by head, and its counted bytes against
// the formula. Tolerance as in tests/13_ring_test.cpp: float32 flash over n = 37 keys, a few ulp beyond
// n·2^-24 relative; 1e-5 absolute and relative.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "13_ring/ulysses.hpp"
#include "attn/rng.hpp"
#include "oracle/05_flash_cpu_oracle.hpp"
#include "support/allclose.hpp"

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
}
