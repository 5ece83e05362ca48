/// \file
/// Chapter 03's hand-built layer: four heads whose every weight is chosen by hand so the chapter can say
/// why each one attends where it does, and the arithmetic of what several heads cost. Not an exercise:
/// the chapter presents it, the learner reads it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "03_multi_head/multi_head.hpp"
#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::ch03 {

/// The hand-built layer's sizes: d_model = 16 = 8 word features (chapter 01's lexicon) + 8 position
/// features; h = 4 heads of d_k = 4.
constexpr std::size_t kDModel = 16;
constexpr std::size_t kHeads = 4;
constexpr std::size_t kDk = kDModel / kHeads;

/// X for the hand-built layer: (n, d_model = 16). Columns 0–7 are chapter 01's named word features
/// (attn::ch01::embed()), columns 8–15 a sinusoidal code of the position p: (cos ω p, sin ω p) for four
/// frequencies ω, so that "one step back" is a rotation a weight matrix can apply.
/// \throws std::invalid_argument for a word chapter 01's lexicon does not know.
Matrix embed(const std::vector<std::string>& tokens);

/// One head of the hand-built layer: its name and the one-line reason it behaves as it does.
struct HeadInfo {
  std::string name;
  std::string why;
};

/// The four heads, in order: positional (attends to the previous token), semantic (to words of the same
/// kind), syntactic (a verb or state to its subject), and a near-copy of the semantic head.
const std::vector<HeadInfo>& head_infos();

/// The hand-built layer's W_Q, W_K, W_V and W_O, each (16, 16); W_O is the identity, so the output is the
/// concatenation of the heads and each output column can be read by head.
MultiHeadWeights hand_built_weights();

/// Random W_Q, W_K, W_V, W_O, each (d_model, d_model) of N(0, 1/d_model) entries (so X·W stays of size ~1),
/// drawn from \p rng in that order: the step-by-step layer of the story and the benchmark's layer.
MultiHeadWeights random_weights(Rng& rng, std::size_t d_model);

/// What one multi-head layer costs, counted (a FLOP is one multiply or one add).
struct Cost {
  double parameters;     ///< entries of W_Q, W_K, W_V, W_O
  double projection;     ///< FLOPs of X·W_Q, X·W_K, X·W_V
  double scores;         ///< FLOPs of Q_i K_iᵀ over all heads
  double mixing;         ///< FLOPs of A_i V_i over all heads
  double output;         ///< FLOPs of Concat·W_O
  double exponentials;   ///< exp() calls of the softmax: one per score
  double score_entries;  ///< entries of the score matrices held at once (h·n·n)
  double total_flops() const { return projection + scores + mixing + output; }
};

/// The cost of a layer with \p h heads of width d_model / h on \p n tokens (h = 1: one wide head).
/// \throws std::invalid_argument when h is 0 or does not divide d_model.
Cost multi_head_cost(std::size_t n, std::size_t d_model, std::size_t h);

/// Writes the attention graph of one head as a Graphviz file: one node per token, and from every token
/// its strongest edges, their thickness and label taken from the weight.
/// \param path where to write the .dot file.
/// \param A (n, n) the head's attention weights; A(i, j): how much token i attends to token j.
/// \param tokens (n) the node labels.
/// \param title the graph's caption (plain text without double quotes).
/// \param per_token how many edges to draw from each token, strongest first.
/// \param min_weight weaker edges are left out.
/// \throws std::invalid_argument when A is not (n, n), a weight of A is NaN or outside [0, 1], the title or a token
///         holds a double quote, a backslash or a NUL, or the path is empty, holds a NUL or is 4096 bytes or longer;
///         std::runtime_error when the file cannot be written.
void write_attention_dot(const std::string& path, const Matrix& A, const std::vector<std::string>& tokens,
                         const std::string& title, std::size_t per_token = 2, double min_weight = 0.1);

/// Renders a Graphviz file to SVG with the `dot` program (Debian's graphviz, which the book needs anyway).
/// \throws std::invalid_argument when a path is empty, holds a NUL or is 4096 bytes or longer, or holds a single
///         quote (the paths are quoted for the shell); std::runtime_error when dot_path is not a regular file (a
///         FIFO would block dot for ever), or when dot is missing or fails.
void render_dot_svg(const std::string& dot_path, const std::string& svg_path);

}  // namespace attn::ch03
