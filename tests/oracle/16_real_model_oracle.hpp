/// \file
/// Chapter 16's oracle: one post-LayerNorm BERT encoder layer in float64 loops, written as the definitions
/// read (PyTorch's (out, in) Linear, biased-variance LayerNorm, erf GELU), sharing no code with the tracks.
#pragma once

#include <cstddef>
#include <vector>

#include "oracle/oracle.hpp"

namespace attn::oracle {

/// A BERT layer's weights in float64, Linear weights (out, in).
struct BertLayer {
  Mat W_Q, W_K, W_V, W_O;                  ///< (d, d)
  std::vector<double> b_Q, b_K, b_V, b_O;  ///< (d)
  std::vector<double> ln1_gamma, ln1_beta;
  Mat W_1;                  ///< (d_ff, d)
  std::vector<double> b_1;  ///< (d_ff)
  Mat W_2;                  ///< (d, d_ff)
  std::vector<double> b_2;  ///< (d)
  std::vector<double> ln2_gamma, ln2_beta;
  std::size_t heads = 1;
  double eps = 1e-12;
};

/// LayerNorm of every row: (x − mean) / √(biased variance + eps) · g + b. X: (n, d) → (n, d).
Mat layer_norm(const Mat& X, const std::vector<double>& g, const std::vector<double>& b, double eps);

/// BERT's embedding: LayerNorm(word[ids[t]] + position[t] + token_type[0]) per token t. → (n, d).
Mat embed(const std::vector<int>& ids, const Mat& word, const Mat& position, const Mat& token_type,
          const std::vector<double>& g, const std::vector<double>& b, double eps);

/// The mean of H's rows divided by its Euclidean length (by 1e-12 when that is smaller). H: (n, d) → (d).
std::vector<double> mean_pool_normalized(const Mat& H);

/// LayerNorm(H + FFN(H)), H = LayerNorm(X + Attention(X)·W_Oᵀ + b_O), heads with keep[i] = false left out.
/// X: (n, d) → (n, d). keep: (heads), empty = all.
Mat bert_layer(const Mat& X, const BertLayer& W, const std::vector<bool>& keep);

}  // namespace attn::oracle
