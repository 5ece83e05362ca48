// Chapter 06's oracle: float64 loops written as the definitions read.
#include "oracle/06_flash_cuda_oracle.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace attn::oracle {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// One head, with an optional rounding r applied where a bf16 framework stores a value.
template <class Round>
void one_head(const float* Q, const float* K, const float* V, std::size_t n_q, std::size_t n_kv, std::size_t d,
              bool causal, Round r, double* O, double* lse) {
  // Query i sits at key position i + n_kv - n_q: with more queries than keys that is negative.
  if (causal && n_q > n_kv) throw std::invalid_argument("oracle (chapter 06): causal attention with n_q > n_kv");
  std::vector<double> s(n_kv);
  for (std::size_t i = 0; i < n_q; ++i) {
    double m = -kInf;
    for (std::size_t j = 0; j < n_kv; ++j) {
      const bool allowed = !causal || j <= i + (n_kv - n_q);
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += r(Q[i * d + c]) * r(K[j * d + c]);
      s[j] = allowed ? r(r(dot) / std::sqrt(static_cast<double>(d))) : -kInf;
      m = std::max(m, s[j]);
    }
    double* o = O + i * d;
    if (m == -kInf) {  // nothing to attend to
      std::fill(o, o + d, 0.0);
      if (lse != nullptr) lse[i] = -kInf;
      continue;
    }
    double l = 0.0;
    for (std::size_t j = 0; j < n_kv; ++j) l += std::exp(s[j] - m);
    for (std::size_t c = 0; c < d; ++c) {
      double acc = 0.0;
      for (std::size_t j = 0; j < n_kv; ++j) acc += r(std::exp(s[j] - m) / l) * r(V[j * d + c]);
      o[c] = r(acc);
    }
    if (lse != nullptr) lse[i] = m + std::log(l);
  }
}
}  // namespace

AttentionLse attention_lse(const std::vector<float>& Q, const std::vector<float>& K, const std::vector<float>& V,
                           std::size_t bh, std::size_t n_q, std::size_t n_kv, std::size_t d, bool causal) {
  AttentionLse out{std::vector<double>(bh * n_q * d), std::vector<double>(bh * n_q)};
  const auto exact = [](double x) { return x; };
  for (std::size_t h = 0; h < bh; ++h)
    one_head(Q.data() + h * n_q * d, K.data() + h * n_kv * d, V.data() + h * n_kv * d, n_q, n_kv, d, causal, exact,
             out.O.data() + h * n_q * d, out.lse.data() + h * n_q);
  return out;
}

double to_bf16(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);                          // x = f · 2^e with 0.5 ≤ |f| < 1
  const double ulp = std::ldexp(1.0, e - 8);  // bf16 keeps 8 significant bits
  return std::nearbyint(x / ulp) * ulp;       // the default rounding mode: to nearest, ties to even
}

std::vector<double> attention_bf16(const std::vector<float>& Q, const std::vector<float>& K,
                                   const std::vector<float>& V, std::size_t n_q, std::size_t n_kv, std::size_t d,
                                   bool causal) {
  std::vector<double> O(n_q * d);
  one_head(
      Q.data(), K.data(), V.data(), n_q, n_kv, d, causal, [](double x) { return to_bf16(x); }, O.data(), nullptr);
  return O;
}

}  // namespace attn::oracle
