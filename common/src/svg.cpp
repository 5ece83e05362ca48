// SVG figures: hand-written XML, because a heat map is a grid of rectangles and a dependency would
// cost more than it saves.
#include "attn/svg.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "attn/print.hpp"

namespace attn {

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void write_svg_heatmap(const std::string& path, const Matrix& m, const std::vector<std::string>& row_labels,
                       const std::vector<std::string>& col_labels, const std::string& title, double lo, double hi) {
  require(m.dimension() == 2 && row_labels.size() == m.shape(0) && col_labels.size() == m.shape(1),
          fmt::format("write_svg_heatmap: matrix {} with {} row and {} column labels", shape_str(m), row_labels.size(),
                      col_labels.size()));
  // A cell holds its value printed to two decimals while the grid fits the book's column (16 columns of
  // 52 px); a larger grid gets smaller cells without numbers, about 700 px in all, so that it still fits.
  constexpr int font = 14, numbered_cell = 52, numbered_cols = 16, grid_px = 704, min_cell = 6;
  const bool numbered = m.shape(1) <= numbered_cols && m.shape(0) <= numbered_cols;
  const int cell =
      numbered ? numbered_cell : std::max(min_cell, grid_px / static_cast<int>(std::max(m.shape(0), m.shape(1))));
  // Label widths from display columns (CJK counts double), about 0.6 em per column.
  std::size_t row_cols = 1, col_cols = 1;
  for (const auto& l : row_labels) row_cols = std::max(row_cols, display_width(l));
  for (const auto& l : col_labels) col_cols = std::max(col_cols, display_width(l));
  const int left = 16 + static_cast<int>(row_cols) * font * 6 / 10;
  const int top = 40 + static_cast<int>(col_cols) * font * 6 / 10;
  const int rows = static_cast<int>(m.shape(0)), cols = static_cast<int>(m.shape(1));
  // Wide enough for the grid and for the title (about 0.6 em per display column, bold).
  const int title_width = 16 + static_cast<int>(display_width(title)) * (font * 65 / 100);
  const int width = std::max(left + cols * cell + 16, title_width), height = top + rows * cell + 16;

  std::ofstream out(path);
  if (!out) throw std::runtime_error("write_svg_heatmap: cannot write " + path);
  out << fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Noto Sans CJK SC, Source Han Sans SC, PingFang SC, Microsoft YaHei, sans-serif\" "
      "font-size=\"{2}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"8\" y=\"22\" font-weight=\"bold\">{3}</text>\n",
      width, height, font, xml_escape(title));
  for (int j = 0; j < cols; ++j) {  // column labels, rotated so long words fit
    const int x = left + j * cell + cell / 2, y = top - 8;
    out << fmt::format("<text x=\"{0}\" y=\"{1}\" transform=\"rotate(-45 {0} {1})\">{2}</text>\n", x, y,
                       xml_escape(col_labels[static_cast<std::size_t>(j)]));
  }
  for (int i = 0; i < rows; ++i) {
    out << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n", left - 8,
                       top + i * cell + cell / 2, xml_escape(row_labels[static_cast<std::size_t>(i)]));
    for (int j = 0; j < cols; ++j) {
      const double v = m(static_cast<std::size_t>(i), static_cast<std::size_t>(j));
      const Rgb c = palette(hi > lo ? (v - lo) / (hi - lo) : 0.0);
      const bool bright = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b > 140;
      const int x = left + j * cell, y = top + i * cell;
      out << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#{:02x}{:02x}{:02x}\"/>", x, y,
                         numbered ? cell - 2 : cell, numbered ? cell - 2 : cell, c.r, c.g, c.b);
      if (!numbered) continue;
      out << fmt::format(
          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" dominant-baseline=\"middle\" "
          "font-size=\"{}\" fill=\"{}\">{:.2f}</text>\n",
          x + (cell - 2) / 2, y + (cell - 2) / 2, font - 2, bright ? "black" : "white", v);
    }
  }
  out << "</svg>\n";
  if (!out) throw std::runtime_error("write_svg_heatmap: error while writing " + path);
}

}  // namespace attn
