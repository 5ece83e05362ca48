/// \file
/// Chapter 13's structs as the hostile battery sees them (tests/support/hostile.hpp): a travelling KVBlock's K and V
/// by name, and a list of chunks written flat (begin, end, begin, end, …) so that its positions are battered as sizes.
#pragma once

#include <cstddef>
#include <vector>

#include "13_ring/ring.hpp"
#include "support/hostile_flash.hpp"

template <>
struct attn::test::hostile::Weights<attn::ch13::KVBlock> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::ch13::KVBlock& b, F&& f) {
    f("K", b.K);
    f("V", b.V);
  }
};

namespace attn::test::hostile {

/// The chunks of a flat list begin, end, begin, end, … (a last odd entry is left out).
inline attn::ch13::Chunks chunks_of(const std::vector<std::size_t>& flat) {
  attn::ch13::Chunks out;
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) out.push_back({flat[i], flat[i + 1]});
  return out;
}

/// The positions of \p flat's chunks, or -1 when a chunk ends before it begins (long double: no wrapping).
inline long double rows_in(const std::vector<std::size_t>& flat) {
  long double rows = 0;
  for (const attn::ch13::Chunk& c : chunks_of(flat)) {
    if (c.end < c.begin) return -1;
    rows += static_cast<long double>(c.end - c.begin);
  }
  return rows;
}

}  // namespace attn::test::hostile
