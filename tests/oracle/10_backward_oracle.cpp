// Chapter 10's oracle: float64 loops written from the definitions (see 10_backward_oracle.hpp).
#include "oracle/10_backward_oracle.hpp"

#include <cmath>

namespace attn::oracle {

double attention_loss(const Mat& Q, const Mat& K, const Mat& V, const Mat& dO, const std::vector<bool>* allowed) {
  const Mat O = attention(Q, K, V, allowed);
  double L = 0.0;
  for (std::size_t i = 0; i < O.v.size(); ++i) L += dO.v[i] * O.v[i];
  return L;
}

Grads attention_gradients(const Mat& Q, const Mat& K, const Mat& V, const Mat& dO, const std::vector<bool>* allowed) {
  const std::size_t n_q = Q.rows, n_kv = K.rows, d_k = Q.cols, d_v = V.cols;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_k == 0 ? 1 : d_k));
  const Mat P = attention_matrix(Q, K, allowed);  // (n_q, n_kv)
  Grads g{Mat(n_q, d_k), Mat(n_kv, d_k), Mat(n_kv, d_v)};
  for (std::size_t i = 0; i < n_q; ++i) {
    std::vector<double> dP(n_kv, 0.0);  // row i of dO Vᵀ
    double p_dot_dp = 0.0;
    for (std::size_t j = 0; j < n_kv; ++j) {
      for (std::size_t c = 0; c < d_v; ++c) dP[j] += dO(i, c) * V(j, c);
      p_dot_dp += P(i, j) * dP[j];
    }
    for (std::size_t j = 0; j < n_kv; ++j) {
      for (std::size_t c = 0; c < d_v; ++c) g.dV(j, c) += P(i, j) * dO(i, c);
      const double dS = P(i, j) * (dP[j] - p_dot_dp);
      for (std::size_t c = 0; c < d_k; ++c) {
        g.dQ(i, c) += dS * K(j, c) * scale;
        g.dK(j, c) += dS * Q(i, c) * scale;
      }
    }
  }
  return g;
}

namespace {

/// ∂L/∂x for every entry x of \p X (one of Q, K, V, passed by copy so each can be nudged in place).
Mat central_differences(Mat& X, const Mat& Q, const Mat& K, const Mat& V, const Mat& dO,
                        const std::vector<bool>* allowed, double h) {
  Mat grad(X.rows, X.cols);
  for (std::size_t e = 0; e < X.v.size(); ++e) {
    const double x = X.v[e];
    X.v[e] = x + h;
    const double up = attention_loss(Q, K, V, dO, allowed);
    X.v[e] = x - h;
    const double down = attention_loss(Q, K, V, dO, allowed);
    X.v[e] = x;
    grad.v[e] = (up - down) / (2.0 * h);
  }
  return grad;
}

}  // namespace

Grads finite_difference_gradients(const Mat& Q, const Mat& K, const Mat& V, const Mat& dO,
                                  const std::vector<bool>* allowed, double h) {
  Mat q = Q, k = K, v = V;  // nudged one entry at a time
  Grads g;
  g.dQ = central_differences(q, q, k, v, dO, allowed, h);
  g.dK = central_differences(k, q, k, v, dO, allowed, h);
  g.dV = central_differences(v, q, k, v, dO, allowed, h);
  return g;
}

}  // namespace attn::oracle
