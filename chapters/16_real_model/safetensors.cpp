// Chapter 16's safetensors file: mapped into memory, its header read by the learner's read_safetensors_header()
// (every number in it checked against the file before anything is read through it), its tensors copied out.
#include "16_real_model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "attn/checks.hpp"

namespace attn::ch16 {

void require_regular_file(const char* what, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error(fmt::format("{} {}: cannot open it ({})", what, path, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw std::runtime_error(fmt::format("{} {}: a folder, not a file", what, path));
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(fmt::format("{} {}: not a regular file (a FIFO, a socket or a device)", what, path));
}

std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

MappedFile::MappedFile(const char* what, const std::string& path) : path_(path) {
  require_regular_file(what, path);  // before opening: a FIFO would block the open itself
  // O_NONBLOCK as well: a FIFO put at the path between the check and the open must not block either.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error(fmt::format("{} {}: cannot open it ({})", what, path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(fmt::format("{} {}: not a regular file", what, path));
  }
  bytes_ = static_cast<std::size_t>(st.st_size);
  if (bytes_ == 0) {  // mmap refuses a length of 0: an empty file is no bytes, for its reader to refuse
    ::close(fd);
    return;
  }
  map_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    bytes_ = 0;
    throw std::runtime_error(fmt::format("{} {}: cannot map it ({})", what, path, std::strerror(errno)));
  }
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), map_(std::exchange(other.map_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MappedFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, bytes_);
  map_ = nullptr;
  bytes_ = 0;
}

Matrix read_tensor(const SafetensorsFile& file, const std::string& name,
                   const std::vector<std::size_t>& expected_shape) {
  require(expected_shape.size() == 1 || expected_shape.size() == 2,
          fmt::format("read_tensor: the shape expected of tensor '{}' has {} dimensions; the model's tensors have 1 "
                      "or 2",
                      name, expected_shape.size()));
  const TensorEntry* entry = file.find(name);
  require(entry != nullptr, fmt::format("read_tensor: {} has no tensor '{}'", file.path(), name));
  require(entry->dtype == "F32",
          fmt::format("read_tensor: tensor '{}' in {} is {}, expected F32", name, file.path(), entry->dtype));
  require(entry->shape == expected_shape,
          fmt::format("read_tensor: tensor '{}' in {} has shape [{}], the config implies [{}]", name, file.path(),
                      fmt::join(entry->shape, ", "), fmt::join(expected_shape, ", ")));
  const std::size_t rows = expected_shape.size() == 2 ? expected_shape[0] : 1;
  const std::size_t cols = expected_shape.back();
  Matrix M = xt::empty<float>({rows, cols});  // (rows, cols), or (1, n)
  // The header was checked at opening: [begin, end) lies inside the data and holds rows·cols floats.
  if (M.size() > 0) std::memcpy(M.data(), file.data() + entry->begin, M.size() * sizeof(float));
  return M;
}

void write_safetensors(const std::string& path,
                       const std::map<std::string, std::pair<std::vector<std::size_t>, std::vector<float>>>& tensors,
                       const std::string& header_patch) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const auto& [shape, values] = tensor;
    std::size_t count = 1;  // refused past 64 bits: a wrapped count would match too few values (a lying file)
    for (std::size_t s : shape) {
      if (s != 0 && count > std::numeric_limits<std::size_t>::max() / s)
        throw std::invalid_argument(
            fmt::format("write_safetensors: tensor '{}': the shape's product passes 64 bits", name));
      count *= s;
    }
    if (count != values.size())
      throw std::invalid_argument(
          fmt::format("write_safetensors: tensor '{}' has {} values for a shape of {}", name, values.size(), count));
    const std::size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));  // little-endian host
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header_patch;
  if (text.empty()) {
    try {
      text = header.dump();  // JSON text must be UTF-8: nlohmann's dump() throws its own type_error otherwise
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(fmt::format("write_safetensors: a tensor name is not valid UTF-8 ({})", e.what()));
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::uint64_t n = text.size();
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((n >> (8 * i)) & 0xffu);
  out.write(length, 8);
  out << text << data;
  if (!out) throw std::runtime_error(fmt::format("write_safetensors: cannot write {}", path));
}

}  // namespace attn::ch16
