// Chapter 12's model, forward and backward by hand. What it demonstrates: that a transformer's training
// step is chapters 02, 10 and 11 put together — nothing else is needed. What it leaves out: LayerNorm,
// MLPs and batching inside one matrix product (sequences run one at a time). Book page: book/12_learning.md.
#include "12_learning/model.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <xtensor/xnpy.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "10_backward/backward.hpp"
#include "11_positions/positions.hpp"

namespace attn::ch12 {

namespace {

std::size_t head_width(const Config& c) { return c.d_model / c.heads; }

/// Columns h·d_k … (h + 1)·d_k − 1 of \p M: (n, d_k).
Matrix head_columns(const Matrix& M, std::size_t h, std::size_t d_k) {
  return xt::view(M, xt::all(), xt::range(h * d_k, (h + 1) * d_k));
}

bool head_kept(const HeadMask& keep, std::size_t l, std::size_t h) { return keep.empty() || keep.at(l).at(h); }

}  // namespace

Model init_model(const Config& c, std::uint64_t seed) {
  require(c.vocab > 0 && c.d_model > 0 && c.heads > 0 && c.layers > 0 && c.context > 0,
          fmt::format("init_model: vocab = {}, d_model = {}, heads = {}, layers = {}, context = {}: none may be 0",
                      c.vocab, c.d_model, c.heads, c.layers, c.context));
  require(c.d_model % c.heads == 0 && head_width(c) % 2 == 0,
          fmt::format("init_model: d_model = {} over {} heads must give an even head width (RoPE rotates pairs)",
                      c.d_model, c.heads));
  Rng rng(seed);
  const float d = static_cast<float>(c.d_model);
  Model m;
  m.config = c;
  m.embed = rng.normal(c.vocab, c.d_model, 0.0f, 1.0f);  // (vocab, d): unit-size rows in the stream
  for (std::size_t l = 0; l < c.layers; ++l) {
    // 1/√d keeps each projection's output the size of its input.
    const float s = 1.0f / std::sqrt(d);
    m.layers.push_back({rng.normal(c.d_model, c.d_model, 0.0f, s), rng.normal(c.d_model, c.d_model, 0.0f, s),
                        rng.normal(c.d_model, c.d_model, 0.0f, s), rng.normal(c.d_model, c.d_model, 0.0f, s)});
  }
  m.unembed = rng.normal(c.d_model, c.vocab, 0.0f, 1.0f / std::sqrt(d));  // (d, vocab)
  return m;
}

Model zeros_like(const Model& like) {
  Model z = like;
  for (Matrix* p : parameters(z)) p->fill(0.0f);
  return z;
}

std::vector<Matrix*> parameters(Model& m) {
  std::vector<Matrix*> out{&m.embed};
  for (Layer& L : m.layers)
    for (Matrix* p : {&L.W_Q, &L.W_K, &L.W_V, &L.W_O}) out.push_back(p);
  out.push_back(&m.unembed);
  return out;
}

std::vector<const Matrix*> parameters(const Model& m) {
  std::vector<const Matrix*> out{&m.embed};
  for (const Layer& L : m.layers)
    for (const Matrix* p : {&L.W_Q, &L.W_K, &L.W_V, &L.W_O}) out.push_back(p);
  out.push_back(&m.unembed);
  return out;
}

namespace {

/// Every parameter of \p m with the file name save_checkpoint() gives it.
template <class M, class P>
std::vector<std::pair<std::string, P>> named_parameters(M& m) {
  std::vector<std::pair<std::string, P>> out{{"embed", &m.embed}};
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    auto& L = m.layers[l];
    out.emplace_back(fmt::format("layer{}_W_Q", l + 1), &L.W_Q);
    out.emplace_back(fmt::format("layer{}_W_K", l + 1), &L.W_K);
    out.emplace_back(fmt::format("layer{}_W_V", l + 1), &L.W_V);
    out.emplace_back(fmt::format("layer{}_W_O", l + 1), &L.W_O);
  }
  out.emplace_back("unembed", &m.unembed);
  return out;
}

/// The .npy file \p path as a T array, or std::invalid_argument naming the file (xtensor's own error says
/// only that some file failed to open).
template <class T>
xt::xarray<T> read_npy(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path))
    throw std::invalid_argument(fmt::format("load_checkpoint: {} is missing", path.string()));
  try {
    return xt::load_npy<T>(path.string());
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("load_checkpoint: {} is not a readable {} .npy file ({})", path.string(),
                                            sizeof(T) == 4 ? "float32" : "float64", e.what()));
  }
}

}  // namespace

void save_checkpoint(const Model& model, const std::string& dir) {
  const std::filesystem::path folder(dir);
  std::filesystem::create_directories(folder);
  const Config& c = model.config;
  const xt::xtensor<double, 1> config{static_cast<double>(c.vocab),   static_cast<double>(c.d_model),
                                      static_cast<double>(c.heads),   static_cast<double>(c.layers),
                                      static_cast<double>(c.context), static_cast<double>(c.rope_base)};
  xt::dump_npy((folder / "config.npy").string(), config);
  for (const auto& [name, p] : named_parameters<const Model, const Matrix*>(model))
    xt::dump_npy((folder / (name + ".npy")).string(), *p);
}

Model load_checkpoint(const std::string& dir) {
  const std::filesystem::path folder(dir);
  const xt::xarray<double> saved = read_npy<double>(folder / "config.npy");
  require(saved.dimension() == 1 && saved.size() == 6,
          fmt::format("load_checkpoint: {} holds {} numbers; a configuration has 6", (folder / "config.npy").string(),
                      saved.size()));
  for (std::size_t i = 0; i < 5; ++i)  // five sizes, then RoPE's base
    require(
        saved(i) >= 1.0 && saved(i) <= 1e9 && saved(i) == std::floor(saved(i)),
        fmt::format("load_checkpoint: {} holds {} where a size belongs", (folder / "config.npy").string(), saved(i)));
  require(saved(5) > 0.0 && std::isfinite(saved(5)),
          fmt::format("load_checkpoint: {} holds a RoPE base of {}", (folder / "config.npy").string(), saved(5)));
  Config c;
  c.vocab = static_cast<std::size_t>(saved(0));
  c.d_model = static_cast<std::size_t>(saved(1));
  c.heads = static_cast<std::size_t>(saved(2));
  c.layers = static_cast<std::size_t>(saved(3));
  c.context = static_cast<std::size_t>(saved(4));
  c.rope_base = static_cast<float>(saved(5));
  Model m = init_model(c, 0);  // the shapes; every value is replaced below
  for (auto& [name, p] : named_parameters<Model, Matrix*>(m)) {
    const std::filesystem::path file = folder / (name + ".npy");
    const xt::xarray<float> values = read_npy<float>(file);
    require(values.dimension() == 2 && values.shape(0) == p->shape(0) && values.shape(1) == p->shape(1),
            fmt::format("load_checkpoint: {} is {}; the configuration in config.npy needs ({}, {})", file.string(),
                        shape_str(values), p->shape(0), p->shape(1)));
    *p = values;
  }
  return m;
}

Matrix embed_tokens(const Model& model, const std::vector<std::size_t>& tokens) {
  const Config& c = model.config;
  require(!tokens.empty() && tokens.size() <= c.context,
          fmt::format("embed_tokens: {} tokens; the model takes 1 to {} (its context)", tokens.size(), c.context));
  Matrix X = Matrix::from_shape({tokens.size(), c.d_model});  // (n, d)
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    require(tokens[t] < c.vocab, fmt::format("embed_tokens: token {} at position {} is outside the vocabulary 0 … {}",
                                             tokens[t], t, c.vocab - 1));
    xt::row(X, t) = xt::row(model.embed, tokens[t]);
  }
  return X;
}

// [forward]
Trace forward_embedded(const Model& model, const Matrix& X0, const HeadMask& keep) {
  const Config& c = model.config;
  const std::size_t n = X0.shape(0), d_k = head_width(c);
  require(X0.shape(1) == c.d_model && n > 0 && n <= c.context,
          fmt::format("forward: X0 is {}; the model takes (1 … {}, {})", shape_str(X0), c.context, c.d_model));
  require(keep.empty() || keep.size() == c.layers,
          fmt::format("forward: the head mask has {} layers, the model {}", keep.size(), c.layers));
  Trace tr;
  tr.residual.push_back(X0);
  const Mask causal = causal_mask(n, n);  // (n, n)
  for (std::size_t l = 0; l < c.layers; ++l) {
    const Layer& L = model.layers[l];
    const Matrix& X = tr.residual.back();                                           // (n, d)
    const Matrix Q = matmul(X, L.W_Q), K = matmul(X, L.W_K), V = matmul(X, L.W_V);  // (n, d) each
    Matrix heads = xt::zeros<float>({n, c.d_model});                                // (n, d) concatenated
    tr.q.emplace_back();
    tr.k.emplace_back();
    tr.v.emplace_back();
    tr.attention.emplace_back();
    for (std::size_t h = 0; h < c.heads; ++h) {
      Matrix q = head_columns(Q, h, d_k), k = head_columns(K, h, d_k);  // (n, d_k) each
      const Matrix v = head_columns(V, h, d_k);                         // (n, d_k)
      apply_rope(q, 0, c.rope_base);                                    // chapter 11
      apply_rope(k, 0, c.rope_base);
      Matrix S = scaled_scores(q, k);  // (n, n), chapter 02
      S = xt::where(causal, S, -std::numeric_limits<float>::infinity());
      Matrix P = softmax_rows(S);  // (n, n)
      if (head_kept(keep, l, h))
        xt::view(heads, xt::all(), xt::range(h * d_k, (h + 1) * d_k)) = matmul(P, v);  // (n, d_k)
      tr.q.back().push_back(std::move(q));
      tr.k.back().push_back(std::move(k));
      tr.v.back().push_back(v);
      tr.attention.back().push_back(std::move(P));
    }
    Matrix next = X + matmul(heads, L.W_O);  // (n, d): the layer adds into the residual stream
    tr.heads_out.push_back(std::move(heads));
    tr.residual.push_back(std::move(next));
  }
  tr.logits = matmul(tr.residual.back(), model.unembed);  // (n, vocab)
  return tr;
}
// [forward]

Trace forward(const Model& model, const std::vector<std::size_t>& tokens, const HeadMask& keep) {
  return forward_embedded(model, embed_tokens(model, tokens), keep);
}

void rope_backward(Matrix& G, float base) {
  const std::size_t n = G.shape(0), d = G.shape(1);
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t i = 0; i < d / 2; ++i) {
      // The same angle as apply_rope (in double, as there); the transpose of a rotation turns the other way.
      const double angle = static_cast<double>(p) *
                           std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const float cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
      const float g0 = G(p, 2 * i), g1 = G(p, 2 * i + 1);
      G(p, 2 * i) = cs * g0 + sn * g1;
      G(p, 2 * i + 1) = -sn * g0 + cs * g1;
    }
}

// [backward]
Matrix backward(const Model& model, const Trace& tr, const Matrix& dlogits, const std::vector<std::size_t>& tokens,
                Model& grads, const HeadMask& keep) {
  const Config& c = model.config;
  const std::size_t n = tr.logits.shape(0), d_k = head_width(c);
  require(dlogits.shape() == tr.logits.shape(),
          fmt::format("backward: dlogits is {} but the logits are {}", shape_str(dlogits), shape_str(tr.logits)));
  grads.unembed += matmul_transpose_a(tr.residual.back(), dlogits);  // (d, vocab)
  Matrix dX = matmul(dlogits, model.unembed, true);                  // (n, d): ∂L/∂(final stream)
  const Mask causal = causal_mask(n, n);
  for (std::size_t l = c.layers; l-- > 0;) {
    const Layer& L = model.layers[l];
    Layer& G = grads.layers[l];
    const Matrix& X = tr.residual[l];  // (n, d) the layer's input
    // next = X + heads·W_O: the stream's gradient passes straight through, and into the heads.
    G.W_O += matmul_transpose_a(tr.heads_out[l], dX);                // (d, d)
    const Matrix dheads = matmul(dX, L.W_O, true);                   // (n, d)
    Matrix dQ = xt::zeros<float>({n, c.d_model}), dK = dQ, dV = dQ;  // (n, d) each
    for (std::size_t h = 0; h < c.heads; ++h) {
      if (!head_kept(keep, l, h)) continue;            // an ablated head passes no gradient
      const Matrix dO = head_columns(dheads, h, d_k);  // (n, d_k)
      AttentionGrads g = attention_backward(tr.q[l][h], tr.k[l][h], tr.v[l][h], dO, causal);  // chapter 10
      rope_backward(g.dQ, c.rope_base);
      rope_backward(g.dK, c.rope_base);
      xt::view(dQ, xt::all(), xt::range(h * d_k, (h + 1) * d_k)) = g.dQ;
      xt::view(dK, xt::all(), xt::range(h * d_k, (h + 1) * d_k)) = g.dK;
      xt::view(dV, xt::all(), xt::range(h * d_k, (h + 1) * d_k)) = g.dV;
    }
    G.W_Q += matmul_transpose_a(X, dQ);
    G.W_K += matmul_transpose_a(X, dK);
    G.W_V += matmul_transpose_a(X, dV);
    dX += matmul(dQ, L.W_Q, true) + matmul(dK, L.W_K, true) + matmul(dV, L.W_V, true);
  }
  for (std::size_t t = 0; t < tokens.size(); ++t) xt::row(grads.embed, tokens[t]) += xt::row(dX, t);
  return dX;
}
// [backward]

// [induction_task]
InductionSequence make_induction(std::size_t n, std::size_t vocab, Rng& rng) {
  const std::size_t shortest = std::max<std::size_t>(2, n / 4);
  require(n >= 4 && n - shortest <= vocab,
          fmt::format("make_induction: n = {} with a vocabulary of {}; need n ≥ 4 and up to n − n/4 = {} distinct "
                      "tokens",
                      n, vocab, n >= shortest ? n - shortest : 0));
  std::uniform_int_distribution<std::size_t> pick_period(shortest, n / 2);
  const std::size_t period = pick_period(rng.engine()), fresh = n - period;  // fresh: distinct tokens needed
  std::vector<std::size_t> all(vocab);
  std::iota(all.begin(), all.end(), std::size_t{0});
  // A partial Fisher–Yates shuffle with the course's engine: the first `fresh` entries are distinct and uniform.
  for (std::size_t i = 0; i < fresh; ++i) {
    std::uniform_int_distribution<std::size_t> pick(i, vocab - 1);
    std::swap(all[i], all[pick(rng.engine())]);
  }
  InductionSequence s;
  s.period = period;
  s.tokens.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(fresh));
  for (std::size_t i = fresh; i < n; ++i) s.tokens.push_back(s.tokens[i - period]);
  s.targets.assign(n, kIgnore);
  for (std::size_t i = fresh; i + 1 < n; ++i) s.targets[i] = s.tokens[i + 1];
  return s;
}
// [induction_task]

namespace {

/// ∂logit(row, target)/∂X0 at the embedded input \p X0: (n, d_model).
Matrix logit_input_gradient(const Model& model, const Matrix& X0, std::size_t row, std::size_t target,
                            const HeadMask& keep) {
  const Trace tr = forward_embedded(model, X0, keep);
  Matrix seed = xt::zeros<float>(tr.logits.shape());  // (n, vocab): only the answer's logit
  seed(row, target) = 1.0f;
  Model unused = zeros_like(model);
  return backward(model, tr, seed, {}, unused, keep);
}

void require_answer(const Model& model, std::size_t n, std::size_t row, std::size_t target) {
  require(row < n && target < model.config.vocab,
          fmt::format("attribution: row {} of {} positions, target {} of a vocabulary of {}", row, n, target,
                      model.config.vocab));
}

}  // namespace

// [attribution_methods]
Vector gradient_times_input(const Model& model, const std::vector<std::size_t>& tokens, std::size_t row,
                            std::size_t target, const HeadMask& keep) {
  const Matrix X0 = embed_tokens(model, tokens);  // (n, d)
  require_answer(model, tokens.size(), row, target);
  return xt::sum(X0 * logit_input_gradient(model, X0, row, target, keep), {1});  // (n)
}

Vector integrated_gradients(const Model& model, const std::vector<std::size_t>& tokens, std::size_t row,
                            std::size_t target, std::size_t steps, const HeadMask& keep) {
  require(steps > 0, "integrated_gradients: steps = 0; the path integral needs at least one point");
  const Matrix X0 = embed_tokens(model, tokens);  // (n, d)
  require_answer(model, tokens.size(), row, target);
  Matrix mean_grad = xt::zeros<float>(X0.shape());  // (n, d)
  for (std::size_t k = 0; k < steps; ++k) {
    const float alpha = (static_cast<float>(k) + 0.5f) / static_cast<float>(steps);  // midpoint rule
    mean_grad += logit_input_gradient(model, alpha * X0, row, target, keep) / static_cast<float>(steps);
  }
  return xt::sum(X0 * mean_grad, {1});  // (n)
}
// [attribution_methods]

double previous_token_score(const Matrix& A) {
  const std::size_t n = A.shape(0);
  if (n < 2) return 0.0;
  double sum = 0.0;
  for (std::size_t i = 1; i < n; ++i) sum += static_cast<double>(A(i, i - 1));
  return sum / static_cast<double>(n - 1);
}

double accuracy(const Matrix& logits, const std::vector<std::size_t>& targets) {
  std::size_t counted = 0, right = 0;
  for (std::size_t i = 0; i < targets.size() && i < logits.shape(0); ++i) {
    if (targets[i] == kIgnore) continue;
    ++counted;
    const auto row = xt::row(logits, i);
    const std::size_t best =
        static_cast<std::size_t>(std::distance(row.begin(), std::max_element(row.begin(), row.end())));
    right += best == targets[i] ? 1 : 0;
  }
  return counted == 0 ? 0.0 : static_cast<double>(right) / static_cast<double>(counted);
}

}  // namespace attn::ch12
