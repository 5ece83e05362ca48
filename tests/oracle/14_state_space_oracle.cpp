// Chapter 14's oracle (see 14_state_space_oracle.hpp): float64, the definitions, no shortcuts.
#include "oracle/14_state_space_oracle.hpp"

#include <cmath>

namespace attn::oracle {

namespace {

Mat identity(std::size_t m) {
  Mat I(m, m);
  for (std::size_t i = 0; i < m; ++i) I(i, i) = 1.0;
  return I;
}

}  // namespace

Mat expm(const Mat& M) {
  const std::size_t m = M.rows;
  double norm = 0.0;  // ‖M‖₁, the largest column sum
  for (std::size_t j = 0; j < m; ++j) {
    double col = 0.0;
    for (std::size_t i = 0; i < m; ++i) col += std::fabs(M(i, j));
    norm = std::max(norm, col);
  }
  int squarings = 0;
  double scale = 1.0;
  while (norm * scale > 0.5) {
    scale /= 2.0;
    ++squarings;
  }
  Mat S = M;  // M / 2^s, ‖S‖ ≤ 1/2: 20 Taylor terms leave a remainder below 0.5^21 / 21! ≈ 1e-26
  for (double& v : S.v) v *= scale;
  Mat E = identity(m), term = identity(m);
  for (int k = 1; k <= 20; ++k) {
    term = matmul(term, S);
    for (double& v : term.v) v /= k;
    for (std::size_t i = 0; i < E.v.size(); ++i) E.v[i] += term.v[i];
  }
  for (int s = 0; s < squarings; ++s) E = matmul(E, E);  // exp(M) = exp(M / 2^s)^(2^s)
  return E;
}

Zoh zoh(const Mat& A, const Mat& B, double delta) {
  const std::size_t m = A.rows;
  Mat block(m + 1, m + 1);  // [[ΔA, ΔB], [0, 0]]
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < m; ++j) block(i, j) = delta * A(i, j);
    block(i, m) = delta * B(i, 0);
  }
  const Mat E = expm(block);
  Zoh z{Mat(m, m), Mat(m, 1)};
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < m; ++j) z.A_bar(i, j) = E(i, j);
    z.B_bar(i, 0) = E(i, m);
  }
  return z;
}

std::vector<double> ssm_kernel(const std::vector<std::complex<double>>& A_bar,
                               const std::vector<std::complex<double>>& B_bar,
                               const std::vector<std::complex<double>>& C, std::size_t n) {
  std::vector<double> K(n, 0.0);
  for (std::size_t l = 0; l < n; ++l) {
    std::complex<double> sum = 0.0;
    for (std::size_t k = 0; k < A_bar.size(); ++k) sum += C[k] * std::pow(A_bar[k], static_cast<double>(l)) * B_bar[k];
    K[l] = sum.real();
  }
  return K;
}

std::vector<double> causal_convolution(const std::vector<double>& K, const std::vector<double>& u) {
  std::vector<double> y(u.size(), 0.0);
  for (std::size_t t = 0; t < u.size(); ++t)
    for (std::size_t j = 0; j <= t && j < K.size(); ++j) y[t] += K[j] * u[t - j];
  return y;
}

Mat selective_scan(const Mat& x, const Mat& delta, const Mat& A, const Mat& B, const Mat& C) {
  const std::size_t n = x.rows, d = x.cols, N = A.cols;
  Mat y(n, d), h(d, N);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t c = 0; c < d; ++c) {
      double sum = 0.0;
      for (std::size_t k = 0; k < N; ++k) {
        h(c, k) = std::exp(delta(t, c) * A(c, k)) * h(c, k) + delta(t, c) * B(t, k) * x(t, c);
        sum += C(t, k) * h(c, k);
      }
      y(t, c) = sum;
    }
  return y;
}

Mat semiseparable(const std::vector<double>& a) {
  const std::size_t n = a.size();
  Mat L(n, n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      double product = 1.0;
      for (std::size_t t = j + 1; t <= i; ++t) product *= a[t];
      L(i, j) = product;
    }
  return L;
}

Mat masked_attention(const std::vector<double>& a, const Mat& C, const Mat& B, const Mat& X) {
  const Mat L = semiseparable(a);
  const std::size_t n = X.rows, p = X.cols, N = C.cols;
  Mat Y(n, p);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      double score = 0.0;  // C_i · B_j: query i against key j
      for (std::size_t k = 0; k < N; ++k) score += C(i, k) * B(j, k);
      for (std::size_t c = 0; c < p; ++c) Y(i, c) += L(i, j) * score * X(j, c);
    }
  return Y;
}

}  // namespace attn::oracle
