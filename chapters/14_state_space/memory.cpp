// Chapter 14's recall task (see memory.hpp). Book page: book/14_state_space.md, "Attention vs memory".
#include "14_state_space/memory.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn::ch14 {

Matrix orthonormal_rows(Rng& rng, std::size_t m, std::size_t d) {
  require(m <= d, fmt::format("orthonormal_rows: m = {} rows cannot be orthogonal in d = {} dimensions", m, d));
  checked_allocation("orthonormal_rows: m × d floats", {m, d, sizeof(float)});  // before allocating
  Matrix Q = rng.normal(m, d);                                                  // (m, d)
  for (std::size_t i = 0; i < m; ++i) {
    // Subtract the parts along the rows before, twice (one pass of Gram–Schmidt loses orthogonality in float).
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t j = 0; j < i; ++j) {
        float dot = 0.0f;
        for (std::size_t c = 0; c < d; ++c) dot += Q(i, c) * Q(j, c);
        for (std::size_t c = 0; c < d; ++c) Q(i, c) -= dot * Q(j, c);
      }
    float norm = 0.0f;
    for (std::size_t c = 0; c < d; ++c) norm += Q(i, c) * Q(i, c);
    norm = std::sqrt(norm);
    for (std::size_t c = 0; c < d; ++c) Q(i, c) /= norm;
  }
  return Q;
}

RecallTask recall_task(const Matrix& K, const Matrix& V) {
  require(K.shape(0) == V.shape(0),
          fmt::format("recall_task: K is {} and V is {}; one value per key is needed", shape_str(K), shape_str(V)));
  require_finite("recall_task", "K", K.data(), K.size());
  require_finite("recall_task", "V", V.data(), V.size());
  const std::size_t m = K.shape(0), d_k = K.shape(1), d_v = V.shape(1);
  checked_allocation("recall_task: C, B and X, 2m × (2·d_k + d_v) floats",
                     {2, m, checked_sum("recall_task: 2·d_k + d_v", {d_k, d_k, d_v}), sizeof(float)});
  RecallTask task{xt::zeros<float>({2 * m, d_k}), xt::zeros<float>({2 * m, d_k}), xt::zeros<float>({2 * m, d_v})};
  xt::view(task.B, xt::range(0, m), xt::all()) = K;      // write: the key is the input matrix
  xt::view(task.X, xt::range(0, m), xt::all()) = V;      // ... and the value is the input
  xt::view(task.C, xt::range(m, 2 * m), xt::all()) = K;  // read: the key is the output matrix
  return task;
}

double relative_error(const Matrix& recalled, const Matrix& V) {
  require(recalled.shape() == V.shape(), fmt::format("relative_error: recalled is {} and V is {}; they need one shape",
                                                     shape_str(recalled), shape_str(V)));
  require_finite("relative_error", "recalled", recalled.data(), recalled.size());
  require_finite("relative_error", "V", V.data(), V.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < V.size(); ++i) {
    const double e = static_cast<double>(recalled.data()[i]) - V.data()[i];
    num += e * e;
    den += static_cast<double>(V.data()[i]) * V.data()[i];
  }
  // Against V = 0 the relative error is 0 when the recall is 0 too, and infinite otherwise (never 0: that would
  // call any recall of nothing perfect).
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

}  // namespace attn::ch14
