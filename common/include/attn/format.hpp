/// \file
/// Numbers as the chapters print them in tables and sentences: one home for each format, so every chapter
/// writes 0.25, 1.23e-04 or "2.61 T" the same way.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace attn {

/// \p v with \p decimals digits after the point: fixed(2.0 / 3) is "0.67", fixed(2.0 / 3, 3) is "0.667".
std::string fixed(double v, int decimals = 2);

/// \p v in scientific notation with \p decimals digits after the point: sci(0.000123) is "1.23e-04".
std::string sci(double v, int decimals = 2);

/// \p v with \p digits significant digits, fixed or scientific, whichever is shorter (printf's %g):
/// significant(0.000123456) is "0.000123", significant(1234567) is "1.23e+06".
std::string significant(double v, int digits = 3);

/// A count with an SI prefix and three significant digits: si(2.61e12) is "2.61 T", si(512) is "512".
std::string si(double v);

/// A duration in the unit that reads best: "12.5 µs", "3.40 ms", "2.00 s"; with \p significant_digits > 0,
/// that many significant digits instead: seconds_str(0.0152, 3) is "15.2 ms", seconds_str(3.2, 3) is "3.2 s".
std::string seconds_str(double seconds, int significant_digits = 0);

/// "1.50 KiB", "40.0 GB"...: \p bytes in binary (KiB, MiB, GiB) or decimal (kB, MB, GB) units.
std::string human_bytes(double bytes, bool binary = true);

/// The words separated by \p sep: joined({"猫", "坐在"}) is "猫 坐在".
std::string joined(const std::vector<std::string>& words, const char* sep = " ");

/// n labels \p prefix followed by 0, 1, ..., n − 1: numbered("t", 3) is {"t0", "t1", "t2"}.
std::vector<std::string> numbered(const std::string& prefix, std::size_t n);

}  // namespace attn
