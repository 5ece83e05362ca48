// Number formats shared by every chapter's tables.
#include "attn/format.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace attn {

std::string fixed(double v, int decimals) { return fmt::format("{:.{}f}", v, decimals); }

std::string sci(double v, int decimals) { return fmt::format("{:.{}e}", v, decimals); }

std::string significant(double v, int digits) { return fmt::format("{:.{}g}", v, digits); }

std::string si(double v) {
  const char* prefixes[] = {"", " k", " M", " G", " T", " P"};
  int p = 0;
  while (v >= 1000 && p < 5) {
    v /= 1000;
    ++p;
  }
  return fmt::format(p == 0 ? "{:.0f}{}" : "{:.3g}{}", v, prefixes[p]);
}

std::string seconds_str(double seconds, int significant_digits) {
  const int d = significant_digits;
  if (d > 0)
    return seconds < 1e-3 ? fmt::format("{:.{}g} µs", seconds * 1e6, d)
           : seconds < 1  ? fmt::format("{:.{}g} ms", seconds * 1e3, d)
                          : fmt::format("{:.{}g} s", seconds, d);
  return seconds < 1e-3 ? fmt::format("{:.1f} µs", seconds * 1e6)
         : seconds < 1  ? fmt::format("{:.2f} ms", seconds * 1e3)
                        : fmt::format("{:.2f} s", seconds);
}

std::string human_bytes(double bytes, bool binary) {
  const double step = binary ? 1024.0 : 1000.0;
  static const char* binary_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  static const char* decimal_units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= step && u < 5) {
    bytes /= step;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes)
                : fmt::format("{:.{}f} {}", bytes,
                              bytes < 10    ? 2
                              : bytes < 100 ? 1
                                            : 0,
                              binary ? binary_units[u] : decimal_units[u]);
}

std::string joined(const std::vector<std::string>& words, const char* sep) {
  return fmt::format("{}", fmt::join(words, sep));
}

std::vector<std::string> numbered(const std::string& prefix, std::size_t n) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < n; ++i) labels.push_back(fmt::format("{}{}", prefix, i));
  return labels;
}

}  // namespace attn
