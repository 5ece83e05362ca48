/// \file
/// Chapter 16's safetensors file: the file memory-mapped (chapter code), its JSON header parsed and checked
/// against the file itself before any tensor is read (read_safetensors_header(), the learner's exercise).
///
/// The format: 8 bytes, little-endian u64 N; N bytes of JSON {"name": {"dtype": "F32", "shape": [r, c],
/// "data_offsets": [begin, end]}, …, "__metadata__": {…}}; then the data, offsets counted from its start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attn/tensor.hpp"

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

/// What a safetensors file's header says, once checked against the file (read_safetensors_header()).
struct SafetensorsHeader {
  std::map<std::string, TensorEntry> entries;  ///< every tensor, by name ("__metadata__" left out)
  std::size_t data_begin = 8;                  ///< where the data start in the file: 8 + the header's length
};

// The chapter's second exercise, documented with the others in real_model.hpp; declared here too because
// SafetensorsFile below reads every file's header with it.
SafetensorsHeader read_safetensors_header(const unsigned char* file, std::size_t bytes, const std::string& path);

/// A file memory-mapped read-only for as long as the object lives (movable, not copyable). An empty file maps to
/// no bytes (bytes() is null, size() 0).
class MappedFile {
 public:
  /// \throws std::runtime_error naming \p what and the path when it is missing, not a regular file
  ///         (require_regular_file(): a folder, a FIFO) or cannot be mapped.
  MappedFile(const char* what, const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* bytes() const { return static_cast<const unsigned char*>(map_); }
  std::size_t size() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A safetensors file: mapped (MappedFile), its header read and checked by read_safetensors_header() before any
/// tensor is read. Inline, so that the header is read by the track's read_safetensors_header().
class SafetensorsFile {
 public:
  /// \throws std::runtime_error as MappedFile does, and std::invalid_argument as read_safetensors_header() does
  ///         (naming the file and what is wrong: truncated, lying header, bad entry, overlap).
  explicit SafetensorsFile(const std::string& path)
      : file_("safetensors file", path), header_(read_safetensors_header(file_.bytes(), file_.size(), path)) {}

  /// The entry named \p name, or nullptr when the file has none.
  const TensorEntry* find(const std::string& name) const {
    const auto it = header_.entries.find(name);
    return it == header_.entries.end() ? nullptr : &it->second;
  }
  /// Every entry, by name.
  const std::map<std::string, TensorEntry>& entries() const { return header_.entries; }
  /// The first byte of the data section (entries' offsets count from here).
  const unsigned char* data() const { return file_.bytes() + header_.data_begin; }
  /// The file's path, for messages.
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

/// Reads one float32 tensor out of a safetensors file, checking it is what the model expects (chapter code).
/// \param file an open safetensors file (its header already checked against its own size).
/// \param name the tensor's name, e.g. "encoder.layer.0.attention.self.query.weight".
/// \param expected_shape the shape the model's config implies: {rows, cols} or {n}, one or two dimensions (a shape
///        of none or of three and more is refused, naming the tensor: the model has no such tensor).
/// \return a copy of its values as (rows, cols), or (1, n) for a one-dimensional tensor.
/// \throws std::invalid_argument naming the tensor when it is missing, its dtype is not "F32", its shape differs
///         from \p expected_shape (both shapes in the message), or \p expected_shape has neither 1 nor 2 dimensions.
Matrix read_tensor(const SafetensorsFile& file, const std::string& name,
                   const std::vector<std::size_t>& expected_shape);

/// Writes a safetensors file of float32 tensors (name → (shape, values)), for the tests and the exercises'
/// examples; \p header_patch, when not empty, replaces the JSON header text as written (to make lying files).
/// \throws std::invalid_argument when a tensor's values do not match its shape, the shape's product passes 64
///         bits, or a name is not valid UTF-8; std::runtime_error when the file cannot be written.
void write_safetensors(const std::string& path,
                       const std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<float>>>& tensors,
                       const std::string& header_patch = "");

}  // namespace attn::ch16
