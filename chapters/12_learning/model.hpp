/// \file
/// Chapter 12's model: a 2-layer attention-only transformer (Olsson et al. 2022, "In-context learning and
/// induction heads") with every forward and backward written out: token embedding, RoPE (chapter 11),
/// causal multi-head attention (chapter 02's forward, chapter 10's backward) added into a residual stream,
/// and an unembedding. No LayerNorm and no MLP: the induction task needs neither (the circuit is two
/// attention heads composing through the residual stream), and without them every head's contribution
/// is a plain sum the chapter can ablate and attribute. Book page: book/12_learning.md.
///
/// The model's backward is plumbing around the learner's layer_backward() (model_backward.hpp), and its training
/// step is the learner's train_step() (learning.hpp); train.hpp runs the loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn::ch12 {

/// The model's sizes.
struct Config {
  std::size_t vocab = 24;      ///< tokens 0 … vocab − 1
  std::size_t d_model = 32;    ///< width of the residual stream
  std::size_t heads = 2;       ///< heads per layer; d_model / heads columns each
  std::size_t layers = 2;      ///< attention layers
  std::size_t context = 32;    ///< longest sequence the model accepts
  float rope_base = 10000.0f;  ///< RoPE's base (chapter 11)
};

/// One attention layer: per-head projections are column blocks of W_Q, W_K, W_V (head h owns columns
/// h·d_k … (h + 1)·d_k − 1, chapter 03's layout), and W_O maps the concatenated heads back.
struct Layer {
  Matrix W_Q;  ///< (d_model, d_model)
  Matrix W_K;  ///< (d_model, d_model)
  Matrix W_V;  ///< (d_model, d_model)
  Matrix W_O;  ///< (d_model, d_model)
};

/// The parameters (and, with the same shapes, their gradients or an optimiser's moments).
struct Model {
  Config config;
  Matrix embed;               ///< (vocab, d_model) token embeddings
  std::vector<Layer> layers;  ///< (layers)
  Matrix unembed;             ///< (d_model, vocab) residual stream → logits
};

/// Which heads run: keep[l][h] false zeroes head h of layer l (an ablation). Empty = all heads.
using HeadMask = std::vector<std::vector<bool>>;

/// Everything the forward computed that the backward needs, and the attention maps the chapter shows.
struct Trace {
  std::vector<Matrix> residual;                ///< (layers + 1) × (n, d_model): stream before each layer, then final
  std::vector<std::vector<Matrix>> q, k, v;    ///< [layer][head] (n, d_k): q and k after RoPE
  std::vector<std::vector<Matrix>> attention;  ///< [layer][head] (n, n) causal softmax weights
  std::vector<Matrix> heads_out;               ///< [layer] (n, d_model): heads concatenated, before W_O
  Matrix logits;                               ///< (n, vocab)
};

/// A model with the given sizes and small Gaussian weights (seeded).
/// \throws std::invalid_argument when vocab, d_model, heads, layers or context is 0, or d_model is not a
///         multiple of heads, or the head width d_model / heads is odd (RoPE rotates pairs), or rope_base is not a
///         finite number above 1, or the parameters would not fit in memory (naming the estimate, before
///         allocating).
Model init_model(const Config& config, std::uint64_t seed);

/// A model of zeros with the shapes of \p like (for gradients and optimiser moments).
Model zeros_like(const Model& like);

/// Every parameter matrix of \p model, in a fixed order (embed, each layer's W_Q W_K W_V W_O, unembed).
std::vector<Matrix*> parameters(Model& model);
/// The same, read-only.
std::vector<const Matrix*> parameters(const Model& model);

/// The file that marks a folder as a checkpoint's: prepare_checkpoint_dir() writes it first.
inline constexpr const char* kCheckpointMarker = "written_by_ch12_learning.txt";

/// Makes \p dir ready for save_checkpoint(), or refuses it (std::invalid_argument naming it) when it is empty
/// text, holds a NUL byte (the system would read a shorter path), exists and is not a folder, cannot be created or
/// written, or holds files this chapter did not write: only a new or empty folder, or one holding a checkpoint written
/// before (kCheckpointMarker and the checkpoint's own .npy files), is accepted, so a file of the user's (or '/') is
/// never replaced. Creates the folder when missing and writes kCheckpointMarker into it. The chapter calls it when it
/// parses the command line, so a bad --save-checkpoint fails with status 2 before training.
void prepare_checkpoint_dir(const std::string& dir);

/// Writes \p model into the folder \p dir (prepare_checkpoint_dir() first) as NumPy .npy files, with xtensor's
/// own xt::dump_npy: config.npy (vocab, d_model, heads, layers, context, rope_base, float64), embed.npy
/// (vocab, d_model), layer1_W_Q.npy … layerL_W_O.npy (d_model, d_model) and unembed.npy (d_model, vocab).
/// Python reads them with numpy.load. Throws std::invalid_argument when prepare_checkpoint_dir() refuses \p dir
/// or require_model() refuses \p model (nothing is written then), std::runtime_error naming the file it cannot write.
void save_checkpoint(const Model& model, const std::string& dir);

/// The model save_checkpoint() wrote into \p dir, bit for bit. Throws std::invalid_argument naming the file
/// when one is missing, unreadable, or holds a shape or configuration that does not fit; every file's header
/// (magic, type <f4 or <f8, C order, a shape of sizes) and length (exactly the bytes its shape needs: not
/// truncated, not header-only, nothing appended) are checked, and every weight file's shape compared with
/// config.npy's, before any weight is allocated or read.
Model load_checkpoint(const std::string& dir);

/// Refuses, with std::invalid_argument naming \p where and the parameter, a model that is not one of its config: a
/// config whose head width is not a positive even number, layers.size() ≠ config.layers, a parameter whose shape is
/// not the config's (embed (vocab, d_model), W_Q … W_O (d_model, d_model), unembed (d_model, vocab)), or a NaN/Inf in
/// one. Model is a plain struct: forward_embedded(), require_trace() and save_checkpoint() check it first.
void require_model(const char* where, const Model& model);

/// The rows of the embedding for \p tokens: (n, d_model).
/// \throws std::invalid_argument naming the token when one is ≥ vocab, when n is 0 or above the context, or naming
///         the shapes when the model's embed is not (vocab, d_model).
Matrix embed_tokens(const Model& model, const std::vector<std::size_t>& tokens);

/// The forward pass from an embedded sequence X0 (n, d_model) (forward() embeds tokens first; integrated
/// gradients scales X0). \p keep ablates heads.
/// \throws std::invalid_argument naming the shapes when X0 does not fit the model or n exceeds the context, naming
///         the first NaN/Inf of X0, when \p keep is not empty and not (layers) × (heads), and as require_model() does.
Trace forward_embedded(const Model& model, const Matrix& X0, const HeadMask& keep = HeadMask());

/// The forward pass of \p tokens: logits (n, vocab) for the next token at every position, and the trace.
Trace forward(const Model& model, const std::vector<std::size_t>& tokens, const HeadMask& keep = HeadMask());

/// A sequence to train on: its tokens and, at every position, the next token to predict (kIgnore where none is).
struct Sequence {
  std::vector<std::size_t> tokens;   ///< (n)
  std::vector<std::size_t> targets;  ///< (n) a token, or kIgnore
};

/// True when \p a and \p b have as many layers and every parameter the same shape (gradients and AdamW's
/// moments must have the model's).
bool same_shapes(const Model& a, const Model& b);

/// Refuses, with std::invalid_argument naming \p where, a model require_model() refuses, and a trace that is not one
/// of \p model on some n tokens: its
/// residual streams (layers + 1) × (n, d_model), heads_out (layers) × (n, d_model), q, k, v (layers) × (heads) ×
/// (n, d_k) and attention (layers) × (heads) × (n, n), n the rows of its logits. A backward indexes all of them.
void require_trace(const char* where, const Model& model, const Trace& trace);

/// backward()'s checks (model_backward.hpp), before it touches \p grads: the trace is one of \p model
/// (require_trace()); dlogits is (n, vocab) and finite; \p grads has the model's shapes; tokens is empty or (n)
/// tokens of the vocabulary; \p keep is empty or (layers) × (heads). Throws std::invalid_argument naming what
/// does not fit.
void require_backward_inputs(const Model& model, const Trace& trace, const Matrix& dlogits,
                             const std::vector<std::size_t>& tokens, const Model& grads, const HeadMask& keep);

/// The induction task: a stretch of distinct random tokens, then its last `period` tokens once more.
struct InductionSequence {
  std::vector<std::size_t> tokens;   ///< (n) prefix, segment, segment again: n = prefix + 2·period
  std::vector<std::size_t> targets;  ///< (n) the next token where it is predictable, kIgnore elsewhere
  std::size_t period = 0;            ///< length of the repeated segment
};

/// The target of a position whose next token cannot be predicted (the loss skips it).
inline constexpr std::size_t kIgnore = static_cast<std::size_t>(-1);

/// One induction sequence of \p n tokens: a period L drawn uniformly from max(2, n/4) … n/2, then n − L
/// distinct random tokens (a prefix of n − 2L, and a segment of L), then the segment again. Position i of
/// the repeat (i = n − L … n − 2) predicts tokens[i + 1] = tokens[i + 1 − L]: find the earlier occurrence of
/// the current token, copy the token after it. The period varies, so no fixed offset (which RoPE would make
/// easy) solves the task: the model must match content. Everything else is kIgnore.
/// \throws std::invalid_argument when n < 4 or n − n/4 > vocab (not enough distinct tokens), or when vocab is too
///         large to shuffle in memory (naming the estimate, before allocating).
InductionSequence make_induction(std::size_t n, std::size_t vocab, Rng& rng);

/// Mean attention from each query i ≥ 1 to key i − 1: 1 for a perfect previous-token head.
/// \param A (n, n) one head's attention.
/// \throws std::invalid_argument when A is not square, or naming its first NaN/Inf.
double previous_token_score(const Matrix& A);

/// Fraction of predictable positions (target ≠ kIgnore) whose largest logit is the target.
/// \throws std::invalid_argument when there is not one target per row of \p logits, when logits has no column (no
///         token to predict), or naming the first NaN/Inf of logits.
double accuracy(const Matrix& logits, const std::vector<std::size_t>& targets);

}  // namespace attn::ch12
