/// \file
/// Chapter 12's model as the hostile battery sees it (tests/support/hostile.hpp): every parameter matrix by name, so
/// a battery can make each one wrong in each dimension, and hold a NaN, in turn. Chapter 17 serves the same model.
#pragma once

#include <string>

#include "12_learning/model.hpp"
#include "support/hostile.hpp"

template <>
struct attn::test::hostile::Weights<attn::ch12::Model> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::ch12::Model& model, F&& f) {
    f("embed", model.embed);
    for (std::size_t l = 0; l < model.layers.size(); ++l) {
      const std::string at = "layers[" + std::to_string(l) + "].";
      f((at + "W_Q").c_str(), model.layers[l].W_Q);
      f((at + "W_K").c_str(), model.layers[l].W_K);
      f((at + "W_V").c_str(), model.layers[l].W_V);
      f((at + "W_O").c_str(), model.layers[l].W_O);
    }
    f("unembed", model.unembed);
  }
};

namespace attn::test::hostile {

/// Whether \p model's parameters have the shapes its config gives (the rule of every battery that takes a model).
inline bool model_fits(const attn::ch12::Model& model) {
  const attn::ch12::Config& c = model.config;
  if (model.embed.shape(0) != c.vocab || model.embed.shape(1) != c.d_model || model.layers.size() != c.layers ||
      model.unembed.shape(0) != c.d_model || model.unembed.shape(1) != c.vocab)
    return false;
  for (const attn::ch12::Layer& L : model.layers)
    for (const attn::Matrix* W : {&L.W_Q, &L.W_K, &L.W_V, &L.W_O})
      if (W->shape(0) != c.d_model || W->shape(1) != c.d_model) return false;
  return true;
}

}  // namespace attn::test::hostile
