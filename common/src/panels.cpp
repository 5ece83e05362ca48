// Small multiples: grids of values drawn side by side, in the terminal and as SVG.
#include "attn/panels.hpp"

#include <algorithm>
#include <array>
#include <fstream>

#include <fmt/color.h>
#include <fmt/format.h>

#include "attn/print.hpp"
#include "attn/svg.hpp"

namespace attn {
namespace {

/// Prints one line of the figure without the padding that trails the last panel.
void print_line(std::string line) {
  while (!line.empty() && line.back() == ' ') line.pop_back();
  fmt::print("{}\n", line);
}

std::string pad_to(const std::string& text, std::size_t width) {
  const std::size_t w = display_width(text);
  return text + std::string(width > w ? width - w : 0, ' ');
}

double at(const Matrix& m, std::size_t i, std::size_t j) {
  return i < m.shape(0) && j < m.shape(1) ? static_cast<double>(m(i, j)) : 0.0;
}

/// Character row \p line of a panel (its rows 2·line and 2·line + 1), framed: "│...│".
std::string panel_line(const Panel& p, std::size_t line, bool color) {
  std::string out = "│";
  for (std::size_t j = 0; j < p.values.shape(1); ++j) {
    const double top = at(p.values, 2 * line, j), bottom = at(p.values, 2 * line + 1, j);
    const bool has_bottom = 2 * line + 1 < p.values.shape(0);
    if (color) {
      const Rgb t = palette(top), b = has_bottom ? palette(bottom) : Rgb{0, 0, 0};
      out += fmt::format(fmt::fg(fmt::rgb(t.r, t.g, t.b)) | fmt::bg(fmt::rgb(b.r, b.g, b.b)), "▀");
    } else {
      const bool on_top = top >= 0.75, on_bottom = has_bottom && bottom >= 0.75;
      out += on_top && on_bottom ? "█" : on_top ? "▀" : on_bottom ? "▄" : " ";
    }
  }
  return out + "│";
}

/// Character row \p line of a panel drawn at half width: each character shows a 2 × 2 block of cells
/// (rows 2·line and 2·line + 1, two columns) as a quadrant glyph of its "on" cells. In colour the on
/// cells take the colour of the block's largest value and the others that of its smallest (exact for a
/// mask, where every value is 0 or 1).
std::string quadrant_line(const Panel& p, std::size_t line, bool color) {
  static constexpr std::array<const char*, 16> glyphs{" ", "▘", "▝", "▀", "▖", "▌", "▞", "▛",
                                                      "▗", "▚", "▐", "▜", "▄", "▙", "▟", "█"};
  const std::size_t rows = p.values.shape(0), cols = p.values.shape(1);
  const double on = color ? 0.5 : 0.75;
  std::string out = "│";
  for (std::size_t j = 0; j < (cols + 1) / 2; ++j) {
    unsigned bits = 0;  // 1: upper left, 2: upper right, 4: lower left, 8: lower right
    double lo = 1.0, hi = 0.0;
    for (unsigned q = 0; q < 4; ++q) {
      const std::size_t i = 2 * line + q / 2, c = 2 * j + q % 2;
      if (i >= rows || c >= cols) continue;
      const double v = at(p.values, i, c);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      if (v >= on) bits |= 1u << q;
    }
    if (color) {
      const Rgb f = palette(hi), b = palette(std::min(lo, hi));
      out += fmt::format(fmt::fg(fmt::rgb(f.r, f.g, f.b)) | fmt::bg(fmt::rgb(b.r, b.g, b.b)), "{}", glyphs[bits]);
    } else {
      out += glyphs[bits];
    }
  }
  return out + "│";
}

}  // namespace

Panel mask_panel(const std::string& title, const Mask& mask) {
  Matrix values = xt::zeros<float>({mask.shape(0), mask.shape(1)});  // (n_q, n_kv)
  for (std::size_t i = 0; i < mask.size(); ++i) values.data()[i] = mask.data()[i] ? 1.0f : 0.0f;
  return {title, values};
}

void print_panels(const std::vector<Panel>& panels, std::size_t per_line) {
  const bool color = color_enabled();
  per_line = std::max<std::size_t>(per_line, 1);
  // Two or more panels a line that would pass 100 columns at one character per column are drawn at half
  // width (2 × 2 cells per character), so that they still stand side by side.
  std::size_t widest = 0;
  for (const auto& p : panels) widest = std::max(widest, p.values.shape(1) + 2);
  const std::size_t side_by_side = std::min(per_line, panels.size());
  const bool half = side_by_side >= 2 && side_by_side * (widest + 2) - 2 > 100;
  const auto inner = [&](std::size_t k) {
    const std::size_t cols = panels[k].values.shape(1);
    return half ? (cols + 1) / 2 : cols;
  };
  const auto width = [&](std::size_t k) { return inner(k) + 2; };
  for (std::size_t first = 0; first < panels.size();) {
    // At most per_line panels, and no more than fit in 100 columns (always at least one).
    std::size_t last = first + 1, columns = width(first);
    while (last < panels.size() && last - first < per_line && columns + 2 + width(last) <= 100)
      columns += 2 + width(last++);
    std::size_t lines = 0;
    for (std::size_t k = first; k < last; ++k) lines = std::max(lines, (panels[k].values.shape(0) + 1) / 2);
    std::string row;
    for (std::size_t k = first; k < last; ++k) row += pad_to(panels[k].title, width(k)) + "  ";
    print_line(row);
    const auto rule = [&](const char* left, const char* right, std::size_t k) {
      std::string s = left;
      for (std::size_t j = 0; j < inner(k); ++j) s += "─";
      return s + right;
    };
    row.clear();
    for (std::size_t k = first; k < last; ++k) row += rule("┌", "┐", k) + "  ";
    print_line(row);
    for (std::size_t line = 0; line < lines; ++line) {
      row.clear();
      for (std::size_t k = first; k < last; ++k)
        row += (line < (panels[k].values.shape(0) + 1) / 2
                    ? (half ? quadrant_line(panels[k], line, color) : panel_line(panels[k], line, color))
                    : std::string(width(k), ' ')) +
               "  ";
      print_line(row);
    }
    row.clear();
    for (std::size_t k = first; k < last; ++k) row += rule("└", "┘", k) + "  ";
    print_line(row);
    first = last;
  }
  if (half) {
    fmt::print("Each character is 2 × 2 cells: ▘▝▖▗ one on, ▀▄▌▐▚▞ two, ▛▜▙▟ three, █ four (on: {}).\n",
               color ? "value ≥ 0.5, in the brighter colour" : "value ≥ 0.75");
  } else if (color) {
    fmt::print("Each character is two rows (upper half ▀ and lower half), coloured from 0 (dark) to 1 (bright).\n");
  } else {
    fmt::print("Each character is two rows: ▀ upper on, ▄ lower on, █ both, blank neither (on: value ≥ 0.75).\n");
  }
}

void write_svg_panels(const std::string& path, const std::vector<Panel>& panels, std::size_t per_line,
                      const std::string& title, int cell_px) {
  per_line = std::max<std::size_t>(per_line, 1);
  constexpr int font = 13, gap = 24, title_h = 36, caption_h = 22;
  int panel_w = 0, panel_h = 0;
  for (const auto& p : panels) {
    panel_w = std::max(panel_w, static_cast<int>(p.values.shape(1)) * cell_px);
    panel_h = std::max(panel_h, static_cast<int>(p.values.shape(0)) * cell_px);
  }
  const int cols = static_cast<int>(std::min(per_line, panels.size()));
  const int rows = static_cast<int>((panels.size() + per_line - 1) / per_line);
  const int width = gap + cols * (panel_w + gap), height = title_h + rows * (caption_h + panel_h + gap);
  std::ofstream out(path);
  if (!out) throw std::runtime_error("write_svg_panels: cannot write " + path);
  out << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"{2}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{3}\" y=\"24\" font-weight=\"bold\" font-size=\"{4}\">{5}</text>\n",
      width, std::max(height, title_h), font, gap, font + 2, xml_escape(title));
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const Matrix& v = panels[k].values;
    const int x0 = gap + static_cast<int>(k % per_line) * (panel_w + gap);
    const int y0 = title_h + static_cast<int>(k / per_line) * (caption_h + panel_h + gap) + caption_h;
    out << fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", x0, y0 - 7, xml_escape(panels[k].title));
    out << fmt::format("<g shape-rendering=\"crispEdges\">\n");
    for (std::size_t i = 0; i < v.shape(0); ++i)
      for (std::size_t j = 0; j < v.shape(1); ++j) {
        const Rgb c = palette(static_cast<double>(v(i, j)));
        out << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#{:02x}{:02x}{:02x}\"/>\n",
                           x0 + static_cast<int>(j) * cell_px, y0 + static_cast<int>(i) * cell_px, cell_px, cell_px,
                           c.r, c.g, c.b);
      }
    out << fmt::format("</g>\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", x0,
                       y0, static_cast<int>(v.shape(1)) * cell_px, static_cast<int>(v.shape(0)) * cell_px);
  }
  out << "</svg>\n";
  if (!out) throw std::runtime_error("write_svg_panels: cannot write " + path);
}

}  // namespace attn
