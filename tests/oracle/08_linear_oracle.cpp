// Chapter 08's oracle: linear attention by its definitions, in float64. Slow on purpose.
#include "oracle/08_linear_oracle.hpp"

#include <cmath>
#include <stdexcept>

namespace attn::oracle {

Mat elu_plus_one(const Mat& X) {
  Mat phi(X.rows, X.cols);
  for (std::size_t i = 0; i < X.v.size(); ++i) phi.v[i] = X.v[i] > 0.0 ? X.v[i] + 1.0 : std::exp(X.v[i]);
  return phi;
}

Mat positive_random_features(const Mat& X, const Mat& Omega) {
  if (X.cols != Omega.cols) throw std::invalid_argument("oracle::positive_random_features: X and Omega differ in d");
  const double d = static_cast<double>(X.cols), m = static_cast<double>(Omega.rows);
  Mat phi(X.rows, Omega.rows);
  for (std::size_t i = 0; i < X.rows; ++i) {
    double norm2 = 0.0;
    for (std::size_t c = 0; c < X.cols; ++c) norm2 += X(i, c) * X(i, c);
    for (std::size_t r = 0; r < Omega.rows; ++r) {
      double proj = 0.0;
      for (std::size_t c = 0; c < X.cols; ++c) proj += Omega(r, c) * X(i, c);
      phi(i, r) = std::exp(proj / std::pow(d, 0.25) - norm2 / (2.0 * std::sqrt(d))) / std::sqrt(m);
    }
  }
  return phi;
}

Mat linear_attention(const Mat& phiQ, const Mat& phiK, const Mat& V, bool causal, double decay) {
  if (phiQ.cols != phiK.cols || phiK.rows != V.rows || (causal && phiQ.rows != phiK.rows))
    throw std::invalid_argument("oracle::linear_attention: shapes do not fit");
  Mat O(phiQ.rows, V.cols);
  for (std::size_t i = 0; i < phiQ.rows; ++i) {
    double total = 0.0;
    std::vector<double> o(V.cols, 0.0);
    const std::size_t last = causal ? i + 1 : phiK.rows;
    for (std::size_t j = 0; j < last; ++j) {
      double w = 0.0;
      for (std::size_t r = 0; r < phiQ.cols; ++r) w += phiQ(i, r) * phiK(j, r);
      if (causal) w *= std::pow(decay, static_cast<double>(i - j));
      total += w;
      for (std::size_t c = 0; c < V.cols; ++c) o[c] += w * V(j, c);
    }
    if (total > 0.0)
      for (std::size_t c = 0; c < V.cols; ++c) O(i, c) = o[c] / total;
  }
  return O;
}

}  // namespace attn::oracle
