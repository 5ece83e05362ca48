// Chapter 15's node classifier: initialisation and the backward, by hand as in chapter 12. The forward
// (node_model.hpp) calls the contract; this file does not, so both tracks share it.
#include "15_structured/node_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "10_backward/backward.hpp"

namespace attn::ch15 {

std::string structure_name(Structure s) {
  switch (s) {
    case Structure::none:
      return "no graph";
    case Structure::mask:
      return "hard mask (GAT)";
    case Structure::bias:
      return "hop bias";
  }
  throw std::invalid_argument(fmt::format("structure_name: {} is none of Structure's values", static_cast<int>(s)));
}

void check_node_task(const NodeTask& task) {
  structure_name(task.structure);  // refuses a value that is none of Structure's
  require(task.slope >= 0.0f && task.slope < 1.0f,
          fmt::format("check_node_task: slope = {} is outside [0, 1)", task.slope));
  const std::size_t n = task.X.shape(0);
  require(task.structure != Structure::mask || (task.allowed.shape(0) == n && task.allowed.shape(1) == n),
          fmt::format("check_node_task: the mask allowed is {} but X {} has n = {} nodes; the hard mask needs ({}, {})",
                      shape_str(task.allowed), shape_str(task.X), n, n, n));
  require(task.structure != Structure::bias || (task.hops.shape(0) == n && task.hops.shape(1) == n),
          fmt::format("check_node_task: hops is {} but X {} has n = {} nodes; the hop bias needs ({}, {})",
                      shape_str(task.hops), shape_str(task.X), n, n, n));
}

void check_node_model(const NodeModel& m, const NodeTask& task) {
  check_node_task(task);
  const std::size_t d_in = task.X.shape(1), d = m.W.shape(1);
  require(m.W.shape(0) == d_in && m.a.shape(0) == 1 && m.a.shape(1) == 2 * d && m.W_out.shape(0) == d &&
              m.W_out.shape(1) > 0 && (task.structure != Structure::bias || (m.b.shape(0) == 1 && m.b.shape(1) > 0)),
          fmt::format("check_node_model: X {}, W {}, a {}, b {}, W_out {} do not fit: need W (d_in, d) = ({}, ·), a "
                      "(1, 2·d), W_out (d, classes ≥ 1) and, for the hop bias, b (1, B ≥ 1)",
                      shape_str(task.X), shape_str(m.W), shape_str(m.a), shape_str(m.b), shape_str(m.W_out), d_in));
  for (const auto& [name, w] :
       {std::pair<const char*, const Matrix*>{"W", &m.W}, {"a", &m.a}, {"b", &m.b}, {"W_out", &m.W_out}})
    require_finite("check_node_model", name, w->data(), w->size());
  // The course's overflow policy on H = X·W (its entries are sums of d_in products), so that H is a finite float.
  require_bounded_products("check_node_model", "X", task.X.data(), task.X.size(), "W", m.W.data(), m.W.size(), d_in);
}

NodeModel init_node_model(std::size_t d_in, std::size_t d, std::size_t B, std::size_t classes, std::uint64_t seed) {
  require(
      d_in > 0 && d > 0 && B > 0 && classes > 0,
      fmt::format("init_node_model: d_in = {}, d = {}, B = {}, classes = {}: all must be ≥ 1", d_in, d, B, classes));
  // One bias per hop distance: a graph of the chapter has at most 2^20 nodes, so no distance is longer than that.
  require(B <= (std::size_t{1} << 20) + 1,
          fmt::format("init_node_model: B = {} hop-bias entries; distances on a graph of at most 2^20 nodes need at "
                      "most 2^20 + 1",
                      B));
  checked_allocation("init_node_model: the hop-bias table b, B floats", {B, sizeof(float)});  // Rng checks the rest
  Rng rng(seed);
  const auto std_of = [](std::size_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };
  NodeModel m;
  m.W = rng.normal(d_in, d, 0.0f, std_of(d_in));
  m.a = rng.normal(1, 2 * d, 0.0f, std_of(d));
  m.b = xt::zeros<float>({std::size_t{1}, B});
  m.W_out = rng.normal(d, classes, 0.0f, std_of(d));
  return m;
}

NodeModel zeros_like(const NodeModel& m) {
  return {xt::zeros_like(m.W), xt::zeros_like(m.a), xt::zeros_like(m.b), xt::zeros_like(m.W_out)};
}

std::vector<Matrix*> parameters(NodeModel& m) { return {&m.W, &m.a, &m.b, &m.W_out}; }

std::vector<std::size_t> predictions(const Matrix& logits) {
  // No class, or a NaN (which max_element's comparisons skip), would give an index that means nothing.
  require(logits.shape(1) > 0 || logits.shape(0) == 0,
          fmt::format("predictions: logits {} have no class to predict", shape_str(logits)));
  require_finite("predictions", "logits", logits.data(), logits.size());
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < logits.shape(0); ++i) {
    const Matrix::value_type* row = logits.data() + i * logits.shape(1);
    out.push_back(static_cast<std::size_t>(std::max_element(row, row + logits.shape(1)) - row));
  }
  return out;
}

void check_node_labels(const std::vector<std::size_t>& labels, const std::vector<std::size_t>& labelled, std::size_t n,
                       std::size_t classes) {
  require(labels.size() == n, fmt::format("train_nodes: {} labels for n = {} nodes; one per node", labels.size(), n));
  for (std::size_t i = 0; i < n; ++i)
    require(labels[i] < classes,
            fmt::format("train_nodes: labels[{}] = {} is not a class (classes = {})", i, labels[i], classes));
  for (std::size_t k = 0; k < labelled.size(); ++k)
    require(labelled[k] < n, fmt::format("train_nodes: labelled[{}] = {} is not a node (n = {})", k, labelled[k], n));
}

double accuracy_on(const std::vector<std::size_t>& predicted, const std::vector<std::size_t>& targets) {
  require(predicted.size() == targets.size(),
          fmt::format("accuracy_on: {} predictions for {} targets", predicted.size(), targets.size()));
  std::size_t right = 0, counted = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == ch12::kIgnore) continue;
    ++counted;
    right += predicted[i] == targets[i];
  }
  return counted ? static_cast<double>(right) / static_cast<double>(counted) : 0.0;
}

// [node_backward]
NodeModel node_backward(const NodeModel& m, const NodeTask& task, const NodeTrace& t, const Matrix& dlogits) {
  check_node_model(m, task);  // b (1, B ≥ 1) among them: its gradient is indexed by min(hops, B − 1)
  const std::size_t n = task.X.shape(0), d = m.W.shape(1), B = m.b.shape(1);
  require(
      dlogits.shape() == t.logits.shape() && t.logits.shape(0) == n && t.logits.shape(1) == m.W_out.shape(1) &&
          t.H.shape(0) == n && t.H.shape(1) == d && t.Z.shape() == t.H.shape() && t.A.shape(0) == n &&
          t.A.shape(1) == n && t.E.shape() == t.A.shape() && m.a.size() == 2 * d && m.W_out.shape(0) == d &&
          task.hops.shape(0) == n && task.hops.shape(1) == n,
      fmt::format("node_backward: dlogits {}, logits {}, H {}, Z {}, A {}, E {}, a {}, W_out {}, hops {} do not fit "
                  "n = {}, d = {}",
                  shape_str(dlogits), shape_str(t.logits), shape_str(t.H), shape_str(t.Z), shape_str(t.A),
                  shape_str(t.E), shape_str(m.a), shape_str(m.W_out), shape_str(task.hops), n, d));
  require_finite("node_backward", "dlogits", dlogits.data(), dlogits.size());
  NodeModel g = zeros_like(m);
  g.W_out = matmul_transpose_a(t.Z, dlogits);        // (d, classes)
  const Matrix dZ = matmul(dlogits, m.W_out, true);  // (n, d)
  Matrix dH = matmul_transpose_a(t.A, dZ);           // (n, d): through Z = A·H
  if (task.residual) dH += dZ;                       // and through Z's + H
  const Matrix dA = matmul(dZ, t.H, true);           // (n, n)
  const Matrix dS = softmax_backward(t.A, dA);       // (n, n): chapter 10; zero where A is (masked pairs)
  if (task.structure == Structure::bias)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) g.b(0, std::min(task.hops(i, j), B - 1)) += dS(i, j);
  // Through e_ij = LeakyReLU(a_l·h_i + a_r·h_j): the slope of the LeakyReLU, then row sums to the listener,
  // column sums to the sender. E > 0 exactly where its input is.
  std::vector<float> row_sum(n, 0.0f), col_sum(n, 0.0f);  // (n) each
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const float dpre = dS(i, j) * (t.E(i, j) > 0.0f ? 1.0f : task.slope);
      row_sum[i] += dpre;
      col_sum[j] += dpre;
    }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < d; ++c) {
      g.a(0, c) += row_sum[i] * t.H(i, c);
      g.a(0, d + c) += col_sum[i] * t.H(i, c);
      dH(i, c) += row_sum[i] * m.a(0, c) + col_sum[i] * m.a(0, d + c);
    }
  g.W = matmul_transpose_a(task.X, dH);  // (d_in, d)
  return g;
}
// [node_backward]

}  // namespace attn::ch15
