// Chapter 15, your exercises. Book page: book/15_structured.md.
// Check your progress with `./course check 15`; stuck? `./course hint 15`.
// Watch your code run the chapter: `./course run 15 --track exercise`.
#include "15_structured/structured.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "15_structured/graph.hpp"
#include "attn/checks.hpp"
#include "attn/errors.hpp"

namespace attn::ch15 {

namespace {
constexpr const char* kChapter = "15_structured";
}

Matrix message_passing(const Matrix& Q, const Matrix& K, const Matrix& V, const Neighbours& in) {
  // TODO(learner): for every node i: message = the score q_i·k_j / √d_k of each j in in[i]; aggregate = a
  //   softmax over those senders (subtract their max first) weighting v_j; update = the weighted mean.
  //   in[i] lists whom i hears: the graph may be directed (j in in[i] does not put i in in[j]). A node with an
  //   empty list gets a zero row. Work and memory grow with the edges: no (n, n) matrix. Check the shapes and
  //   the neighbour ids (< n) first.
  throw not_implemented("message_passing", kChapter,
                        "chapter 02's attention, but the softmax of node i runs over in[i] only, not over all n.");
}

Matrix gat_scores(const Matrix& H, const Vector& a, float slope) {
  // TODO(learner): e_ij = LeakyReLU(a_l·h_i + a_r·h_j) with a_l = a[0, d) and a_r = a[d, 2d).
  //   LeakyReLU(x) = x for x > 0, slope·x otherwise. Reject a of the wrong size and a slope outside [0, 1).
  throw not_implemented("gat_scores", kChapter,
                        "compute a_l·h_i and a_r·h_j once per node (two vectors of n), then add them for every pair.");
}

Matrix gatv2_scores(const Matrix& L, const Matrix& R, const Vector& a, float slope) {
  // TODO(learner): e_ij = Σ_c a_c · LeakyReLU(L_ic + R_jc): the nonlinearity comes BEFORE a mixes the
  //   coordinates. Reject shapes that do not fit and a slope outside [0, 1).
  throw not_implemented("gatv2_scores", kChapter,
                        "three nested loops (i, j, c); the LeakyReLU is applied to each coordinate of l_i + r_j.");
}

Matrix gat_layer(const Matrix& X, const std::vector<GatHead>& heads, const Mask& allowed, float slope) {
  // TODO(learner): for each head k: H = X·W_k; E = gat_scores(H, a_k, slope); -inf where allowed is false;
  //   A = softmax over each row (chapter 02's softmax_rows gives a row with no allowed entry zeros);
  //   columns [k·d_head, (k+1)·d_head) of the result = A·H. Check every head's shapes and the mask's.
  throw not_implemented("gat_layer", kChapter,
                        "xt::where(allowed, E, -inf) masks the scores; matmul() and softmax_rows() do the rest.");
}

Matrix hop_bias(const Hops& hops, const Vector& b) {
  // TODO(learner): B_ij = b[min(hops_ij, B - 1)]: the table's last entry covers every distance ≥ B - 1,
  //   kUnreachable included. An empty b and a non-square hops are std::invalid_argument.
  throw not_implemented("hop_bias", kChapter,
                        "b[0] is the distance 0 (the node itself), b[1] a neighbour: index b by the distance itself.");
}

Mask subtree_mask(const std::vector<long>& parent) {
  // TODO(learner): mask(i, j) = true when j is in i's subtree: i = j, or i is an ancestor of j.
  //   Validate the array with check_parents() first.
  throw not_implemented("subtree_mask", kChapter,
                        "from every j walk up the parents to the root, marking each node passed as able to see j.");
}

void merge_packed(const float* in, float* inout, std::size_t rows, std::size_t d_v) {
  // TODO(learner): merge the two partial results row by row into inout (each row is [lse, O_0 … O_{d_v-1}]):
  //   the merged lse is log(e^{lse_in} + e^{lse_inout}) and the merged O is the two O weighted by
  //   e^{lse − merged lse}. Rows whose lse is near ±100 must come out exact (neither overflow nor vanish), and
  //   a row whose two lse are −inf stays lse = −inf with O = 0. Refuse (std::invalid_argument) what
  //   structured.hpp lists: before reading anything, null pointers (with rows > 0) and operands whose bytes,
  //   rows·(d_v + 1)·4, pass 64 bits; before writing anything, an lse that is NaN or +inf and an O that is not
  //   finite.
  throw not_implemented("merge_packed", kChapter,
                        "the merged O is a weighted mean of the two O; e^{100} overflows float, so compare the two "
                        "lse before exponentiating.");
}

}  // namespace attn::ch15
