/// \file
/// all-MiniLM-L6-v2's forward made fast for one sentence at a time (chapter code): the same arithmetic as
/// sentence_embeddings(), rearranged the way the deployment engines arrange it. At batch 1 a sentence of a dozen
/// tokens needs about a quarter of a GFLOP, spread over 24 products of 12 rows each (Q|K|V, W_O, W_1, W_2 in six
/// layers): in the lesson's forward much of the time went to what surrounds the arithmetic (copies, allocations,
/// the library packing each weight again per call), and those are what this file removes.
///
///   - Weights laid out once at load (PackedLinear): each Linear's (out, in) weight rearranged into panels of 16
///     output columns, so the product streams it as it lies; ONNX Runtime does the same (MlasGemmPackB), as does
///     CTranslate2 (packed GEMM weights at load).
///   - One product for Q, K and V (their weights side by side: (d, 3d)), and every bias added inside the product.
///   - One buffer arena (ForwardScratch), grown to the largest batch and reused by every layer and call: no
///     allocation per step (ONNX Runtime's arena allocator).
///   - Residual + LayerNorm fused in place (ONNX Runtime's SkipLayerNorm), GELU in place on the product's buffer
///     (its BiasGelu) with PyTorch's own vectorised erf formula, attention per head straight from the fused Q|K|V
///     buffer (its Attention op), a vector of keys at a time (fast_kernels.hpp: on the path of the course's vector
///     layer, attn/vector.hpp, which ATTN_VECTOR_ISA can force).
///   - Nothing started on other threads: a caller that has two cores runs two sentences at once.
/// embed_sentences() also times its steps (ForwardProfile): the breakdown on the measurements page.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "16_real_model/minilm.hpp"
#include "attn/tensor.hpp"

namespace attn::ch16 {

/// The steps of the forward that ForwardProfile times, in the order the forward meets them.
enum class ForwardStep : std::size_t {
  tokenize,        ///< text to ids (basic_tokenize() and wordpiece())
  embed,           ///< word + position + token type rows, and their LayerNorm
  qkv,             ///< the fused Q|K|V projection (one product)
  attention,       ///< softmax(Q Kᵀ/√d_k) V per sentence and head
  out_projection,  ///< the attention output's projection W_O
  ffn_up,          ///< the feed-forward's first product (to d_ff)
  gelu,            ///< GELU on it
  ffn_down,        ///< the feed-forward's second product (back to d)
  layer_norm,      ///< both residual + LayerNorm steps of every layer
  pooling,         ///< mean pooling and L2 normalisation
  buffers,         ///< growing the arena (only when a batch is larger than any before)
  count
};

/// The name of \p step as the breakdown prints it ("qkv", "ffn_up", …).
/// \throws std::invalid_argument naming the value when \p step is not one of ForwardStep's steps.
const char* step_name(ForwardStep step);

/// Seconds spent in each step, summed over many calls of embed_sentences() (std::chrono::steady_clock around each).
struct ForwardProfile {
  std::array<double, static_cast<std::size_t>(ForwardStep::count)> seconds{};  ///< by ForwardStep
  std::size_t calls = 0, sentences = 0, tokens = 0;                            ///< what the seconds cover
};

namespace detail {

/// One Linear, x·Wᵀ + b, with W laid out for the product: in panels of 16 output columns ((out/16, in, 16), each
/// panel's 16 weights of one input contiguous) where the path in use has the packed product (AVX-512, AVX2+FMA,
/// NEON: detail::has_packed_gemm()) and out is a multiple of 16, else transposed, (in, out), for OpenBLAS's
/// sgemm without a transpose.
struct PackedLinear {
  std::size_t in = 0, out = 0;
  bool panels = false;         ///< which of the two layouts \p weights holds
  std::vector<float> weights;  ///< (out/16, in, 16) or (in, out)
  std::vector<float> bias;     ///< (out)
};

/// \p W (out, in) and \p b (out) laid out for the product.
/// \throws std::invalid_argument naming \p name and the shapes when b is not (out) or W is empty, or naming the
///         first NaN/Inf of W or b.
PackedLinear pack_linear(const char* name, const Matrix& W, const Vector& b);

/// Y (n, out) = X (n, in) · Wᵀ + b, with the layout pack_linear() chose. Raw buffers: the arena's.
void apply_linear(const PackedLinear& L, const float* X, std::size_t n, float* Y);

/// One encoder layer of FastMiniLM: its four products laid out by pack_linear(), and its LayerNorms' (d) weights.
struct FastLayer {
  PackedLinear qkv, out, up, down;
  Vector ln1_gamma, ln1_beta, ln2_gamma, ln2_beta;
};

}  // namespace detail

/// The growing buffers of one thread's forward: one per role, reused by every layer and call.
struct ForwardScratch {
  std::vector<float> x, qkv, merged, projected, ff, scores, keys_t;
  std::vector<int> ids;
  std::vector<std::size_t> starts;
};

/// all-MiniLM-L6-v2 prepared for speed: the model's tables and vocabulary (kept by reference: \p model must
/// outlive it) and every layer's weights laid out by pack_linear().
class FastMiniLM {
 public:
  /// Lays out every layer's weights. \throws std::invalid_argument as check_layer_weights() does (a weight's
  /// shape not fitting d), or naming the layer and the weight that holds a NaN or infinity.
  explicit FastMiniLM(const MiniLM& model);

  /// The sentence embeddings of \p texts, packed one after another as in sentence_embeddings() (equal to it to
  /// float32 rounding). \p scratch is the calling thread's arena; \p profile, when given, receives the seconds of
  /// each step. \return (d) per text. \throws std::invalid_argument as tokenize() does (text not UTF-8).
  std::vector<Vector> embed_sentences(const std::vector<std::string>& texts, ForwardScratch& scratch,
                                      ForwardProfile* profile = nullptr) const;

  /// The model it reads its tables from.
  const MiniLM& model() const { return model_; }

 private:
  const MiniLM& model_;
  std::vector<detail::FastLayer> layers_;
};

}  // namespace attn::ch16
