/// \file
/// GPU test cases in a doctest program: a case whose name starts with "on the GPU" needs a CUDA device.
/// Include this header in the test file (once per test program): without a device the cases are skipped
/// before the run starts, with their reason (attn::test::skip_before_run, support/results.hpp), so doctest,
/// ctest and ./course check report them as skipped, never as passed. Listing the cases (--list-test-cases, as
/// ctest's discovery does) still shows them all.
#pragma once

#include <doctest/doctest.h>

#include <ostream>
#include <set>
#include <string>

#include "06_flash_cuda/ladder.hpp"
#include "support/results.hpp"

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
// Without a device it takes the GPU cases out of the run with their reason (attn::test::skip_before_run in
// support/results.hpp, the course's one way to skip), so doctest, ctest and ./course check report them as
// skipped, never as passed; listing the cases (--list-test-cases, as ctest's discovery does) still shows them
// all. After a full run it names the untested kernel exercise.
class GpuSkipListener : public doctest::IReporter {
 public:
  explicit GpuSkipListener(const doctest::ContextOptions& options) : out_(*options.cout) {
    // --count is not listing: it counts the cases that would run, so the GPU cases drop out of it too.
    const bool listing = options.list_test_cases || options.list_test_suites;
    if (listing || options.no_skip || device().present) return;
    const std::string& why = device().why_not;
    const std::string reason = why.rfind("no CUDA device", 0) == 0 ? why : "no CUDA device (" + why + ")";
    for (const doctest::detail::TestCase& tc : doctest::detail::getRegisteredTests())
      if (is_gpu_case(tc)) skip_before_run(tc, reason);
  }
  void test_case_skipped(const doctest::TestCaseData& tc) override { skipped_ += tc.m_skip && is_gpu_case(tc); }
  void test_run_end(const doctest::TestRunStats& stats) override {
    if (skipped_ == 0 || stats.numTestCasesPassingFilters == 0) return;
    if (stats.numTestCasesPassingFilters + static_cast<unsigned>(skipped_) == stats.numTestCases) {
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
