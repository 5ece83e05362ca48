// Chapter 16's recorded references (tests/data/16_real_model_reference.txt) on any bytes: every text it accepts has
// ids and a finite embedding.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "16_real_model/minilm.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = attn::fuzz::write_input("reference.txt", data, size);
  attn::fuzz::judge([&] {
    for (const attn::ch16::ReferenceText& r : attn::ch16::read_reference(path)) {
      if (r.ids.empty() || r.embedding.empty()) __builtin_trap();
      for (double x : r.embedding)
        if (!std::isfinite(x)) __builtin_trap();
    }
  });
  return 0;
}
