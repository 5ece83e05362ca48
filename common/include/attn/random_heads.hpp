/// \file
/// Random inputs of several heads at once, for the programs and tests that draw them (one definition for all).
#pragma once

#include <algorithm>
#include <cstddef>

#include "attn/checks.hpp"
#include "attn/rng.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// (heads, n, d) with N(0, 1) entries, drawn from \p rng in row-major order: head 0's n rows first.
/// \throws std::invalid_argument naming heads × n when it does not fit (and what Rng::normal refuses).
inline Tensor3 normal_heads(Rng& rng, std::size_t heads, std::size_t n, std::size_t d) {
  const Matrix flat = rng.normal(checked_product("normal_heads: heads × n", {heads, n}), d);  // (heads·n, d)
  Tensor3 T = xt::zeros<float>({heads, n, d});                                                // (heads, n, d)
  std::copy(flat.begin(), flat.end(), T.begin());
  return T;
}

}  // namespace attn
