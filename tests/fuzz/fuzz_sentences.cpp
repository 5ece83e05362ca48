// Chapter 16's sentence list (chapters/16_real_model/sentences.txt) on any bytes.
#include <cstddef>
#include <cstdint>

#include "16_real_model/minilm.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = attn::fuzz::write_input("sentences.txt", data, size);
  attn::fuzz::judge([&] {
    for (const std::string& s : attn::ch16::read_sentences(path))
      if (s.empty() || s[0] == '#') __builtin_trap();  // empty and comment lines are skipped
  });
  return 0;
}
