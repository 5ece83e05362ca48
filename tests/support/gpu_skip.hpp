/// \file
/// GPU test cases in a doctest program: a case whose name starts with "on the GPU" needs a CUDA device.
/// Include this header in the test file (once per test program): without a device the cases are marked
/// skipped when the run starts, so doctest reports them as skipped, never as passed, and the program says
/// why. Listing the cases (--list-test-cases, as ctest's discovery does) still shows them all.
#pragma once

#include <doctest/doctest.h>

#include <ostream>
#include <set>
#include <string>

#include "06_flash_cuda/ladder.hpp"

// doctest's registry of test cases (defined in doctest's implementation, tests/support/test_main.cpp).
namespace doctest::detail {
std::set<TestCase>& getRegisteredTests();
}

namespace attn::test {

// The device, looked up once. GPU cases are the ones whose name starts with this prefix.
inline const attn::ch06::DeviceInfo& device() {
  static const attn::ch06::DeviceInfo info = attn::ch06::query_device();
  return info;
}
inline constexpr const char* kGpuPrefix = "on the GPU";
inline bool is_gpu_case(const doctest::TestCaseData& tc) { return std::string(tc.m_name).rfind(kGpuPrefix, 0) == 0; }

// A doctest listener, created when a run starts (after the command line is read, before any case runs).
// Without a device it marks the GPU cases skipped, so doctest reports them as skipped, never as passed;
// listing the cases (--list-test-cases, as ctest's discovery does) still shows them all. At the end it says
// why: "skipped: no CUDA device (...)" when only GPU cases were selected (ctest runs one case at a time and
// reports that line as skipped), and a note naming the untested kernel exercise after a full run.
class GpuSkipListener : public doctest::IReporter {
 public:
  explicit GpuSkipListener(const doctest::ContextOptions& options) : out_(*options.cout) {
    // --count is not listing: it counts the cases that would run, so the GPU cases drop out of it too.
    const bool listing = options.list_test_cases || options.list_test_suites;
    if (listing || options.no_skip || device().present) return;
    for (const doctest::detail::TestCase& tc : doctest::detail::getRegisteredTests())
      if (is_gpu_case(tc)) const_cast<doctest::detail::TestCase&>(tc).m_skip = true;  // not part of the set's order
  }
  void test_case_skipped(const doctest::TestCaseData& tc) override { skipped_ += tc.m_skip && is_gpu_case(tc); }
  void test_run_end(const doctest::TestRunStats& stats) override {
    if (skipped_ == 0) return;
    if (stats.numTestCasesPassingFilters == 0) {  // ctest's SKIP_REGULAR_EXPRESSION matches this line
      const std::string& why = device().why_not;
      out_ << "skipped: " << (why.rfind("no CUDA device", 0) == 0 ? why : "no CUDA device (" + why + ")") << "\n";
    } else if (stats.numTestCasesPassingFilters + static_cast<unsigned>(skipped_) == stats.numTestCases) {
      out_ << "note: " << skipped_ << " test cases need a GPU and were skipped here: " << device().why_not
           << ".\n      Chapter 06's kernels, the kernel exercise among them (flash_inner_step in "
              "flash_cuda_inner.cu),\n      were not tested on this machine: run ./course check 06 on a machine with "
              "an NVIDIA GPU (sm_80 or newer).\n";
    }
  }
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}

 private:
  std::ostream& out_;
  int skipped_ = 0;
};

// A GPU case's first line: run with --no-skip on a machine without a device, it fails saying why.
#define REQUIRE_DEVICE() \
  REQUIRE_MESSAGE(::attn::test::device().present, "this case needs a CUDA device: " << ::attn::test::device().why_not)
}  // namespace attn::test

REGISTER_LISTENER("gpu_skip", 1, attn::test::GpuSkipListener);
