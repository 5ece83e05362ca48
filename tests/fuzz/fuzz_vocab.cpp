// Chapter 16's vocabulary reader (vocab.txt) on any bytes, then a lookup of every token it read.
#include <cstddef>
#include <cstdint>

#include "16_real_model/tokenizer.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = attn::fuzz::write_input("vocab.txt", data, size);
  attn::fuzz::judge([&] {
    const attn::ch16::Vocab v = attn::ch16::load_vocab(path);
    for (std::size_t id = 0; id < v.token_of.size(); ++id)
      if (v.find(v.token_of[id]) != static_cast<int>(id)) __builtin_trap();  // a token must find its own id
  });
  return 0;
}
