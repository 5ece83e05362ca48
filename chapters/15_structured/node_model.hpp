/// \file
/// Chapter 15's node classifier: one GAT-scored attention layer and a linear read-out, trained with chapter
/// 12's cross-entropy and AdamW. The structure of the graph enters in one of three ways: not at all (every
/// node hears every node), as a hard mask (GAT: only neighbours and the node itself), or as a learned bias
/// per hop distance added to every score (Graphormer's spatial encoding).
/// The forward and the training loop are header-only because they call the contract (gat_scores(),
/// hop_bias()), which each track supplies; the backward is chapter code (node_model.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "02_qkv_trace/qkv_trace.hpp"
#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "15_structured/graph.hpp"
#include "15_structured/structured.hpp"
#include "attn/rng.hpp"

namespace attn::ch15 {

/// \addtogroup ch15
/// @{

/// How the graph enters the scores.
enum class Structure {
  none,  ///< plain attention over all nodes: the graph is not used
  mask,  ///< GAT: −inf off the graph's edges (self-loops kept)
  bias,  ///< Graphormer: + b[min(hops, B − 1)] on every score, b learned
};

/// The name of \p s for tables: "no graph", "hard mask (GAT)", "hop bias".
/// \throws std::invalid_argument naming the value when \p s is none of Structure's.
std::string structure_name(Structure s);

/// The weights of the classifier. a and b are (1, ·) matrices so that chapter 12's adamw_step() updates them.
struct NodeModel {
  Matrix W;      ///< (d_in, d) node features → projected features H
  Matrix a;      ///< (1, 2·d) GAT's attention vector
  Matrix b;      ///< (1, B) bias per hop distance (Structure::bias only)
  Matrix W_out;  ///< (d, classes) read-out
};

/// The graph and the features a model is trained on.
struct NodeTask {
  Matrix X;      ///< (n, d_in) node features
  Mask allowed;  ///< (n, n) the graph with self-loops (adjacency_mask(g, true))
  Hops hops;     ///< (n, n) hop distances
  Structure structure = Structure::mask;
  float slope = 0.2f;     ///< LeakyReLU's slope
  bool residual = false;  ///< Z = A·H + H: each node keeps its own features beside what it hears
};

/// What the forward keeps for the backward.
struct NodeTrace {
  Matrix H;       ///< (n, d) X·W
  Matrix E;       ///< (n, n) GAT scores, before mask or bias
  Matrix A;       ///< (n, n) attention weights
  Matrix Z;       ///< (n, d) A·H (+ H with a residual)
  Matrix logits;  ///< (n, classes) Z·W_out
};

/// A fresh model: W, a and W_out normal with variance 1/fan-in, b zero (the bias starts neutral).
/// \throws std::invalid_argument when a size is 0, when B is more than 2^20 + 1 (the hop distances of the chapter's
///         largest graph), or when a matrix would not fit in memory (naming the estimate, before allocating it).
NodeModel init_node_model(std::size_t d_in, std::size_t d, std::size_t B, std::size_t classes, std::uint64_t seed);
/// Zeros of the model's shapes (gradients, AdamW moments).
NodeModel zeros_like(const NodeModel& m);
/// The weights in a fixed order, for the optimiser.
std::vector<Matrix*> parameters(NodeModel& m);

/// ∂loss/∂weights from ∂loss/∂logits (chapter code: it does not call the contract).
/// dZ = dlogits·W_outᵀ; dA = dZ·Hᵀ; dS = chapter 10's softmax_backward(A, dA); the bias table gathers dS by
/// distance; through the LeakyReLU, row sums of dE reach a_l and h_i, column sums a_r and h_j.
/// \throws std::invalid_argument as check_node_model() does, naming the shapes when the trace, the task and the model
///         do not fit, or naming the first NaN/Inf of \p dlogits.
NodeModel node_backward(const NodeModel& m, const NodeTask& task, const NodeTrace& trace, const Matrix& dlogits);

/// Checks a task before any work: \p task.structure one of Structure's values, the slope in [0, 1), and what
/// that structure reads of the graph exactly (n, n) for the n rows of X: the mask for Structure::mask, the hops
/// for Structure::bias. A (1, 1) mask would otherwise broadcast over every pair: training with no graph at all.
/// \throws std::invalid_argument naming the shapes (or the value) that do not fit.
void check_node_task(const NodeTask& task);

/// Checks that \p m fits \p task (and the task itself, check_node_task()): W (d_in, d) for X's d_in columns, a
/// (1, 2·d), W_out (d, classes ≥ 1), and b (1, B ≥ 1) for Structure::bias; every weight finite; and X and W
/// within the course's overflow policy (d_in · max|X| · max|W|, attn/checks.hpp), so that H = X·W is finite.
/// \throws std::invalid_argument naming the shapes that do not fit, or the weight or input at fault.
void check_node_model(const NodeModel& m, const NodeTask& task);

// [node_forward]
/// The forward: H = X·W, E = gat_scores(H, a), scores S = E (none), E masked to the graph (mask) or
/// E + hop_bias(hops, b) (bias); A = softmax_rows(S); Z = A·H (+ H); logits = Z·W_out.
/// \throws std::invalid_argument as check_node_model() does, before any work, and as gat_scores() does.
inline NodeTrace node_forward(const NodeModel& m, const NodeTask& task) {
  check_node_model(m, task);
  NodeTrace t;
  t.H = matmul(task.X, m.W);                            // (n, d)
  t.E = gat_scores(t.H, xt::flatten(m.a), task.slope);  // (n, n)
  Matrix S = t.E;                                       // (n, n)
  if (task.structure == Structure::mask) S = xt::where(task.allowed, t.E, -std::numeric_limits<float>::infinity());
  if (task.structure == Structure::bias) S = t.E + hop_bias(task.hops, xt::flatten(m.b));
  t.A = softmax_rows(S);   // (n, n)
  t.Z = matmul(t.A, t.H);  // (n, d)
  if (task.residual) t.Z += t.H;
  t.logits = matmul(t.Z, m.W_out);  // (n, classes)
  return t;
}
// [node_forward]

/// How to train.
struct NodeTraining {
  std::size_t d = 8;        ///< projected features
  std::size_t B = 4;        ///< hop-bias table: 0, 1, 2 and "3 or more" hops
  std::size_t steps = 150;  ///< full-batch AdamW steps
  AdamW adamw{0.05f, 0.9f, 0.999f, 1e-8f, 5e-4f};
};

/// A trained model and what it predicts.
struct NodeResult {
  NodeModel model;
  NodeTrace trace;                     ///< the forward of the trained model
  std::vector<std::size_t> predicted;  ///< (n) argmax of the logits
  double accuracy = 0.0;               ///< on the nodes without a label in training
};

// [node_step]
/// One AdamW step (number \p t, from 1) of \p model on the cross-entropy of the nodes of \p task whose target
/// is a class (chapter 12's kIgnore elsewhere); \p m and \p v are AdamW's moments. Returns the loss.
inline double node_step(NodeModel& model, NodeModel& m, NodeModel& v, std::size_t t, const NodeTask& task,
                        const std::vector<std::size_t>& targets, const AdamW& settings) {
  const NodeTrace trace = node_forward(model, task);
  const LossAndGrad lg = cross_entropy(trace.logits, targets);  // chapter 12
  NodeModel grads = node_backward(model, task, trace, lg.dlogits);
  std::vector<Matrix*> P = parameters(model), G = parameters(grads), M = parameters(m), V = parameters(v);
  for (std::size_t k = 0; k < P.size(); ++k) adamw_step(*P[k], *G[k], *M[k], *V[k], t, settings);  // chapter 12
  return lg.loss;
}
// [node_step]

/// The predicted class of every node: the argmax of its row of \p logits (n, classes).
/// \throws std::invalid_argument when there are rows but no class, or naming the first NaN/Inf of \p logits.
std::vector<std::size_t> predictions(const Matrix& logits);

/// The fraction of nodes with a target (not kIgnore) whose prediction equals it; 0 when none has one.
double accuracy_on(const std::vector<std::size_t>& predicted, const std::vector<std::size_t>& targets);

/// Checks train_nodes()' labels before any work.
/// \throws std::invalid_argument naming the entry when labels is not (n), a label is ≥ classes, or a labelled node
///         is ≥ n.
void check_node_labels(const std::vector<std::size_t>& labels, const std::vector<std::size_t>& labelled, std::size_t n,
                       std::size_t classes);

// [train_nodes]
/// Trains a fresh model (\p seed) full-batch on the labels of the nodes in \p labelled (the others are
/// chapter 12's kIgnore targets), and scores it on the rest.
/// \param task the graph, the features and how the graph enters the scores.
/// \param labels (n) every node's true class, < classes.
/// \param labelled the nodes whose label the loss sees.
/// \param classes number of classes.
/// \param s sizes, steps and AdamW settings.
/// \param seed the model's initialisation.
/// \throws std::invalid_argument as check_node_task(), check_node_labels() and init_node_model() do, before
///         training.
inline NodeResult train_nodes(const NodeTask& task, const std::vector<std::size_t>& labels,
                              const std::vector<std::size_t>& labelled, std::size_t classes, const NodeTraining& s,
                              std::uint64_t seed) {
  check_node_task(task);
  check_node_labels(labels, labelled, task.X.shape(0), classes);
  std::vector<std::size_t> targets(task.X.shape(0), ch12::kIgnore), unseen = labels;  // (n) each
  for (std::size_t i : labelled) {
    targets.at(i) = labels.at(i);
    unseen.at(i) = ch12::kIgnore;  // scored on the nodes the loss did not see
  }
  NodeResult r{init_node_model(task.X.shape(1), s.d, s.B, classes, seed), {}, {}, 0.0};
  NodeModel m = zeros_like(r.model), v = zeros_like(r.model);
  for (std::size_t t = 1; t <= s.steps; ++t) node_step(r.model, m, v, t, task, targets, s.adamw);
  r.trace = node_forward(r.model, task);
  r.predicted = predictions(r.trace.logits);
  r.accuracy = accuracy_on(r.predicted, unseen);
  return r;
}
// [train_nodes]

/// @}

}  // namespace attn::ch15
