// attn_output_width FILE...: fails (status 1) when a line of a chapter's output is wider than 100 display
// columns, naming the file, the line and its width. A terminal of 100 columns and the book's output blocks
// show every chapter without wrapping or scrolling sideways; widths count a CJK character as two columns
// (attn::display_width, the measure the tables themselves are aligned with).
#include <fstream>
#include <iostream>
#include <string>

#include "attn/print.hpp"

int main(int argc, char** argv) {
  constexpr std::size_t limit = 100;
  int wide = 0;
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a]);
    if (!in) {
      std::cerr << "attn_output_width: cannot read " << argv[a] << "\n";
      return 2;
    }
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const std::size_t width = attn::display_width(line);
      if (width <= limit) continue;
      ++wide;
      std::cout << argv[a] << ":" << number << ": " << width << " columns (limit " << limit << "): " << line << "\n";
    }
  }
  if (wide > 0) std::cout << wide << " lines wider than " << limit << " columns\n";
  return wide > 0 ? 1 : 0;
}
