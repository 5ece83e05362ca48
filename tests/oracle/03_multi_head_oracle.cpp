// Multi-head attention by its definition, in float64: each head from its own column slice, each head's
// output pushed through its own rows of W_O, the contributions summed (which is what Concat·W_O is).
#include "oracle/03_multi_head_oracle.hpp"

#include <stdexcept>

namespace attn::oracle {

Mat columns(const Mat& m, std::size_t first, std::size_t count) {
  if (first + count > m.cols) throw std::invalid_argument("oracle::columns: out of range");
  Mat out(m.rows, count);
  for (std::size_t r = 0; r < m.rows; ++r)
    for (std::size_t c = 0; c < count; ++c) out(r, c) = m(r, first + c);
  return out;
}

Mat head_output(const Mat& X, const Mat& W_Q, const Mat& W_K, const Mat& W_V, std::size_t h, std::size_t i,
                const std::vector<bool>* allowed) {
  if (h == 0 || X.cols % h != 0) throw std::invalid_argument("oracle::head_output: d_model % h != 0");
  const std::size_t d_k = X.cols / h;
  const Mat Q = matmul(X, columns(W_Q, i * d_k, d_k));
  const Mat K = matmul(X, columns(W_K, i * d_k, d_k));
  const Mat V = matmul(X, columns(W_V, i * d_k, d_k));
  return attention(Q, K, V, allowed);
}

Mat multi_head(const Mat& X, const Mat& W_Q, const Mat& W_K, const Mat& W_V, const Mat& W_O,
               const std::vector<bool>& keep, const std::vector<bool>* allowed) {
  const std::size_t h = keep.size();
  if (h == 0 || X.cols % h != 0) throw std::invalid_argument("oracle::multi_head: d_model % h != 0");
  const std::size_t d_k = X.cols / h;
  Mat out(X.rows, W_O.cols);
  for (std::size_t i = 0; i < h; ++i) {
    if (!keep[i]) continue;
    const Mat head = head_output(X, W_Q, W_K, W_V, h, i, allowed);  // (n, d_k)
    for (std::size_t t = 0; t < X.rows; ++t)
      for (std::size_t o = 0; o < W_O.cols; ++o) {
        double s = 0.0;
        for (std::size_t c = 0; c < d_k; ++c) s += head(t, c) * W_O(i * d_k + c, o);
        out(t, o) += s;
      }
  }
  return out;
}

}  // namespace attn::oracle
