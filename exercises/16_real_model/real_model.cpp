// Chapter 16, your exercises. Book page: book/16_real_model.md.
// Check your progress with `./course check 16`; stuck? `./course hint 16`.
// Watch your code run the chapter: `./course run 16 --track exercise`.
#include "16_real_model/real_model.hpp"

#include <cstring>

#include <fmt/format.h>

#include "03_multi_head/multi_head.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "16_real_model/layers.hpp"
#include "attn/errors.hpp"

namespace attn::ch16 {

namespace {
constexpr const char* kChapter = "16_real_model";
}

std::vector<int> wordpiece(const std::string& word, const Vocab& vocab) {
  // TODO(learner): greedy longest match from the left. From position `start`, try the longest piece first and
  //   shorten it one code point at a time until vocab.find(piece) >= 0; pieces after the first are looked up as
  //   "##" + piece. No piece at some position, or more than vocab.max_word_chars code points: return {vocab.unk}.
  //   An empty word is std::invalid_argument; utf8_length(word) counts code points (and refuses bad UTF-8).
  throw not_implemented("wordpiece", kChapter,
                        "longest piece first: for end = chars down to start + 1, look up the piece (with \"##\" "
                        "unless start = 0).");
}

Matrix read_tensor(const SafetensorsFile& file, const std::string& name,
                   const std::vector<std::size_t>& expected_shape) {
  // TODO(learner): file.find(name) gives the TensorEntry (nullptr when missing). Check, naming the tensor in
  //   each std::invalid_argument: it exists, its dtype is "F32", its shape equals expected_shape (1 or 2 dims).
  //   Then copy its bytes, file.data() + entry->begin, into a (rows, cols) Matrix ((1, n) for a vector).
  throw not_implemented("read_tensor", kChapter,
                        "three checks (present, F32, shape), then one std::memcpy from file.data() + entry->begin.");
}

Tensor3 prune_heads(const Tensor3& heads, const std::vector<bool>& keep_head) {
  // TODO(learner): a copy of `heads` (h, n, d_k) in which every head i with keep_head[i] == false is all zeros.
  //   keep_head.size() != h is std::invalid_argument naming both sizes.
  throw not_implemented("prune_heads", kChapter, "copy, then xt::view(out, i, xt::all(), xt::all()) = 0.0f.");
}

Matrix encoder_layer(const Matrix& X, const EncoderLayerWeights& W, const std::vector<bool>& keep_head) {
  // TODO(learner): Q, K, V = linear(X, W.W_Q, W.b_Q), … split into W.heads heads (split_heads); per head
  //   flash_attention(Q_i, K_i, V_i, false, 64, 64).O; prune_heads when keep_head is not empty; merge_heads;
  //   A = linear(merged, W.W_O, W.b_O); H = layer_norm(X + A, W.ln1_gamma, W.ln1_beta, W.ln_eps);
  //   F = linear(gelu(linear(H, W.W_1, W.b_1)), W.W_2, W.b_2); return layer_norm(H + F, W.ln2_gamma, …).
  //   First check_layer_weights("encoder_layer", W, d) (layers.hpp): it refuses every weight whose shape does not
  //   fit d, and d not divisible by W.heads; keep_head of the wrong size: std::invalid_argument.
  throw not_implemented("encoder_layer", kChapter,
                        "attention sublayer, then feed-forward sublayer, each as LayerNorm(x + sublayer(x)).");
}

}  // namespace attn::ch16
