/// \file
/// Chapter 15's oracle: GAT and GATv2 scores, one masked GAT head, the subtree relation of a tree and the node
/// classifier of chapters/15_structured/node_model.hpp, written as the definitions read in float64 loops.
#pragma once

#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// e_ij = LeakyReLU(Σ_c a_c H_ic + Σ_c a_{d+c} H_jc): H (n, d), a (2d) → (n, n).
Mat gat_scores(const Mat& H, const std::vector<double>& a, double slope);

/// e_ij = Σ_c a_c LeakyReLU(L_ic + R_jc): L, R (n, d), a (d) → (n, n).
Mat gatv2_scores(const Mat& L, const Mat& R, const std::vector<double>& a, double slope);

/// One GAT head: H = X·W, per row a softmax of the scores over the allowed senders (none: zeros), times H.
/// X (n, d_in), W (d_in, d), a (2d), allowed (n·n, row-major) → (n, d).
Mat gat_head(const Mat& X, const Mat& W, const std::vector<double>& a, const std::vector<bool>& allowed, double slope);

/// allowed(i, j) = j is i or a descendant of i, found by a depth-first walk down from i over the children
/// lists of \p parent (−1 for the root): (n·n, row-major).
std::vector<bool> subtree_relation(const std::vector<long>& parent);

/// The node classifier's logits: H = X·W, E = gat_scores(H, a), S = E (structure 0), E with −inf where not
/// allowed (1), or E + b[min(hops, B − 1)] (2); A = softmax rows (all −inf: zeros); logits = (A·H + H)·W_out
/// with a residual, A·H·W_out without. hops (n·n, row-major).
Mat node_logits(const Mat& X, const Mat& W, const std::vector<double>& a, const std::vector<double>& b,
                const Mat& W_out, const std::vector<bool>& allowed, const std::vector<std::size_t>& hops, int structure,
                double slope, bool residual);

}  // namespace attn::oracle
