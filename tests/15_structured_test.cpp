// Chapter 15's tests, run against both tracks. Expected values come from the float64 oracle (tests/oracle/)
// or from closed-form cases worked out here, never from the other track.
//
// Tolerances: the outputs are float32 sums of at most 12 terms of size ≲ 10 (scores, softmax weights, values of
// size ~1), so their rounding is a few 1e-7 relative; 1e-5 absolute plus 1e-5 relative holds that with room,
// while a wrong mask, a missing head or a misplaced half of a moves outputs by 1e-2 or more.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "04_complexity/heap_counter.hpp"
#include "15_structured/csr.hpp"
#include "15_structured/graph.hpp"
#include "15_structured/igraph_graphs.hpp"
#include "15_structured/node_model.hpp"
#include "15_structured/reduction.hpp"
#include "15_structured/structured.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"
#include "oracle/05_flash_cpu_oracle.hpp"
#include "oracle/12_learning_oracle.hpp"
#include "oracle/15_structured_oracle.hpp"
#include "support/allclose.hpp"
#include "support/throws.hpp"

namespace {

namespace ch15 = attn::ch15;
namespace oracle = attn::oracle;
using attn::Mask;
using attn::Matrix;
using attn::Vector;
using attn::test::to_oracle;

constexpr double kAtol = 1e-5, kRtol = 1e-5;  // see the file's opening comment
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// A small graph with an isolated node: 0 – 1 – 2 – 3, 1 – 4, 2 – 5, and node 6 alone.
ch15::Graph small_graph() { return {7, {{0, 1}, {1, 2}, {2, 3}, {1, 4}, {2, 5}}}; }

/// A directed graph: in[i] lists whom node i hears. No edge is returned (j ∈ in[i] never puts i in in[j], except
/// 3 ↔ 4), node 2 hears nobody, and node 0 hears only nodes that do not hear it: a mask applied transposed (node
/// i hearing the nodes that hear it) changes every row.
ch15::Neighbours directed_lists() { return {{1, 2}, {2}, {}, {0, 4}, {3, 0, 1}}; }

/// The (n, n) mask of neighbour lists, row i = listener i, as the oracle reads it.
std::vector<bool> mask_of(const ch15::Neighbours& in) {
  std::vector<bool> allowed(in.size() * in.size(), false);
  for (std::size_t i = 0; i < in.size(); ++i)
    for (std::size_t j : in[i]) allowed[i * in.size() + j] = true;
  return allowed;
}

std::vector<double> to_vector(const Vector& v) { return std::vector<double>(v.begin(), v.end()); }

#define CHECK_CLOSE(actual, expected)                                           \
  do {                                                                          \
    const auto cmp_ = attn::test::allclose((actual), (expected), kAtol, kRtol); \
    CHECK_MESSAGE(cmp_.ok, cmp_.report);                                        \
  } while (false)

/// Packs an (O, lse) pair from the oracle as merge_packed() reads it: rows of [lse, O_0 … O_{d_v−1}].
std::vector<float> packed_from_oracle(const oracle::Mat& O, const std::vector<double>& lse) {
  std::vector<float> out;
  for (std::size_t i = 0; i < O.rows; ++i) {
    out.push_back(static_cast<float>(lse[i]));
    for (std::size_t c = 0; c < O.cols; ++c) out.push_back(static_cast<float>(O(i, c)));
  }
  return out;
}

/// The oracle's partial result of Q over keys [begin, end) of K, V, packed.
std::vector<float> packed_part(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t begin, std::size_t end) {
  const oracle::Mat q = to_oracle(Q), k = to_oracle(K), v = to_oracle(V);
  std::vector<bool> allowed(Q.shape(0) * K.shape(0), false);
  for (std::size_t i = 0; i < Q.shape(0); ++i)
    for (std::size_t j = begin; j < end; ++j) allowed[i * K.shape(0) + j] = true;
  return packed_from_oracle(oracle::attention(q, k, v, &allowed), oracle::log_sum_exp_rows(q, k, &allowed));
}

/// O out of a packed result: (rows, d_v).
Matrix unpack_O(const std::vector<float>& packed, std::size_t rows, std::size_t d_v) {
  Matrix O = Matrix::from_shape({rows, d_v});
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < d_v; ++c) O(i, c) = packed[i * (d_v + 1) + 1 + c];
  return O;
}

}  // namespace

TEST_SUITE("15_structured/message_passing") {
  TEST_CASE("message_passing over every node equals attention over all keys (the complete graph)") {
    attn::Rng rng(1501);
    const Matrix Q = rng.normal(9, 5), K = rng.normal(9, 5), V = rng.normal(9, 4);
    const Matrix out = ch15::message_passing(Q, K, V, ch15::complete_lists(9));
    CHECK_CLOSE(out, oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)));
  }

  TEST_CASE("message_passing over a graph's edges is attention masked to the graph, and an isolated node gets zeros") {
    attn::Rng rng(1502);
    const Matrix Q = rng.normal(7, 4), K = rng.normal(7, 4), V = rng.normal(7, 3);
    for (bool self_loops : {false, true}) {
      const Mask mask = ch15::adjacency_mask(small_graph(), self_loops);
      const std::vector<bool> allowed = attn::test::to_oracle(mask);
      const Matrix out = ch15::message_passing(Q, K, V, ch15::neighbour_lists(small_graph(), self_loops));
      CHECK_CLOSE(out, oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed));
      if (!self_loops)
        for (std::size_t c = 0; c < 3; ++c) CHECK_MESSAGE(out(6, c) == 0.0f, "node 6 hears nobody: its output is 0");
    }
  }

  TEST_CASE("message_passing on a directed graph: node i hears in[i], not the nodes that hear it") {
    attn::Rng rng(1519);
    const Matrix Q = rng.normal(5, 3), K = rng.normal(5, 3), V = rng.normal(5, 2);
    const std::vector<bool> allowed = mask_of(directed_lists());
    const Matrix out = ch15::message_passing(Q, K, V, directed_lists());
    CHECK_CLOSE(out, oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V), &allowed));
  }

  TEST_CASE("message_passing's heap grows with the edges: 2048 nodes of 3 senders never hold an (n, n) matrix") {
    // A ring with self-loops: 3 senders per node. The output is 2048 × 4 floats (32 KiB); an (n, n) float matrix
    // would be 16 MiB and an (n, n) mask 4 MiB. Scratch per node and the output stay far below 1 MiB.
    const std::size_t n = 2048;
    ch15::Neighbours in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = {(i + n - 1) % n, i, (i + 1) % n};
    attn::Rng rng(1520);
    const Matrix Q = rng.normal(n, 4), K = rng.normal(n, 4), V = rng.normal(n, 4);
    Matrix out;
    const std::size_t peak = attn::ch04::measure_heap_peak([&] { out = ch15::message_passing(Q, K, V, in); });
    CHECK_MESSAGE(peak <= (std::size_t{1} << 20), "message_passing held ", peak,
                  " bytes of heap at its peak for 3 senders per node; an (n, n) float matrix is ", n * n * 4);
    REQUIRE(out.shape(0) == n);
    for (std::size_t i : {std::size_t{0}, std::size_t{1}, n - 1}) {  // spot rows against the oracle
      const std::vector<std::size_t> senders = in[i];
      const Matrix q = xt::view(Q, xt::range(i, i + 1), xt::all()), o = xt::view(out, xt::range(i, i + 1), xt::all());
      std::vector<bool> allowed(n, false);
      for (std::size_t j : senders) allowed[j] = true;
      CAPTURE(i);
      CHECK_CLOSE(o, oracle::attention(to_oracle(q), to_oracle(K), to_oracle(V), &allowed));
    }
  }

  TEST_CASE("message_passing stays exact with scores near 1e4 (the max is subtracted per node)") {
    Matrix Q = xt::zeros<float>({3, 2}), K = xt::zeros<float>({3, 2});
    Q(0, 0) = 100.0f;
    Q(1, 0) = -100.0f;
    Q(2, 1) = 100.0f;
    K(0, 0) = 141.0f;  // q·k / √2 ≈ ±9970: exp would overflow without the shift
    K(1, 0) = 140.0f;
    K(2, 1) = 1.0f;
    const Matrix V = {{1.0f, 0.0f}, {0.0f, 1.0f}, {0.5f, 0.5f}};
    const Matrix out = ch15::message_passing(Q, K, V, ch15::complete_lists(3));
    CHECK_CLOSE(out, oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)));
  }

  TEST_CASE("message_passing rejects a neighbour id past n and shapes that differ, naming them") {
    const Matrix Q = xt::ones<float>({3, 2}), K = xt::ones<float>({3, 2}), V = xt::ones<float>({3, 2});
    CHECK_THROWS_NAMING(ch15::message_passing(Q, K, V, {{0}, {1}, {5}}), std::invalid_argument, "5");
    CHECK_THROWS_AS(ch15::message_passing(Q, K, V, {{0}, {1}}), std::invalid_argument);
    CHECK_THROWS_AS(ch15::message_passing(Q, xt::ones<float>({3, 4}), V, ch15::complete_lists(3)),
                    std::invalid_argument);
    CHECK_THROWS_AS(ch15::message_passing(Q, K, xt::ones<float>({2, 2}), ch15::complete_lists(3)),
                    std::invalid_argument);
  }
}

TEST_SUITE("15_structured/gat_scores") {
  TEST_CASE("gat_scores equal LeakyReLU(a_l·h_i + a_r·h_j) from the oracle, at slopes 0.2 and 0") {
    attn::Rng rng(1503);
    const Matrix H = rng.normal(8, 3);
    const Vector a = xt::flatten(rng.normal(1, 6));
    for (float slope : {0.2f, 0.0f})
      CHECK_CLOSE(ch15::gat_scores(H, a, slope), oracle::gat_scores(to_oracle(H), to_vector(a), slope));
  }

  TEST_CASE("gat_scores are static: every listener ranks the senders in the same order") {
    attn::Rng rng(1504);
    const Matrix H = rng.normal(10, 4);
    const Vector a = xt::flatten(rng.normal(1, 8));
    const Matrix E = ch15::gat_scores(H, a);
    REQUIRE(E.shape(0) == 10);
    for (std::size_t i = 1; i < 10; ++i)
      CHECK_MESSAGE(attn::ranked(E, i) == attn::ranked(E, 0), "listener " << i << " ranks differently from listener 0");
    const std::vector<std::size_t> all_tied{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};  // what equal scores would rank
    CHECK_MESSAGE(attn::ranked(E, 0) != all_tied, "the senders should not all tie (a score that ignores h_j)");
  }

  TEST_CASE("gat_scores rejects an attention vector of the wrong size and a slope outside 0 ≤ slope < 1") {
    const Matrix H = xt::ones<float>({4, 3});
    CHECK_THROWS_NAMING(ch15::gat_scores(H, xt::ones<float>({3})), std::invalid_argument, "3");
    CHECK_THROWS_AS(ch15::gat_scores(H, xt::ones<float>({6}), 1.0f), std::invalid_argument);
    CHECK_THROWS_AS(ch15::gat_scores(H, xt::ones<float>({6}), -0.1f), std::invalid_argument);
  }
}

TEST_SUITE("15_structured/gatv2_scores") {
  TEST_CASE("gatv2_scores equal Σ_c a_c·LeakyReLU(l_ic + r_jc) from the oracle") {
    attn::Rng rng(1505);
    const Matrix L = rng.normal(7, 5), R = rng.normal(7, 5);
    const Vector a = xt::flatten(rng.normal(1, 5));
    CHECK_CLOSE(ch15::gatv2_scores(L, R, a), oracle::gatv2_scores(to_oracle(L), to_oracle(R), to_vector(a), 0.2));
  }

  TEST_CASE("gatv2_scores let listeners disagree: a closed-form case where 0 prefers sender 0 and 1 sender 1") {
    // slope 0 (ReLU), a = (1, 1): e_ij = relu(l_i0 + r_j0) + relu(l_i1 + r_j1).
    const Matrix L = {{5.0f, 0.0f}, {0.0f, 5.0f}};
    const Matrix R = {{1.0f, -10.0f}, {-10.0f, 1.0f}};
    const Matrix E = ch15::gatv2_scores(L, R, Vector{1.0f, 1.0f}, 0.0f);
    const Matrix expected = {{6.0f, 1.0f}, {1.0f, 6.0f}};
    CHECK_CLOSE(E, to_oracle(expected));
  }

  TEST_CASE("gatv2_scores rejects shapes that do not fit and a slope outside 0 ≤ slope < 1") {
    const Matrix L = xt::ones<float>({3, 2});
    CHECK_THROWS_NAMING(ch15::gatv2_scores(L, xt::ones<float>({4, 2}), Vector{1.0f, 1.0f}), std::invalid_argument, "3",
                        "4");  // L and R: one row per node each
    CHECK_THROWS_AS(ch15::gatv2_scores(L, xt::ones<float>({3, 3}), Vector{1.0f, 1.0f}), std::invalid_argument);
    CHECK_THROWS_AS(ch15::gatv2_scores(L, L, Vector{1.0f}), std::invalid_argument);
    CHECK_THROWS_AS(ch15::gatv2_scores(L, L, Vector{1.0f, 1.0f}, 1.5f), std::invalid_argument);
  }
}

TEST_SUITE("15_structured/gat_layer") {
  TEST_CASE("gat_layer with two heads equals the oracle head by head, masked to the graph, heads side by side") {
    attn::Rng rng(1506);
    const Matrix X = rng.normal(7, 5);
    const std::vector<ch15::GatHead> heads{{rng.normal(5, 3), xt::flatten(rng.normal(1, 6))},
                                           {rng.normal(5, 3), xt::flatten(rng.normal(1, 6))}};
    const Mask mask = ch15::adjacency_mask(small_graph(), true);
    const Matrix out = ch15::gat_layer(X, heads, mask);
    REQUIRE(out.shape(1) == 6);
    for (std::size_t k = 0; k < 2; ++k) {
      const Matrix head_k = xt::view(out, xt::all(), xt::range(3 * k, 3 * k + 3));
      CAPTURE(k);
      CHECK_CLOSE(head_k, oracle::gat_head(to_oracle(X), to_oracle(heads[k].W), to_vector(heads[k].a),
                                           attn::test::to_oracle(mask), 0.2));
    }
  }

  TEST_CASE("gat_layer on a directed graph: row i of the mask is whom node i may hear") {
    attn::Rng rng(1521);
    const Matrix X = rng.normal(5, 4);
    const std::vector<ch15::GatHead> heads{{rng.normal(4, 3), xt::flatten(rng.normal(1, 6))}};
    const std::vector<bool> allowed = mask_of(directed_lists());
    Mask mask(Mask::shape_type{5, 5}, false);
    for (std::size_t k = 0; k < allowed.size(); ++k) mask.data()[k] = allowed[k];
    CHECK_CLOSE(ch15::gat_layer(X, heads, mask),
                oracle::gat_head(to_oracle(X), to_oracle(heads[0].W), to_vector(heads[0].a), allowed, 0.2));
  }

  TEST_CASE("gat_layer gives a node with no allowed sender zeros, not NaN") {
    attn::Rng rng(1507);
    const Matrix X = rng.normal(7, 4);
    const std::vector<ch15::GatHead> heads{{rng.normal(4, 2), xt::flatten(rng.normal(1, 4))}};
    const Mask mask = ch15::adjacency_mask(small_graph(), false);  // node 6 has no edge and no self-loop
    const Matrix out = ch15::gat_layer(X, heads, mask);
    CHECK_CLOSE(out, oracle::gat_head(to_oracle(X), to_oracle(heads[0].W), to_vector(heads[0].a),
                                      attn::test::to_oracle(mask), 0.2));
    CHECK(out(6, 0) == 0.0f);
    CHECK(out(6, 1) == 0.0f);
  }

  TEST_CASE("gat_layer rejects no heads, heads of different sizes and a mask of the wrong size") {
    const Matrix X = xt::ones<float>({4, 3});
    const Mask mask(Mask::shape_type{4, 4}, true);
    const ch15::GatHead good{xt::ones<float>({3, 2}), xt::ones<float>({4})};
    CHECK_THROWS_AS(ch15::gat_layer(X, {}, mask), std::invalid_argument);
    CHECK_THROWS_AS(ch15::gat_layer(X, {good, {xt::ones<float>({3, 3}), xt::ones<float>({4})}}, mask),
                    std::invalid_argument);
    CHECK_THROWS_AS(ch15::gat_layer(X, {{xt::ones<float>({2, 2}), xt::ones<float>({4})}}, mask), std::invalid_argument);
    CHECK_THROWS_AS(ch15::gat_layer(X, {good}, Mask(Mask::shape_type{3, 3}, true)), std::invalid_argument);
  }
}

TEST_SUITE("15_structured/hop_bias") {
  TEST_CASE("hop_bias takes b at each distance, and the last entry for far and unreachable pairs") {
    const ch15::Hops hops = ch15::hop_distances(small_graph());
    const Vector b = {10.0f, 11.0f, 12.0f};  // 0, 1, ≥ 2 hops
    const Matrix B = ch15::hop_bias(hops, b);
    REQUIRE(B.shape(0) == 7);
    CHECK(B(0, 0) == 10.0f);  // itself
    CHECK(B(0, 1) == 11.0f);  // a neighbour
    CHECK(B(0, 2) == 12.0f);  // two hops
    CHECK(B(0, 3) == 12.0f);  // three hops: past the table
    CHECK(B(4, 5) == 12.0f);  // 4 – 1 – 2 – 5
    CHECK(B(0, 6) == 12.0f);  // unreachable
    CHECK(B(6, 6) == 10.0f);
  }

  TEST_CASE("hop_bias rejects an empty table and a distance matrix that is not square") {
    const ch15::Hops square(ch15::Hops::shape_type{2, 2}, 0);
    CHECK_THROWS_AS(ch15::hop_bias(square, Vector::from_shape({0})), std::invalid_argument);
    CHECK_THROWS_AS(ch15::hop_bias(ch15::Hops(ch15::Hops::shape_type{2, 3}, 0), Vector{1.0f}), std::invalid_argument);
  }
}

TEST_SUITE("15_structured/subtree_mask") {
  TEST_CASE("subtree_mask lets a token see itself and its descendants, on the article's trees and random ones") {
    std::vector<std::vector<long>> trees;
    for (const ch15::ParsedSentence& s : ch15::parsed_sentences()) trees.push_back(s.parent);
    attn::Rng rng(1508);
    for (int t = 0; t < 5; ++t) {  // random trees: node i > 0 hangs from a random earlier node, then relabelled
      const std::size_t n = 12;
      std::vector<std::size_t> label(n);
      for (std::size_t i = 0; i < n; ++i) label[i] = i;
      std::shuffle(label.begin(), label.end(), rng.engine());
      std::vector<long> parent(n, -1);
      for (std::size_t i = 1; i < n; ++i)
        parent[label[i]] = static_cast<long>(label[static_cast<std::size_t>(rng.engine()() % i)]);
      trees.push_back(parent);
    }
    for (const auto& parent : trees) {
      const Mask mask = ch15::subtree_mask(parent);
      const std::vector<bool> expected = oracle::subtree_relation(parent);
      REQUIRE(mask.size() == expected.size());
      const std::size_t n = parent.size();
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j)
          CHECK_MESSAGE(mask(i, j) == expected[i * n + j],
                        "token " << i << (expected[i * n + j] ? " should" : " should not") << " see token " << j);
    }
  }

  TEST_CASE("subtree_mask rejects two roots, a parent past n, a token that is its own parent, and a cycle") {
    CHECK_THROWS_WITH_AS(ch15::subtree_mask({-1, 0, -1}), doctest::Contains("one root"), std::invalid_argument);
    CHECK_THROWS_NAMING(ch15::subtree_mask({-1, 5}), std::invalid_argument, "parent", "1", "5");
    CHECK_THROWS_AS(ch15::subtree_mask({-1, 1}), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch15::subtree_mask({-1, 2, 3, 1}), doctest::Contains("cycle"), std::invalid_argument);
  }
}

TEST_SUITE("15_structured/merge_packed") {
  TEST_CASE("merge_packed of two partial results equals attention over all keys") {
    attn::Rng rng(1509);
    const Matrix Q = rng.normal(3, 4), K = rng.normal(11, 4), V = rng.normal(11, 5);
    std::vector<float> left = packed_part(Q, K, V, 0, 4);
    const std::vector<float> right = packed_part(Q, K, V, 4, 11);
    ch15::merge_packed(right.data(), left.data(), 3, 5);
    CHECK_CLOSE(unpack_O(left, 3, 5), oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)));
    const std::vector<double> lse = oracle::log_sum_exp_rows(to_oracle(Q), to_oracle(K));
    for (std::size_t i = 0; i < 3; ++i) CHECK(left[i * 6] == doctest::Approx(lse[i]).epsilon(1e-5));
  }

  TEST_CASE("merge_packed is associative: (a∘b)∘c and a∘(b∘c) both equal the oracle over all keys") {
    attn::Rng rng(1510);
    const Matrix Q = rng.normal(2, 3), K = rng.normal(15, 3), V = rng.normal(15, 3);
    const std::vector<float> a = packed_part(Q, K, V, 0, 5), b = packed_part(Q, K, V, 5, 9),
                             c = packed_part(Q, K, V, 9, 15);
    std::vector<float> ab = b, bc = c;
    ch15::merge_packed(a.data(), ab.data(), 2, 3);  // a∘b
    ch15::merge_packed(c.data(), ab.data(), 2, 3);  // (a∘b)∘c
    ch15::merge_packed(b.data(), bc.data(), 2, 3);  // b∘c
    std::vector<float> a_bc = a;
    ch15::merge_packed(bc.data(), a_bc.data(), 2, 3);  // a∘(b∘c)
    const oracle::Mat expected = oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V));
    CHECK_CLOSE(unpack_O(ab, 2, 3), expected);
    CHECK_CLOSE(unpack_O(a_bc, 2, 3), expected);
  }

  TEST_CASE("merge_packed is exact for parts whose lse is near +100 or −100 (e^100 overflows float, e^−104 is 0)") {
    attn::Rng rng(1522);
    const Matrix Q = rng.normal(2, 3), K = rng.normal(9, 3), V = rng.normal(9, 3);
    const oracle::Mat expected = oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V));
    const std::vector<double> lse = oracle::log_sum_exp_rows(to_oracle(Q), to_oracle(K));
    // Adding c to both parts' lse leaves the merged O alone and adds c to the merged lse; +100 and −120 make
    // e^lse overflow and underflow; (+60, −60) puts the parts 120 apart, so the smaller weighs e^−120 ≈ 0.
    for (const auto& [shift_a, shift_b] : {std::pair{100.0f, 100.0f}, std::pair{-120.0f, -120.0f}}) {
      std::vector<float> a = packed_part(Q, K, V, 0, 4), b = packed_part(Q, K, V, 4, 9);
      for (std::size_t r = 0; r < 2; ++r) {
        a[r * 4] += shift_a;
        b[r * 4] += shift_b;
      }
      ch15::merge_packed(a.data(), b.data(), 2, 3);
      CAPTURE(shift_a);
      CHECK_CLOSE(unpack_O(b, 2, 3), expected);
      for (std::size_t r = 0; r < 2; ++r)
        CHECK(b[r * 4] == doctest::Approx(lse[r] + static_cast<double>(shift_a)).epsilon(1e-6));
    }
    std::vector<float> high = packed_part(Q, K, V, 0, 4), low = packed_part(Q, K, V, 4, 9);
    for (std::size_t r = 0; r < 2; ++r) {
      high[r * 4] += 60.0f;
      low[r * 4] -= 60.0f;
    }
    const std::vector<float> high_alone = high;
    ch15::merge_packed(low.data(), high.data(), 2, 3);
    for (std::size_t k = 0; k < high.size(); ++k)  // e^−120 relative: the low part leaves no trace in float32
      CHECK(high[k] == doctest::Approx(high_alone[k]).epsilon(1e-6));
  }

  TEST_CASE("merge_packed gives a part that saw no key (lse = −inf) no weight, and two such stay empty, never NaN") {
    attn::Rng rng(1511);
    const Matrix Q = rng.normal(2, 3), K = rng.normal(6, 3), V = rng.normal(6, 2);
    std::vector<float> result = packed_part(Q, K, V, 0, 6);
    const std::vector<float> empty{kMinusInf, 0.0f, 0.0f, kMinusInf, 0.0f, 0.0f};
    ch15::merge_packed(empty.data(), result.data(), 2, 2);
    CHECK_CLOSE(unpack_O(result, 2, 2), oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V)));
    std::vector<float> both = empty;
    ch15::merge_packed(empty.data(), both.data(), 2, 2);
    CHECK(both[0] == kMinusInf);
    CHECK(both[1] == 0.0f);
    CHECK(both[2] == 0.0f);
  }

  TEST_CASE("merge_packed along the binomial tree over P = 1 … 8 ranks equals the oracle in ⌈log₂P⌉ rounds") {
    attn::Rng rng(1512);
    const std::size_t n = 40;
    const Matrix Q = rng.normal(2, 4), K = rng.normal(n, 4), V = rng.normal(n, 4);
    const oracle::Mat expected = oracle::attention(to_oracle(Q), to_oracle(K), to_oracle(V));
    const std::size_t log2[] = {0, 0, 1, 2, 2, 3, 3, 3, 3};
    for (std::size_t P = 1; P <= 8; ++P) {
      std::vector<std::vector<float>> parts;
      for (std::size_t r = 0; r < P; ++r) parts.push_back(packed_part(Q, K, V, r * n / P, (r + 1) * n / P));
      CAPTURE(P);
      CHECK(ch15::tree_reduce(parts, 2, 4) == log2[P]);
      CHECK_CLOSE(unpack_O(parts[0], 2, 4), expected);
    }
  }

  TEST_CASE("merge_packed rejects an lse that is NaN and null pointers") {
    std::vector<float> ok{0.0f, 1.0f}, bad{std::nanf(""), 1.0f};
    CHECK_THROWS_AS(ch15::merge_packed(bad.data(), ok.data(), 1, 1), std::invalid_argument);
    CHECK_THROWS_AS(ch15::merge_packed(nullptr, ok.data(), 1, 1), std::invalid_argument);
  }
}

TEST_SUITE("15_structured: chapter code") {
  TEST_CASE("graphs with a node id past n, a self-loop or a repeated edge are refused, naming the edge") {
    CHECK_THROWS_WITH_AS(ch15::check_graph({3, {{0, 3}}}), doctest::Contains("(0, 3)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch15::check_graph({3, {{1, 1}}}), doctest::Contains("self-loop"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch15::check_graph({3, {{0, 1}, {1, 0}}}), doctest::Contains("twice"), std::invalid_argument);
    CHECK_THROWS_AS(ch15::neighbour_lists({3, {{2, 7}}}, true), std::invalid_argument);
    CHECK_THROWS_AS(ch15::check_graph({std::size_t{1} << 40, {}}), std::invalid_argument);
    CHECK_NOTHROW(ch15::check_graph(small_graph()));
  }

  TEST_CASE("breadth-first hop distances on a small graph equal the distances counted by hand") {
    const ch15::Hops hops = ch15::hop_distances(small_graph());
    CHECK(hops(0, 3) == 3);
    CHECK(hops(4, 5) == 3);
    CHECK(hops(3, 4) == 3);
    CHECK(hops(5, 5) == 0);
    CHECK(hops(0, 6) == ch15::kUnreachable);
    CHECK(hops(6, 0) == ch15::kUnreachable);
  }

  TEST_CASE("igraph's karate club has 34 members and 78 friendships, and its distances equal the BFS") {
    if (!ch15::have_igraph()) {
      MESSAGE("built without igraph: nothing to check");
      return;
    }
    const ch15::Graph club = ch15::famous_graph("Zachary");
    CHECK(club.n == 34);
    CHECK(club.edges.size() == 78);
    CHECK(ch15::igraph_hop_distances(club) == ch15::hop_distances(club));
    CHECK(ch15::karate_factions().size() == 34);
    CHECK_THROWS_AS(ch15::famous_graph("No such graph"), std::invalid_argument);
  }

  TEST_CASE("igraph's block model gives two cliques at p_in = 1, p_out = 0, and refuses a probability past 1") {
    if (!ch15::have_igraph()) {
      MESSAGE("built without igraph: nothing to check");
      return;
    }
    const ch15::Graph g = ch15::sbm_graph({5, 4}, 1.0, 0.0, 3);
    CHECK(g.n == 9);
    CHECK(g.edges.size() == 10 + 6);  // C(5, 2) + C(4, 2)
    for (const auto& [u, v] : g.edges) CHECK_MESSAGE((u < 5) == (v < 5), "edge (" << u << ", " << v << ") crosses");
    CHECK(ch15::sbm_graph({5, 4}, 0.0, 1.0, 3).edges.size() == 20);  // 5 · 4 across, none inside
    CHECK_THROWS_WITH_AS(ch15::sbm_graph({5, 4}, 1.5, 0.0, 3), doctest::Contains("p_in = 1.5"), std::invalid_argument);
  }

  TEST_CASE(
      "CSR attention equals the oracle's masked attention head by head, isolated node zeros, on 1 and 3 threads") {
    attn::Rng rng(1514);
    const ch15::Neighbours in = ch15::neighbour_lists(small_graph(), false);        // node 6 hears nobody
    const Matrix Q = rng.normal(7, 6), K = rng.normal(7, 6), V = rng.normal(7, 6);  // 2 heads of 3
    const std::vector<bool> allowed = attn::test::to_oracle(ch15::adjacency_mask(small_graph(), false));
    const Matrix one = ch15::csr_attention(Q, K, V, ch15::csr_of(in), 2, 1);
    for (std::size_t c = 0; c < 2; ++c) {
      auto cols = xt::range(3 * c, 3 * c + 3);
      const Matrix Qc = xt::view(Q, xt::all(), cols), Kc = xt::view(K, xt::all(), cols),
                   Vc = xt::view(V, xt::all(), cols), Oc = xt::view(one, xt::all(), cols);
      CAPTURE(c);
      CHECK_CLOSE(Oc, oracle::attention(to_oracle(Qc), to_oracle(Kc), to_oracle(Vc), &allowed));
    }
    const ch15::Csr big = ch15::random_csr(3000, 5, 7);  // more nodes than one work item, so threads share them
    const Matrix Qb = rng.normal(3000, 8), Kb = rng.normal(3000, 8), Vb = rng.normal(3000, 8);
    CHECK(ch15::csr_attention(Qb, Kb, Vb, big, 2, 1) == ch15::csr_attention(Qb, Kb, Vb, big, 2, 3));
  }

  /// Node \p i's output row O (n, heads·d_k), head by head, against the oracle's attention of its query over its
  /// senders in \p g (d_k = 16).
  void check_node_against_oracle(const Matrix& Q, const Matrix& K, const Matrix& V, const Matrix& O, const ch15::Csr& g,
                                 std::size_t i, std::size_t heads) {
    std::vector<bool> allowed(g.n, false);  // (1, n): node i's senders
    for (std::size_t e = g.row_start[i]; e < g.row_start[i + 1]; ++e) allowed[g.cols[e]] = true;
    for (std::size_t c = 0; c < heads; ++c) {
      auto cols = xt::range(16 * c, 16 * c + 16);
      const Matrix q = xt::view(Q, xt::range(i, i + 1), cols), Kc = xt::view(K, xt::all(), cols),
                   Vc = xt::view(V, xt::all(), cols), o = xt::view(O, xt::range(i, i + 1), cols);
      CAPTURE(c);
      CHECK_CLOSE(o, oracle::attention(to_oracle(q), to_oracle(Kc), to_oracle(Vc), &allowed));
    }
  }

  TEST_CASE("CSR attention at the benchmark's shape (4 heads of 16, 11 senders) equals the oracle node by node") {
    attn::Rng rng(1516);
    const std::size_t n = 1100;  // two work items and a part, so the prefetch stream crosses nodes and items
    const ch15::Csr g = ch15::random_csr(n, 10, 1516);
    const Matrix Q = rng.normal(n, 64), K = rng.normal(n, 64), V = rng.normal(n, 64);
    const Matrix O = ch15::csr_attention(Q, K, V, g, 4, 2);
    for (std::size_t i : {std::size_t{0}, std::size_t{511}, std::size_t{512}, n - 1}) {
      CAPTURE(i);
      check_node_against_oracle(Q, K, V, O, g, i, 4);
    }
  }

  TEST_CASE(
      "CSR attention with 8 heads of 16 (two groups of four), 0, 1, 4 and 40 senders and peaked scores equals "
      "the oracle, and csr_attention_into overwrites every row of a reused output") {
    // On a CPU with AVX-512 these shapes run the four-heads-at-a-time node kernel: a group past the first, edges
    // filling exact and partial registers of exponentials (4 senders = 16 scores; 1 and 40 = partial), and
    // scores far apart (Q × 20), so that the max shift matters and many weights fall below e^-87.
    attn::Rng rng(1518);
    const std::size_t n = 60;
    ch15::Neighbours in(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t degree = i == 0 ? 0 : i == 1 ? 1 : i < 30 ? 4 : 40;  // node 0 hears nobody
      for (std::size_t e = 0; e < degree; ++e) in[i].push_back((i * 7 + e * 13) % n);
    }
    const ch15::Csr g = ch15::csr_of(in);
    const Matrix Q = 20.0f * rng.normal(n, 128), K = rng.normal(n, 128), V = rng.normal(n, 128);
    Matrix O = xt::full_like(Q, 7.0f);  // (n, 128) a reused buffer's old contents, to be overwritten
    ch15::csr_attention_into(Q, ch15::GatherRows(K, "K"), ch15::GatherRows(V, "V"), g, 8, 2, O);
    for (std::size_t t = 0; t < 128; ++t) CHECK_MESSAGE(O(0, t) == 0.0f, "the isolated node kept column " << t);
    for (std::size_t i : {std::size_t{1}, std::size_t{2}, std::size_t{29}, std::size_t{30}, n - 1}) {
      CAPTURE(i);
      check_node_against_oracle(Q, K, V, O, g, i, 8);
    }
  }

  TEST_CASE("csr_attention_into refuses an output of the wrong shape or Q itself, leaving it unchanged") {
    const Matrix X = xt::ones<float>({2, 4});
    const ch15::GatherRows rows(X, "K");
    const ch15::Csr g = ch15::csr_of({{0, 1}, {1}});
    Matrix O = xt::full_like(xt::ones<float>({3, 4}), 5.0f);  // (3, 4): one row too many
    CHECK_THROWS_WITH_AS(ch15::csr_attention_into(X, rows, rows, g, 2, 1, O), doctest::Contains("O is (3, 4)"),
                         std::invalid_argument);
    CHECK(O == xt::full_like(O, 5.0f));
    Matrix Q = X;
    CHECK_THROWS_WITH_AS(ch15::csr_attention_into(Q, rows, rows, g, 2, 1, Q), doctest::Contains("Q itself"),
                         std::invalid_argument);
    CHECK(Q == X);
    Matrix O2 = xt::full_like(X, 5.0f);
    ch15::Csr bad = g;
    bad.cols[1] = 9;
    CHECK_THROWS_WITH_AS(ch15::csr_attention_into(X, rows, rows, bad, 2, 1, O2), doctest::Contains("sender 9"),
                         std::invalid_argument);
    CHECK(O2 == xt::full_like(X, 5.0f));
    // More threads than work items: only as many as there are items run (before, 2^40 threads' scratch was refused).
    // bad input answered: csr_attention_into
    Matrix one = O2, many = O2;
    ch15::csr_attention_into(X, rows, rows, g, 2, 1, one);
    ch15::csr_attention_into(X, rows, rows, g, 2, std::size_t{1} << 40, many);
    CHECK(many == one);
  }

  TEST_CASE("GatherRows keeps every row on a cache line, equal to the matrix, and names a NaN's matrix") {
    attn::Rng rng(1517);
    const Matrix M = rng.normal(5, 20);  // 80-byte rows: padded to 128
    const ch15::GatherRows rows(M, "K");
    REQUIRE(rows.rows() == 5);
    REQUIRE(rows.width() == 20);
    for (std::size_t j = 0; j < 5; ++j) {
      CHECK_MESSAGE(reinterpret_cast<std::uintptr_t>(rows.row(j)) % 64 == 0, "row " << j << " is not on a cache line");
      for (std::size_t t = 0; t < 20; ++t) CHECK(rows.row(j)[t] == M(j, t));
    }
    Matrix bad = M;
    bad(3, 7) = std::nanf("");
    CHECK_THROWS_WITH_AS(ch15::GatherRows(bad, "K"), doctest::Contains("K["), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ch15::csr_attention(M, M, bad, ch15::random_csr(5, 2, 1), 4), doctest::Contains("V["),
                         std::invalid_argument);
  }

  TEST_CASE("csr_of and csr_attention refuse a sender past n, a malformed row_start and heads that do not divide") {
    CHECK_THROWS_WITH_AS(ch15::csr_of({{0}, {5}}), doctest::Contains("node 5"), std::invalid_argument);
    const Matrix X = xt::ones<float>({2, 4});
    ch15::Csr g = ch15::csr_of({{0, 1}, {1}});
    CHECK_THROWS_AS(ch15::csr_attention(X, X, X, g, 3), std::invalid_argument);
    CHECK_THROWS_AS(ch15::csr_attention(X, X, X, g, 2, 0), std::invalid_argument);
    g.row_start = {0, 3, 2};
    CHECK_THROWS_WITH_AS(ch15::csr_attention(X, X, X, g, 2), doctest::Contains("row_start"), std::invalid_argument);
    g = ch15::csr_of({{0, 1}, {1}});
    g.cols[2] = 9;
    CHECK_THROWS_WITH_AS(ch15::csr_attention(X, X, X, g, 2), doctest::Contains("sender 9"), std::invalid_argument);
  }

  TEST_CASE("a MAX expression's target at each operator is the largest digit of its subtree, by the oracle's walk") {
    attn::Rng rng(1515);
    for (int k = 0; k < 20; ++k) {
      const ch15::MaxExpression e = ch15::make_max_expression(rng, 3);
      const std::size_t n = e.tokens.size();
      REQUIRE(e.parent.size() == n);
      REQUIRE(e.target.size() == n);
      CHECK(e.tokens[0] == ch15::kMaxToken);
      const std::vector<bool> below = oracle::subtree_relation(e.parent);
      for (std::size_t i = 0; i < n; ++i) {
        if (e.tokens[i] != ch15::kMaxToken) {
          CHECK(e.target[i] == attn::ch12::kIgnore);
          continue;
        }
        std::size_t largest = 0;
        for (std::size_t j = 0; j < n; ++j)
          if (below[i * n + j] && e.tokens[j] != ch15::kMaxToken) largest = std::max(largest, e.tokens[j]);
        CHECK_MESSAGE(e.target[i] == largest, "operator " << i);
      }
    }
    CHECK_THROWS_AS(ch15::make_max_expression(rng, 0), std::invalid_argument);
  }

  TEST_CASE("predictions take each row's argmax, and accuracy counts only the nodes with a target") {
    const Matrix logits = {{0.1f, 0.9f}, {0.8f, 0.2f}, {0.3f, 0.7f}};
    CHECK(ch15::predictions(logits) == std::vector<std::size_t>{1, 0, 1});
    CHECK(ch15::accuracy_on({1, 0, 1}, {1, attn::ch12::kIgnore, 0}) == doctest::Approx(0.5));
    CHECK_THROWS_AS(ch15::accuracy_on({1, 0}, {1}), std::invalid_argument);
  }

  TEST_CASE("the article's sentences carry one tree each, one head and one relation per token") {
    for (const ch15::ParsedSentence& s : ch15::parsed_sentences()) {
      CAPTURE(s.name);
      CHECK(s.parent.size() == s.tokens.size());
      CHECK(s.relation.size() == s.tokens.size());
      CHECK_NOTHROW(ch15::check_parents(s.parent));
      CHECK(s.pronoun < s.tokens.size());
      CHECK(s.antecedent < s.tokens.size());
    }
  }

  TEST_CASE("the binomial tree's schedule: every rank but 0 sends once, rank 0 receives ⌈log₂P⌉ times") {
    for (std::size_t P = 1; P <= 9; ++P) {
      std::vector<std::size_t> sends(P, 0), receives(P, 0);
      for (std::size_t round = 0; round < ch15::ceil_log2(P); ++round)
        for (std::size_t r = 0; r < P; ++r) {
          const ch15::TreeStep s = ch15::tree_step(r, round, P);
          sends[r] += s.sends;
          receives[r] += s.receives;
          if (s.sends) CHECK(ch15::tree_step(s.partner, round, P).receives);
        }
      CAPTURE(P);
      CHECK(sends[0] == 0);
      for (std::size_t r = 1; r < P; ++r) CHECK(sends[r] == 1);
      CHECK(receives[0] == ch15::ceil_log2(P));
    }
  }

  TEST_CASE(
      "the node classifier's backward equals central differences of the float64 oracle, each structure, with and "
      "without a residual") {
    // Central differences with h ≈ 1e-3 on the float64 oracle: truncation error ~h²·|f'''| ≈ 1e-6 for these O(1)
    // losses, rounding ~1e-13; the float32 backward of a 6-node model rounds at a few 1e-7 relative. Hence
    // 2e-5 absolute and 2e-3 relative; a missing term (the LeakyReLU's slope, a sum over the wrong axis)
    // is off by 1e-2 or more. A kink within h of a score would break it; these weights put none there.
    attn::Rng rng(1513);
    const ch15::Graph g = {6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {1, 5}}};
    const std::vector<std::size_t> targets{0, attn::ch12::kIgnore, 1, 1, attn::ch12::kIgnore, 0};
    for (int variant = 0; variant < 6; ++variant) {
      const auto s = static_cast<ch15::Structure>(variant % 3);
      const bool residual = variant >= 3;
      CAPTURE(ch15::structure_name(s));
      CAPTURE(residual);
      const ch15::NodeTask task{rng.normal(6, 4), ch15::adjacency_mask(g, true), ch15::hop_distances(g), s, 0.2f,
                                residual};
      ch15::NodeModel model = ch15::init_node_model(4, 3, 3, 2, 77);
      model.b = rng.normal(1, 3);
      const ch15::NodeTrace trace = ch15::node_forward(model, task);
      const attn::LossAndGrad lg = attn::cross_entropy(trace.logits, targets);
      ch15::NodeModel grads = ch15::node_backward(model, task, trace, lg.dlogits);
      const std::vector<bool> allowed = attn::test::to_oracle(task.allowed);
      const std::vector<std::size_t> hops(task.hops.begin(), task.hops.end());
      const auto loss = [&](const ch15::NodeModel& m) {
        const oracle::Mat logits = oracle::node_logits(to_oracle(task.X), to_oracle(m.W), to_vector(xt::flatten(m.a)),
                                                       to_vector(xt::flatten(m.b)), to_oracle(m.W_out), allowed, hops,
                                                       static_cast<int>(s), 0.2, residual);
        return oracle::cross_entropy(logits, targets);
      };
      std::vector<attn::Matrix*> params = ch15::parameters(model), grad = ch15::parameters(grads);
      for (std::size_t p = 0; p < params.size(); ++p) {
        oracle::Mat numeric(params[p]->shape(0), params[p]->shape(1));
        for (std::size_t k = 0; k < params[p]->size(); ++k) {
          const float keep = params[p]->data()[k];
          // The weights are float32: the step taken is what float32 holds of keep ± 1e-3, measured exactly.
          const float up_w = keep + 1e-3f, down_w = keep - 1e-3f;
          params[p]->data()[k] = up_w;
          const double up = loss(model);
          params[p]->data()[k] = down_w;
          const double down = loss(model);
          params[p]->data()[k] = keep;
          numeric.v[k] = (up - down) / (static_cast<double>(up_w) - static_cast<double>(down_w));
        }
        CAPTURE(p);
        const auto cmp = attn::test::allclose(*grad[p], numeric, 2e-5, 2e-3);
        CHECK_MESSAGE(cmp.ok, cmp.report);
      }
    }
  }
}

// The defects hostile calls found in the contract's reference answers, one case per exercise they belong to.
TEST_SUITE("15_structured/message_passing") {
  TEST_CASE("with d_k = 0 every score is 0, so each node gets the plain mean of its senders' values") {
    // All NaN before: the empty dot product 0 times 1/√0 = ∞.
    const Matrix none = xt::zeros<float>({3, 0});
    const Matrix V{{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 9.0f}};
    const Matrix out = ch15::message_passing(none, none, V, {{0, 1}, {0, 1, 2}, {}});
    const Matrix expected{{2.0f, 3.0f}, {3.0f, 5.0f}, {0.0f, 0.0f}};  // weights e^0 = 1: sums of small integers, exact
    CHECK(out == expected);
  }
}

TEST_SUITE("15_structured/gat_scores") {
  TEST_CASE("finite features past float's range are refused by the course's overflow policy, not turned into NaN") {
    // a_l·h = +∞ and a_r·h = −∞ for every pair: NaN before.
    const Matrix H = xt::full_like(Matrix(xt::zeros<float>({3, 2})), 2e38f);
    const Vector a{1.0f, 1.0f, -1.0f, -1.0f};
    CHECK_THROWS_NAMING(ch15::gat_scores(H, a), std::invalid_argument, "gat_scores", "max|a|", "max|H|");
    CHECK_THROWS_NAMING(ch15::gat_scores(H, Vector{1.0f, std::nanf(""), 0.0f, 0.0f}), std::invalid_argument, "a", "1");
  }
}

TEST_SUITE("15_structured/gatv2_scores") {
  TEST_CASE("finite projections past float's range are refused, or answered when a makes them weigh nothing") {
    const Matrix L = xt::full_like(Matrix(xt::zeros<float>({2, 2})), 3e38f), R = L;
    // l + r overflowed to ∞ and a zero a_c times ∞ gave NaN.
    const Matrix E = ch15::gatv2_scores(L, R, Vector(xt::zeros<float>({2})));
    CHECK(E == Matrix(xt::zeros<float>({2, 2})));
    CHECK_THROWS_NAMING(ch15::gatv2_scores(L, R, Vector(xt::ones<float>({2}))), std::invalid_argument, "gatv2_scores",
                        "max|L|");
  }

  TEST_CASE("2^32 nodes of width 0 are refused with the (n, n) estimate instead of wrapping to 0 bytes") {
    const Matrix wide = Matrix::from_shape({std::size_t{1} << 32, 0});  // no values, 2^32 rows
    CHECK_THROWS_NAMING(ch15::gatv2_scores(wide, wide, Vector(xt::zeros<float>({0}))), std::invalid_argument,
                        "gatv2_scores", "4294967296");
    CHECK_THROWS_NAMING(ch15::gat_scores(wide, Vector(xt::zeros<float>({0}))), std::invalid_argument, "gat_scores",
                        "4294967296");
  }
}

TEST_SUITE("15_structured/subtree_mask") {
  TEST_CASE("a chain of 2^20 tokens is refused with the mask's estimate, after a linear check of the tree") {
    const std::size_t n = std::size_t{1} << 20;
    std::vector<long> chain(n);
    for (std::size_t i = 0; i < n; ++i) chain[i] = static_cast<long>(i) - 1;
    CHECK_THROWS_NAMING(ch15::subtree_mask(chain), std::invalid_argument, "subtree_mask", "available");
  }
}

TEST_SUITE("15_structured/merge_packed") {
  TEST_CASE("a d_v whose operands cannot exist is refused before anything is read or written") {
    float in[3] = {0.0f, 1.0f, 2.0f}, inout[3] = {0.0f, 3.0f, 4.0f};
    CHECK_THROWS_NAMING(ch15::merge_packed(in, inout, 1, std::size_t{1} << 63), std::invalid_argument, "merge_packed");
    CHECK_THROWS_NAMING(ch15::merge_packed(in, inout, 2, std::numeric_limits<std::size_t>::max()),
                        std::invalid_argument, "d_v + 1");
    CHECK_THROWS_NAMING(ch15::merge_packed(in, inout, std::size_t{1} << 62, 3), std::invalid_argument, "merge_packed");
    CHECK(inout[1] == 3.0f);
  }
}
