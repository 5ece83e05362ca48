/// \file
/// Chapter 16's safetensors reader (chapter code, not an exercise): the file memory-mapped, its JSON header
/// parsed with nlohmann::json and checked against the file itself before any tensor is read.
///
/// The format: 8 bytes, little-endian u64 N; N bytes of JSON {"name": {"dtype": "F32", "shape": [r, c],
/// "data_offsets": [begin, end]}, …, "__metadata__": {…}}; then the data, offsets counted from its start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attn::ch16 {

/// One tensor's entry in the header.
struct TensorEntry {
  std::string dtype;               ///< "F32", "I64", …
  std::vector<std::size_t> shape;  ///< e.g. {30522, 384}
  std::size_t begin = 0;           ///< first byte, counted from the start of the data
  std::size_t end = 0;             ///< one past the last byte
};

/// Refuses, before opening it, a \p path that is not a regular file: missing, a folder, a FIFO (opening one
/// would wait forever for a writer) or a device. Every reader of the chapter's files calls it first.
/// \throws std::runtime_error naming \p what, the path and what it is instead.
void require_regular_file(const char* what, const std::string& path);

/// Bytes per element of a safetensors dtype ("F32" → 4); 0 for a dtype the reader does not know.
std::size_t dtype_bytes(const std::string& dtype);

/// A safetensors file, memory-mapped read-only for as long as the object lives (movable, not copyable).
class SafetensorsFile {
 public:
  /// Maps \p path and checks its header: the length fits the file and is at most 100 MB, the header is a
  /// JSON object, every entry has a known dtype, a shape of non-negative integers, and data_offsets
  /// [begin, end] with begin ≤ end ≤ the data's size and end − begin = (product of the shape) × the dtype's
  /// size, and no two tensors overlap.
  /// \throws std::runtime_error naming the file when it is missing, not a regular file (require_regular_file():
  ///         a folder, a FIFO) or cannot be mapped, and
  ///         std::invalid_argument naming the file and what is wrong (truncated, lying header, bad entry).
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  /// The entry named \p name, or nullptr when the file has none.
  const TensorEntry* find(const std::string& name) const;
  /// Every entry, by name.
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  /// The first byte of the data section (entries' offsets count from here).
  const unsigned char* data() const { return data_; }
  /// The file's path, for messages.
  const std::string& path() const { return path_; }

 private:
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;
  std::map<std::string, TensorEntry> entries_;
};

/// Writes a safetensors file of float32 tensors (name → (shape, values)), for the tests and the exercises'
/// examples; \p header_patch, when not empty, replaces the JSON header text as written (to make lying files).
/// \throws std::invalid_argument when a tensor's values do not match its shape, the shape's product passes 64
///         bits, or a name is not valid UTF-8; std::runtime_error when the file cannot be written.
void write_safetensors(const std::string& path,
                       const std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<float>>>& tensors,
                       const std::string& header_patch = "");

}  // namespace attn::ch16
