// Chapter 16's safetensors reader on any bytes: the header is parsed and checked against the file, then every
// tensor it accepts is read whole through data() and its offsets (what read_tensor() does), so an offset the
// checks let through that points outside the mapping is an AddressSanitizer report.
#include <cstddef>
#include <cstdint>

#include "16_real_model/safetensors.hpp"
#include "fuzz_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = attn::fuzz::write_input("model.safetensors", data, size);
  attn::fuzz::judge([&] {
    const attn::ch16::SafetensorsFile file(path);
    unsigned sum = 0;
    for (const auto& [name, entry] : file.entries())
      for (std::size_t b = entry.begin; b < entry.end; ++b) sum += file.data()[b];
    static volatile unsigned sink;
    sink = sum;
  });
  return 0;
}
