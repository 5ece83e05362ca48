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
  return "?";
}

NodeModel init_node_model(std::size_t d_in, std::size_t d, std::size_t B, std::size_t classes, std::uint64_t seed) {
  require(
      d_in > 0 && d > 0 && B > 0 && classes > 0,
      fmt::format("init_node_model: d_in = {}, d = {}, B = {}, classes = {}: all must be ≥ 1", d_in, d, B, classes));
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
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < logits.shape(0); ++i) {
    const Matrix::value_type* row = logits.data() + i * logits.shape(1);
    out.push_back(static_cast<std::size_t>(std::max_element(row, row + logits.shape(1)) - row));
  }
  return out;
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
  const std::size_t n = task.X.shape(0), d = m.W.shape(1), B = m.b.shape(1);
  require(dlogits.shape() == t.logits.shape() && t.H.shape(0) == n && t.A.shape(0) == n && m.a.size() == 2 * d &&
              task.hops.shape(0) == n && task.hops.shape(1) == n,
          fmt::format("node_backward: dlogits {}, logits {}, H {}, A {}, a {}, hops {} do not fit n = {}, d = {}",
                      shape_str(dlogits), shape_str(t.logits), shape_str(t.H), shape_str(t.A), shape_str(m.a),
                      shape_str(task.hops), n, d));
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
