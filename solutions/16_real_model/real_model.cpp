// Chapter 16, the reference answers. Book page: book/16_real_model.md.
#include "16_real_model/real_model.hpp"

#include <cstring>

#include <fmt/format.h>

#include "03_multi_head/multi_head.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "16_real_model/layers.hpp"

namespace attn::ch16 {

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

// [read_tensor]
Matrix read_tensor(const SafetensorsFile& file, const std::string& name,
                   const std::vector<std::size_t>& expected_shape) {
  const TensorEntry* entry = file.find(name);
  require(entry != nullptr, fmt::format("read_tensor: {} has no tensor '{}'", file.path(), name));
  require(entry->dtype == "F32",
          fmt::format("read_tensor: tensor '{}' in {} is {}, expected F32", name, file.path(), entry->dtype));
  require(entry->shape == expected_shape,
          fmt::format("read_tensor: tensor '{}' in {} has shape [{}], the config implies [{}]", name, file.path(),
                      fmt::join(entry->shape, ", "), fmt::join(expected_shape, ", ")));
  require(
      expected_shape.size() == 1 || expected_shape.size() == 2,
      fmt::format("read_tensor: tensor '{}' has {} dimensions; this reader takes 1 or 2", name, expected_shape.size()));
  const std::size_t rows = expected_shape.size() == 2 ? expected_shape[0] : 1;
  const std::size_t cols = expected_shape.back();
  Matrix M = xt::empty<float>({rows, cols});  // (rows, cols), or (1, n)
  // The file checked at opening that [begin, end) lies inside it and holds rows·cols floats. A tensor of no
  // elements has nothing to copy (and memcpy may not be given the null pointer an empty matrix holds).
  if (M.size() > 0) std::memcpy(M.data(), file.data() + entry->begin, M.size() * sizeof(float));
  return M;
}
// [read_tensor]

// [prune_heads]
Tensor3 prune_heads(const Tensor3& heads, const std::vector<bool>& keep_head) {
  require(keep_head.size() == heads.shape(0), fmt::format("prune_heads: keep_head has {} entries for {} heads {}",
                                                          keep_head.size(), heads.shape(0), shape_str(heads)));
  Tensor3 out = heads;  // (h, n, d_k)
  for (std::size_t i = 0; i < keep_head.size(); ++i)
    if (!keep_head[i]) xt::view(out, i, xt::all(), xt::all()) = 0.0f;
  return out;
}
// [prune_heads]

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

}  // namespace attn::ch16
