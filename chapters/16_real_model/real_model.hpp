/// \file
/// Chapter 16, a real model: the contract the learner implements in exercises/16_real_model/real_model.cpp.
/// Book page: book/16_real_model.md.
///
/// all-MiniLM-L6-v2 (6 encoder layers × 12 heads, d = 384) is read from its safetensors file, its text cut
/// into WordPiece tokens, and run through the course's own attention (chapter 03's heads, chapter 05's
/// tiled flash kernel). The six exercises are the model's own parts, in the order the forward meets them: one
/// WordPiece step, the safetensors header, LayerNorm, the embedding layer, one encoder layer, and mean pooling
/// with L2 normalisation.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "16_real_model/safetensors.hpp"
#include "16_real_model/tokenizer.hpp"
#include "attn/tensor.hpp"

namespace attn::ch16 {

/// \defgroup ch16 Chapter 16: a real model
/// all-MiniLM-L6-v2 computed with the course's kernels, and what its 72 heads do.
/// @{

/// The weights of one BERT encoder layer, each Linear as PyTorch stores it: (out, in), applied as x·Wᵀ + b.
struct EncoderLayerWeights {
  Matrix W_Q, W_K, W_V, W_O;   ///< (d, d) each, (out, in)
  Vector b_Q, b_K, b_V, b_O;   ///< (d) each
  Vector ln1_gamma, ln1_beta;  ///< (d) the LayerNorm after attention + residual
  Matrix W_1;                  ///< (d_ff, d) the feed-forward's first Linear
  Vector b_1;                  ///< (d_ff)
  Matrix W_2;                  ///< (d, d_ff) its second Linear
  Vector b_2;                  ///< (d)
  Vector ln2_gamma, ln2_beta;  ///< (d) the LayerNorm after the feed-forward + residual
  std::size_t heads = 12;      ///< h; d_k = d / h
  float ln_eps = 1e-12f;       ///< LayerNorm's ε (config.json's layer_norm_eps)
};

/// One WordPiece step: cuts one word (already lower-cased, accent-stripped and split at punctuation by
/// basic_tokenize()) into the longest pieces the vocabulary knows, greedily from the left; every piece but
/// the first is looked up with the prefix "##". A word with a part no piece matches, or longer than
/// Vocab::max_word_chars characters (code points), becomes the single id Vocab::unk.
/// \param word one word, UTF-8, not empty.
/// \param vocab the vocabulary (vocab.txt).
/// \return the ids of its pieces, in order (≥ 1 id).
/// \throws std::invalid_argument when \p word is empty or is not valid UTF-8.
std::vector<int> wordpiece(const std::string& word, const Vocab& vocab);

/// Reads and checks the header of a safetensors file: 8 bytes holding N, the header's length, as an unsigned
/// little-endian 64-bit integer; N bytes of JSON, an object whose every key but "__metadata__" names a tensor
/// {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]}; then the data, which the offsets count from.
/// Nothing in the file is trusted: every number is checked against the file before anything is read through it.
/// Every number is 64 bits wide, and every one of its bits counts: N read from 4 bytes only, a dimension or an
/// offset read into 32 bits, or a product that wraps past 2^64, lets a lying header through.
/// \param file the file's bytes (memory-mapped: SafetensorsFile calls this), may be null when \p bytes is 0.
/// \param bytes the file's size.
/// \param path the file's name, for the messages.
/// \return every tensor's entry by name, and data_begin = 8 + N. A file of no data (N = the bytes after the first 8)
///         is read, and so is a header of exactly 10^8 bytes.
/// \throws std::invalid_argument naming \p path: when the file has fewer than 8 bytes (naming its size and 8); when N
///         is more than the bytes after the first 8, naming N and those bytes (N = the JSON's size + 2^32 is such a
///         lie: its fifth byte is 1); when N is more than 10^8 bytes, safetensors' own limit, naming N and the limit,
///         100000000, even where the file is that long; when the header is not a JSON object. Naming the tensor as
///         well: an entry that is not an object with "dtype", "shape" and "data_offsets"; a dtype that is not a string
///         or that dtype_bytes() does not know; a shape that is not a list of non-negative integers below 2^64; a shape
///         whose bytes pass 64 bits (the dtype's size times each dimension in turn: a partial product past 2^64 − 1),
///         naming the shape, whatever the offsets say (F32 [4294967296, 4294967296] and F32 [4611686018427387904] wrap
///         to 0 bytes; F32 [4611686018427387903] needs 18446744073709551612 and is checked against its offsets);
///         offsets that are not two non-negative integers [begin, end] with begin ≤ end ≤ the data's size, naming
///         begin, end and the data's size; end − begin other than the shape's bytes, naming both. Naming both tensors:
///         two tensors whose byte ranges overlap (a tensor of no bytes overlaps nothing).
SafetensorsHeader read_safetensors_header(const unsigned char* file, std::size_t bytes, const std::string& path);

/// LayerNorm over each row x of \p X: (x − μ) / √(σ² + ε) · γ + β, with μ the row's mean and σ² its biased variance
/// (the mean of (x − μ)², divided by d, as PyTorch's LayerNorm). ε is the model's (1e-12 for this one, where
/// PyTorch's default is 1e-5): on a row of tiny variance the two give different rows, and the tests have one; they
/// also have rows whose σ² is 1e-14, 1e-12 and 1e-10, beside the model's ε. Any finite X is normalised: μ, x − μ and
/// σ² must not overflow where the result does not (a row of ±3e38 has σ² = 9e76, and in (3e38, 3e38, 3e38, −3e38)
/// x − μ reaches −4.5e38, both past float's range: compute them in double); that first row normalises to ±1.
/// \param X (n, d). \param gamma (d) the scale γ. \param beta (d) the shift β.
/// \param eps ε > 0, finite: the smallest positive float is an ε, and so is the largest finite one.
/// \return (n, d); n = 0 gives (0, d).
/// \throws std::invalid_argument naming the shapes when γ or β is not (d), when ε ≤ 0 or is not finite (NaN, ∞;
///         naming ε), or naming the first NaN/Inf of X, γ or β.
Matrix layer_norm(const Matrix& X, const Vector& gamma, const Vector& beta, float eps);

/// BERT's embedding layer: token t at position i (counted from 0, [CLS] included) becomes
/// LayerNorm(word[id_t] + position[i] + token_type[0]): its word's learned row, its position's learned row
/// (absolute positions, learned, where chapter 11's sinusoids are computed) and the first token type's (a single
/// sentence is all type 0), then layer_norm() with γ, β and ε.
/// \param ids (n) token ids, 1 ≤ n ≤ the position table's rows.
/// \param word (vocab, d) the token embeddings.
/// \param position (max_positions, d) the position embeddings.
/// \param token_type (token_types, d) the token-type embeddings, at least one row.
/// \param gamma (d) the embeddings' LayerNorm scale. \param beta (d) its shift. \param eps its ε.
/// \return (n, d).
/// \throws std::invalid_argument naming n and the number of positions when there are no ids or more ids than
///         positions; naming the shapes when the tables do not share d or token_type has no row; naming the id and
///         its position when an id is negative or not below the vocabulary's size; as layer_norm() does.
Matrix embed(const std::vector<int>& ids, const Matrix& word, const Matrix& position, const Matrix& token_type,
             const Vector& gamma, const Vector& beta, float eps);

/// One post-LayerNorm BERT encoder layer, computed with the course's attention:
///   Q, K, V = X·W_Qᵀ + b_Q, … (chapter 03's split_heads() into h heads of d_k = d / h),
///   per head chapter 05's flash_attention() (no mask: one sentence, no padding; any tiles, 64 × 64 as the chapter
///   uses: they change the result only by float rounding), the heads keep_head removes
///   zeroed (prune_heads()), merge_heads(), A = merged·W_Oᵀ + b_O, H = LayerNorm(X + A),
///   F = GELU(H·W_1ᵀ + b_1)·W_2ᵀ + b_2 (GELU with erf, as BERT's "gelu"), out = LayerNorm(H + F), both LayerNorms
///   with W.ln_eps.
/// \param X (n, d) the layer's input, one row per token.
/// \param W the layer's weights.
/// \param keep_head (h) which heads take part; empty = all of them.
/// \return (n, d).
/// \throws std::invalid_argument naming the shapes when X or the weights do not fit (check_layer_weights(): no
///         weight is broadcast, none read past its end), or when d is not divisible by W.heads; naming both sizes
///         when keep_head is neither empty nor (h).
Matrix encoder_layer(const Matrix& X, const EncoderLayerWeights& W, const std::vector<bool>& keep_head = {});

/// The sentence embedding from the last layer's rows: their mean, divided by its Euclidean length (sentence-
/// transformers' Pooling in "mean" mode, then Normalize): e = h̄ / max(‖h̄‖₂, 1e-12), h̄ = (1/n) Σ_i h_i. Every row
/// counts, [CLS] and [SEP] included; a mean of length 0 stays 0 (Normalize's 1e-12).
/// The mean, not the sum: the two differ where the 1/n does not cancel. The floor 1e-12 is on the length ‖h̄‖₂, not
/// on its square: a mean shorter than 1e-12 is not scaled up to length 1 but comes out as h̄ · 10^12 (a mean of
/// length 5e-13 gives an e of length 0.5), while a mean of length 1e-8 gives length 1. Any finite H is pooled: h̄ and
/// ‖h̄‖₂ must not overflow where h̄ itself does not (two rows of (3e38, 0) sum past float's range and (3e38)² is far
/// past it: sum and square in double), and those rows give e = (1, 0).
/// \param H (n, d) the encoder's output, n ≥ 1.
/// \return (d), of length 1 when ‖h̄‖₂ ≥ 1e-12, else ‖h̄‖₂ · 10^12 (0 for a mean of zeros).
/// \throws std::invalid_argument naming the shape when n = 0, or naming the first NaN/Inf of H.
Vector mean_pool_normalized(const Matrix& H);

/// @}

}  // namespace attn::ch16
