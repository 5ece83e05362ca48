/// \file
/// What every fuzzer of a file reader shares: the fuzzer's bytes written to a file of its own (in /dev/shm when it
/// exists: the readers take paths), and the one rule each input is judged by: the reader returns, or refuses with
/// the exceptions its contract names (std::invalid_argument for what is wrong in the file, std::runtime_error for a
/// file it cannot read). Any other exception escapes and ends the run as a crash, as does a sanitizer's report.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace attn::fuzz {

/// A folder of this fuzzing process's own, made once.
inline const std::filesystem::path& folder() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                           : std::filesystem::temp_directory_path();
    const std::filesystem::path d = base / ("attn_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

/// Writes \p size bytes at \p data to \p name in folder(); returns its path.
inline std::string write_input(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = folder() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path.string();
}

/// Runs \p read; the refusals its contract allows are outcomes, anything else escapes.
template <class Read>
void judge(Read&& read) {
  try {
    read();
  } catch (const std::invalid_argument&) {
  } catch (const std::runtime_error&) {
  }
}

}  // namespace attn::fuzz
