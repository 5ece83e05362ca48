// Chapter 12's float64 oracle: a tiny transformer and cross-entropy, loops only.
#include "oracle/12_learning_oracle.hpp"

#include <cmath>

#include "oracle/11_positions_oracle.hpp"

namespace attn::oracle {

namespace {

/// Columns c0 … c0 + w − 1 of \p m.
Mat columns(const Mat& m, std::size_t c0, std::size_t w) {
  Mat out(m.rows, w);
  for (std::size_t i = 0; i < m.rows; ++i)
    for (std::size_t j = 0; j < w; ++j) out(i, j) = m(i, c0 + j);
  return out;
}

void rope(Mat& x, double base) {
  for (std::size_t p = 0; p < x.rows; ++p)
    for (std::size_t i = 0; i < x.cols / 2; ++i) {
      const double a =
          static_cast<double>(p) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(x.cols));
      const double x0 = x(p, 2 * i), x1 = x(p, 2 * i + 1);
      x(p, 2 * i) = std::cos(a) * x0 - std::sin(a) * x1;
      x(p, 2 * i + 1) = std::sin(a) * x0 + std::cos(a) * x1;
    }
}

}  // namespace

Mat transformer_logits(const Transformer& model, const std::vector<std::size_t>& tokens) {
  const std::size_t n = tokens.size(), d = model.embed.cols, dk = d / model.heads;
  Mat x(n, d);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < d; ++j) x(t, j) = model.embed(tokens[t], j);
  std::vector<bool> causal(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) causal[i * n + j] = j <= i;
  for (const auto& W : model.layers) {
    const Mat Q = matmul(x, W[0]), K = matmul(x, W[1]), V = matmul(x, W[2]);
    Mat heads(n, d);
    for (std::size_t h = 0; h < model.heads; ++h) {
      Mat q = columns(Q, h * dk, dk), k = columns(K, h * dk, dk);
      rope(q, model.rope_base);
      rope(k, model.rope_base);
      const Mat o = attention(q, k, columns(V, h * dk, dk), &causal);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < dk; ++j) heads(i, h * dk + j) = o(i, j);
    }
    const Mat added = matmul(heads, W[3]);
    for (std::size_t i = 0; i < x.v.size(); ++i) x.v[i] += added.v[i];
  }
  return matmul(x, model.unembed);
}

Mat attention_layer(const Mat& X, const std::array<Mat, 4>& W, std::size_t heads, double rope_base,
                    const std::vector<bool>& keep) {
  const std::size_t n = X.rows, d = X.cols, dk = d / heads;
  std::vector<bool> causal(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) causal[i * n + j] = j <= i;
  const Mat Q = matmul(X, W[0]), K = matmul(X, W[1]), V = matmul(X, W[2]);
  Mat heads_out(n, d);
  for (std::size_t h = 0; h < heads; ++h) {
    if (!keep.empty() && !keep[h]) continue;
    Mat q = columns(Q, h * dk, dk), k = columns(K, h * dk, dk);
    rope(q, rope_base);
    rope(k, rope_base);
    const Mat o = attention(q, k, columns(V, h * dk, dk), &causal);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < dk; ++j) heads_out(i, h * dk + j) = o(i, j);
  }
  Mat Y = matmul(heads_out, W[3]);
  for (std::size_t i = 0; i < Y.v.size(); ++i) Y.v[i] += X.v[i];
  return Y;
}

namespace {

/// Σ dY ∘ attention_layer(X, W, …): the loss whose gradient is the layer's backward given dY.
double layer_loss(const Mat& X, const std::array<Mat, 4>& W, std::size_t heads, double rope_base, const Mat& dY,
                  const std::vector<bool>& keep) {
  const Mat Y = attention_layer(X, W, heads, rope_base, keep);
  double L = 0.0;
  for (std::size_t i = 0; i < Y.v.size(); ++i) L += dY.v[i] * Y.v[i];
  return L;
}

/// Central differences of \p loss with respect to every entry of \p x (nudged in place, then restored).
template <class Loss>
Mat central_differences(Mat& x, double h, Loss&& loss) {
  Mat g(x.rows, x.cols);
  for (std::size_t i = 0; i < x.v.size(); ++i) {
    const double keep = x.v[i];
    x.v[i] = keep + h;
    const double up = loss();
    x.v[i] = keep - h;
    const double down = loss();
    x.v[i] = keep;
    g.v[i] = (up - down) / (2.0 * h);
  }
  return g;
}

}  // namespace

LayerGrads attention_layer_gradients(const Mat& X, const std::array<Mat, 4>& W, std::size_t heads, double rope_base,
                                     const Mat& dY, const std::vector<bool>& keep, double h) {
  Mat x = X;
  std::array<Mat, 4> w = W;
  const auto loss = [&] { return layer_loss(x, w, heads, rope_base, dY, keep); };
  LayerGrads g;
  g.dX = central_differences(x, h, loss);
  for (std::size_t i = 0; i < 4; ++i) g.dW[i] = central_differences(w[i], h, loss);
  return g;
}

Mat rope_transpose(const Mat& G, std::size_t first, double base) {
  Mat out(G.rows, G.cols);
  for (std::size_t p = 0; p < G.rows; ++p)
    for (std::size_t c = 0; c < G.cols; ++c) {
      Mat unit(G.rows, G.cols);
      unit(p, c) = 1.0;
      const Mat column = rope(unit, first, base);  // the map's column for input (p, c): nonzero in row p only
      for (std::size_t c2 = 0; c2 < G.cols; ++c2) out(p, c) += column(p, c2) * G(p, c2);
    }
  return out;
}

double cross_entropy(const Mat& logits, const std::vector<std::size_t>& targets) {
  double sum = 0.0;
  std::size_t counted = 0;
  for (std::size_t r = 0; r < logits.rows; ++r) {
    if (targets[r] >= logits.cols) continue;
    const std::vector<double> p = softmax(logits.row(r));
    sum -= std::log(p[targets[r]]);
    ++counted;
  }
  return counted == 0 ? 0.0 : sum / static_cast<double>(counted);
}

Mat cross_entropy_grad(const Mat& logits, const std::vector<std::size_t>& targets) {
  Mat g(logits.rows, logits.cols);
  std::size_t counted = 0;
  for (std::size_t t : targets) counted += t < logits.cols ? 1 : 0;
  for (std::size_t r = 0; r < logits.rows; ++r) {
    if (targets[r] >= logits.cols) continue;
    const std::vector<double> p = softmax(logits.row(r));
    for (std::size_t j = 0; j < logits.cols; ++j)
      g(r, j) = (p[j] - (j == targets[r] ? 1.0 : 0.0)) / static_cast<double>(counted);
  }
  return g;
}

std::vector<Mat*> parameters(Transformer& model) {
  std::vector<Mat*> out{&model.embed};
  for (auto& W : model.layers)
    for (Mat& M : W) out.push_back(&M);
  out.push_back(&model.unembed);
  return out;
}

double batch_loss(const Transformer& model, const std::vector<std::vector<std::size_t>>& tokens,
                  const std::vector<std::vector<std::size_t>>& targets) {
  Mat stacked(0, model.unembed.cols);
  std::vector<std::size_t> all_targets;
  for (std::size_t b = 0; b < tokens.size(); ++b) {
    const Mat logits = transformer_logits(model, tokens[b]);
    stacked.v.insert(stacked.v.end(), logits.v.begin(), logits.v.end());
    stacked.rows += logits.rows;
    all_targets.insert(all_targets.end(), targets[b].begin(), targets[b].end());
  }
  return cross_entropy(stacked, all_targets);
}

std::vector<Mat> batch_loss_gradients(const Transformer& model, const std::vector<std::vector<std::size_t>>& tokens,
                                      const std::vector<std::vector<std::size_t>>& targets, double h) {
  Transformer t = model;
  std::vector<Mat> out;
  for (Mat* p : parameters(t))
    out.push_back(central_differences(*p, h, [&] { return batch_loss(t, tokens, targets); }));
  return out;
}

void adamw_step(AdamWState& s, const std::vector<double>& grad, std::size_t t, double lr, double beta1, double beta2,
                double eps, double weight_decay) {
  const double c1 = 1.0 - std::pow(beta1, static_cast<double>(t)), c2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  for (std::size_t i = 0; i < s.theta.size(); ++i) {
    s.m[i] = beta1 * s.m[i] + (1.0 - beta1) * grad[i];
    s.v[i] = beta2 * s.v[i] + (1.0 - beta2) * grad[i] * grad[i];
    s.theta[i] -= lr * (s.m[i] / c1 / (std::sqrt(s.v[i] / c2) + eps) + weight_decay * s.theta[i]);
  }
}

}  // namespace attn::oracle
