/// \file
/// Small multiples: several (rows, cols) grids of values in [0, 1], side by side, drawn without numbers:
/// in the terminal two rows per character (half blocks), and as one SVG file. Suits masks and sparsity
/// patterns of 64 × 64, where a numbered heat map (attn::print_heatmap(), attn::write_svg_heatmap()) would be
/// far too wide.
#pragma once

#include <string>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// One grid and its title. Values in [0, 1] are coloured with attn::palette(); a mask is 0 or 1.
struct Panel {
  std::string title;
  Matrix values;  ///< (rows, cols)
};

/// A mask as a panel: allowed pairs 1, the rest 0.
Panel mask_panel(const std::string& title, const Mask& mask);

/// Prints \p panels side by side, \p per_line at a time, each framed and titled, within 100 columns: where
/// two or more would pass it, every character shows 2 × 2 cells (quadrant glyphs ▘▝▖▗ ▀▄▌▐▚▞ ▛▜▙▟ █), and
/// where even that does not fit, fewer panels share a line. With colour every
/// character cell shows two rows in their palette colours; without colour a row pair becomes █ ▀ ▄ or a
/// space, a value of at least 0.75 counting as "on" (so 0.5 can mark something drawn only in colour).
/// A legend line under the panels says so.
void print_panels(const std::vector<Panel>& panels, std::size_t per_line);

/// Writes \p panels as one SVG file at \p path: \p per_line panels per row of the figure, each cell
/// \p cell_px pixels square, a title above each panel and \p title above all.
/// Throws std::runtime_error if the file cannot be written.
void write_svg_panels(const std::string& path, const std::vector<Panel>& panels, std::size_t per_line,
                      const std::string& title, int cell_px = 4);

}  // namespace attn
