/// \file
/// Chapter 05's FlashOutput as the hostile battery sees it (tests/support/hostile.hpp): its O and lse by name, so a
/// battery can make each wrong in each dimension, and hold a NaN, in turn (chapter 13's merges, chapter 17's splits).
#pragma once

#include "05_flash_cpu/flash_cpu.hpp"
#include "support/hostile.hpp"

template <>
struct attn::test::hostile::Weights<attn::FlashOutput> {
  static constexpr bool defined = true;
  template <class F>
  static void visit(attn::FlashOutput& p, F&& f) {
    f("O", p.O);
    f("lse", p.lse);
  }
};
