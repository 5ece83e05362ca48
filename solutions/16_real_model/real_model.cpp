// Chapter 16, the reference answers. Book page: book/16_real_model.md.
// The model's own parts, in the order the forward meets them: a word's WordPiece ids, the safetensors header
// its weights come from, LayerNorm, the embedding layer, one encoder layer, and the pooled sentence embedding.
#include "16_real_model/real_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "03_multi_head/multi_head.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "16_real_model/layers.hpp"

namespace attn::ch16 {

// [safetensors_entry]
namespace {

// A header larger than this is not a model's header but a lie (safetensors itself caps it at 100 MB).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::invalid_argument(fmt::format("safetensors file {}: {}", path, what));
}

// One entry of the header, checked against the size of the data.
TensorEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j,
                        std::size_t data_bytes) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    refuse(path, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
  TensorEntry e;
  if (!j["dtype"].is_string()) refuse(path, fmt::format("tensor '{}': dtype is not a string", name));
  e.dtype = j["dtype"].get<std::string>();
  const std::size_t element = dtype_bytes(e.dtype);
  if (element == 0) refuse(path, fmt::format("tensor '{}': unknown dtype '{}'", name, e.dtype));
  if (!j["shape"].is_array()) refuse(path, fmt::format("tensor '{}': shape is not a list", name));
  std::size_t needed = element;  // bytes: element size times every dimension, refused past 64 bits
  for (const nlohmann::json& s : j["shape"]) {
    if (!s.is_number_unsigned())
      refuse(path, fmt::format("tensor '{}': shape {} is not a list of sizes", name, j["shape"].dump()));
    e.shape.push_back(s.get<std::size_t>());
    if (e.shape.back() != 0 && needed > std::numeric_limits<std::size_t>::max() / e.shape.back())
      refuse(path, fmt::format("tensor '{}': shape {} overflows 64 bits", name, j["shape"].dump()));
    needed *= e.shape.back();
  }
  const nlohmann::json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    refuse(path, fmt::format("tensor '{}': data_offsets {} is not [begin, end]", name, off.dump()));
  e.begin = off[0].get<std::size_t>();
  e.end = off[1].get<std::size_t>();
  if (e.begin > e.end || e.end > data_bytes)
    refuse(path, fmt::format("tensor '{}': data_offsets [{}, {}] lie outside the {} bytes of data (truncated "
                             "file or lying header)",
                             name, e.begin, e.end, data_bytes));
  if (e.end - e.begin != needed)
    refuse(path, fmt::format("tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", name,
                             j["shape"].dump(), e.dtype, needed, e.end - e.begin));
  return e;
}

}  // namespace
// [safetensors_entry]

// [wordpiece]
std::vector<int> wordpiece(const std::string& word, const Vocab& vocab) {
  require(!word.empty(), "wordpiece: the word is empty (basic_tokenize() never yields one)");
  const std::size_t chars = utf8_length(word);  // also refuses invalid UTF-8
  if (chars > vocab.max_word_chars) return {vocab.unk};
  // Byte offset of every code point, and of the end: pieces are cut between code points, never inside one.
  std::vector<std::size_t> at;
  for (std::size_t b = 0; b < word.size(); ++b)
    if ((static_cast<unsigned char>(word[b]) & 0xC0u) != 0x80u) at.push_back(b);
  at.push_back(word.size());
  std::vector<int> ids;
  std::size_t start = 0;
  while (start < chars) {
    // The longest piece from `start` that the vocabulary knows; a continuation piece carries "##".
    int found = -1;
    std::size_t end = chars;
    for (; end > start; --end) {
      const std::string piece = (start > 0 ? "##" : "") + word.substr(at[start], at[end] - at[start]);
      found = vocab.find(piece);
      if (found >= 0) break;
    }
    if (found < 0) return {vocab.unk};  // one part no piece matches: the whole word is unknown
    ids.push_back(found);
    start = end;
  }
  return ids;
}
// [wordpiece]

// [read_safetensors_header]
SafetensorsHeader read_safetensors_header(const unsigned char* file, std::size_t bytes, const std::string& path) {
  if (bytes < 8) refuse(path, fmt::format("{} bytes, fewer than the 8 of the header's length (truncated)", bytes));
  std::uint64_t header_bytes = 0;  // little-endian u64, read byte by byte (no alignment, any host)
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file[i];
  if (header_bytes > bytes - 8)
    refuse(path, fmt::format("the header claims {} bytes but the file has {} after the length (truncated file or "
                             "lying header)",
                             header_bytes, bytes - 8));
  if (header_bytes > kMaxHeaderBytes)
    refuse(path, fmt::format("the header claims {} bytes, more than safetensors' limit of {}", header_bytes,
                             kMaxHeaderBytes));
  const auto* text = reinterpret_cast<const char*>(file + 8);
  const nlohmann::json j = nlohmann::json::parse(text, text + header_bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) refuse(path, "the header is not a JSON object");
  SafetensorsHeader h;
  h.data_begin = 8 + static_cast<std::size_t>(header_bytes);
  const std::size_t data_bytes = bytes - h.data_begin;
  for (const auto& [name, value] : j.items())
    if (name != "__metadata__") h.entries.emplace(name, parse_entry(path, name, value, data_bytes));
  // No two tensors may share a byte: in the order of their first bytes, each must start at or after the end of
  // every one before it. A tensor of no bytes holds none to share.
  std::vector<std::pair<std::size_t, const std::string*>> order;  // (begin, name)
  for (const auto& [name, e] : h.entries)
    if (e.end > e.begin) order.emplace_back(e.begin, &name);
  std::sort(order.begin(), order.end());
  const std::string* reaching = nullptr;  // the tensor that reaches furthest so far
  for (const auto& [begin, name] : order) {
    if (reaching != nullptr && h.entries.at(*reaching).end > begin)
      refuse(path, fmt::format("tensors '{}' and '{}' overlap", *reaching, *name));
    if (reaching == nullptr || h.entries.at(*name).end > h.entries.at(*reaching).end) reaching = name;
  }
  return h;
}
// [read_safetensors_header]

// [layer_norm]
Matrix layer_norm(const Matrix& X, const Vector& gamma, const Vector& beta, float eps) {
  require(
      gamma.shape(0) == X.shape(1) && beta.shape(0) == X.shape(1),
      fmt::format("layer_norm: X {} with γ {} and β {} do not fit", shape_str(X), shape_str(gamma), shape_str(beta)));
  require(eps > 0.0f && std::isfinite(eps), fmt::format("layer_norm: ε = {} must be positive and finite", eps));
  require_finite("layer_norm", "X", X.data(), X.size());
  require_finite("layer_norm", "γ", gamma.data(), gamma.size());
  require_finite("layer_norm", "β", beta.data(), beta.size());
  const std::size_t n = X.shape(0), d = X.shape(1);
  Matrix Y = xt::empty<float>({n, d});  // (n, d)
  for (std::size_t i = 0; i < n; ++i) {
    // Mean and variance in double: 384 float sums would lose the last digits the reference keeps.
    double mean = 0.0, var = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean += X(i, j);
    mean /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) var += (X(i, j) - mean) * (X(i, j) - mean);
    var /= static_cast<double>(d);  // biased (÷ d, not d − 1), as PyTorch's LayerNorm
    // ε inside the root: on a row of tiny variance it decides the scale, so it must be the model's own.
    const double inv = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (std::size_t j = 0; j < d; ++j) Y(i, j) = static_cast<float>((X(i, j) - mean) * inv) * gamma(j) + beta(j);
  }
  return Y;
}
// [layer_norm]

// [embed]
Matrix embed(const std::vector<int>& ids, const Matrix& word, const Matrix& position, const Matrix& token_type,
             const Vector& gamma, const Vector& beta, float eps) {
  const std::size_t n = ids.size(), d = word.shape(1);
  require(n >= 1 && n <= position.shape(0), fmt::format("embed: {} tokens, the model takes 1 to {} (position {})", n,
                                                        position.shape(0), shape_str(position)));
  require(position.shape(1) == d && token_type.shape(1) == d && token_type.shape(0) >= 1,
          fmt::format("embed: word {}, position {}, token type {} do not fit", shape_str(word), shape_str(position),
                      shape_str(token_type)));
  Matrix X = xt::empty<float>({n, d});  // (n, d)
  for (std::size_t t = 0; t < n; ++t) {
    require(ids[t] >= 0 && static_cast<std::size_t>(ids[t]) < word.shape(0),
            fmt::format("embed: token id {} at position {} is outside the vocabulary of {}", ids[t], t, word.shape(0)));
    const auto id = static_cast<std::size_t>(ids[t]);
    // Three learned rows added: what the token is, where it is (position t, from 0), which segment (type 0).
    for (std::size_t j = 0; j < d; ++j) X(t, j) = word(id, j) + position(t, j) + token_type(0, j);
  }
  return layer_norm(X, gamma, beta, eps);
}
// [embed]

// [encoder_layer]
Matrix encoder_layer(const Matrix& X, const EncoderLayerWeights& W, const std::vector<bool>& keep_head) {
  const std::size_t n = X.shape(0), d = X.shape(1), h = W.heads;
  check_layer_weights("encoder_layer", W, d);  // every weight's shape, and h dividing d, before any product
  require(keep_head.empty() || keep_head.size() == h,
          fmt::format("encoder_layer: keep_head has {} entries for h = {} heads", keep_head.size(), h));
  // Self-attention: project (PyTorch's (out, in) weights), split into heads (chapter 03), attend per head
  // with chapter 05's flash kernel (no mask: one sentence, no padding), prune, merge, project back.
  const Tensor3 Q = split_heads(linear(X, W.W_Q, W.b_Q), h);  // (h, n, d_k)
  const Tensor3 K = split_heads(linear(X, W.W_K, W.b_K), h);  // (h, n, d_k)
  const Tensor3 V = split_heads(linear(X, W.W_V, W.b_V), h);  // (h, n, d_k)
  Tensor3 heads = xt::zeros<float>({h, n, d / h});            // (h, n, d_k)
  for (std::size_t i = 0; i < h; ++i) {
    const Matrix Q_i = xt::view(Q, i, xt::all(), xt::all()), K_i = xt::view(K, i, xt::all(), xt::all()),
                 V_i = xt::view(V, i, xt::all(), xt::all());
    xt::view(heads, i, xt::all(), xt::all()) = flash_attention(Q_i, K_i, V_i, /*causal=*/false, 64, 64).O;
  }
  if (!keep_head.empty()) heads = prune_heads(heads, keep_head);
  const Matrix A = linear(merge_heads(heads), W.W_O, W.b_O);  // (n, d)
  // Post-LayerNorm residual blocks, as BERT has them: LayerNorm(x + sublayer(x)).
  const Matrix H = layer_norm(X + A, W.ln1_gamma, W.ln1_beta, W.ln_eps);  // (n, d)
  const Matrix F = linear(gelu(linear(H, W.W_1, W.b_1)), W.W_2, W.b_2);   // (n, d)
  return layer_norm(H + F, W.ln2_gamma, W.ln2_beta, W.ln_eps);            // (n, d)
}
// [encoder_layer]

// [mean_pool_normalized]
Vector mean_pool_normalized(const Matrix& H) {
  require(H.shape(0) >= 1, fmt::format("mean_pool_normalized: no tokens in {}", shape_str(H)));
  require_finite("mean_pool_normalized", "H", H.data(), H.size());
  const std::size_t n = H.shape(0), d = H.shape(1);
  Vector e = xt::zeros<float>({d});  // (d): the mean of the rows, every token counted ([CLS] and [SEP] too)
  for (std::size_t j = 0; j < d; ++j) {
    double sum = 0.0;
    for (std::size_t t = 0; t < n; ++t) sum += H(t, j);
    e(j) = static_cast<float>(sum / static_cast<double>(n));
  }
  double norm2 = 0.0;
  for (float v : e) norm2 += static_cast<double>(v) * v;
  // sentence-transformers' Normalize divides by max(‖e‖, 1e-12): a mean of length 0 stays 0, never 0/0.
  const double norm = std::max(std::sqrt(norm2), 1e-12);
  for (float& v : e) v = static_cast<float>(v / norm);
  return e;
}
// [mean_pool_normalized]

}  // namespace attn::ch16
