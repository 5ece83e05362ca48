// Tests of common/: what every chapter relies on to show its results.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/svg.hpp"

TEST_SUITE("common") {
  TEST_CASE("display_width counts CJK characters as two columns") {
    CHECK(attn::display_width("cat") == 3);
    CHECK(attn::display_width("猫") == 2);
    CHECK(attn::display_width("垫子上 it") == 9);
  }

  TEST_CASE("display_width counts fullwidth punctuation as two, combining marks as zero, shade glyphs as one") {
    CHECK(attn::display_width("猫坐在垫子上，它很累") == 20);  // the seed's comma is fullwidth
    CHECK(attn::display_width("e\u0301") == 1);                // e and a combining acute accent: one column
    CHECK(attn::display_width("░▒▓█▀▄") == 6);
    CHECK(attn::display_width("a\377b") == 3);  // a byte that is not UTF-8 (0xff) still takes a column
  }

  TEST_CASE("human_bytes picks the unit") {
    CHECK(attn::human_bytes(512) == "512 B");
    CHECK(attn::human_bytes(1536) == "1.50 KiB");
    CHECK(attn::human_bytes(40e9, false) == "40.0 GB");
  }

  TEST_CASE("a heat map whose labels do not match the matrix is refused, naming the shape") {
    const attn::Matrix m = xt::zeros<float>({2, 3});
    CHECK_THROWS_WITH_AS(attn::write_svg_heatmap("/tmp/x.svg", m, {"a", "b"}, {"c"}, "t"), doctest::Contains("(2, 3)"),
                         std::invalid_argument);
  }

  TEST_CASE("write_svg_plot draws an SVG with gnuplot and refuses mismatched series") {
    const std::string path = "attn_common_test_plot.svg";
    attn::write_svg_plot(path, {"t", "n", "s", true, true, {{"f", {1, 2, 4}, {1, 4, 16}}}});
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str().find("<svg") != std::string::npos);
    std::remove(path.c_str());
    CHECK_THROWS_AS(attn::write_svg_plot(path, {"t", "x", "y", false, false, {{"bad", {1, 2}, {1}}}}),
                    std::invalid_argument);
    CHECK_THROWS_AS(attn::write_svg_plot(path, {"t", "x", "y", true, false, {{"bad", {0, 2}, {1, 1}}}}),
                    std::invalid_argument);
  }

  TEST_CASE("median_seconds returns the median of the timed runs") {
    int calls = 0;
    const double t = attn::median_seconds([&] { ++calls; }, 5, 2);
    CHECK(calls == 7);
    CHECK(t >= 0.0);
  }
}
