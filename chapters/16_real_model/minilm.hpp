/// \file
/// all-MiniLM-L6-v2 as a whole: its files, its config, the full forward (embeddings, six encoder layers,
/// mean pooling, L2 normalisation) and the statistics of its heads. The functions declared here are chapter
/// code (minilm.cpp); the inline ones after load_minilm() join them with the exercises of real_model.hpp (inline,
/// so that each track's program and tests run its own exercises).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "05_flash_cpu/flash_cpu.hpp"
#include "16_real_model/layers.hpp"
#include "16_real_model/real_model.hpp"
#include "attn/tensor.hpp"

namespace attn::ch16 {

/// The sizes config.json gives, each checked on reading.
struct MiniLMConfig {
  std::size_t vocab = 30522, d = 384, heads = 12, layers = 6, d_ff = 1536, max_positions = 512, token_types = 2;
  float ln_eps = 1e-12f;
  std::size_t max_tokens = 256;  ///< sentence-transformers cuts longer inputs here ([CLS] and [SEP] included)
};

/// Where the model is: the environment variable ATTN_MINILM_DIR when set, else build/models/all-MiniLM-L6-v2
/// in the checkout (where ./course setup unpacks it).
std::string default_model_dir();

/// Empty when \p dir holds config.json, vocab.txt and model.safetensors; else why not and how to get them.
std::string model_missing_reason(const std::string& dir);

/// Reads \p dir/config.json. \throws std::runtime_error naming the path when it is missing or not a regular
/// file (a folder, a FIFO); std::invalid_argument naming the field when it is missing, not BERT with
/// "gelu" and absolute positions, or a size is 0 or not divisible (hidden_size by num_attention_heads).
MiniLMConfig read_config(const std::string& dir);

/// Checks that \p file holds no layer past the \p layers config.json gives: every tensor named
/// "encoder.layer.N.…" has N < layers. A config of 3 layers for a file of 6 would otherwise run half the model.
/// \throws std::invalid_argument naming the file and the first tensor past them.
void check_layer_count(const SafetensorsFile& file, std::size_t layers);

/// Every head's attention matrix in one layer, softmax(Q_i K_iᵀ / √d_k) (chapter 02's functions on
/// chapter 03's split), recomputed from the layer's input for inspection.
/// \param X (n, d) the layer's input.
/// \param W the layer's weights (W_Q, b_Q, W_K, b_K and the head count are used).
/// \return (h, n, n). \throws std::invalid_argument as check_layer_weights() does: naming the shapes when the
///         weights do not fit X or d is not divisible by the head count; naming a NaN/Inf as linear() does.
Tensor3 attention_maps(const Matrix& X, const EncoderLayerWeights& W);

/// What one head's attention looks at, averaged over the query rows of one sentence.
struct HeadShares {
  double cls = 0, sep = 0, previous = 0, next = 0, self = 0;  ///< attention on [CLS], [SEP], i−1, i+1, i
  double entropy = 0;                                         ///< −Σ_j a_ij ln a_ij, in nats
};

/// The shares of one head, from its attention matrix \p A (n, n) over [CLS] w … [SEP] (n ≥ 2).
/// Rows without a previous (or next) token count 0 there. \throws std::invalid_argument when A is not square or
/// n < 2, or naming the first entry that is NaN, infinite or negative.
HeadShares head_shares(const Matrix& A);

/// One recorded reference text: its ids and embedding from sentence-transformers (record_reference.py).
struct ReferenceText {
  std::string text;
  std::vector<int> ids;
  std::vector<double> embedding;  ///< (d)
};

/// Reads tests/data/16_real_model_reference.txt ("text: …", "ids: …", "embedding: …" per text).
/// \throws std::runtime_error naming the file when it cannot be read or is not a regular file (a folder, a
///         FIFO); std::invalid_argument naming the line when a value is not a whole number (an id) or a finite
///         number (the embedding), or a text has two ids or embedding lines, and when a text lacks its ids or its
///         embedding.
std::vector<ReferenceText> read_reference(const std::string& path);

/// The sentences of a text file, one per line, skipping empty lines and comment lines (starting with a hash sign).
/// \throws std::runtime_error naming the file when it cannot be read or is not a regular file (a folder, a FIFO).
std::vector<std::string> read_sentences(const std::string& path);

/// How much each head adds to its layer's attention output: the mean over tokens of ‖O_i·W_O[:, cols_i]ᵀ‖,
/// head i's output O_i (n, d_k) through its own columns of W_O.
/// \param X (n, d) the layer's input.
/// \param W the layer's weights.
/// \return (h). A head that adds little is the first to prune.
/// \throws std::invalid_argument as attention_maps() does, or naming the shapes when W_O is not (d, h·d_k).
std::vector<double> head_contributions(const Matrix& X, const EncoderLayerWeights& W);

/// The layer turned grouped-query (chapter 09) without retraining: the key and value projections of each
/// group of h/g heads replaced by their mean (chapter 09's mean_pool_kv_heads() on W_K and b_K, W_V and b_V
/// cut per head: pooling the projections pools the keys, since the projection is linear), every head of a
/// group then reading the same keys and values.
/// \param W the layer's weights.
/// \param g the number of key/value heads; it divides h.
/// \return the weights with W_K, b_K, W_V, b_V pooled. \throws std::invalid_argument as check_layer_weights() does
/// (against d = W_Q's columns; h = 0 included), or when g does not divide h.
EncoderLayerWeights pool_kv_heads(const EncoderLayerWeights& W, std::size_t g);

/// How one head attends in encoder_layer_with(): its queries (n, d_k), keys (n, d_k), values (n, d_k) to its
/// output (n, d_k).
using HeadAttention = std::function<Matrix(const Matrix& Q, const Matrix& K, const Matrix& V)>;

/// The model: config and every weight, copied out of the memory-mapped file through read_tensor().
struct MiniLM {
  MiniLMConfig config;
  Vocab vocab;
  Matrix word, position, token_type;  ///< (vocab, d), (max_positions, d), (token_types, d)
  Vector ln_gamma, ln_beta;           ///< (d) the embeddings' LayerNorm
  std::vector<EncoderLayerWeights> layers;
};

/// Which heads take part: keep[l][i] for layer l, head i; empty = all.
using HeadMask = std::vector<std::vector<bool>>;

// [load_minilm]
/// Loads the model in \p dir: config, vocabulary and all 101 weight tensors, each read with read_tensor()
/// against the shape the config implies, the file holding no layer the config lacks (check_layer_count()).
/// \throws std::invalid_argument / std::runtime_error naming the file.
inline MiniLM load_minilm(const std::string& dir) {
  MiniLM m;
  m.config = read_config(dir);
  const MiniLMConfig& c = m.config;
  m.vocab = load_vocab(dir + "/vocab.txt");
  require(m.vocab.token_of.size() == c.vocab, "vocab.txt has " + std::to_string(m.vocab.token_of.size()) +
                                                  " tokens, config.json says " + std::to_string(c.vocab));
  const SafetensorsFile file(dir + "/model.safetensors");
  check_layer_count(file, c.layers);
  const auto vec = [&](const std::string& name, std::size_t n) { return row_vector(read_tensor(file, name, {n})); };
  m.word = read_tensor(file, "embeddings.word_embeddings.weight", {c.vocab, c.d});
  m.position = read_tensor(file, "embeddings.position_embeddings.weight", {c.max_positions, c.d});
  m.token_type = read_tensor(file, "embeddings.token_type_embeddings.weight", {c.token_types, c.d});
  m.ln_gamma = vec("embeddings.LayerNorm.weight", c.d);
  m.ln_beta = vec("embeddings.LayerNorm.bias", c.d);
  for (std::size_t l = 0; l < c.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    EncoderLayerWeights W;
    W.W_Q = read_tensor(file, p + "attention.self.query.weight", {c.d, c.d});
    W.W_K = read_tensor(file, p + "attention.self.key.weight", {c.d, c.d});
    W.W_V = read_tensor(file, p + "attention.self.value.weight", {c.d, c.d});
    W.W_O = read_tensor(file, p + "attention.output.dense.weight", {c.d, c.d});
    W.b_Q = vec(p + "attention.self.query.bias", c.d);
    W.b_K = vec(p + "attention.self.key.bias", c.d);
    W.b_V = vec(p + "attention.self.value.bias", c.d);
    W.b_O = vec(p + "attention.output.dense.bias", c.d);
    W.ln1_gamma = vec(p + "attention.output.LayerNorm.weight", c.d);
    W.ln1_beta = vec(p + "attention.output.LayerNorm.bias", c.d);
    W.W_1 = read_tensor(file, p + "intermediate.dense.weight", {c.d_ff, c.d});
    W.b_1 = vec(p + "intermediate.dense.bias", c.d_ff);
    W.W_2 = read_tensor(file, p + "output.dense.weight", {c.d, c.d_ff});
    W.b_2 = vec(p + "output.dense.bias", c.d);
    W.ln2_gamma = vec(p + "output.LayerNorm.weight", c.d);
    W.ln2_beta = vec(p + "output.LayerNorm.bias", c.d);
    W.heads = c.heads;
    W.ln_eps = c.ln_eps;
    m.layers.push_back(std::move(W));
  }
  return m;
}
// [load_minilm]

/// [CLS] + the WordPiece ids of every word basic_tokenize() finds + [SEP], cut to config.max_tokens as
/// sentence-transformers cuts it (the last kept id is [SEP]).
inline std::vector<int> tokenize(const std::string& text, const Vocab& vocab, std::size_t max_tokens) {
  require(max_tokens >= 2, "tokenize: max_tokens = " + std::to_string(max_tokens) + " leaves no room for [CLS] [SEP]");
  std::vector<int> ids{vocab.cls};
  for (const std::string& word : basic_tokenize(text))
    for (int id : wordpiece(word, vocab)) ids.push_back(id);
  if (ids.size() > max_tokens - 1) ids.resize(max_tokens - 1);
  ids.push_back(vocab.sep);
  return ids;
}

namespace detail {
/// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of \p M, copied row by row: one sentence's slice of one head,
/// contiguous for the attention kernel (an xtensor view would be copied element by element). \return (rows, cols).
inline Matrix block(const Matrix& M, std::size_t r0, std::size_t rows, std::size_t c0, std::size_t cols) {
  Matrix B = Matrix::from_shape({rows, cols});
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(M.data() + (r0 + r) * M.shape(1) + c0, cols, B.data() + r * cols);
  return B;
}
}  // namespace detail

/// encoder_layer_with() on a batch of sentences packed one after another in the rows of one matrix, with no
/// padding: sentence s holds rows [starts[s], starts[s + 1]). The row-wise steps of the layer (the
/// projections, LayerNorm, the feed-forward block) run on all rows at once: one large matrix product instead
/// of one small one per sentence, which is what makes a batch fast. Attention runs per sentence and head, so
/// no sentence sees another's tokens and no padding mask is needed — the "varlen" packing of FlashAttention's
/// API and of PyTorch's nested tensors.
/// \param X (T, d) the packed input, T = starts.back().
/// \param starts (S + 1) sentence boundaries: 0 = starts[0] ≤ starts[1] ≤ … ≤ starts[S] = T.
/// \param W the layer's weights.
/// \param attend the per-head attention, called on (n_s, d_k) views of one sentence.
/// \return (T, d).
/// \throws std::invalid_argument as check_layer_weights() does (before any product), or when \p starts does not
///         rise from 0 to T.
// [encoder_layer_packed]
inline Matrix encoder_layer_packed(const Matrix& X, const std::vector<std::size_t>& starts,
                                   const EncoderLayerWeights& W, const HeadAttention& attend) {
  const std::size_t T = X.shape(0), d = X.shape(1), h = W.heads;
  // Every weight's shape against d, before any product: a half-width W_Q would be read past its end per head.
  check_layer_weights("encoder_layer_packed", W, d);
  require(
      starts.size() >= 2 && starts.front() == 0 && starts.back() == T && std::is_sorted(starts.begin(), starts.end()),
      fmt::format("encoder_layer_packed: starts must rise from 0 to the {} rows of X; got [{}]", T,
                  fmt::join(starts, ", ")));
  require(static_cast<bool>(attend), "encoder_layer_packed: attend is empty; give the attention of one head");
  const std::size_t d_k = d / h;
  const Matrix Q = linear(X, W.W_Q, W.b_Q), K = linear(X, W.W_K, W.b_K), V = linear(X, W.W_V, W.b_V);  // (T, d)
  Matrix merged = xt::zeros<float>({T, d});  // (T, d): every head's output in its d_k columns
  for (std::size_t s = 0; s + 1 < starts.size(); ++s) {
    const std::size_t first = starts[s], n_s = starts[s + 1] - starts[s];
    if (n_s == 0) continue;  // an empty sentence has no tokens to attend
    for (std::size_t i = 0; i < h; ++i) {
      const Matrix O_i = attend(detail::block(Q, first, n_s, i * d_k, d_k), detail::block(K, first, n_s, i * d_k, d_k),
                                detail::block(V, first, n_s, i * d_k, d_k));  // (n_s, d_k)
      require(O_i.shape(0) == n_s && O_i.shape(1) == d_k,
              fmt::format("encoder_layer_packed: attend gave head {} an output {}; it needs ({}, {})", i,
                          shape_str(O_i), n_s, d_k));
      for (std::size_t r = 0; r < n_s; ++r)
        std::copy_n(O_i.data() + r * d_k, d_k, merged.data() + (first + r) * d + i * d_k);
    }
  }
  const Matrix H = layer_norm(X + linear(merged, W.W_O, W.b_O), W.ln1_gamma, W.ln1_beta, W.ln_eps);  // (T, d)
  return layer_norm(H + linear(gelu(linear(H, W.W_1, W.b_1)), W.W_2, W.b_2), W.ln2_gamma, W.ln2_beta, W.ln_eps);
}
// [encoder_layer_packed]

/// encoder_layer() with another attention per head in place of the exact one: an earlier chapter's shortcut
/// (a sliding window, Performer features) swapped into the real model. The chapter's own copy of the layer,
/// since the learner's encoder_layer() is the exact attention by contract; the tests check the two agree
/// when \p attend is exact.
/// \param X (n, d) the layer's input.
/// \param W the layer's weights.
/// \param attend the per-head attention.
/// \return (n, d). \throws std::invalid_argument as check_layer_weights() does (a weight's shape not fitting d, d
///         not divisible by the head count), when \p attend is empty or returns a head an output that is not
///         (n, d_k), or as linear() and layer_norm() do.
inline Matrix encoder_layer_with(const Matrix& X, const EncoderLayerWeights& W, const HeadAttention& attend) {
  return encoder_layer_packed(X, {0, X.shape(0)}, W, attend);
}

/// The sentence embeddings of a batch, all heads kept: the sentences packed into one matrix and every layer run
/// once on the batch (encoder_layer_packed()), then pooled sentence by sentence. Equal to sentence_embedding()
/// of each text to float32 rounding; faster by the size of the products. \return (d) per text.
inline std::vector<Vector> sentence_embeddings(const MiniLM& m, const std::vector<std::string>& texts) {
  if (texts.empty()) return {};
  std::vector<Matrix> embedded;  // (n_s, d) per sentence
  std::vector<std::size_t> starts{0};
  for (const std::string& text : texts) {
    embedded.push_back(embed(tokenize(text, m.vocab, m.config.max_tokens), m.word, m.position, m.token_type, m.ln_gamma,
                             m.ln_beta, m.config.ln_eps));
    starts.push_back(starts.back() + embedded.back().shape(0));
  }
  Matrix X = xt::empty<float>({starts.back(), m.config.d});  // (T, d): the sentences' rows one after another
  for (std::size_t s = 0; s < texts.size(); ++s)
    xt::view(X, xt::range(starts[s], starts[s + 1]), xt::all()) = embedded[s];
  const HeadAttention exact = [](const Matrix& Q, const Matrix& K, const Matrix& V) {
    return flash_attention(Q, K, V, /*causal=*/false, 64, 64).O;  // as encoder_layer() attends
  };
  for (const EncoderLayerWeights& W : m.layers) X = encoder_layer_packed(X, starts, W, exact);
  std::vector<Vector> out;
  for (std::size_t s = 0; s < texts.size(); ++s)
    out.push_back(mean_pool_normalized(xt::view(X, xt::range(starts[s], starts[s + 1]), xt::all())));
  return out;
}

// [forward]
/// The encoder's output for one sentence: embed(), then every layer's encoder_layer() with the heads \p keep
/// leaves. \p layer_inputs, when given, receives each layer's input (for attention_maps()).
/// \return (n, d).
inline Matrix encode(const MiniLM& m, const std::vector<int>& ids, const HeadMask& keep = {},
                     std::vector<Matrix>* layer_inputs = nullptr) {
  require(keep.empty() || keep.size() == m.layers.size(), "encode: a head mask for " + std::to_string(keep.size()) +
                                                              " layers, the model has " +
                                                              std::to_string(m.layers.size()));
  Matrix X = embed(ids, m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta, m.config.ln_eps);  // (n, d)
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    if (layer_inputs != nullptr) layer_inputs->push_back(X);
    X = encoder_layer(X, m.layers[l], keep.empty() ? std::vector<bool>{} : keep[l]);
  }
  return X;
}

/// The sentence embedding with \p attend in every head of every layer (encoder_layer_with()). \return (d).
inline Vector sentence_embedding_with(const MiniLM& m, const std::string& text, const HeadAttention& attend) {
  Matrix X = embed(tokenize(text, m.vocab, m.config.max_tokens), m.word, m.position, m.token_type, m.ln_gamma,
                   m.ln_beta, m.config.ln_eps);  // (n, d)
  for (const EncoderLayerWeights& W : m.layers) X = encoder_layer_with(X, W, attend);
  return mean_pool_normalized(X);
}

/// The sentence embedding: encode(), mean pooling over the tokens, L2 normalisation. \return (d).
inline Vector sentence_embedding(const MiniLM& m, const std::string& text, const HeadMask& keep = {}) {
  return mean_pool_normalized(encode(m, tokenize(text, m.vocab, m.config.max_tokens), keep));
}

// [forward]

}  // namespace attn::ch16
