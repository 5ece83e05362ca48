/// \file
/// Chapter 16, a real model: the contract the learner implements in exercises/16_real_model/real_model.cpp.
/// Book page: book/16_real_model.md.
///
/// all-MiniLM-L6-v2 (6 encoder layers × 12 heads, d = 384) is read from its safetensors file, its text cut
/// into WordPiece tokens, and run through the course's own attention (chapter 03's heads, chapter 05's
/// tiled flash kernel). The four exercises are the parts a reader writes: one WordPiece step, one tensor
/// read with its checks, pruning heads by masking them, and one encoder layer's forward.
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

/// Reads one float32 tensor out of a safetensors file, checking it is what the model expects.
/// \param file an open safetensors file (its header already checked against its own size).
/// \param name the tensor's name, e.g. "encoder.layer.0.attention.self.query.weight".
/// \param expected_shape the shape the model's config implies: {rows, cols} or {n}.
/// \return a copy of its values as (rows, cols), or (1, n) for a one-dimensional tensor.
/// \throws std::invalid_argument naming the tensor when it is missing, its dtype is not "F32", or its shape
///         differs from \p expected_shape (both shapes in the message).
Matrix read_tensor(const SafetensorsFile& file, const std::string& name,
                   const std::vector<std::size_t>& expected_shape);

/// Head pruning by masking: every head whose \p keep_head entry is false gets an output of zeros, so its rows
/// of W_O add nothing to the layer; the kept heads are unchanged.
/// \param heads (h, n, d_k) every head's attention output, before the merge.
/// \param keep_head (h) true = keep the head.
/// \return (h, n, d_k).
/// \throws std::invalid_argument naming both sizes when keep_head's size is not h.
Tensor3 prune_heads(const Tensor3& heads, const std::vector<bool>& keep_head);

/// One post-LayerNorm BERT encoder layer, computed with the course's attention:
///   Q, K, V = X·W_Qᵀ + b_Q, … (chapter 03's split_heads() into h heads of d_k = d / h),
///   per head chapter 05's flash_attention() (no mask: one sentence, no padding), prune_heads(),
///   merge_heads(), A = merged·W_Oᵀ + b_O, H = LayerNorm(X + A),
///   F = GELU(H·W_1ᵀ + b_1)·W_2ᵀ + b_2 (GELU with erf, as BERT's "gelu"), out = LayerNorm(H + F).
/// \param X (n, d) the layer's input, one row per token.
/// \param W the layer's weights.
/// \param keep_head (h) which heads take part; empty = all of them.
/// \return (n, d).
/// \throws std::invalid_argument naming the shapes when X or the weights do not fit (check_layer_weights(): no
///         weight is broadcast, none read past its end), or when d is not divisible by W.heads.
Matrix encoder_layer(const Matrix& X, const EncoderLayerWeights& W, const std::vector<bool>& keep_head = {});

/// @}

}  // namespace attn::ch16
