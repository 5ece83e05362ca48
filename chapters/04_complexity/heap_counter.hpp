/// \file
/// A counting allocator for the whole program: chapter 04 replaces the global operator new and delete
/// so it can *measure* the bytes full attention holds at once, instead of trusting the formula.
/// Linking this file into a program replaces the allocator of that program (the chapter's executable and
/// its tests); every C++ allocation (std::vector, xtensor) is counted, OpenBLAS's own buffers are not.
#pragma once

#include <cstddef>

namespace attn::ch04 {

/// Bytes allocated with operator new and not yet freed, in this whole process.
std::size_t heap_live_bytes();

/// The largest heap_live_bytes() since the last reset_heap_peak().
std::size_t heap_peak_bytes();

/// Starts a new peak: heap_peak_bytes() becomes heap_live_bytes().
void reset_heap_peak();

// [measure_heap_peak]
/// The heap that \p work held at its peak beyond what was live before it started, in bytes.
template <class Work>
std::size_t measure_heap_peak(Work&& work) {
  reset_heap_peak();
  const std::size_t before = heap_live_bytes();
  work();
  const std::size_t peak = heap_peak_bytes();
  return peak > before ? peak - before : 0;
}
// [measure_heap_peak]

}  // namespace attn::ch04
