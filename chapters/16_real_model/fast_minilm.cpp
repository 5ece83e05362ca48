// all-MiniLM-L6-v2's forward made fast for small batches: weights laid out at load, one arena, fused steps
// (fast_minilm.hpp says which engine does the same).
#include "16_real_model/fast_minilm.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "16_real_model/fast_kernels.hpp"
#include "16_real_model/layers.hpp"
#include "attn/cblas.hpp"
#include "attn/checks.hpp"

namespace attn::ch16 {

namespace {

// The step clock: each lap() adds the time since the last lap to one step. Reads no clock without a profile.
class StepClock {
 public:
  explicit StepClock(ForwardProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }
  void lap(ForwardStep step) {
    if (profile_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->seconds[static_cast<std::size_t>(step)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  ForwardProfile* profile_;
  std::chrono::steady_clock::time_point last_;
};

// A buffer of the arena at least \p size floats long: it grows (the only allocation) and never shrinks.
float* at_least(std::vector<float>& buffer, std::size_t size) {
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

// Row x (d) of a LayerNorm, in place: (x − μ) / √(σ² + ε) · γ + β, mean and variance in double as layer_norm().
void layer_norm_row(float* x, std::size_t d, const float* gamma, const float* beta, float eps) {
  double mean = 0.0, var = 0.0;
  for (std::size_t j = 0; j < d; ++j) mean += x[j];
  mean /= static_cast<double>(d);
  for (std::size_t j = 0; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
  var /= static_cast<double>(d);
  const double inv = 1.0 / std::sqrt(var + static_cast<double>(eps));
  for (std::size_t j = 0; j < d; ++j) x[j] = static_cast<float>((x[j] - mean) * inv) * gamma[j] + beta[j];
}

// X (n, d) = LayerNorm(X + A), in place: the residual add and the LayerNorm in one pass over the rows (ONNX
// Runtime's SkipLayerNorm), no (n, d) temporary for the sum.
void add_layer_norm(float* X, const float* A, std::size_t n, std::size_t d, const Vector& gamma, const Vector& beta,
                    float eps) {
  for (std::size_t t = 0; t < n; ++t) {
    float* x = X + t * d;
    const float* a = A + t * d;
    for (std::size_t j = 0; j < d; ++j) x[j] += a[j];
    layer_norm_row(x, d, gamma.data(), beta.data(), eps);
  }
}

// PyTorch's own erf formula, not SLEEF's erf: the same GELU as the reference, at a third of the cost.
void gelu_in_place(float* y, std::size_t n) { detail::gelu_vector(y, n); }

// One head of one sentence, exact softmax attention, read from the fused Q|K|V rows and written into its d_k
// columns of the merged output. qkv (n, 3d) with Q, K, V side by side; out (n, d). keys_t, scores: scratch.
// Kᵀ is copied first, (d_k, n), so that a row of scores is a sum of rows of Kᵀ: the compiler vectorises it
// over the keys (a dot product over d_k would not be, without reordering float sums).
void attend_head(const float* qkv, std::size_t n, std::size_t d, std::size_t d_k, std::size_t head, float* out,
                 float* keys_t, float* scores) {
  // A vector of keys at a time (16, 8 or 4) where a head is whole vectors wide (all-MiniLM's d_k = 32).
  if (detail::attention_vector_fits(d_k)) return detail::attend_head_vector(qkv, n, d, d_k, head, out, keys_t, scores);
  const std::size_t row = 3 * d, q0 = head * d_k, k0 = d + head * d_k, v0 = 2 * d + head * d_k;
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t c = 0; c < d_k; ++c) keys_t[c * n + j] = qkv[j * row + k0 + c];
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_k));
  for (std::size_t t = 0; t < n; ++t) {
    const float* q = qkv + t * row + q0;
    std::fill_n(scores, n, 0.0f);
    for (std::size_t c = 0; c < d_k; ++c)
      for (std::size_t j = 0; j < n; ++j) scores[j] += q[c] * keys_t[c * n + j];
    float top = -INFINITY;
    for (std::size_t j = 0; j < n; ++j) top = std::max(top, scores[j] *= scale);
    float sum = 0.0f;
    for (std::size_t j = 0; j < n; ++j) sum += scores[j] = std::exp(scores[j] - top);
    float* o = out + t * d + q0;
    std::fill_n(o, d_k, 0.0f);
    for (std::size_t j = 0; j < n; ++j) {
      const float* v = qkv + j * row + v0;
      for (std::size_t c = 0; c < d_k; ++c) o[c] += scores[j] * v[c];
    }
    const float inv = 1.0f / sum;
    for (std::size_t c = 0; c < d_k; ++c) o[c] *= inv;
  }
}

// A weight must be finite: the fast forward does not scan products for NaN as linear() does.
void require_finite_weight(const char* name, const float* data, std::size_t size) {
  const auto bad = std::find_if(data, data + size, [](float v) { return !std::isfinite(v); });
  if (bad != data + size)  // the message reads *bad: formatted only when there is one (end is past the buffer)
    throw std::invalid_argument(
        fmt::format("pack_linear: {} holds {} at entry {}", name, *bad, static_cast<std::size_t>(bad - data)));
}

}  // namespace

const char* step_name(ForwardStep step) {
  static constexpr const char* kNames[] = {"tokenize",       "embed",   "qkv",    "attention",
                                           "out_projection", "ffn_up",  "gelu",   "ffn_down",
                                           "layer_norm",     "pooling", "buffers"};
  const auto i = static_cast<std::size_t>(step);
  require(i < static_cast<std::size_t>(ForwardStep::count), fmt::format("step_name: step {} is not a step", i));
  return kNames[i];
}

namespace detail {

PackedLinear pack_linear(const char* name, const Matrix& W, const Vector& b) {
  const std::size_t out = W.shape(0), in = W.shape(1);
  require(out > 0 && in > 0 && b.shape(0) == out,
          fmt::format("pack_linear: {} is {} with b {}; it needs (out, in) with out, in ≥ 1 and b (out)", name,
                      shape_str(W), shape_str(b)));
  require_finite_weight(name, W.data(), W.size());
  require_finite_weight(name, b.data(), b.size());
  PackedLinear L;
  L.in = in;
  L.out = out;
  L.panels = has_packed_gemm() && out % 16 == 0;
  L.bias.assign(b.begin(), b.end());
  L.weights.resize(in * out);
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t k = 0; k < in; ++k)
      // Panels: output o is lane o % 16 of panel o / 16, which holds its in rows of 16 one after another.
      (L.panels ? L.weights[(o / 16) * in * 16 + k * 16 + o % 16] : L.weights[k * out + o]) = W(o, k);
  return L;
}

void apply_linear(const PackedLinear& L, const float* X, std::size_t n, float* Y) {
  if (n == 0) return;
  if (L.panels) return packed_gemm(X, n, L.in, L.weights.data(), L.out, L.bias.data(), Y);
  // The bias first, then the product added to it (β = 1): no second pass over Y.
  for (std::size_t t = 0; t < n; ++t) std::copy(L.bias.begin(), L.bias.end(), Y + t * L.out);
  const auto i = [](std::size_t v) { return static_cast<int>(v); };
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i(n), i(L.out), i(L.in), 1.0f, X, i(L.in), L.weights.data(),
              i(L.out), 1.0f, Y, i(L.out));
}

}  // namespace detail

FastMiniLM::FastMiniLM(const MiniLM& model) : model_(model) {
  const MiniLMConfig& c = model.config;
  // The tables the embedding step reads row by row, unchecked there: every token id below the vocabulary's size
  // (the vocabulary's own), every position below max_tokens, and the LayerNorm's γ and β of width d.
  require(c.d > 0 && c.heads > 0 && c.d % c.heads == 0 && model.word.shape(0) >= model.vocab.token_of.size() &&
              model.word.shape(1) == c.d && model.position.shape(0) >= c.max_tokens && model.position.shape(1) == c.d &&
              model.token_type.shape(0) >= 1 && model.token_type.shape(1) == c.d && model.ln_gamma.size() == c.d &&
              model.ln_beta.size() == c.d && c.max_tokens >= 2 && c.ln_eps > 0.0f && std::isfinite(c.ln_eps),
          fmt::format("FastMiniLM: the tables do not fit d = {}, h = {}, {} tokens of a {}-word vocabulary: word {}, "
                      "position {}, token_type {}, γ {}, β {}",
                      c.d, c.heads, c.max_tokens, model.vocab.token_of.size(), shape_str(model.word),
                      shape_str(model.position), shape_str(model.token_type), shape_str(model.ln_gamma),
                      shape_str(model.ln_beta)));
  // Every number the forward reads unchecked, scanned once here: no product or LayerNorm scans them per call.
  const auto finite = [](const std::string& what, const auto& t) {
    require_finite("FastMiniLM", what.c_str(), t.data(), t.size());
  };
  for (const auto& [what, table] :
       {std::pair{"word", &model.word}, {"position", &model.position}, {"token_type", &model.token_type}})
    finite(what, *table);
  finite("embedding γ", model.ln_gamma);
  finite("embedding β", model.ln_beta);
  for (std::size_t l = 0; l < model.layers.size(); ++l) {
    const EncoderLayerWeights& W = model.layers[l];
    check_layer_weights(fmt::format("FastMiniLM: layer {}", l).c_str(), W, model.config.d, "config.json's hidden_size");
    for (const auto& [what, v] : {std::pair{"ln1_gamma", &W.ln1_gamma},
                                  {"ln1_beta", &W.ln1_beta},
                                  {"ln2_gamma", &W.ln2_gamma},
                                  {"ln2_beta", &W.ln2_beta}})
      finite(fmt::format("layer {}'s {}", l, what), *v);
    // Q, K and V's weights stacked, (3d, d): one product gives the three side by side in each row.
    const Matrix W_qkv = xt::concatenate(xt::xtuple(W.W_Q, W.W_K, W.W_V), 0);
    const Vector b_qkv = xt::concatenate(xt::xtuple(W.b_Q, W.b_K, W.b_V));
    const std::string at = fmt::format("layer {}'s ", l);
    using detail::pack_linear;
    layers_.push_back({pack_linear((at + "W_Q|W_K|W_V").c_str(), W_qkv, b_qkv),
                       pack_linear((at + "W_O").c_str(), W.W_O, W.b_O), pack_linear((at + "W_1").c_str(), W.W_1, W.b_1),
                       pack_linear((at + "W_2").c_str(), W.W_2, W.b_2), W.ln1_gamma, W.ln1_beta, W.ln2_gamma,
                       W.ln2_beta});
  }
}

std::vector<Vector> FastMiniLM::embed_sentences(const std::vector<std::string>& texts, ForwardScratch& scratch,
                                                ForwardProfile* profile) const {
  if (texts.empty()) return {};
  const MiniLMConfig& c = model_.config;
  const std::size_t d = c.d, h = c.heads, d_k = d / h, d_ff = layers_.empty() ? 0 : layers_[0].up.out;
  StepClock clock(profile);
  // Text to ids, sentence after sentence: sentence s holds rows [starts[s], starts[s + 1]).
  scratch.ids.clear();
  scratch.starts.assign(1, 0);
  for (const std::string& text : texts) {
    const std::vector<int> ids = tokenize(text, model_.vocab, c.max_tokens);
    scratch.ids.insert(scratch.ids.end(), ids.begin(), ids.end());
    scratch.starts.push_back(scratch.ids.size());
  }
  clock.lap(ForwardStep::tokenize);
  const std::size_t T = scratch.ids.size(), longest = [&] {
    std::size_t m = 0;
    for (std::size_t s = 0; s + 1 < scratch.starts.size(); ++s)
      m = std::max(m, scratch.starts[s + 1] - scratch.starts[s]);
    return m;
  }();
  float* x = at_least(scratch.x, T * d);                      // (T, d) the layers' input and output
  float* qkv = at_least(scratch.qkv, T * 3 * d);              // (T, 3d) Q | K | V
  float* merged = at_least(scratch.merged, T * d);            // (T, d) every head's output in its d_k columns
  float* projected = at_least(scratch.projected, T * d);      // (T, d) a product's output before its residual
  float* ff = at_least(scratch.ff, T * d_ff);                 // (T, d_ff) the feed-forward's inside
  const std::size_t longest16 = (longest + 15) / 16 * 16;     // rounded up to whole vectors of 16 (vector_kernels.cpp)
  float* scores = at_least(scratch.scores, longest16);        // (n) one row of scores
  float* keys_t = at_least(scratch.keys_t, d_k * longest16);  // (d_k, n) one head's keys, transposed
  clock.lap(ForwardStep::buffers);
  // Embeddings: word + position (counted from 0 in each sentence) + token type 0, then LayerNorm, row by row.
  for (std::size_t s = 0; s + 1 < scratch.starts.size(); ++s)
    for (std::size_t t = scratch.starts[s]; t < scratch.starts[s + 1]; ++t) {
      const auto id = static_cast<std::size_t>(scratch.ids[t]), position = t - scratch.starts[s];
      float* row = x + t * d;
      const float *word = model_.word.data() + id * d, *where = model_.position.data() + position * d,
                  *type = model_.token_type.data();
      for (std::size_t j = 0; j < d; ++j) row[j] = word[j] + where[j] + type[j];
      layer_norm_row(row, d, model_.ln_gamma.data(), model_.ln_beta.data(), c.ln_eps);
    }
  clock.lap(ForwardStep::embed);
  for (const detail::FastLayer& L : layers_) {
    detail::apply_linear(L.qkv, x, T, qkv);
    clock.lap(ForwardStep::qkv);
    for (std::size_t s = 0; s + 1 < scratch.starts.size(); ++s) {
      const std::size_t first = scratch.starts[s], n = scratch.starts[s + 1] - first;
      for (std::size_t i = 0; i < h; ++i)
        attend_head(qkv + first * 3 * d, n, d, d_k, i, merged + first * d, keys_t, scores);
    }
    clock.lap(ForwardStep::attention);
    detail::apply_linear(L.out, merged, T, projected);
    clock.lap(ForwardStep::out_projection);
    add_layer_norm(x, projected, T, d, L.ln1_gamma, L.ln1_beta, c.ln_eps);  // x = H = LayerNorm(X + A)
    clock.lap(ForwardStep::layer_norm);
    detail::apply_linear(L.up, x, T, ff);
    clock.lap(ForwardStep::ffn_up);
    gelu_in_place(ff, T * d_ff);
    clock.lap(ForwardStep::gelu);
    detail::apply_linear(L.down, ff, T, projected);
    clock.lap(ForwardStep::ffn_down);
    add_layer_norm(x, projected, T, d, L.ln2_gamma, L.ln2_beta, c.ln_eps);  // x = LayerNorm(H + F)
    clock.lap(ForwardStep::layer_norm);
  }
  // Mean pooling and L2 normalisation per sentence, in double as mean_pool_normalized().
  std::vector<Vector> out;
  out.reserve(texts.size());
  std::vector<double> sum(d);
  for (std::size_t s = 0; s + 1 < scratch.starts.size(); ++s) {
    const std::size_t first = scratch.starts[s], n = scratch.starts[s + 1] - first;
    std::fill(sum.begin(), sum.end(), 0.0);
    for (std::size_t t = first; t < first + n; ++t)
      for (std::size_t j = 0; j < d; ++j) sum[j] += x[t * d + j];
    Vector e = Vector::from_shape({d});
    double norm2 = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      e(j) = static_cast<float>(sum[j] / static_cast<double>(n));
      norm2 += static_cast<double>(e(j)) * e(j);
    }
    const double norm = std::max(std::sqrt(norm2), 1e-12);
    for (float& v : e) v = static_cast<float>(v / norm);
    out.push_back(std::move(e));
  }
  clock.lap(ForwardStep::pooling);
  if (profile != nullptr) {
    ++profile->calls;
    profile->sentences += texts.size();
    profile->tokens += T;
  }
  return out;
}

}  // namespace attn::ch16
