/// \file
/// What a chapter shows in the terminal: headings, aligned tables and heat maps, coloured in a
/// terminal and plain when piped, when `NO_COLOR` is set, or when the book captures the output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// True when output may carry ANSI colour: stdout is a terminal and NO_COLOR is unset (no-color.org),
/// unless set_color() decided otherwise.
bool color_enabled();
/// Forces colour on or off (the book turns it off).
void set_color(bool on);

/// Columns a terminal uses for \p text: East Asian wide characters (猫, 垫子) take two.
std::size_t display_width(std::string_view text);

/// An sRGB colour.
struct Rgb {
  std::uint8_t r, g, b;
};
/// The course's sequential palette (viridis-like, dark = 0, bright = 1), shared by terminal and SVG,
/// so a heat map looks the same in both. \p t is clamped to [0, 1].
Rgb palette(double t);

/// Prints a chapter section heading.
void heading(std::string_view title);

/// A table with aligned columns; the first column is left-aligned, the others right-aligned unless
/// set_left() says otherwise.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  Table& set_left(std::size_t column);
  Table& add_row(std::vector<std::string> cells);
  void print() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> left_;
};

/// Prints \p m (rows, cols) as a heat map with labelled rows and columns, each cell showing its value
/// with \p decimals digits; colour scaled from \p lo to \p hi (0 and 1 suit attention weights).
/// Plain output adds a shade glyph (░▒▓█) so the picture survives without colour. A legend line follows
/// the map: the colour strip from \p lo to \p hi, or the value at which each shade glyph starts.
void print_heatmap(const Matrix& m, const std::vector<std::string>& row_labels,
                   const std::vector<std::string>& col_labels, int decimals = 2, double lo = 0.0, double hi = 1.0);

/// \p text (one paragraph) as lines of at most \p width display columns, \p indent included, each line
/// starting with \p indent and ending in a newline: long messages stay inside the course's 100 columns.
std::string wrapped(std::string_view text, std::size_t width, std::string_view indent = "  ");

/// A bar of \p width cells for a value in [0, 1], in eighths (▏▎▍▌▋▊▉█).
std::string bar(double fraction, int width);

}  // namespace attn
