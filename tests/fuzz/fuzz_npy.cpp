// Chapter 12's checkpoint reader on any bytes: the input is config.npy of a checkpoint folder, then, with a valid
// config, each weight file in turn (the first byte of the input picks which). load_checkpoint() checks every .npy
// header against its file before reading data.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "12_learning/model.hpp"
#include "fuzz_file.hpp"

namespace {

// A valid checkpoint of the smallest model, written once with the course's own writer.
const std::filesystem::path& good_checkpoint() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = attn::fuzz::folder() / "good";
    attn::ch12::Config c;
    c.vocab = 4;
    c.d_model = 2;
    c.heads = 1;
    c.layers = 1;
    c.context = 4;
    attn::ch12::prepare_checkpoint_dir(d.string());
    attn::ch12::save_checkpoint(attn::ch12::init_model(c, 12), d.string());
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* const files[] = {"config.npy", "embed.npy", "layer1_W_Q.npy", "unembed.npy"};
  // The checkpoint of the previous input with its one changed file written back from the good one, kept in memory:
  // no copy of the folder per input (std::filesystem::copy failed with EINTR under libFuzzer's timer signals).
  static const std::filesystem::path dir = attn::fuzz::folder() / "checkpoint";
  static std::vector<std::string> good;
  if (good.empty()) {
    std::filesystem::remove_all(dir);
    std::filesystem::copy(good_checkpoint(), dir);
    for (const char* f : files) {
      std::ifstream in(dir / f, std::ios::binary);
      good.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  const std::size_t pick = data[0] % 4;
  attn::fuzz::write_input(std::string("checkpoint/") + files[pick], data + 1, size - 1);
  attn::fuzz::judge([&] { attn::ch12::load_checkpoint(dir.string()); });
  attn::fuzz::write_input(std::string("checkpoint/") + files[pick],
                          reinterpret_cast<const std::uint8_t*>(good[pick].data()), good[pick].size());
  return 0;
}
