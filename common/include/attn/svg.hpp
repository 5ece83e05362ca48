/// \file
/// Figures for the book, written as self-contained SVG files (no tools needed to view them).
#pragma once

#include <string>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// Writes \p m (rows, cols) as an SVG heat map to \p path: one square per entry, coloured with
/// attn::palette() from \p lo to \p hi, its value printed inside, rows and columns labelled
/// (row = who attends, column = what it attends to). Throws std::runtime_error if the file cannot be
/// written, std::invalid_argument if the labels do not match the shape.
void write_svg_heatmap(const std::string& path, const Matrix& m, const std::vector<std::string>& row_labels,
                       const std::vector<std::string>& col_labels, const std::string& title, double lo = 0.0,
                       double hi = 1.0);

/// Escapes &, <, >, " for SVG/XML text.
std::string xml_escape(const std::string& text);

}  // namespace attn
