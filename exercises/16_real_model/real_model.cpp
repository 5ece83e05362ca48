// Chapter 16, your exercises. Book page: book/16_real_model.md.
// Check your progress with `./course check 16`; stuck? `./course hint 16`.
// Watch your code run the chapter: `./course run 16 --track exercise`.
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
#include "attn/errors.hpp"

namespace attn::ch16 {

namespace {
constexpr const char* kChapter = "16_real_model";
}

std::vector<int> wordpiece(const std::string& word, const Vocab& vocab) {
  // TODO(learner): cut the word into the vocabulary's pieces, greedily from the left, the longest piece first;
  //   every piece after the first is looked up with "##" in front. A word with a part no piece matches, or longer
  //   than vocab.max_word_chars code points, is {vocab.unk} as a whole. Pieces are cut between code points, never
  //   inside one. An empty word, or one that is not UTF-8, is std::invalid_argument.
  throw not_implemented("wordpiece", kChapter,
                        "longest piece first: from each start, try the piece that runs to the end of the word, then "
                        "one code point shorter.");
}

SafetensorsHeader read_safetensors_header(const unsigned char* file, std::size_t bytes, const std::string& path) {
  // TODO(learner): read the 8-byte little-endian length N, parse the N bytes after it as JSON (nlohmann::json),
  //   and return every tensor's entry (dtype, shape, [begin, end)) with data_begin = 8 + N. Check everything the
  //   contract lists against the file before returning: the file's size, N, the JSON object, each entry's fields,
  //   its bytes (shape × dtype size) against its offsets and the data's size, and that no two tensors overlap.
  //   Every refusal is std::invalid_argument naming the file (and the tensor, or both tensors).
  throw not_implemented("read_safetensors_header", kChapter,
                        "the length is bytes 0 … 7, least significant first; the data start right after the JSON.");
}

Matrix layer_norm(const Matrix& X, const Vector& gamma, const Vector& beta, float eps) {
  // TODO(learner): normalise every row to mean 0 and variance 1, with ε under the square root, then scale by γ and
  //   shift by β, coordinate by coordinate. The variance is the biased one (÷ d). Refuse γ or β of the wrong size,
  //   an ε that is not positive and finite, and NaN/Inf in X, γ or β.
  throw not_implemented("layer_norm", kChapter,
                        "per row: μ = mean, σ² = mean of (x − μ)², then (x − μ) / √(σ² + ε) · γ + β.");
}

Matrix embed(const std::vector<int>& ids, const Matrix& word, const Matrix& position, const Matrix& token_type,
             const Vector& gamma, const Vector& beta, float eps) {
  // TODO(learner): row t of the result is the LayerNorm of three learned rows added: the word's (row ids[t] of
  //   word), the position's (row t of position) and token type 0's. Refuse no ids and more ids than positions
  //   (naming n and the number of positions), tables that do not share d, and an id outside the vocabulary
  //   (naming it and its position).
  throw not_implemented("embed", kChapter, "sum the three rows for every token, then one call of your layer_norm().");
}

Matrix encoder_layer(const Matrix& X, const EncoderLayerWeights& W, const std::vector<bool>& keep_head) {
  // TODO(learner): one post-LayerNorm BERT layer (real_model.hpp gives the formula): multi-head self-attention with
  //   the course's heads and flash kernel, the heads keep_head removes taken out, the output projection, residual
  //   and LayerNorm; then the feed-forward block with erf-GELU, residual and LayerNorm, both with the model's ε.
  //   Refuse weights that do not fit X (check_layer_weights in layers.hpp) and a keep_head of the wrong size.
  throw not_implemented("encoder_layer", kChapter,
                        "attention sublayer, then feed-forward sublayer, each as LayerNorm(x + sublayer(x)).");
}

Vector mean_pool_normalized(const Matrix& H) {
  // TODO(learner): the sentence embedding: the mean of all rows of H, divided by max(its Euclidean length, 1e-12):
  //   length 1, or less for a mean shorter than 1e-12 (0 stays 0). Sum and square in double, so that rows at float's
  //   range do not overflow. No rows, or a NaN/Inf in H, is std::invalid_argument.
  throw not_implemented("mean_pool_normalized", kChapter,
                        "average each column over the tokens, then divide the vector by its length.");
}

}  // namespace attn::ch16
