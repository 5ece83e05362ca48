// Chapter 16's config.json reader on any bytes: every size it accepts must be positive and inside its limits.
#include <cstddef>
#include <cstdint>

#include "16_real_model/minilm.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  attn::fuzz::write_input("config.json", data, size);
  attn::fuzz::judge([&] {
    const attn::ch16::MiniLMConfig c = attn::ch16::read_config(attn::fuzz::folder().string());
    if (c.d == 0 || c.heads == 0 || c.d % c.heads != 0 || c.layers == 0 || !(c.ln_eps > 0.0f)) __builtin_trap();
  });
  return 0;
}
