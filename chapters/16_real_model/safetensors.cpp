// Chapter 16's safetensors reader: map the file, parse and check the header, never trust an offset.
// Every number in the header is checked against the file before anything is read through it, so a truncated
// file or a lying header is refused with a message instead of read out of bounds.
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
#include <nlohmann/json.hpp>

namespace attn::ch16 {

namespace {

// A header larger than this is not a model's header but a lie (safetensors itself caps it at 100 MB).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::invalid_argument(fmt::format("safetensors file {}: {}", path, what));
}

// One entry of the header, checked against the data's size.
TensorEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j,
                        std::size_t data_bytes) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    refuse(path, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
  TensorEntry e;
  if (!j["dtype"].is_string()) refuse(path, fmt::format("tensor '{}': dtype is not a string", name));
  e.dtype = j["dtype"].get<std::string>();
  const std::size_t element = dtype_bytes(e.dtype);
  if (element == 0) refuse(path, fmt::format("tensor '{}': unknown dtype '{}'", name, e.dtype));
  if (!j["shape"].is_array()) refuse(path, fmt::format("tensor '{}': shape is not a list", name));
  std::size_t needed = element;  // bytes: element size times every dimension, refused past 64 bits
  for (const nlohmann::json& s : j["shape"]) {
    if (!s.is_number_unsigned())
      refuse(path, fmt::format("tensor '{}': shape {} is not a list of sizes", name, j["shape"].dump()));
    e.shape.push_back(s.get<std::size_t>());
    if (e.shape.back() != 0 && needed > std::numeric_limits<std::size_t>::max() / e.shape.back())
      refuse(path, fmt::format("tensor '{}': shape {} overflows 64 bits", name, j["shape"].dump()));
    needed *= e.shape.back();
  }
  const nlohmann::json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    refuse(path, fmt::format("tensor '{}': data_offsets {} is not [begin, end]", name, off.dump()));
  e.begin = off[0].get<std::size_t>();
  e.end = off[1].get<std::size_t>();
  if (e.begin > e.end || e.end > data_bytes)
    refuse(path, fmt::format("tensor '{}': data_offsets [{}, {}] lie outside the {} bytes of data (truncated "
                             "file or lying header)",
                             name, e.begin, e.end, data_bytes));
  if (e.end - e.begin != needed)
    refuse(path, fmt::format("tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", name,
                             j["shape"].dump(), e.dtype, needed, e.end - e.begin));
  return e;
}

}  // namespace

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

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  require_regular_file("safetensors file", path);  // before opening: a FIFO would block the open itself
  // O_NONBLOCK as well: a FIFO put at the path between the check and the open must not block either.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0)
    throw std::runtime_error(fmt::format("safetensors file {}: cannot open it ({})", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(fmt::format("safetensors file {}: not a regular file", path));
  }
  map_bytes_ = static_cast<std::size_t>(st.st_size);
  if (map_bytes_ < 8) {
    ::close(fd);
    refuse(path, fmt::format("{} bytes, fewer than the 8 of the header's length (truncated)", map_bytes_));
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error(fmt::format("safetensors file {}: cannot map it ({})", path, std::strerror(errno)));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    std::uint64_t header_bytes = 0;  // little-endian u64, read byte by byte (no alignment, any host)
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
    if (header_bytes > kMaxHeaderBytes || header_bytes > map_bytes_ - 8)
      refuse(path, fmt::format("the header claims {} bytes but the file has {} after the length (truncated file "
                               "or lying header)",
                               header_bytes, map_bytes_ - 8));
    const auto* header = reinterpret_cast<const char*>(bytes + 8);
    const nlohmann::json j = nlohmann::json::parse(header, header + header_bytes, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) refuse(path, "the header is not a JSON object");
    data_ = bytes + 8 + header_bytes;
    const std::size_t data_bytes = map_bytes_ - 8 - static_cast<std::size_t>(header_bytes);
    for (const auto& [name, value] : j.items()) {
      if (name == "__metadata__") continue;
      entries_.emplace(name, parse_entry(path, name, value, data_bytes));
    }
    // No two tensors may share bytes: sorted by begin, each must end before the next begins.
    std::vector<std::pair<std::size_t, std::string>> order;
    for (const auto& [name, e] : entries_) order.emplace_back(e.begin, name);
    std::sort(order.begin(), order.end());
    for (std::size_t i = 1; i < order.size(); ++i) {
      const TensorEntry& before = entries_.at(order[i - 1].second);
      if (before.end > order[i].first && before.end > before.begin)
        refuse(path, fmt::format("tensors '{}' and '{}' overlap", order[i - 1].second, order[i].second));
    }
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      entries_(std::move(other.entries_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    entries_ = std::move(other.entries_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
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
