// Grouped-query attention and head pooling by their definitions, in float64. Slow on purpose.
#include "oracle/09_mqa_gqa_oracle.hpp"

#include <stdexcept>

namespace attn::oracle {

Heads grouped_attention(const Heads& Q, const Heads& K, const Heads& V, bool causal) {
  const std::size_t h = Q.size(), g = K.size();
  if (g == 0 || h % g != 0 || V.size() != g) throw std::invalid_argument("oracle::grouped_attention: bad head counts");
  Heads out;
  for (std::size_t i = 0; i < h; ++i) {
    // Written differently from the solutions on purpose: i·g/h, not i / (h/g). They agree when g divides h.
    const std::size_t group = i * g / h;
    const Mat& Kg = K[group];
    std::vector<bool> allowed(Q[i].rows * Kg.rows, true);
    if (causal) {
      if (Q[i].rows > Kg.rows) throw std::invalid_argument("oracle::grouped_attention: n_q > n_kv");
      const std::size_t offset = Kg.rows - Q[i].rows;
      for (std::size_t r = 0; r < Q[i].rows; ++r)
        for (std::size_t c = 0; c < Kg.rows; ++c) allowed[r * Kg.rows + c] = c <= r + offset;
    }
    out.push_back(attention(Q[i], Kg, V[group], &allowed));
  }
  return out;
}

Heads mean_pool_heads(const Heads& heads, std::size_t g) {
  const std::size_t h = heads.size();
  if (g == 0 || h % g != 0) throw std::invalid_argument("oracle::mean_pool_heads: g must divide h");
  const std::size_t r = h / g;
  Heads out;
  for (std::size_t j = 0; j < g; ++j) {
    Mat mean(heads[j * r].rows, heads[j * r].cols);
    for (std::size_t i = j * r; i < (j + 1) * r; ++i)
      for (std::size_t e = 0; e < mean.v.size(); ++e) mean.v[e] += heads[i].v[e] / static_cast<double>(r);
    out.push_back(mean);
  }
  return out;
}

}  // namespace attn::oracle
