// Chapter 12's tests, run against both tracks. Expected values come from the float64 oracle
// (tests/oracle/12_learning_oracle.hpp: the transformer, one attention layer and cross-entropy as loops; RoPE from
// chapter 11's oracle), from central differences of that oracle, or from hand-worked closed forms, never from the
// other track. Where a result is wrong, the tests also compute what the likely mistakes give (RoPE's rotation
// turned the wrong way, a missing residual path, a step that reuses t, ...) and name the one it matches.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "11_positions/positions.hpp"
#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "12_learning/model_backward.hpp"
#include "12_learning/train.hpp"
#include "attn/rng.hpp"
#include "oracle/10_backward_oracle.hpp"
#include "oracle/11_positions_oracle.hpp"
#include "oracle/12_learning_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile_ch12.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::test::to_oracle;
namespace ch12 = attn::ch12;
namespace oracle = attn::oracle;

constexpr double kEps = 1.0 / (1 << 24);  // float32's unit roundoff, 2^-24

constexpr std::size_t kSkip = ch12::kIgnore;

/// The float32 model's weights as the oracle's float64 transformer.
oracle::Transformer to_oracle_model(const ch12::Model& m) {
  oracle::Transformer t;
  t.heads = m.config.heads;
  t.rope_base = static_cast<double>(m.config.rope_base);
  t.embed = to_oracle(m.embed);
  for (const ch12::Layer& L : m.layers)
    t.layers.push_back({to_oracle(L.W_Q), to_oracle(L.W_K), to_oracle(L.W_V), to_oracle(L.W_O)});
  t.unembed = to_oracle(m.unembed);
  return t;
}

/// A tiny configuration for gradient checks: 2 layers, 2 heads of width 2, 5 tokens.
ch12::Config tiny_config() {
  ch12::Config c;
  c.vocab = 5;
  c.d_model = 4;
  c.heads = 2;
  c.layers = 2;
  c.context = 8;
  return c;
}

/// The model of the layer tests: 2 layers of 2 heads of width 4 (d_model 8). RoPE's base is 100 so that both
/// pairs of a head turn visibly (by 1 and 0.1 radians per position; base 10000 would turn the second by 0.01).
ch12::Config layer_config() {
  ch12::Config c = tiny_config();
  c.d_model = 8;
  c.rope_base = 100.0f;
  return c;
}

/// A layer test's inputs: a model of layer_config() (seeded with \p seed), a random embedded input X0 and gradient
/// dY, (n, d_model) each (drawn with seed + 1), and the forward's trace of X0 with \p keep.
struct LayerCase {
  ch12::Model model;
  Matrix dY;
  ch12::Trace trace;
};
LayerCase layer_case(std::uint64_t seed, std::size_t n, const ch12::HeadMask& keep = ch12::HeadMask()) {
  LayerCase c{ch12::init_model(layer_config(), seed), {}, {}};
  attn::Rng rng(seed + 1);
  const Matrix X0 = rng.normal(n, 8);  // (n, d_model)
  c.dY = rng.normal(n, 8);             // (n, d_model)
  c.trace = ch12::forward_embedded(c.model, X0, keep);
  return c;
}

std::array<oracle::Mat, 4> to_oracle_layer(const ch12::Layer& L) {
  return {to_oracle(L.W_Q), to_oracle(L.W_K), to_oracle(L.W_V), to_oracle(L.W_O)};
}

/// Does \p actual match \p expected within atol + rtol·|expected|? (to name the mistake a wrong result matches)
template <class Actual>
bool matches(const Actual& actual, const oracle::Mat& expected, double atol, double rtol) {
  return attn::test::allclose(actual, expected, atol, rtol).ok;
}

oracle::Mat head_columns(const oracle::Mat& M, std::size_t h, std::size_t d_k) {
  oracle::Mat out(M.rows, d_k);
  for (std::size_t i = 0; i < M.rows; ++i)
    for (std::size_t j = 0; j < d_k; ++j) out(i, j) = M(i, h * d_k + j);
  return out;
}

oracle::Mat scaled(oracle::Mat M, double factor) {
  for (double& x : M.v) x *= factor;
  return M;
}

oracle::Mat minus(oracle::Mat a, const oracle::Mat& b) {
  for (std::size_t i = 0; i < a.v.size(); ++i) a.v[i] -= b.v[i];
  return a;
}

/// Mistakes a layer backward can make between chapter 10's dQ, dK of a head and the projections' gradients.
enum class Slip { rope_forward_again, no_rope_backward, no_scale, dq_dk_swapped };

/// W_Q's and W_K's gradients (float64) of layer \p l's backward made with \p slip: each head's dQ and dK from
/// chapter 10's oracle (the chain rule on the trace's q, k, v, with dO = dY·W_Oᵀ), then RoPE's transpose (the
/// oracle's), then Xᵀ· — except where the slip changes a step.
std::pair<oracle::Mat, oracle::Mat> projection_grads_with(Slip slip, const ch12::Model& model, const ch12::Trace& tr,
                                                          std::size_t l, const Matrix& dY) {
  const ch12::Config& c = model.config;
  const std::size_t n = dY.shape(0), d_k = c.d_model / c.heads;
  const double base = static_cast<double>(c.rope_base);
  std::vector<bool> causal(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) causal[i * n + j] = true;
  const oracle::Mat X = to_oracle(tr.residual[l]);
  const oracle::Mat dheads = oracle::matmul(to_oracle(dY), oracle::transpose(to_oracle(model.layers[l].W_O)));
  oracle::Mat dQ(n, c.d_model), dK(n, c.d_model);
  for (std::size_t h = 0; h < c.heads; ++h) {
    const oracle::Grads g = oracle::attention_gradients(to_oracle(tr.q[l][h]), to_oracle(tr.k[l][h]),
                                                        to_oracle(tr.v[l][h]), head_columns(dheads, h, d_k), &causal);
    oracle::Mat gq = oracle::rope_transpose(g.dQ, 0, base), gk = oracle::rope_transpose(g.dK, 0, base);
    if (slip == Slip::rope_forward_again) {
      gq = oracle::rope(g.dQ, 0, base);
      gk = oracle::rope(g.dK, 0, base);
    } else if (slip == Slip::no_rope_backward) {
      gq = g.dQ;
      gk = g.dK;
    } else if (slip == Slip::no_scale) {
      gq = scaled(gq, std::sqrt(static_cast<double>(d_k)));
      gk = scaled(gk, std::sqrt(static_cast<double>(d_k)));
    } else {
      std::swap(gq, gk);
    }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < d_k; ++j) {
        dQ(i, h * d_k + j) = gq(i, j);
        dK(i, h * d_k + j) = gk(i, j);
      }
  }
  const oracle::Mat Xt = oracle::transpose(X);
  return {oracle::matmul(Xt, dQ), oracle::matmul(Xt, dK)};
}

/// Which known mistake W_Q's and W_K's gradients match (within atol, rtol), said so that it points at the step.
std::string projection_slip(const Matrix& dW_Q, const Matrix& dW_K, const ch12::Model& model, const ch12::Trace& tr,
                            std::size_t l, const Matrix& dY, double atol, double rtol) {
  const std::pair<Slip, const char*> known[] = {
      {Slip::rope_forward_again,
       "they match a backward that turns dQ and dK by +θ, RoPE's forward rotation again: its transpose, "
       "rope_backward, turns them by −θ"},
      {Slip::no_rope_backward,
       "they match a backward without RoPE's: chapter 10's dQ and dK are gradients of the rotated q and k, so "
       "they pass through rope_backward before W_Q and W_K"},
      {Slip::no_scale,
       "they are √d_k times too large, as without attention's 1/√d_k: the scores are q·k/√d_k, so dQ = dS·K/√d_k "
       "and dK = dSᵀ·Q/√d_k (chapter 10's attention_backward has both)"},
      {Slip::dq_dk_swapped, "W_Q's matches dK's share and W_K's dQ's: chapter 10's dQ belongs to W_Q, dK to W_K"}};
  for (const auto& [slip, says] : known) {
    const auto [q, k] = projection_grads_with(slip, model, tr, l, dY);
    if (matches(dW_Q, q, atol, rtol) && matches(dW_K, k, atol, rtol)) return says;
  }
  return "dW_Q = Xᵀ·dQ and dW_K = Xᵀ·dK, with each head's dQ and dK from chapter 10 turned back by rope_backward";
}

/// A copy of every parameter of \p m (ch12::parameters()' order).
std::vector<Matrix> snapshot(const ch12::Model& m) {
  std::vector<Matrix> out;
  for (const Matrix* p : ch12::parameters(m)) out.push_back(*p);
  return out;
}

bool unchanged(const ch12::Model& m, const std::vector<Matrix>& before) {
  const std::vector<const Matrix*> P = ch12::parameters(m);
  for (std::size_t i = 0; i < P.size(); ++i)
    if (!(*P[i] == before[i])) return false;
  return true;
}

const char* const kParameterNames[] = {"embed",       "layer 1 W_Q", "layer 1 W_K", "layer 1 W_V", "layer 1 W_O",
                                       "layer 2 W_Q", "layer 2 W_K", "layer 2 W_V", "layer 2 W_O", "unembed"};

/// Mistakes a training step can make around adamw_step.
enum class StepSlip { none, same_t, accumulated, not_zeroed, decay_in_gradient };

/// Two training steps of the float64 model (central-difference gradients of the batch loss, then the oracle's
/// AdamW on every parameter), made with \p slip: the parameters after each step, and each step's loss before it.
struct OracleSteps {
  std::vector<std::vector<oracle::Mat>> after;  ///< [step][parameter]
  std::vector<double> loss;                     ///< [step]
};
OracleSteps oracle_steps(StepSlip slip, const ch12::Model& start,
                         const std::vector<std::vector<ch12::Sequence>>& batches, const attn::AdamW& s) {
  oracle::Transformer t = to_oracle_model(start);
  std::vector<oracle::Mat*> P = oracle::parameters(t);
  std::vector<oracle::AdamWState> state;
  for (oracle::Mat* p : P) state.push_back({p->v, std::vector<double>(p->v.size()), std::vector<double>(p->v.size())});
  std::vector<oracle::Mat> previous;
  OracleSteps out;
  for (std::size_t k = 0; k < batches.size(); ++k) {
    std::vector<std::vector<std::size_t>> tokens, targets;
    for (const ch12::Sequence& q : batches[k]) {
      tokens.push_back(q.tokens);
      targets.push_back(q.targets);
    }
    out.loss.push_back(oracle::batch_loss(t, tokens, targets));
    std::vector<oracle::Mat> g = oracle::batch_loss_gradients(t, tokens, targets);
    double decay = static_cast<double>(s.weight_decay);
    for (std::size_t i = 0; i < P.size(); ++i)
      for (std::size_t e = 0; e < g[i].v.size(); ++e) {
        if (slip == StepSlip::accumulated && k > 0) g[i].v[e] += previous[i].v[e];
        if (slip == StepSlip::not_zeroed) g[i].v[e] += P[i]->v[e];  // gradients begun as a copy of the model
        if (slip == StepSlip::decay_in_gradient) g[i].v[e] += decay * P[i]->v[e];  // Adam with L2
      }
    if (slip == StepSlip::decay_in_gradient) decay = 0.0;
    const std::size_t step = slip == StepSlip::same_t ? 1 : k + 1;
    out.after.emplace_back();
    for (std::size_t i = 0; i < P.size(); ++i) {
      oracle::adamw_step(state[i], g[i].v, step, static_cast<double>(s.lr), s.beta1, s.beta2,
                         static_cast<double>(s.eps), decay);
      P[i]->v = state[i].theta;
      out.after.back().push_back(*P[i]);
    }
    previous = g;
  }
  return out;
}

}  // namespace

TEST_SUITE("12_learning") {
  TEST_CASE("rope_backward is RoPE's transpose: equal to the float64 oracle's Rᵀ·G, from position 5 with base 100" *
            doctest::test_suite("12_learning/rope_backward")) {
    attn::Rng rng(1210);
    const Matrix G = rng.normal(7, 6);  // (7, 6): 3 pairs turning by 1, 0.22 and 0.046 rad per position
    Matrix back = G;
    attn::rope_backward(back, 5, 100.0f);
    const oracle::Mat g = to_oracle(G), expected = oracle::rope_transpose(g, 5, 100.0);
    // Each entry is c·g0 ± s·g1 of a float32 angle's cosine and sine: a few roundings of 2^-24 of values below 4
    // (measured worst 1e-7); a rotation the wrong way misses by ~1.
    const double atol = 1e-6, rtol = 0.0;
    std::string why = "each pair (g0, g1) of row p turns by −(5 + p)·100^(−2i/6): (c·g0 + s·g1, −s·g0 + c·g1)";
    if (matches(back, oracle::rope(g, 5, 100.0), atol, rtol))
      why = "yours turns by +θ, the forward rotation again: the backward of y = R·x is Rᵀ, the turn back";
    else if (matches(back, g, atol, rtol))
      why = "G came back unchanged: RoPE's backward turns every pair back by its angle";
    else if (matches(back, oracle::rope_transpose(g, 0, 100.0), atol, rtol))
      why = "yours counts positions from 0: row p is at first_position + p";
    INFO(why);
    CHECK_ALLCLOSE(back, expected, atol, rtol);
  }

  TEST_CASE("rope_backward undoes apply_rope (a rotation's transpose is its inverse) and leaves position 0 alone" *
            doctest::test_suite("12_learning/rope_backward")) {
    attn::Rng rng(1211);
    const Matrix X = rng.normal(9, 8);  // (9, 8)
    Matrix Y = X;
    attn::apply_rope(Y, 3, 10000.0f);  // chapter 11's forward
    attn::rope_backward(Y, 3, 10000.0f);
    // Two float32 rotations of values below 4: a few roundings of 2^-24 each (measured worst 1.2e-7); a wrong
    // turn misses by ~1.
    INFO("rope_backward(apply_rope(X)) must give X back: RᵀR = I");
    CHECK_ALLCLOSE(Y, to_oracle(X), 1e-6, 0.0);
    Matrix first = X;
    attn::rope_backward(first, 0, 10000.0f);
    INFO("row 0 at position 0 turns by angle 0: it stays exactly as it was");
    CHECK(Matrix(xt::view(first, xt::range(0, 1), xt::all())) == Matrix(xt::view(X, xt::range(0, 1), xt::all())));
  }

  TEST_CASE("rope_backward refuses an odd d, a base of 1 and a NaN gradient, leaving G unchanged" *
            doctest::test_suite("12_learning/rope_backward")) {
    Matrix odd = {{1.0f, 2.0f, 3.0f}};  // (1, 3)
    CHECK_THROWS_NAMING(attn::rope_backward(odd, 0, 100.0f), std::invalid_argument, "1", "3");
    CHECK(odd == Matrix{{1.0f, 2.0f, 3.0f}});
    Matrix G = {{1.0f, 2.0f}, {3.0f, 4.0f}};  // (2, 2)
    const Matrix before = G;
    CHECK_THROWS_AS(attn::rope_backward(G, 0, 1.0f), std::invalid_argument);
    CHECK_THROWS_AS(attn::rope_backward(G, 0, std::numeric_limits<float>::quiet_NaN()), std::invalid_argument);
    CHECK(G == before);
    G(1, 1) = std::numeric_limits<float>::infinity();
    const Matrix with_inf = G;
    CHECK_THROWS_NAMING(attn::rope_backward(G, 0, 100.0f), std::invalid_argument, "G", "3");
    CHECK(xt::all(xt::equal(G, with_inf)));
  }

  TEST_CASE(
      "layer_backward of the second layer equals float64 central differences of that layer: W_Q, W_K, W_V, "
      "W_O and dX" *
      doctest::test_suite("12_learning/layer_backward")) {
    const LayerCase c = layer_case(1212, 6);
    const ch12::Model& model = c.model;
    const ch12::Trace& tr = c.trace;
    const Matrix& dY = c.dY;  // (6, d_model)
    const attn::LayerGrads g = attn::layer_backward(model, tr, 1, dY);
    const oracle::LayerGrads e = oracle::attention_layer_gradients(
        to_oracle(tr.residual[1]), to_oracle_layer(model.layers[1]), 2, 100.0, to_oracle(dY));
    // float32 products and softmaxes of width 8 with values up to ~5: a few dozen roundings of 2^-24 (measured
    // worst 1.1e-6 at a value of 4.6, 2.4e-7 relative); central differences add ~1e-9. The mistakes the messages
    // name miss by 0.01 or more.
    const double atol = 2e-6, rtol = 1e-6;
    {
      const bool transposed = matches(g.dW.W_O, oracle::transpose(e.dW[3]), atol, rtol);
      const std::string why = transposed
                                  ? "yours is the transpose: W_O's gradient is headsᵀ·dY (trace.heads_out), row i "
                                    "for column i of the heads"
                                  : "W_O's gradient is headsᵀ·dY, heads being trace.heads_out";
      INFO(why);
      CHECK_ALLCLOSE(g.dW.W_O, e.dW[3], atol, rtol);
    }
    {
      INFO(
          "W_V's gradient is Xᵀ·dV, dV each head's from chapter 10's attention_backward with dO = its columns of "
          "dY·W_Oᵀ");
      CHECK_ALLCLOSE(g.dW.W_V, e.dW[2], atol, rtol);
    }
    {
      const bool ok = matches(g.dW.W_Q, e.dW[0], atol, rtol) && matches(g.dW.W_K, e.dW[1], atol, rtol);
      INFO("W_Q and W_K: ", ok ? std::string() : projection_slip(g.dW.W_Q, g.dW.W_K, model, tr, 1, dY, atol, rtol));
      CHECK_ALLCLOSE(g.dW.W_Q, e.dW[0], atol, rtol);
      CHECK_ALLCLOSE(g.dW.W_K, e.dW[1], atol, rtol);
    }
    {
      const bool no_residual = matches(g.dX, minus(e.dX, to_oracle(dY)), atol, rtol);
      const std::string why = no_residual
                                  ? "dX lacks the residual path: Y = X + heads·W_O, so dX = dY + what flows back "
                                    "through the heads"
                                  : "dX = dY (the residual stream) + dQ·W_Qᵀ + dK·W_Kᵀ + dV·W_Vᵀ";
      INFO(why);
      CHECK_ALLCLOSE(g.dX, e.dX, atol, rtol);
    }
  }

  TEST_CASE("layer_backward with W_O = 0: the layer passes X through, so dX = dY exactly and only W_O learns" *
            doctest::test_suite("12_learning/layer_backward")) {
    ch12::Model model = ch12::init_model(layer_config(), 1214);
    model.layers[0].W_O.fill(0.0f);  // Y = X + heads·0 = X
    attn::Rng rng(1215);
    const Matrix X0 = rng.normal(5, 8), dY = rng.normal(5, 8);  // (5, d_model) each
    const ch12::Trace tr = ch12::forward_embedded(model, X0);
    const attn::LayerGrads g = attn::layer_backward(model, tr, 0, dY);
    INFO("the residual stream: Y = X + heads·W_O, so dX begins as dY (and nothing reaches the heads when W_O = 0)");
    CHECK(g.dX == dY);  // dY plus products of exact zeros: exact
    for (const Matrix* W : {&g.dW.W_Q, &g.dW.W_K, &g.dW.W_V}) CHECK(xt::all(xt::equal(*W, 0.0f)));
    // One float32 product of width 5 (values ~1): a few roundings of 2^-24.
    CHECK_ALLCLOSE(g.dW.W_O, oracle::matmul(oracle::transpose(to_oracle(tr.heads_out[0])), to_oracle(dY)), 1e-6, 1e-5);
  }

  TEST_CASE("layer_backward of the first layer with its second head switched off: that head passes no gradient" *
            doctest::test_suite("12_learning/layer_backward")) {
    const ch12::HeadMask keep{{true, false}, {true, true}};
    const LayerCase lc = layer_case(1216, 6, keep);
    const attn::LayerGrads g = attn::layer_backward(lc.model, lc.trace, 0, lc.dY, keep[0]);
    const oracle::LayerGrads e =
        oracle::attention_layer_gradients(to_oracle(lc.trace.residual[0]), to_oracle_layer(lc.model.layers[0]), 2,
                                          100.0, to_oracle(lc.dY), {true, false});
    {
      INFO("a head whose keep flag is false added nothing to Y: its columns of W_Q, W_K, W_V get no gradient");
      for (const Matrix* W : {&g.dW.W_Q, &g.dW.W_K, &g.dW.W_V}) {
        const Matrix off = xt::view(*W, xt::all(), xt::range(4, 8));  // (d_model, d_k) head 1's columns
        CHECK(xt::all(xt::equal(off, 0.0f)));
      }
    }
    // As in the test of the second layer: float32 rounding (measured worst 5.8e-7), central differences ~1e-9.
    const char* const names[] = {"W_Q", "W_K", "W_V", "W_O"};
    const Matrix* got[] = {&g.dW.W_Q, &g.dW.W_K, &g.dW.W_V, &g.dW.W_O};
    for (std::size_t i = 0; i < 4; ++i) {
      INFO("the gradient of ", std::string(names[i]), " with head 0 on and head 1 off");
      CHECK_ALLCLOSE(*got[i], e.dW[i], 2e-6, 1e-6);
    }
    INFO("dX with head 0 on and head 1 off");
    CHECK_ALLCLOSE(g.dX, e.dX, 2e-6, 1e-6);
  }

  TEST_CASE(
      "layer_backward refuses a layer past the last, a dY of another shape or holding NaN, and a keep of "
      "another size" *
      doctest::test_suite("12_learning/layer_backward")) {
    const LayerCase c = layer_case(1218, 4);  // dY (4, d_model)
    CHECK_THROWS_NAMING(attn::layer_backward(c.model, c.trace, 2, c.dY), std::invalid_argument, "2");
    CHECK_THROWS_NAMING(attn::layer_backward(c.model, c.trace, 0, Matrix(xt::zeros<float>({4, 6}))),
                        std::invalid_argument, "4", "6");
    Matrix nan = c.dY;
    nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::layer_backward(c.model, c.trace, 0, nan), std::invalid_argument, "dY", "10");
    CHECK_THROWS_AS(attn::layer_backward(c.model, c.trace, 0, c.dY, {true}), std::invalid_argument);
    ch12::Config other = layer_config();
    other.layers = 1;
    CHECK_THROWS_AS(
        attn::layer_backward(c.model, ch12::forward_embedded(ch12::init_model(other, 1), c.trace.residual[0]), 1, c.dY),
        std::invalid_argument);
  }

  TEST_CASE(
      "train_step takes two AdamW steps of the float64 model: every parameter moves, with t = 1 then 2, by "
      "each step's own gradient" *
      doctest::test_suite("12_learning/train_step")) {
    const ch12::Model start = ch12::init_model(tiny_config(), 1220);
    const std::vector<std::vector<ch12::Sequence>> batches{
        {{{1, 4, 0, 2, 1, 3}, {kSkip, 0, 2, kSkip, 3, 1}}, {{2, 2, 4, 0}, {2, 4, 0, kSkip}}},
        {{{0, 3, 1, 4, 2}, {3, 1, 4, 2, kSkip}}, {{4, 1, 1, 3, 0, 2, 4}, {1, kSkip, 3, 0, 2, 4, kSkip}}}};
    // ε = 1e-3 rather than 1e-8: a step is then lr·ĝ/(|ĝ| + ε) and moves at most lr/ε = 10 times a gradient's
    // error, where ε = 1e-8 would let a gradient of 1e-9 (pure rounding) swing its parameter by ±lr.
    const attn::AdamW s{0.01f, 0.9, 0.999, 1e-3f, 0.1f};
    const OracleSteps right = oracle_steps(StepSlip::none, start, batches, s);
    const std::pair<StepSlip, const char*> slips[] = {
        {StepSlip::same_t,
         "it matches a step that passes t = 1 again: adamw_step's bias corrections need this step's t"},
        {StepSlip::accumulated,
         "it matches gradients summed over both steps: each step's gradients start from zero (ch12::zeros_like)"},
        {StepSlip::not_zeroed,
         "it matches gradients begun as a copy of the model, not from zero: ch12::zeros_like(model)"},
        {StepSlip::decay_in_gradient,
         "it matches weight decay added to the gradient (Adam with L2): AdamW decays the weight itself, in "
         "adamw_step, with the settings unchanged"}};
    std::vector<OracleSteps> wrong;
    for (const auto& slip : slips) wrong.push_back(oracle_steps(slip.first, start, batches, s));
    ch12::Model model = start, m = ch12::zeros_like(start), v = m;
    // Parameters below 2 moved by ~lr = 0.01 per step: float32 rounding of θ (1.2e-7) and at most 10 times the
    // float32 gradients' error (1e-8 here) per step (measured worst 9.6e-8 after two steps); the mistakes the
    // messages name move a parameter by 1e-3 or more.
    const double atol = 1e-6, rtol = 0.0;
    for (std::size_t k = 0; k < 2; ++k) {
      CAPTURE(k + 1);
      const std::vector<Matrix> before = snapshot(model);
      const double loss = attn::train_step(model, m, v, k + 1, batches[k], s);
      {
        INFO("the batch's loss before the step: one cross_entropy over every sequence's rows, stacked");
        CHECK(loss == doctest::Approx(right.loss[k]).epsilon(1e-6));  // logs of float32 softmaxes: ~1e-7 relative
      }
      const std::vector<const Matrix*> P = ch12::parameters(static_cast<const ch12::Model&>(model));
      for (std::size_t i = 0; i < P.size(); ++i) {
        std::string why = "each parameter moves by adamw_step with its own moments";
        if (!matches(*P[i], right.after[k][i], atol, rtol)) {
          if (*P[i] == before[i]) why = "it did not move: adamw_step runs on every parameter ch12::parameters() lists";
          for (std::size_t w = 0; w < wrong.size(); ++w)
            if (matches(*P[i], wrong[w].after[k][i], atol, rtol)) why = slips[w].second;
        }
        INFO(std::string(kParameterNames[i]), ": ", why);
        CHECK_ALLCLOSE(*P[i], right.after[k][i], atol, rtol);
      }
    }
  }

  TEST_CASE(
      "train_step refuses an empty batch, t = 0, moments of other shapes and targets that are not one per "
      "token, changing nothing" *
      doctest::test_suite("12_learning/train_step")) {
    ch12::Model model = ch12::init_model(tiny_config(), 1221), m = ch12::zeros_like(model), v = m;
    const std::vector<Matrix> before = snapshot(model);
    const std::vector<ch12::Sequence> batch{{{1, 2, 3}, {2, 3, kSkip}}};
    const attn::AdamW s{0.01f, 0.9, 0.999, 1e-8f, 0.0f};
    CHECK_THROWS_AS(attn::train_step(model, m, v, 1, {}, s), std::invalid_argument);
    CHECK_THROWS_AS(attn::train_step(model, m, v, 0, batch, s), std::invalid_argument);
    CHECK_THROWS_AS(attn::train_step(model, m, v, 1, {{{1, 2, 3}, {2, 3}}}, s), std::invalid_argument);
    CHECK_THROWS_AS(attn::train_step(model, m, v, 1, {batch[0], {{1, 9}, {9, kSkip}}}, s),
                    std::invalid_argument);  // token 9 of a vocabulary of 5, in the second sequence
    ch12::Config wider = tiny_config();
    wider.vocab = 6;
    ch12::Model other = ch12::zeros_like(ch12::init_model(wider, 1));
    CHECK_THROWS_AS(attn::train_step(model, other, v, 1, batch, s), std::invalid_argument);
    CHECK_THROWS_AS(attn::train_step(model, m, other, 1, batch, s), std::invalid_argument);
    INFO("a refused step changes nothing: the model and both moments are as they were");
    CHECK(unchanged(model, before));
    CHECK(unchanged(m, snapshot(ch12::zeros_like(model))));
    CHECK(unchanged(v, snapshot(ch12::zeros_like(model))));
  }

  TEST_CASE("cross_entropy matches the float64 oracle and averages over the counted rows only" *
            doctest::test_suite("12_learning/cross_entropy")) {
    attn::Rng rng(1201);
    const Matrix logits = rng.normal(6, 7, 0.0f, 2.0f);                // (6, 7)
    const std::vector<std::size_t> targets{3, kSkip, 0, 6, kSkip, 2};  // 4 counted rows
    const attn::LossAndGrad lg = attn::cross_entropy(logits, targets);
    const oracle::Mat L = to_oracle(logits);
    // A sum of 4 logs of numbers ~1 from float32 inputs: a few 2^-24 relative, far inside 1e-6.
    INFO("divide by the number of counted rows (4), not by all rows (6); skipped rows give no loss");
    CHECK(lg.loss == doctest::Approx(oracle::cross_entropy(L, targets)).epsilon(1e-6));
    // Each entry is (p − onehot) / 4 with p from a float32 softmax: |error| ≲ 2^-24·vocab.
    INFO("dlogits = (softmax − onehot) / C on counted rows and exactly 0 on skipped rows");
    CHECK_ALLCLOSE(lg.dlogits, oracle::cross_entropy_grad(L, targets), 1e-7, 1e-5);
  }

  TEST_CASE("cross_entropy of uniform logits is log(vocab), and large logits stay finite" *
            doctest::test_suite("12_learning/cross_entropy")) {
    const Matrix flat = xt::zeros<float>({3, 8});
    const attn::LossAndGrad u = attn::cross_entropy(flat, {1, 2, 7});
    INFO("every token equally likely: −log(1/8) = log 8");
    CHECK(u.loss == doctest::Approx(std::log(8.0)).epsilon(1e-6));
    Matrix big = xt::zeros<float>({1, 3});
    big(0, 0) = 1000.0f;  // exp(1000) overflows: only the max-subtracted log-sum-exp survives
    big(0, 1) = 999.0f;
    const attn::LossAndGrad b = attn::cross_entropy(big, {1});
    INFO("subtract the row's maximum before exp: the loss is 1 + log(1 + e^-1) ≈ 1.3133, not inf or nan");
    CHECK(b.loss == doctest::Approx(1.0 + std::log(1.0 + std::exp(-1.0))).epsilon(1e-6));
    CHECK(std::isfinite(static_cast<double>(b.dlogits(0, 0))));
  }

  TEST_CASE("cross_entropy shifts each row by its own maximum: rows a thousand apart both stay exact" *
            doctest::test_suite("12_learning/cross_entropy")) {
    // One shift for the whole matrix (its largest logit, 1000) sends every exp of row 1 to exp(−998) = 0 in
    // float32: log 0 = −inf. Row by row, each log-sum-exp is a sum of three numbers ≤ 1: float32 rounding.
    const Matrix logits = {{1000.0f, 999.0f, 998.0f}, {0.0f, 1.0f, 2.0f}};  // (2, 3)
    const std::vector<std::size_t> targets{1, 0};
    const attn::LossAndGrad lg = attn::cross_entropy(logits, targets);
    INFO("log-sum-exp per row: subtract that row's maximum, not one maximum over all rows");
    CHECK(lg.loss == doctest::Approx(oracle::cross_entropy(to_oracle(logits), targets)).epsilon(1e-6));
    CHECK_ALLCLOSE(lg.dlogits, oracle::cross_entropy_grad(to_oracle(logits), targets), 1e-7, 1e-5);
  }

  TEST_CASE("cross_entropy refuses targets of the wrong length, an empty vocabulary and NaN logits" *
            doctest::test_suite("12_learning/cross_entropy")) {
    const Matrix logits = xt::zeros<float>({3, 4});
    CHECK_THROWS_AS(attn::cross_entropy(logits, {1, 2}), std::invalid_argument);
    CHECK_THROWS_AS(attn::cross_entropy(Matrix(xt::zeros<float>({2, 0})), {0, 0}), std::invalid_argument);
    Matrix bad = logits;
    bad(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(attn::cross_entropy(bad, {0, 1, 2}), std::invalid_argument);
  }

  TEST_CASE("adamw_step takes two hand-worked steps with bias correction and decoupled weight decay" *
            doctest::test_suite("12_learning/adamw_step")) {
    // θ = 1, lr 0.1, β = (0.9, 0.999), ε = 1e-8, weight decay 0.01. Step 1, g = 0.5: m = 0.05, v = 0.00025,
    // m̂ = 0.5, v̂ = 0.25, m̂/√v̂ = 1, θ = 1 − 0.1·(1 + 0.01·1) = 0.899. Step 2, g = −0.5: m = −0.005,
    // v = 0.00049975, m̂ = −0.005/0.19 = −1/38, v̂ = 0.00049975/0.001999 = 0.25, m̂/√v̂ = −1/19,
    // θ = 0.899 − 0.1·(−1/19 + 0.01·0.899) = 0.90336416.
    attn::AdamW s{0.1f, 0.9, 0.999, 1e-8f, 0.01f};
    Matrix theta = xt::ones<float>({1, 1}), m = xt::zeros<float>({1, 1}), v = m;
    attn::adamw_step(theta, Matrix(xt::ones<float>({1, 1}) * 0.5f), m, v, 1, s);
    // Values ~1 through a handful of float32 operations: a few ulps (1e-7 each); 1e-6 leaves room, and is far
    // below the 1e-3 that L2-style decay (0.9) or a missing bias correction (θ ≈ 0.68) would miss by.
    INFO("step 1: m̂ = g and v̂ = g² after bias correction, so θ moves by lr·(1 + weight_decay·θ)");
    CHECK(static_cast<double>(m(0, 0)) == doctest::Approx(0.05).epsilon(1e-6));
    CHECK(static_cast<double>(v(0, 0)) == doctest::Approx(0.00025).epsilon(1e-6));
    CHECK(static_cast<double>(theta(0, 0)) == doctest::Approx(0.899).epsilon(1e-6));
    attn::adamw_step(theta, Matrix(xt::ones<float>({1, 1}) * -0.5f), m, v, 2, s);
    INFO("step 2: bias corrections 1 − 0.9² and 1 − 0.999²; decay uses θ before the step");
    CHECK(static_cast<double>(theta(0, 0)) == doctest::Approx(0.90336416).epsilon(1e-6));
  }

  TEST_CASE("adamw_step follows the float64 AdamW with β1 = 0.9, β2 = 0.999 for ten steps, to float32 rounding" *
            doctest::test_suite("12_learning/adamw_step")) {
    attn::Rng rng(121);
    attn::AdamW s;  // the defaults: β1 = 0.9, β2 = 0.999, exactly as PyTorch's
    s.lr = 1e-2f;
    s.weight_decay = 0.01f;
    const std::size_t T = 10;
    Matrix theta = rng.normal(4, 5), m = xt::zeros<float>({4, 5}), v = m;  // (4, 5)
    oracle::AdamWState exact{to_oracle(theta).v, std::vector<double>(20, 0.0), std::vector<double>(20, 0.0)};
    // Every step rounds m, v and θ to float once (ε = 2^-24 relative each); an error in m or v decays by β after
    // it, so after t steps m and v are within t·ε of their largest size so far. θ adds its own rounding and the
    // step's error from those of m and v: lr·(|Δm̂|/√v̂ + |m̂|·|Δv̂|/(2 v̂^{3/2})), to first order.
    double m_size = 0.0, v_size = 0.0, theta_tol = 0.0;
    for (std::size_t t = 1; t <= T; ++t) {
      CAPTURE(t);
      const Matrix g = rng.normal(4, 5, 0.0f, 0.1f);  // (4, 5)
      attn::adamw_step(theta, g, m, v, t, s);
      oracle::adamw_step(exact, to_oracle(g).v, t, static_cast<double>(s.lr), 0.9, 0.999, static_cast<double>(s.eps),
                         static_cast<double>(s.weight_decay));
      const double c1 = 1.0 - std::pow(0.9, static_cast<double>(t)), c2 = 1.0 - std::pow(0.999, static_cast<double>(t));
      for (std::size_t i = 0; i < 20; ++i) {
        m_size = std::max(m_size, std::fabs(exact.m[i]));
        v_size = std::max(v_size, exact.v[i]);
      }
      const double m_tol = static_cast<double>(t) * kEps * m_size, v_tol = static_cast<double>(t) * kEps * v_size;
      double step_tol = 0.0;
      for (std::size_t i = 0; i < 20; ++i) {
        const double m_hat = exact.m[i] / c1, v_hat = exact.v[i] / c2;
        step_tol = std::max(
            step_tol, static_cast<double>(s.lr) * (m_tol / c1 / std::sqrt(v_hat) +
                                                   std::fabs(m_hat) * v_tol / c2 / (2.0 * v_hat * std::sqrt(v_hat))) +
                          kEps * std::fabs(exact.theta[i]));
      }
      theta_tol += step_tol;
      INFO(
          "m = β1·m + (1 − β1)·g and v = β2·v + (1 − β2)·g² with β and 1 − β exactly as given (a float 1 − 0.999f "
          "is 0.000999987: v 1.3e-5 off)");
      const auto as_matrix = [](const std::vector<double>& x) {
        oracle::Mat out(4, 5);
        out.v = x;
        return out;
      };
      CHECK_ALLCLOSE(m, as_matrix(exact.m), m_tol, 0.0);
      CHECK_ALLCLOSE(v, as_matrix(exact.v), v_tol, 0.0);
      CHECK_ALLCLOSE(theta, as_matrix(exact.theta), 2.0 * theta_tol, 0.0);
    }
  }

  TEST_CASE("adamw_step adds ε to √v̂, after the bias correction and outside the square root" *
            doctest::test_suite("12_learning/adamw_step")) {
    // At step 1 the bias corrections give m̂ = g and v̂ = g² exactly, so θ = −lr·g / (|g| + ε) from θ = 0.
    // With g = 0.01 and a large ε = 0.1 the places ε could go differ by a factor 3 or more:
    // g/(√v̂ + ε) = 0.0909 (right), g/√(v̂ + ε) = 0.0316, and ε added to √v before the correction 0.0032.
    const attn::AdamW s{1.0f, 0.9f, 0.999f, 0.1f, 0.0f};
    Matrix theta = xt::zeros<float>({1, 1}), m = theta, v = theta;
    attn::adamw_step(theta, Matrix(xt::ones<float>({1, 1}) * 0.01f), m, v, 1, s);
    const double g = static_cast<double>(0.01f), eps = static_cast<double>(0.1f);
    INFO("θ −= lr·(m̂ / (√v̂ + ε) + weight_decay·θ): ε joins the corrected root, it does not go under it");
    // A handful of float32 operations on values ~0.01 to 1: a few ulps, 1e-5 relative leaves room.
    CHECK(static_cast<double>(theta(0, 0)) == doctest::Approx(-g / (g + eps)).epsilon(1e-5));
  }

  TEST_CASE("adamw_step refuses mismatched shapes and step 0, leaving the weights unchanged" *
            doctest::test_suite("12_learning/adamw_step")) {
    Matrix theta = xt::ones<float>({2, 2}), m = xt::zeros<float>({2, 2}), v = m;
    const Matrix before = theta;
    CHECK_THROWS_AS(attn::adamw_step(theta, Matrix(xt::ones<float>({2, 3})), m, v, 1, attn::AdamW{}),
                    std::invalid_argument);
    CHECK_THROWS_AS(attn::adamw_step(theta, Matrix(xt::ones<float>({2, 2})), m, v, 0, attn::AdamW{}),
                    std::invalid_argument);
    CHECK(theta == before);
  }

  TEST_CASE(
      "adamw_step refuses settings that give NaN weights, and a NaN or infinite gradient or weight, leaving "
      "everything unchanged" *
      doctest::test_suite("12_learning/adamw_step")) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    Matrix theta = xt::ones<float>({2, 2}), m = xt::zeros<float>({2, 2}), v = m;
    const Matrix zero_grad = xt::zeros<float>({2, 2}), before = theta;
    const auto with = [](float lr, float beta1, float beta2, float eps, float decay) {
      return attn::AdamW{lr, beta1, beta2, eps, decay};
    };
    // β1 = 1 or β2 = 1: the bias correction 1 − βᵗ is 0; β2 > 1 or < 0: v can turn negative; ε = 0 with a zero
    // gradient: 0 / 0; a NaN or negative learning rate or decay.
    for (const attn::AdamW& bad : {with(1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f), with(1e-3f, 0.9f, 1.0f, 1e-8f, 0.0f),
                                   with(1e-3f, 0.9f, 1.5f, 1e-8f, 0.0f), with(1e-3f, -0.1f, 0.999f, 1e-8f, 0.0f),
                                   with(1e-3f, 0.9f, 0.999f, 0.0f, 0.0f), with(1e-3f, 0.9f, 0.999f, inf, 0.0f),
                                   with(nan, 0.9f, 0.999f, 1e-8f, 0.0f), with(-1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f),
                                   with(inf, 0.9f, 0.999f, 1e-8f, 0.0f), with(1e-3f, nan, 0.999f, 1e-8f, 0.0f),
                                   with(1e-3f, 0.9f, 0.999f, 1e-8f, nan), with(1e-3f, 0.9f, 0.999f, 1e-8f, -0.5f)}) {
      CAPTURE(bad.lr);
      CAPTURE(bad.beta1);
      CAPTURE(bad.beta2);
      CAPTURE(bad.eps);
      CAPTURE(bad.weight_decay);
      CHECK_THROWS_NAMING(attn::adamw_step(theta, zero_grad, m, v, 1, bad), std::invalid_argument, "adamw_step");
    }
    Matrix bad_grad = zero_grad;
    bad_grad(1, 0) = nan;
    CHECK_THROWS_NAMING(attn::adamw_step(theta, bad_grad, m, v, 1, attn::AdamW{}), std::invalid_argument, "grad", "2");
    Matrix bad_theta = theta;
    bad_theta(0, 1) = -inf;
    CHECK_THROWS_NAMING(attn::adamw_step(bad_theta, zero_grad, m, v, 1, attn::AdamW{}), std::invalid_argument, "param",
                        "1");
    CHECK(theta == before);
    CHECK(xt::all(xt::equal(m, 0.0f)));
    CHECK(xt::all(xt::equal(v, 0.0f)));
  }

  TEST_CASE("induction_score and attention_rollout refuse an attention map holding NaN or infinity" *
            doctest::test_suite("12_learning/attention_rollout")) {
    Matrix A = xt::eye<float>(3);
    A(2, 0) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_NAMING(attn::induction_score(A, {1, 2, 1}), std::invalid_argument, "A", "6");
    CHECK_THROWS_NAMING(attn::attention_rollout({Matrix(xt::eye<float>(3)), A}), std::invalid_argument, "6");
    A(2, 0) = std::numeric_limits<float>::infinity();
    CHECK_THROWS_AS(attn::attention_rollout({A}), std::invalid_argument);
  }

  TEST_CASE("induction_score is 1 for a perfect induction head and 0 for a head on the twin or the previous token" *
            doctest::test_suite("12_learning/induction_score")) {
    // Token 1 occurs at 1, 4 and 7: query 7 must be scored on key 5 (after the latest occurrence, at 4).
    const std::vector<std::size_t> tokens{4, 1, 2, 3, 1, 2, 3, 1};
    const std::size_t n = tokens.size();
    const std::size_t after_latest[] = {0, 0, 0, 0, 2, 3, 4, 5};  // for queries 4 … 7; 0 … 3 have no earlier twin
    Matrix induction = xt::eye<float>(n), twin = induction, previous = xt::zeros<float>({n, n}), earliest = induction;
    for (std::size_t i = 0; i < n; ++i) previous(i, i == 0 ? 0 : i - 1) = 1.0f;
    for (std::size_t i = 4; i < n; ++i) {
      induction(i, i) = twin(i, i) = earliest(i, i) = 0.0f;
      induction(i, after_latest[i]) = 1.0f;
      twin(i, after_latest[i] - 1) = 1.0f;               // the earlier copy of the current token itself: one too early
      earliest(i, i == 7 ? 2 : after_latest[i]) = 1.0f;  // query 7 on the token after the *first* 1
    }
    INFO("query i is scored on key j + 1, j the latest earlier position holding token i");
    CHECK(attn::induction_score(induction, tokens) == doctest::Approx(1.0));
    CHECK(attn::induction_score(twin, tokens) == doctest::Approx(0.0));
    CHECK(attn::induction_score(previous, tokens) == doctest::Approx(0.0));
    INFO("with several earlier occurrences, the latest one counts: 3 of 4 queries right gives 0.75");
    CHECK(attn::induction_score(earliest, tokens) == doctest::Approx(0.75));
    Matrix uniform = xt::zeros<float>({n, n});  // causal uniform: query i spreads 1/(i + 1) over keys 0 … i
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j <= i; ++j) uniform(i, j) = 1.0f / static_cast<float>(i + 1);
    INFO("average over the 4 queries whose token occurred before, not over all 8");
    CHECK(attn::induction_score(uniform, tokens) == doctest::Approx((1.0 / 5 + 1.0 / 6 + 1.0 / 7 + 1.0 / 8) / 4));
    CHECK(attn::induction_score(uniform, {0, 1, 2, 3, 4, 5, 6, 7}) == doctest::Approx(0.0));  // nothing repeats
    CHECK_THROWS_AS(attn::induction_score(Matrix(xt::zeros<float>({n, n - 1})), tokens), std::invalid_argument);
    CHECK_THROWS_AS(attn::induction_score(uniform, {1, 2, 1}), std::invalid_argument);
  }

  TEST_CASE("attention_rollout multiplies half-residual layers, the last layer on the left" *
            doctest::test_suite("12_learning/attention_rollout")) {
    Matrix A1 = xt::zeros<float>({3, 3}), A2 = A1;  // (3, 3) each, causal, rows summing to 1
    A1(0, 0) = 1.0f;
    A1(1, 0) = 1.0f;
    A1(2, 1) = 1.0f;  // layer 1: previous-token-ish
    A2(0, 0) = 1.0f;
    A2(1, 1) = 1.0f;
    A2(2, 0) = 0.5f;
    A2(2, 2) = 0.5f;
    // Float64 by hand: R = (½A2 + ½I)(½A1 + ½I).
    oracle::Mat M1(3, 3), M2(3, 3);
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        M1(i, j) = 0.5 * static_cast<double>(A1(i, j)) + (i == j ? 0.5 : 0.0);
        M2(i, j) = 0.5 * static_cast<double>(A2(i, j)) + (i == j ? 0.5 : 0.0);
      }
    const Matrix R = attn::attention_rollout({A1, A2});
    // Products of halves and quarters: exact in float32.
    INFO("Ã = ½A + ½I per layer; R = Ã2·Ã1 (Ã1·Ã2 differs for these matrices)");
    CHECK_ALLCLOSE(R, oracle::matmul(M2, M1), 0.0, 0.0);
    const Matrix eye = xt::eye<float>(3);
    INFO("identity attention passes every token through unchanged");
    CHECK_ALLCLOSE(attn::attention_rollout({eye, eye}), to_oracle(eye), 0.0, 0.0);
    CHECK_THROWS_AS(attn::attention_rollout({}), std::invalid_argument);
    CHECK_THROWS_AS(attn::attention_rollout({A1, Matrix(xt::zeros<float>({2, 2}))}), std::invalid_argument);
  }

  TEST_CASE("cross_entropy through the model: logits and every layer's gradient match float64 central differences" *
            doctest::test_suite("12_learning/cross_entropy")) {
    const ch12::Config c = tiny_config();
    const ch12::Model model = ch12::init_model(c, 77);
    const std::vector<std::size_t> tokens{1, 4, 0, 2, 1, 3}, targets{kSkip, 0, 2, kSkip, 3, 1};
    oracle::Transformer t = to_oracle_model(model);
    const ch12::Trace tr = ch12::forward(model, tokens);
    // float32 through 2 layers of width 4 with values ~1: a few dozen roundings of 2^-24 each.
    CHECK_ALLCLOSE(tr.logits, oracle::transformer_logits(t, tokens), 1e-5, 1e-5);
    const attn::LossAndGrad lg = attn::cross_entropy(tr.logits, targets);
    ch12::Model grads = ch12::zeros_like(model);
    ch12::backward(model, tr, lg.dlogits, tokens, grads);
    // Central differences of the float64 oracle, h = 1e-5: truncation h²·|f'''| ~ 1e-10, rounding 1e-16/h ~ 1e-11.
    const double h = 1e-5;
    std::vector<oracle::Mat*> P = oracle::parameters(t);
    const std::vector<const Matrix*> G = ch12::parameters(static_cast<const ch12::Model&>(grads));
    const char* names[] = {"embed",       "layer 1 W_Q", "layer 1 W_K", "layer 1 W_V", "layer 1 W_O",
                           "layer 2 W_Q", "layer 2 W_K", "layer 2 W_V", "layer 2 W_O", "unembed"};
    for (std::size_t p = 0; p < P.size(); ++p) {
      oracle::Mat numeric(P[p]->rows, P[p]->cols);
      for (std::size_t i = 0; i < P[p]->v.size(); ++i) {
        const double keep = P[p]->v[i];
        P[p]->v[i] = keep + h;
        const double up = oracle::cross_entropy(oracle::transformer_logits(t, tokens), targets);
        P[p]->v[i] = keep - h;
        const double down = oracle::cross_entropy(oracle::transformer_logits(t, tokens), targets);
        P[p]->v[i] = keep;
        numeric.v[i] = (up - down) / (2.0 * h);
      }
      INFO("gradient of ", std::string(names[p]));
      // The float32 backward of gradients ~0.1: its rounding, a few dozen times 2^-24, stays below 1e-6.
      CHECK_ALLCLOSE(*G[p], numeric, 1e-6, 1e-4);
    }
  }

  TEST_CASE("induction_score's task: make_induction repeats distinct tokens with a varying period" *
            doctest::test_suite("12_learning/induction_score")) {
    attn::Rng rng(5);
    const std::size_t n = 12;
    std::set<std::size_t> periods;
    for (int trial = 0; trial < 50; ++trial) {
      const ch12::InductionSequence s = ch12::make_induction(n, 10, rng);
      REQUIRE(s.tokens.size() == n);
      REQUIRE(s.targets.size() == n);
      REQUIRE(s.period >= 3);  // max(2, n/4) … n/2
      REQUIRE(s.period <= 6);
      periods.insert(s.period);
      const std::size_t fresh = n - s.period;
      CHECK(std::set<std::size_t>(s.tokens.begin(), s.tokens.begin() + static_cast<std::ptrdiff_t>(fresh)).size() ==
            fresh);
      for (std::size_t i = 0; i < n; ++i) {
        CHECK(s.tokens[i] < 10);
        if (i >= fresh) CHECK(s.tokens[i] == s.tokens[i - s.period]);
        CHECK(s.targets[i] == (i >= fresh && i + 1 < n ? s.tokens[i + 1] : kSkip));
      }
    }
    // The generator and the score agree: a head that attends from each repeated token to the token after its
    // earlier copy (and elsewhere to itself) scores exactly 1 on a generated sequence.
    const ch12::InductionSequence s = ch12::make_induction(n, 10, rng);
    Matrix perfect = xt::eye<float>(n);  // (n, n)
    for (std::size_t i = n - s.period; i < n; ++i) {
      perfect(i, i) = 0.0f;
      perfect(i, i - s.period + 1) = 1.0f;
    }
    CHECK(attn::induction_score(perfect, s.tokens) == doctest::Approx(1.0));
    INFO("the period must vary, or a fixed RoPE offset would solve the task without reading tokens");
    CHECK(periods.size() == 4);
    CHECK_THROWS_AS(ch12::make_induction(20, 10, rng), std::invalid_argument);  // needs 15 distinct tokens
    CHECK_THROWS_AS(ch12::make_induction(3, 10, rng), std::invalid_argument);
  }

  TEST_CASE("cross_entropy needs a model: an empty vocabulary and a sequence past the context are refused" *
            doctest::test_suite("12_learning/cross_entropy")) {
    ch12::Config c = tiny_config();
    c.vocab = 0;
    CHECK_THROWS_AS(ch12::init_model(c, 1), std::invalid_argument);
    c = tiny_config();
    c.d_model = 6;  // 3 columns per head: RoPE cannot rotate an odd width
    CHECK_THROWS_AS(ch12::init_model(c, 1), std::invalid_argument);
    const ch12::Model model = ch12::init_model(tiny_config(), 1);
    CHECK_THROWS_AS(ch12::forward(model, std::vector<std::size_t>(9, 0)), std::invalid_argument);  // context 8
    CHECK_THROWS_AS(ch12::forward(model, {0, 5}), std::invalid_argument);                          // vocab 5
    CHECK_THROWS_AS(ch12::forward(model, {}), std::invalid_argument);
    // A sequence that fits is accepted, and its loss is a positive finite number.
    const double loss = attn::cross_entropy(ch12::forward(model, {0, 4, 1}).logits, {4, 1, kSkip}).loss;
    CHECK(std::isfinite(loss));
    CHECK(loss > 0.0);
  }

  TEST_CASE("train_step trains the model: 300 steps take the loss from above 3 to below 1" *
            doctest::test_suite("12_learning/train_step")) {
    // A smaller task than the chapter's (n = 12) so that the run takes about a second. The loss starts above
    // log(24) ≈ 3.2 (worse than a uniform guess) and, with this seed, is near 0.13 by step 300: below 1 only once
    // the induction circuit has formed (`ch12_learning --length 12 --steps 300 --lr 0.01` prints the curve).
    ch12::Config c;
    c.context = 12;
    ch12::TrainSettings s;
    s.length = 12;
    s.steps = 300;
    s.adamw.lr = 0.01f;
    const ch12::TrainResult r = ch12::train_induction(c, s);
    REQUIRE(r.loss.size() == 300);
    double last = 0.0;
    for (std::size_t t = 280; t < 300; ++t) last += r.loss[t] / 20.0;
    INFO("mean loss over the first 5 steps: ", (r.loss[0] + r.loss[1] + r.loss[2] + r.loss[3] + r.loss[4]) / 5.0);
    CHECK(r.loss[0] > 3.0);
    INFO("mean loss over steps 281 … 300: ", last);
    CHECK(last < 1.0);
  }

  TEST_CASE("train_step is deterministic: one seed gives the same loss curve bit for bit" *
            doctest::test_suite("12_learning/train_step")) {
    ch12::Config c;
    c.context = 12;
    ch12::TrainSettings s;
    s.length = 12;
    s.steps = 30;
    const ch12::TrainResult a = ch12::train_induction(c, s), b = ch12::train_induction(c, s);
    CHECK(a.loss == b.loss);  // exact equality on purpose: one thread, fixed seeds, the same operations
    s.seed += 1;
    CHECK(ch12::train_induction(c, s).loss != a.loss);  // and the seed does matter
  }

  TEST_CASE(
      "cross_entropy of a model with every head ablated is that of embed·unembed, and ablated heads learn nothing" *
      doctest::test_suite("12_learning/cross_entropy")) {
    const ch12::Config c = tiny_config();
    const ch12::Model model = ch12::init_model(c, 9);
    const std::vector<std::size_t> tokens{2, 0, 4, 1}, targets{0, 4, 1, kSkip};
    // With no head running, the residual stream carries the embeddings unchanged to the unembedding.
    const ch12::HeadMask none(c.layers, std::vector<bool>(c.heads, false));
    oracle::Mat X(tokens.size(), c.d_model);
    for (std::size_t t = 0; t < tokens.size(); ++t)
      for (std::size_t j = 0; j < c.d_model; ++j) X(t, j) = static_cast<double>(model.embed(tokens[t], j));
    const oracle::Mat bigram = oracle::matmul(X, to_oracle(model.unembed));
    const ch12::Trace tr = ch12::forward(model, tokens, none);
    CHECK_ALLCLOSE(tr.logits, bigram, 1e-5, 1e-5);  // one float32 product of width 4: a few ulps
    CHECK(attn::cross_entropy(tr.logits, targets).loss ==
          doctest::Approx(oracle::cross_entropy(bigram, targets)).epsilon(1e-5));
    // Head 1 of layer 1 switched off: its columns of W_Q, W_K, W_V get exactly zero gradient, head 0's do not.
    ch12::HeadMask keep(c.layers, std::vector<bool>(c.heads, true));
    keep[0][1] = false;
    const ch12::Trace tk = ch12::forward(model, tokens, keep);
    ch12::Model grads = ch12::zeros_like(model);
    ch12::backward(model, tk, attn::cross_entropy(tk.logits, targets).dlogits, tokens, grads, keep);
    const std::size_t d_k = c.d_model / c.heads;
    const Matrix off = xt::view(grads.layers[0].W_Q, xt::all(), xt::range(d_k, 2 * d_k));  // (d, d_k)
    const Matrix on = xt::view(grads.layers[0].W_Q, xt::all(), xt::range(0, d_k));         // (d, d_k)
    CHECK(static_cast<double>(xt::amax(xt::abs(off))()) == 0.0);
    CHECK(static_cast<double>(xt::amax(xt::abs(on))()) > 0.0);
  }

  TEST_CASE(
      "cross_entropy's logits explained: with every head ablated, gradient × input and integrated gradients "
      "credit only the current token" *
      doctest::test_suite("12_learning/cross_entropy")) {
    // Without heads, logit(i, y) = X0_i · unembed[:, y]: a linear function of row i alone. Gradient × input is
    // that logit at j = i and 0 elsewhere; integrated gradients equals it exactly (the path integral of a
    // constant gradient), whatever the number of steps.
    const ch12::Config c = tiny_config();
    const ch12::Model model = ch12::init_model(c, 21);
    const std::vector<std::size_t> tokens{3, 1, 4, 0, 2};
    const ch12::HeadMask none(c.layers, std::vector<bool>(c.heads, false));
    const std::size_t row = 3, target = 2;
    double logit = 0.0;
    for (std::size_t d = 0; d < c.d_model; ++d)
      logit += static_cast<double>(model.embed(tokens[row], d)) * static_cast<double>(model.unembed(d, target));
    std::vector<double> expected(tokens.size(), 0.0);
    expected[row] = logit;
    // Sums of 4 products of numbers ~1 in float32 (and 3 midpoints averaged): a few ulps of 1.
    CHECK_ALLCLOSE(ch12::gradient_times_input(model, tokens, row, target, none), expected, 1e-6, 1e-5);
    CHECK_ALLCLOSE(ch12::integrated_gradients(model, tokens, row, target, 3, none), expected, 1e-6, 1e-5);
    // With the heads on, integrated gradients still sums to logit(x) − logit(0) (completeness); logit(0) = 0
    // for this bias-free model. 256 midpoints leave a quadrature error well under the 1e-2 allowed here.
    const ch12::Trace tr = ch12::forward(model, tokens);
    const attn::Vector ig = ch12::integrated_gradients(model, tokens, row, target, 256);
    CHECK(static_cast<double>(xt::sum(ig)()) ==
          doctest::Approx(static_cast<double>(tr.logits(row, target))).epsilon(1e-2));
    CHECK_THROWS_AS(ch12::integrated_gradients(model, tokens, row, target, 0), std::invalid_argument);
    CHECK_THROWS_AS(ch12::gradient_times_input(model, tokens, 5, target), std::invalid_argument);
    // The loss itself, for the case name's sake and as a sanity check of the ablated model's logits.
    CHECK(std::isfinite(attn::cross_entropy(tr.logits, {1, 4, 0, 2, kSkip}).loss));
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile values,
// each call refused naming what was wrong or answered as the contract says. A model is battered weight by weight
// (tests/support/hostile_ch12.hpp); a struct of settings or a list of layers, field by field.
namespace {

namespace hostile = attn::test::hostile;

/// The battery's model: vocab 6, d_model 4, 2 heads of d_k = 2, 1 layer, context 6.
ch12::Config battery_config() {
  ch12::Config c;
  c.vocab = 6;
  c.d_model = 4;
  c.heads = 2;
  c.layers = 1;
  c.context = 6;
  return c;
}

/// A causal (3, 3) attention map whose rows sum to 1.
Matrix lower_triangular_attention(float a10, float a20, float a21) {
  Matrix A = xt::zeros<float>({3, 3});
  A(0, 0) = 1.0f;
  A(1, 0) = a10;
  A(1, 1) = 1.0f - a10;
  A(2, 0) = a20;
  A(2, 1) = a21;
  A(2, 2) = 1.0f - a20 - a21;
  return A;
}

}  // namespace

TEST_SUITE("12_learning: the hostile battery") {
  TEST_CASE("rope_backward under the hostile battery" * doctest::test_suite("12_learning/rope_backward")) {
    // hostile battery: rope_backward
    attn::Rng rng(1290);
    hostile::battery(
        "rope_backward", {"G", "first_position", "base"},
        [](Matrix& G, std::size_t first_position, float base) {
          attn::rope_backward(G, first_position, base);
          return G;
        },
        Matrix(rng.normal(3, 4)), std::size_t{2}, 100.0f)
        .fits([](const Matrix& G, std::size_t first_position, float base) {
          const std::size_t n = G.shape(0);
          return G.shape(1) % 2 == 0 && std::isfinite(base) && base > 1.0f &&
                 (n == 0 || first_position <= std::numeric_limits<std::size_t>::max() - (n - 1));
        })
        .answer([](const Matrix& R, const Matrix& G, std::size_t, float) { return R.shape() == G.shape(); })
        .run();
  }

  TEST_CASE("layer_backward under the hostile battery" * doctest::test_suite("12_learning/layer_backward")) {
    // hostile battery: layer_backward
    attn::Rng rng(1291);
    const ch12::Model model = ch12::init_model(battery_config(), 1291);
    const ch12::Trace trace = ch12::forward(model, {1, 4, 2, 4, 0});
    hostile::battery(
        "layer_backward", {"model", "layer", "dY", "keep"},
        [&](const ch12::Model& m, std::size_t layer, const Matrix& dY, const std::vector<bool>& keep) {
          const attn::LayerGrads g = attn::layer_backward(m, trace, layer, dY, keep);
          return std::vector<Matrix>{g.dW.W_Q, g.dW.W_K, g.dW.W_V, g.dW.W_O, g.dX};
        },
        model, std::size_t{0}, Matrix(rng.normal(5, 4)), std::vector<bool>{true, false})
        .fits([](const ch12::Model& m, std::size_t layer, const Matrix& dY, const std::vector<bool>& keep) {
          return hostile::model_fits(m) && layer == 0 && dY.shape(0) == 5 && dY.shape(1) == 4 &&
                 (keep.empty() || keep.size() == 2);
        })
        .answer([](const std::vector<Matrix>& g, const ch12::Model&, std::size_t, const Matrix& dY,
                   const std::vector<bool>&) { return g[4].shape() == dY.shape() && g[0].shape(0) == 4; })
        .run();
  }

  TEST_CASE("cross_entropy under the hostile battery" * doctest::test_suite("12_learning/cross_entropy")) {
    // hostile battery: cross_entropy
    attn::Rng rng(1292);
    hostile::battery(
        "cross_entropy", {"logits", "targets"},
        [](const Matrix& logits, const std::vector<std::size_t>& targets) {
          const attn::LossAndGrad r = attn::cross_entropy(logits, targets);
          return std::vector<Matrix>{r.dlogits, Matrix{{static_cast<float>(r.loss)}}};
        },
        Matrix(rng.normal(4, 3)), std::vector<std::size_t>{2, kSkip, 0, 1})
        .fits([](const Matrix& logits, const std::vector<std::size_t>& targets) {
          return targets.size() == logits.shape(0) && logits.shape(1) > 0;
        })
        .answer([](const std::vector<Matrix>& r, const Matrix& logits, const std::vector<std::size_t>&) {
          return r[0].shape() == logits.shape() && std::isfinite(r[1](0, 0)) && r[1](0, 0) >= 0.0f;
        })
        .run();
  }

  TEST_CASE("adamw_step under the hostile battery" * doctest::test_suite("12_learning/adamw_step")) {
    // hostile battery: adamw_step
    attn::Rng rng(1293);
    const Matrix m0 = 0.1f * rng.normal(2, 3), v0 = xt::abs(0.1f * rng.normal(2, 3));
    hostile::battery(
        "adamw_step",
        {"param", "grad", "m", "v", "t", "lr|settings", "beta1|settings|β1", "beta2|settings|β2", "eps|settings|ε",
         "weight_decay|settings"},
        [](Matrix& param, const Matrix& grad, Matrix& m, Matrix& v, std::size_t t, float lr, double beta1, double beta2,
           float eps, float weight_decay) {
          attn::adamw_step(param, grad, m, v, t, attn::AdamW{lr, beta1, beta2, eps, weight_decay});
          return std::vector<Matrix>{param, m, v};
        },
        Matrix(rng.normal(2, 3)), Matrix(rng.normal(2, 3)), m0, v0, std::size_t{3}, 1e-2f, 0.9, 0.999, 1e-8f, 0.01f)
        .fits([](const Matrix& param, const Matrix& grad, const Matrix& m, const Matrix& v, std::size_t t, float lr,
                 double beta1, double beta2, float eps, float weight_decay) {
          const auto ok = [](double x, double lo) { return std::isfinite(x) && x >= lo; };
          return grad.shape() == param.shape() && m.shape() == param.shape() && v.shape() == param.shape() && t >= 1 &&
                 ok(lr, 0) && ok(beta1, 0) && beta1 < 1 && ok(beta2, 0) && beta2 < 1 && ok(eps, 0) && eps > 0 &&
                 ok(weight_decay, 0);
        })
        .answer([](const std::vector<Matrix>& r, const Matrix& param, const Matrix&, const Matrix&, const Matrix&,
                   std::size_t, float, double, double, float, float) { return r[0].shape() == param.shape(); })
        .run();
  }

  TEST_CASE("train_step under the hostile battery" * doctest::test_suite("12_learning/train_step")) {
    // hostile battery: train_step
    const ch12::Model model = ch12::init_model(battery_config(), 1294);
    hostile::battery(
        "train_step", {"model", "t", "tokens|batch", "targets|batch", "lr|settings"},
        [](ch12::Model& m, std::size_t t, const std::vector<std::size_t>& tokens,
           const std::vector<std::size_t>& targets, float lr) {
          ch12::Model mm = ch12::zeros_like(m), vv = ch12::zeros_like(m);
          const double loss = attn::train_step(m, mm, vv, t, {{tokens, targets}}, attn::AdamW{lr, 0.9, 0.98, 1e-8f, 0});
          return std::vector<Matrix>{m.embed, Matrix{{static_cast<float>(loss)}}};
        },
        model, std::size_t{1}, std::vector<std::size_t>{1, 3, 1, 3}, std::vector<std::size_t>{kSkip, 1, 3, 1}, 1e-2f)
        .fits([](const ch12::Model& m, std::size_t t, const std::vector<std::size_t>& tokens,
                 const std::vector<std::size_t>& targets, float lr) {
          bool ok = hostile::model_fits(m) && t >= 1 && !tokens.empty() && tokens.size() <= 6 &&
                    targets.size() == tokens.size() && std::isfinite(lr) && lr >= 0;
          for (const std::size_t x : tokens) ok = ok && x < 6;
          return ok;
        })
        .run();
  }

  TEST_CASE("induction_score under the hostile battery" * doctest::test_suite("12_learning/induction_score")) {
    // hostile battery: induction_score
    const Matrix A = lower_triangular_attention(0.3f, 0.2f, 0.5f);  // (3, 3)
    hostile::battery(
        "induction_score", {"A", "tokens"},
        [](const Matrix& a, const std::vector<std::size_t>& tokens) { return attn::induction_score(a, tokens); }, A,
        std::vector<std::size_t>{4, 7, 4})
        .fits([](const Matrix& a, const std::vector<std::size_t>& tokens) {
          return a.shape(0) == tokens.size() && a.shape(1) == tokens.size();
        })
        .run();
  }

  TEST_CASE("attention_rollout under the hostile battery" * doctest::test_suite("12_learning/attention_rollout")) {
    // hostile battery: attention_rollout
    const Matrix A = lower_triangular_attention(0.3f, 0.2f, 0.5f);  // (3, 3)
    hostile::battery(
        "attention_rollout", {"layers[0]|layers", "layers[1]|layers"},
        [](const Matrix& a1, const Matrix& a2) {
          return attn::attention_rollout({a1, a2});
        },
        A, lower_triangular_attention(0.6f, 0.1f, 0.1f))
        .fits([](const Matrix& a1, const Matrix& a2) { return a1.shape(0) == a1.shape(1) && a2.shape() == a1.shape(); })
        .answer([](const Matrix& R, const Matrix& a1, const Matrix&) { return R.shape() == a1.shape(); })
        .run();
    hostile::battery(
        "attention_rollout", {"layers"},
        [](const std::vector<Matrix>& layers) { return attn::attention_rollout(layers); }, std::vector<Matrix>{A})
        .fits([](const std::vector<Matrix>& layers) { return !layers.empty(); })
        .run();
  }
}
