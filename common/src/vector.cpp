// The vector layer's choice of instruction set (see attn/vector.hpp), and its one kernel, vector_lanes(): the
// smallest example of the pattern every fast kernel follows.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "../src/vector.cpp"  // this file, found from common/include
#include "attn/vector.hpp"

#include <hwy/foreach_target.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace attn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The floats of one vector on this target: what the running path is, seen from inside a kernel.
std::size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

}  // namespace attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn {

HWY_EXPORT(FloatLanes);
std::size_t vector_lanes() { return ATTN_DISPATCH(FloatLanes)(); }

namespace {

constexpr VectorPath kEveryPath[] = {VectorPath::avx512, VectorPath::avx2, VectorPath::neon, VectorPath::portable};

// Highway's target bits for one path. The portable path is Highway's EMU128 or SCALAR (which of the two this
// compiler builds: GCC before 12.3 miscompiles EMU128, and Highway then builds SCALAR).
std::int64_t highway_targets(VectorPath path) {
  switch (path) {
    case VectorPath::avx512:
      return HWY_AVX3;
    case VectorPath::avx2:
      return HWY_AVX2;
    case VectorPath::neon:
      return HWY_NEON;
    case VectorPath::portable:
      break;
  }
  return HWY_EMU128 | HWY_SCALAR;
}

std::string keys_of(const std::vector<VectorPath>& paths) {
  std::string out;
  for (const VectorPath p : paths) out += (out.empty() ? "" : ", ") + std::string(vector_path_key(p));
  return out;
}

const char* kOverride = "ATTN_VECTOR_ISA";

}  // namespace

const char* vector_path_name(VectorPath path) {
  switch (path) {
    case VectorPath::avx512:
      return "AVX-512";
    case VectorPath::avx2:
      return "AVX2+FMA";
    case VectorPath::neon:
      return "NEON";
    case VectorPath::portable:
      break;
  }
  return "portable";
}

const char* vector_path_key(VectorPath path) {
  switch (path) {
    case VectorPath::avx512:
      return "avx512";
    case VectorPath::avx2:
      return "avx2";
    case VectorPath::neon:
      return "neon";
    case VectorPath::portable:
      break;
  }
  return "portable";
}

std::vector<VectorPath> vector_paths_available() {
  // What the CPU has (Highway asks CPUID, or the arm64 kernel's hardware capabilities), among what the course
  // compiled (HWY_TARGETS: attn/vector.hpp's list, less what this compiler or CPU family cannot build). Read once,
  // before choose_vector_path() narrows what Highway reports.
  static const std::int64_t native = hwy::SupportedTargets() & HWY_TARGETS;
  std::vector<VectorPath> paths;
  for (const VectorPath p : kEveryPath)
    if (p == VectorPath::portable || (native & highway_targets(p)) != 0) paths.push_back(p);
  return paths;
}

VectorPath vector_path_for(const char* forced, const std::vector<VectorPath>& available) {
  if (forced == nullptr || *forced == '\0') return available.front();
  const std::string value = forced;
  for (const VectorPath p : kEveryPath) {
    if (value != vector_path_key(p)) continue;
    for (const VectorPath a : available)
      if (a == p) return p;
    throw std::invalid_argument(std::string(kOverride) + "=" + value + ": this CPU cannot run the " +
                                vector_path_name(p) + " path; it can run " + keys_of(available));
  }
  throw std::invalid_argument(std::string(kOverride) + "=" + value + ": not a vector path (one of " +
                              keys_of({std::begin(kEveryPath), std::end(kEveryPath)}) + "); this CPU can run " +
                              keys_of(available));
}

namespace detail {

VectorPath choose_vector_path() {
  const VectorPath path = vector_path_for(std::getenv(kOverride), vector_paths_available());
  // Highway dispatches each call to the widest target it is told the CPU supports: tell it only this path's
  // (and the portable fallback every kernel has), then make it choose again, for every kernel at once.
  hwy::SetSupportedTargetsForTest(highway_targets(path) | highway_targets(VectorPath::portable));
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return path;
}

}  // namespace detail

std::string vector_path_description() {
  const VectorPath path = vector_path();
  if (path == vector_paths_available().front()) return vector_path_name(path);
  return std::string(vector_path_name(path)) + " (" + kOverride + ")";  // short: a machine line's half is 92 columns
}

}  // namespace attn
#endif  // HWY_ONCE
