// Chapter 12's checkpoint reader on any bytes: the input is config.npy of a checkpoint folder, then, with a valid
// config, each weight file in turn (the first byte of the input picks which). load_checkpoint() checks every .npy
// header against its file before reading data.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

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
  const std::filesystem::path dir = attn::fuzz::folder() / "checkpoint";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(good_checkpoint(), dir);
  static const char* const files[] = {"config.npy", "embed.npy", "layer1_W_Q.npy", "unembed.npy"};
  const std::string target = files[data[0] % 4];
  attn::fuzz::write_input("checkpoint/" + target, data + 1, size - 1);
  attn::fuzz::judge([&] { attn::ch12::load_checkpoint(dir.string()); });
  return 0;
}
