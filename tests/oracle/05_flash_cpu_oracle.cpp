// Chapter 05's oracle: log-sum-exp and partial online-softmax states from their definitions, in float64.
#include "oracle/05_flash_cpu_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::oracle {

namespace {

double score(const Mat& Q, const Mat& K, std::size_t i, std::size_t j) {
  double s = 0.0;
  for (std::size_t c = 0; c < Q.cols; ++c) s += Q(i, c) * K(j, c);
  return s / std::sqrt(static_cast<double>(Q.cols));
}

}  // namespace

std::vector<bool> causal_allowed(std::size_t n_q, std::size_t n_kv) {
  std::vector<bool> allowed(n_q * n_kv, false);
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t j = 0; j < n_kv; ++j) allowed[i * n_kv + j] = j + n_q <= i + n_kv;  // j ≤ i + n_kv - n_q
  return allowed;
}

std::vector<double> log_sum_exp_rows(const Mat& Q, const Mat& K, const std::vector<bool>* allowed) {
  std::vector<double> lse(Q.rows, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < Q.rows; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < K.rows; ++j)
      if (!allowed || (*allowed)[i * K.rows + j]) m = std::max(m, score(Q, K, i, j));
    if (std::isinf(m)) continue;
    double sum = 0.0;
    for (std::size_t j = 0; j < K.rows; ++j)
      if (!allowed || (*allowed)[i * K.rows + j]) sum += std::exp(score(Q, K, i, j) - m);
    lse[i] = m + std::log(sum);
  }
  return lse;
}

State partial_state(const Mat& Q, const Mat& K, const Mat& V, std::size_t begin, std::size_t end) {
  State st{std::vector<double>(Q.rows, -std::numeric_limits<double>::infinity()), std::vector<double>(Q.rows, 0.0),
           Mat(Q.rows, V.cols)};
  for (std::size_t i = 0; i < Q.rows; ++i) {
    for (std::size_t j = begin; j < end; ++j) st.m[i] = std::max(st.m[i], score(Q, K, i, j));
    for (std::size_t j = begin; j < end; ++j) {
      const double p = std::exp(score(Q, K, i, j) - st.m[i]);
      st.l[i] += p;
      for (std::size_t c = 0; c < V.cols; ++c) st.acc(i, c) += p * V(j, c);
    }
  }
  return st;
}

}  // namespace attn::oracle
