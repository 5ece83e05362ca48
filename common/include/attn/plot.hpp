/// \file
/// Line plots for the book, drawn by gnuplot (Debian's gnuplot-nox) as SVG: axes, log scales and
/// legends are gnuplot's job, not the course's.
#pragma once

#include <string>
#include <vector>

namespace attn {

/// One line of a plot: y against x, drawn with points and a line unless \p line is false.
struct Series {
  std::string label;      ///< legend entry
  std::vector<double> x;  ///< (k) abscissae
  std::vector<double> y;  ///< (k) ordinates
  bool line = true;       ///< join the points (false: points only, e.g. measurements beside a fitted line)
};

/// What to draw and how.
struct PlotSpec {
  std::string title;
  std::string xlabel;
  std::string ylabel;
  bool logx = false;  ///< logarithmic x axis (base 2 ticks suit doubling series)
  bool logy = false;  ///< logarithmic y axis (base 10)
  std::vector<Series> series;
};

/// Writes \p spec as an SVG file at \p path by piping a script into gnuplot. Deterministic: the same
/// data gives the same file. Throws std::invalid_argument for a series whose x and y differ in length
/// (or non-positive values on a log axis), std::runtime_error if gnuplot is missing or fails.
void write_svg_plot(const std::string& path, const PlotSpec& spec);

}  // namespace attn
