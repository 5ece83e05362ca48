/// \file
/// Chapter 15, structured attention: the contract the learner implements in
/// exercises/15_structured/structured.cpp. Book page: book/15_structured.md.
///
/// Attention is message passing on a graph: every node (token) sends a message to the nodes that listen to
/// it, each listener weighs what it hears with a softmax and sums. Chapter 02's attention is that on the
/// complete graph; a graph's edges make it masked attention (Graph Attention, GAT); a distance on the graph
/// added to the scores makes it a soft prior (Graphormer). Trees are graphs too (a dependency parse), and the
/// merge of chapter 13 reduces partial results over P ranks along a tree.
#pragma once

#include <cstddef>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::ch15 {

/// \defgroup ch15 Chapter 15: structured attention
/// Message passing, GAT and GATv2 scores, the masked GAT layer, the hop-distance bias, the subtree mask of a
/// parent array, and the (lse, O) merge as the body of an MPI reduction.
/// @{

/// For every node i, the nodes it hears from (its in-neighbours, i itself included when it has a self-loop),
/// in increasing order: (n) lists.
using Neighbours = std::vector<std::vector<std::size_t>>;

/// Hop distances between nodes: (n, n), kUnreachable where no path exists.
using Hops = xt::xtensor<std::size_t, 2>;

/// The distance of two nodes that no path joins.
inline constexpr std::size_t kUnreachable = static_cast<std::size_t>(-1);

/// One GAT head: W projects a node's features, a scores a pair of projected nodes.
struct GatHead {
  Matrix W;  ///< (d_in, d_head)
  Vector a;  ///< (2·d_head): the first d_head entries read the listener h_i, the last d_head the sender h_j
};

// --- the exercises --------------------------------------------------------------------------------------

/// Attention as message passing. Every node j sends node i the message (s_ij, v_j) with
/// s_ij = q_i·k_j / √d_k; node i aggregates its messages with a softmax over the nodes it hears from and
/// updates to the weighted mean: out_i = Σ_{j ∈ in[i]} softmax_j(s_ij) v_j. A node that hears from nobody
/// (an isolated node) gets out_i = 0, never NaN. With in[i] = every node this is chapter 02's attention;
/// with a graph's edges it is attention masked to the graph. The graph may be directed: in[i] lists whom i hears,
/// and j ∈ in[i] says nothing of in[j]. Work and memory grow with the edges (Σ|in[i]|), not with n²: no (n, n)
/// matrix is formed (the tests bound the heap). With d_k = 0 every score is 0 (an empty dot
/// product) and a node's output is the plain mean of its senders' values.
/// \param Q (n, d_k) one query per node.
/// \param K (n, d_k) one key per node.
/// \param V (n, d_v) one value per node.
/// \param in (n) node i hears from the nodes in in[i].
/// \return (n, d_v).
/// \throws std::invalid_argument naming the shapes when Q, K, V and in differ in n or Q and K in d_k,
///         naming the id when a neighbour id is ≥ n, and as the course's overflow policy says
///         (attn/checks.hpp's require_attention_inputs()): naming a NaN/Inf, or Q and K so large a score
///         could overflow.
Matrix message_passing(const Matrix& Q, const Matrix& K, const Matrix& V, const Neighbours& in);

/// GAT's scores (Veličković et al. 2018): e_ij = LeakyReLU(aᵀ[h_i ‖ h_j]) = LeakyReLU(a_l·h_i + a_r·h_j),
/// with a_l = a[0, d), a_r = a[d, 2d). For every pair, before any mask.
/// \param H (n, d) projected node features, H = X·W.
/// \param a (2·d) the attention vector.
/// \param slope LeakyReLU's slope for negative inputs, in [0, 1) (GAT uses 0.2).
/// \return (n, n) e_ij for listener i and sender j.
/// \throws std::invalid_argument naming the shapes when a is not (2·d), or naming the slope; as the course's
///         overflow policy says (attn/checks.hpp's require_bounded_products()): naming the first NaN/Inf of a or
///         H, or when 2d · max|a| · max|H| is past float's range / 4 (a score could overflow); and naming the
///         estimate when the (n, n) scores would not fit in memory, before allocating.
Matrix gat_scores(const Matrix& H, const Vector& a, float slope = 0.2f);

/// GATv2's scores (Brody et al. 2022): the nonlinearity moves inside, e_ij = Σ_c a_c·LeakyReLU(L_ic + R_jc),
/// where L = X·W_l and R = X·W_r are the listener's and the sender's projections (W = [W_l; W_r] applied
/// to [x_i ‖ x_j]).
/// \param L (n, d) listener projections.
/// \param R (n, d) sender projections: the same n as L (one of each per node; a different row count is refused).
/// \param a (d) the attention vector.
/// \param slope LeakyReLU's slope for negative inputs, in [0, 1).
/// \return (n, n) e_ij, finite for every input the checks let through: L_ic + R_jc of two finite floats may pass
///         float's range (two entries near 3e38), so form it in double (with a = 0 every e_ij is then 0, never
///         0 · inf = NaN).
/// \throws std::invalid_argument naming the shapes when L, R and a do not fit, or naming the slope; as the
///         course's overflow policy says (require_bounded_products()): naming the first NaN/Inf of a, L or R, or
///         when 2d · max|a| · max|L| or 2d · max|a| · max|R| is past float's range / 4; and naming the estimate
///         when the (n, n) scores would not fit in memory, before allocating.
Matrix gatv2_scores(const Matrix& L, const Matrix& R, const Vector& a, float slope = 0.2f);

/// A multi-head GAT layer: per head k, H = X·W_k, scores gat_scores(H, a_k, slope), disallowed pairs
/// removed, a softmax over each row's allowed senders, out_k = A·H; the heads' outputs side by side.
/// A node with no allowed sender gets zeros.
/// \param X (n, d_in) node features.
/// \param heads (h) the heads; every W is (d_in, d_head) with the same d_head, every a (2·d_head).
/// \param allowed (n, n), true = node i may hear node j: row i is listener i (a directed graph's mask is not
///        symmetric, and allowed(j, i) says nothing of i hearing j). GAT adds the self-loops: see adjacency_mask().
/// \param slope LeakyReLU's slope, in [0, 1).
/// \return (n, h·d_head): columns [k·d_head, (k+1)·d_head) are head k's.
/// \throws std::invalid_argument naming the shapes when X, the heads and the mask do not fit, when heads
///         is empty, or naming the slope; as the course's overflow policy says (require_bounded_products()) for
///         X and each W (d_in · max|X| · max|W|), then as gat_scores() does for each head's a and H.
Matrix gat_layer(const Matrix& X, const std::vector<GatHead>& heads, const Mask& allowed, float slope = 0.2f);

/// Graphormer's spatial bias: B_ij = b[min(hops_ij, B − 1)] for a table b of B entries, so b[0] is a node's
/// bias towards itself, b[1] towards its neighbours, …, and b[B − 1] towards everything B − 1 or more hops
/// away, the unreachable included.
/// \param hops (n, n) hop distances (kUnreachable where no path exists).
/// \param b (B) one learned bias per distance, B ≥ 1.
/// \return (n, n) the bias added to the scores.
/// \throws std::invalid_argument when b is empty or hops is not square.
Matrix hop_bias(const Hops& hops, const Vector& b);

/// The subtree mask of a rooted tree given by its parent array: token i may attend to token j exactly when
/// j lies in i's subtree (j = i, a child of i, a child of a child, …). The root sees every token; a leaf
/// only itself.
/// \param parent (n) parent[i] is i's parent, −1 for the one root.
/// \return (n, n), true = i may attend to j.
/// \throws std::invalid_argument (see check_parents()) when parent is not one tree, or naming the estimate when
///         the (n, n) mask would not fit in memory, before allocating.
Mask subtree_mask(const std::vector<long>& parent);

/// The merge of two partial attention results, packed for an MPI reduction: \p rows rows of d_v + 1 floats,
/// [lse, O_0, …, O_{d_v−1}], each the result of the same queries over a different set of keys. On return
/// \p inout holds the result over both sets: lse = log(e^{lse_in} + e^{lse_inout}), O = the two O weighted
/// by e^{lse_part − lse} (chapter 13's merge, on packed rows). The result is exact for lse values far from 0
/// (±100 in the tests: e^100 overflows float, e^−104 is 0). A row with lse = −inf saw no key and weighs
/// nothing; both −inf stays lse = −inf, O = 0. The merge is commutative, and associative up to float
/// rounding (two orders of merging agree to the last bits, not bit for bit), so MPI_Allreduce may apply it in
/// any tree and gets the same result to rounding.
/// \param in (rows, d_v + 1) one packed operand, read only.
/// \param inout (rows, d_v + 1) the other packed operand, overwritten with the merge.
/// \param rows number of query rows.
/// \param d_v the value size.
/// \throws std::invalid_argument, before anything is read or written, when a pointer is null (with rows > 0), or
///         an operand's bytes, rows·(d_v + 1)·4, do not fit in 64 bits (no such operand exists: naming d_v + 1
///         when that sum itself wraps); before anything is written, when an lse is NaN or +inf or an O holds a NaN
///         or infinity.
void merge_packed(const float* in, float* inout, std::size_t rows, std::size_t d_v);

/// @}

}  // namespace attn::ch15
