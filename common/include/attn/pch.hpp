/// \file
/// The precompiled header of the course: the heavy, stable headers every translation unit parses.
/// Nothing here is the course's own code; changing it rebuilds everything.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/color.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attn/tensor.hpp"
