// SVG line plots through gnuplot: the data travel inline in the script (gnuplot 5 data blocks).
#include "attn/plot.hpp"

#include <cstdio>
#include <sstream>

#include <fmt/format.h>

#include "attn/svg.hpp"
#include "attn/tensor.hpp"

namespace attn {
namespace {

// Quotes a string for a gnuplot script (single quotes; a quote inside is doubled).
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

void check_series(const PlotSpec& spec) {
  for (const Series& s : spec.series) {
    require(s.x.size() == s.y.size(), fmt::format("write_svg_plot: series '{}' has {} x values and {} y values",
                                                  s.label, s.x.size(), s.y.size()));
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      require(!spec.logx || s.x[i] > 0,
              fmt::format("write_svg_plot: series '{}' has x = {} on a log axis", s.label, s.x[i]));
      require(!spec.logy || s.y[i] > 0,
              fmt::format("write_svg_plot: series '{}' has y = {} on a log axis", s.label, s.y[i]));
    }
  }
}

}  // namespace

void write_svg_plot(const std::string& path, const PlotSpec& spec) {
  check_series(spec);
  std::ostringstream script;
  // The legend goes under the frame, where no data can be: inside it covered curves (chapter 10's gradient
  // norms, chapter 13's α–β lines) wherever they happened to run.
  script << "set terminal svg size 760,480 dynamic enhanced font 'sans,13' background rgb 'white'\n"
         << "set output " << quoted(path) << "\n"
         << "set title " << quoted(spec.title) << " noenhanced\n"
         << "set xlabel " << quoted(spec.xlabel) << " noenhanced\n"
         << "set ylabel " << quoted(spec.ylabel) << " noenhanced\n"
         << "set grid lc rgb '#dddddd'\nset key below noenhanced\n"
         << (spec.logx ? "set logscale x 2\n" : "") << (spec.logy ? "set logscale y 10\nset format y '10^{%L}'\n" : "");
  for (std::size_t k = 0; k < spec.series.size(); ++k) {
    script << "$d" << k << " << EOD\n";
    for (std::size_t i = 0; i < spec.series[k].x.size(); ++i)
      script << fmt::format("{:.9g} {:.9g}\n", spec.series[k].x[i], spec.series[k].y[i]);
    script << "EOD\n";
  }
  script << "plot ";
  for (std::size_t k = 0; k < spec.series.size(); ++k) {
    const Series& s = spec.series[k];
    script << (k ? ", " : "") << "$d" << k << " using 1:2 with " << (s.line ? "linespoints" : "points")
           << " lw 2 pt 7 ps 0.8 title " << quoted(s.label);
  }
  script << "\n";

  FILE* gnuplot = popen("gnuplot 2>&1", "w");
  if (gnuplot == nullptr) throw std::runtime_error("write_svg_plot: cannot start gnuplot (./course setup installs it)");
  const std::string text = script.str();
  std::fwrite(text.data(), 1, text.size(), gnuplot);
  const int status = pclose(gnuplot);
  if (status != 0)
    throw std::runtime_error(
        fmt::format("write_svg_plot: gnuplot failed (status {}) writing {}; is gnuplot-nox "
                    "installed? (./course setup)",
                    status, path));
}

}  // namespace attn
