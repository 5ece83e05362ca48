/// \file
/// The test programs' declared results, and the one way a case is skipped.
///
/// attn::test::skip(reason): a running case that cannot run here (no model, no CUDA device) says so and
/// returns. It prints "skipped: <reason>" on a line of its own, which ctest reports as skipped
/// (attn_discover_tests sets that pattern for every test), and the results file records the case as skipped
/// with its reason: never as passed. attn::test::skip_before_run(case, reason) does the same for a case a
/// listener takes out before the run starts (tests/support/gpu_skip.hpp: the GPU cases without a device).
///
/// The results file: with ATTN_TEST_RESULTS=FILE in the environment, a test program writes FILE as JSON
/// lines, one object a line, each flushed as it is written, so a program that dies mid-run still leaves
/// every line before its death (the last "start" without its "case" names the case that died):
///   {"event": "run", "program": "..."}                         the run begins
///   {"event": "listed", "name", "suite", "exercise", "file", "line"}   per case, with --list-test-cases
///   {"event": "start", "name", "suite", "exercise"}            a case begins
///   {"event": "case", "name", "suite", "exercise", "status", "reason", "seconds", "failures": [...]}
///   {"event": "end", "cases", "failed"}                         the run ended normally (or after a signal)
/// status is "passed", "failed" or "skipped" (reason: why). exercise is the part after the '/' of a suite
/// "NN_name/exercise", null for other suites ("NN_name: chapter code"). Every failure of the case is listed:
///   {"kind": "assert", "file", "line", "assertion": "CHECK", "expression", "values", "exception",
///    "context": [INFO/CAPTURE lines], "subcases": [...]}
///   {"kind": "message", "file", "line", "message", "context", "subcases"}  (FAIL_CHECK, CHECK_ALLCLOSE, ...)
///   {"kind": "exception" | "crash", "message", "context", "subcases"}     (an exception or a signal)
/// ./course check reads this file (driver/loop.py), never the console text.
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace attn::test {

/// Marks the running test case skipped, with \p reason (what is missing and how to get it, e.g.
/// "no model in build/models/...: ./course setup fetches it"). The case returns right after the call.
/// Called after a failed assertion, the case stays failed (the skip is reported as ignored).
void skip(const std::string& reason);

/// Marks \p test_case skipped before the run starts (it will not run), with \p reason. For a listener's
/// constructor: the run has not started yet.
void skip_before_run(const doctest::TestCaseData& test_case, const std::string& reason);

/// The doctest listener behind both: it follows the running case for skip(), prints the reasons of cases
/// skipped before the run when nothing else ran (ctest runs one case a time), and writes the results file.
/// Registered once, in tests/support/test_main.cpp.
class ResultsListener : public doctest::IReporter {
 public:
  explicit ResultsListener(const doctest::ContextOptions& options);
  ~ResultsListener() override;
  ResultsListener(const ResultsListener&) = delete;
  ResultsListener& operator=(const ResultsListener&) = delete;

  void report_query(const doctest::QueryData& query) override;
  void test_run_start() override;
  void test_run_end(const doctest::TestRunStats& stats) override;
  void test_case_start(const doctest::TestCaseData& test_case) override;
  void test_case_reenter(const doctest::TestCaseData& test_case) override;
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override;
  void test_case_exception(const doctest::TestCaseException& exception) override;
  void subcase_start(const doctest::SubcaseSignature& subcase) override;
  void subcase_end() override;
  void log_assert(const doctest::AssertData& assertion) override;
  void log_message(const doctest::MessageData& message) override;
  void test_case_skipped(const doctest::TestCaseData& test_case) override;
};

}  // namespace attn::test
