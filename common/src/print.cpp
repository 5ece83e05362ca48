// Terminal output: colour detection, display widths, tables and heat maps.
#include "attn/print.hpp"

#include <locale.h>
#include <unistd.h>
#include <wchar.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cwchar>
#include <optional>
#include <stdexcept>

#include <fmt/color.h>
#include <fmt/format.h>

namespace attn {
namespace {

std::optional<bool> forced_color;

// A UTF-8 character-type locale of its own, so display widths do not depend on the program's global
// locale (which stays "C"). glibc always provides C.UTF-8; newlocale() failing is reported, not ignored.
locale_t utf8_locale() {
  static const locale_t locale = [] {
    const locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (l == static_cast<locale_t>(nullptr))
      throw std::runtime_error("display_width: the C.UTF-8 locale is not available");
    return l;
  }();
  return locale;
}

std::string pad(std::string_view text, std::size_t width, bool left) {
  const std::size_t w = display_width(text);
  const std::string fill(width > w ? width - w : 0, ' ');
  return left ? std::string(text) + fill : fill + std::string(text);
}

// One line under a heat map saying what its shading means, in the units of the values: a palette strip
// from lo to hi in colour, the value where each glyph starts in plain text (a glyph covers the values
// that round to its quarter of [lo, hi]).
void print_heatmap_legend(const std::array<const char*, 5>& shades, int decimals, double lo, double hi, bool color) {
  const auto value = [&](double t) { return fmt::format("{:.{}f}", lo + t * (hi - lo), decimals + 1); };
  if (color) {
    std::string strip;
    for (int k = 0; k <= 8; ++k) {
      const Rgb c = palette(k / 8.0);
      strip += fmt::format(fmt::bg(fmt::rgb(c.r, c.g, c.b)), "  ");
    }
    fmt::print("colour: {} {} {}\n", value(0.0), strip, value(1.0));
    return;
  }
  fmt::print("shade: blank below {}, {} from {}, {} from {}, {} from {}, {} from {}\n", value(0.125), shades[1],
             value(0.125), shades[2], value(0.375), shades[3], value(0.625), shades[4], value(0.875));
}

}  // namespace

bool color_enabled() {
  if (forced_color) return *forced_color;
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) != 0 && (no_color == nullptr || *no_color == '\0');
}

void set_color(bool on) { forced_color = on; }

std::size_t display_width(std::string_view text) {
  // The C library knows the Unicode width tables: wcwidth() gives 2 for East Asian wide characters
  // (猫, 垫子), 0 for combining marks, 1 for the rest. A byte that is not valid UTF-8 counts as one column.
  const locale_t previous = uselocale(utf8_locale());
  std::mbstate_t state{};
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size();) {
    wchar_t wc = 0;
    const std::size_t len = std::mbrtowc(&wc, text.data() + i, text.size() - i, &state);
    if (len == static_cast<std::size_t>(-1) || len == static_cast<std::size_t>(-2) || len == 0) {
      state = std::mbstate_t{};
      width += 1;
      i += 1;
      continue;
    }
    const int w = wcwidth(wc);
    width += w > 0 ? static_cast<std::size_t>(w) : 0;
    i += len;
  }
  uselocale(previous);
  return width;
}

Rgb palette(double t) {
  // Five stops of the viridis colour map, linearly interpolated: perceptually ordered, readable in grey.
  static constexpr std::array<std::array<double, 3>, 5> stops{
      {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  t = std::clamp(t, 0.0, 1.0) * (stops.size() - 1);
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(t), stops.size() - 2);
  const double f = t - static_cast<double>(k);
  const auto mix = [&](int c) {
    return static_cast<std::uint8_t>(std::lround(stops[k][c] + f * (stops[k + 1][c] - stops[k][c])));
  };
  return {mix(0), mix(1), mix(2)};
}

void heading(std::string_view title) {
  if (color_enabled()) {
    fmt::print(fmt::emphasis::bold | fmt::fg(fmt::terminal_color::bright_cyan), "\n== {} ==\n", title);
  } else {
    fmt::print("\n== {} ==\n", title);
  }
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)), left_(headers_.size(), false) {
  if (!left_.empty()) left_[0] = true;
}

Table& Table::set_left(std::size_t column) {
  left_.at(column) = true;
  return *this;
}

Table& Table::add_row(std::vector<std::string> cells) {
  require(cells.size() == headers_.size(),
          fmt::format("Table::add_row: {} cells for {} columns", cells.size(), headers_.size()));
  rows_.push_back(std::move(cells));
  return *this;
}

void Table::print() const {
  std::vector<std::size_t> widths(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    widths[c] = display_width(headers_[c]);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  const auto print_row = [&](const std::vector<std::string>& cells, bool bold) {
    std::string line;
    for (std::size_t c = 0; c < cells.size(); ++c) line += (c ? "  " : "") + pad(cells[c], widths[c], left_[c]);
    if (bold && color_enabled()) {
      fmt::print(fmt::emphasis::bold, "{}\n", line);
    } else {
      fmt::print("{}\n", line);
    }
  };
  print_row(headers_, true);
  std::string rule;
  for (std::size_t c = 0; c < widths.size(); ++c) rule += (c ? "  " : "") + std::string(widths[c], '-');
  fmt::print("{}\n", rule);
  for (const auto& row : rows_) print_row(row, false);
}

void print_heatmap(const Matrix& m, const std::vector<std::string>& row_labels,
                   const std::vector<std::string>& col_labels, int decimals, double lo, double hi) {
  require(m.dimension() == 2 && row_labels.size() == m.shape(0) && col_labels.size() == m.shape(1),
          fmt::format("print_heatmap: matrix {} with {} row and {} column labels", shape_str(m), row_labels.size(),
                      col_labels.size()));
  const bool color = color_enabled();
  static constexpr std::array<const char*, 5> shades{" ", "░", "▒", "▓", "█"};
  std::size_t label_w = 0;
  for (const auto& l : row_labels) label_w = std::max(label_w, display_width(l));
  std::size_t cell_w = static_cast<std::size_t>(decimals) + 3 + (color ? 0 : 1);  // "-0.83" plus a glyph
  for (const auto& l : col_labels) cell_w = std::max(cell_w, display_width(l));

  fmt::print("{}", pad("", label_w, true));
  for (const auto& l : col_labels) fmt::print(" {}", pad(l, cell_w, false));
  fmt::print("\n");
  for (std::size_t i = 0; i < m.shape(0); ++i) {
    fmt::print("{}", pad(row_labels[i], label_w, true));
    for (std::size_t j = 0; j < m.shape(1); ++j) {
      const double v = m(i, j);
      const double t = hi > lo ? (v - lo) / (hi - lo) : 0.0;
      const std::string number = fmt::format("{:.{}f}", v, decimals);
      if (color) {
        const Rgb c = palette(t);
        // Dark text on the bright end of the palette, light text on the dark end.
        const bool bright = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b > 140;
        const auto style =
            fmt::bg(fmt::rgb(c.r, c.g, c.b)) | fmt::fg(bright ? fmt::rgb(0, 0, 0) : fmt::rgb(255, 255, 255));
        fmt::print(" {}", fmt::format(style, "{}", pad(number, cell_w, false)));
      } else {
        const auto shade = static_cast<std::size_t>(std::lround(std::clamp(t, 0.0, 1.0) * 4));
        fmt::print(" {}", pad(number + shades[shade], cell_w, false));
      }
    }
    fmt::print("\n");
  }
  print_heatmap_legend(shades, decimals, lo, hi, color);
}

std::string wrapped(std::string_view text, std::size_t width, std::string_view indent) {
  std::string out, line;
  std::size_t start = 0;
  const std::size_t room = width > indent.size() ? width - display_width(indent) : 1;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    if (!line.empty() && display_width(line) + 1 + display_width(word) > room) {
      out += std::string(indent) + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
    start = end + 1;
  }
  return out + (line.empty() ? "" : std::string(indent) + line + "\n");
}

std::string bar(double fraction, int width) {
  static constexpr std::array<const char*, 9> eighths{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};
  const long total = std::lround(std::clamp(fraction, 0.0, 1.0) * width * 8);
  std::string s;
  for (long k = 0; k < total / 8; ++k) s += eighths[8];
  s += eighths[static_cast<std::size_t>(total % 8)];
  return s;
}

}  // namespace attn
