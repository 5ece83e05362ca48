// The declared results of a test program and its skips (tests/support/results.hpp says what and why).
#include "support/results.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn::test {
namespace {

// What the listener knows between its calls. One run per program, one case at a time (doctest runs cases
// in one thread), so plain members do.
struct State {
  std::ostream* console = &std::cout;
  std::ofstream file;  // the results file, open when ATTN_TEST_RESULTS names one
  const doctest::TestCaseData* current = nullptr;
  bool current_failed = false;
  std::string current_reason;                                      // the skip() of the running case, "" when none
  std::vector<std::string> subcases;                               // the subcases entered, outermost first
  std::vector<std::string> failures;                               // the running case's failures, as JSON objects
  std::map<const doctest::TestCaseData*, std::string> before_run;  // skip_before_run()'s cases and reasons
  std::set<std::string> reasons_skipped_before_run;                // of those the run met
};

State& state() {
  static State s;
  return s;
}

// A JSON string: quotes, backslashes and control characters escaped; other bytes as they are (UTF-8 text
// stays readable; a stray byte is left for the reader to replace).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

// The exercise a suite declares: "07_sparse/local_window_mask" -> local_window_mask; other suites -> "".
std::string exercise_of(const char* suite) {
  const std::string s = suite == nullptr ? "" : suite;
  const std::size_t slash = s.find('/');
  return slash == std::string::npos ? "" : s.substr(slash + 1);
}

// "name", "suite" and "exercise" of a case, as the start of a JSON object's members.
std::string case_members(const doctest::TestCaseData& tc) {
  const std::string exercise = exercise_of(tc.m_test_suite);
  return "\"name\": " + quoted(tc.m_name) + ", \"suite\": " + quoted(tc.m_test_suite ? tc.m_test_suite : "") +
         ", \"exercise\": " + (exercise.empty() ? std::string("null") : quoted(exercise));
}

// One line of the results file, flushed at once: a program that dies next still leaves it.
void write_line(const std::string& json_object) {
  State& s = state();
  if (!s.file.is_open()) return;
  s.file << json_object << '\n';
  s.file.flush();
}

// The INFO/CAPTURE lines in scope now (for an assertion), or those kept when an exception left them.
std::vector<std::string> active_context() {
  std::vector<std::string> lines;
  const int n = doctest::IReporter::get_num_active_contexts();
  const doctest::IContextScope* const* contexts = doctest::IReporter::get_active_contexts();
  for (int i = 0; i < n; ++i) {
    std::ostringstream line;
    contexts[i]->stringify(&line);
    lines.push_back(line.str());
  }
  return lines;
}

std::vector<std::string> stringified_context() {
  std::vector<std::string> lines;
  const int n = doctest::IReporter::get_num_stringified_contexts();
  const doctest::String* contexts = doctest::IReporter::get_stringified_contexts();
  for (int i = 0; i < n; ++i) lines.emplace_back(contexts[i].c_str());
  return lines;
}

std::string where(const char* file, int line) {
  return "\"file\": " + quoted(file ? file : "") + ", \"line\": " + std::to_string(line);
}

void add_failure(const std::string& kind, const std::string& members, const std::vector<std::string>& context) {
  State& s = state();
  s.current_failed = true;
  s.failures.push_back("{\"kind\": " + quoted(kind) + ", " + members + ", \"context\": " + quoted_list(context) +
                       ", \"subcases\": " + quoted_list(s.subcases) + "}");
}

}  // namespace

void skip(const std::string& reason) {
  State& s = state();
  if (s.current == nullptr) throw std::logic_error("attn::test::skip(\"" + reason + "\") called outside a test case");
  if (s.current_failed) {  // a failure stays a failure: no "skipped:" line for ctest to read as a skip
    *s.console << "not skipped, it failed first: " << reason << "\n";
    return;
  }
  s.current_reason = reason;
  *s.console << "skipped: " << reason << "\n";  // ctest's SKIP_REGULAR_EXPRESSION matches this line
  s.console->flush();
}

void skip_before_run(const doctest::TestCaseData& test_case, const std::string& reason) {
  // m_skip is doctest's own skip: the case does not run and doctest counts it skipped. It is no part of the
  // registry's order, so setting it on a registered case is safe.
  const_cast<doctest::TestCaseData&>(test_case).m_skip = true;
  state().before_run[&test_case] = reason;
}

ResultsListener::ResultsListener(const doctest::ContextOptions& options) {
  State& s = state();
  if (options.cout != nullptr) s.console = options.cout;
  if (const char* path = std::getenv("ATTN_TEST_RESULTS"); path != nullptr && *path != '\0') {
    s.file.open(path, std::ios::out | std::ios::trunc);
    if (!s.file) std::cerr << "cannot write the test results to " << path << " (ATTN_TEST_RESULTS)\n";
    write_line("{\"event\": \"run\", \"program\": " + quoted(options.binary_name.c_str()) + "}");
  }
}

ResultsListener::~ResultsListener() = default;

void ResultsListener::report_query(const doctest::QueryData& query) {
  const doctest::ContextOptions* options = doctest::getContextOptions();
  if (options == nullptr || !options->list_test_cases) return;
  for (unsigned i = 0; i < query.num_data; ++i) {
    const doctest::TestCaseData& tc = *query.data[i];
    write_line("{\"event\": \"listed\", " + case_members(tc) + ", " + where(tc.m_file.c_str(), tc.m_line) + "}");
  }
}

void ResultsListener::test_run_start() {}

void ResultsListener::test_run_end(const doctest::TestRunStats& stats) {
  State& s = state();
  // Only cases skipped before the run were selected (ctest runs one case a time): say why, on the line
  // ctest reads as a skip. After a run of other cases too, the results file holds each skip.
  if (stats.numTestCasesPassingFilters == 0)
    for (const std::string& reason : s.reasons_skipped_before_run) *s.console << "skipped: " << reason << "\n";
  write_line("{\"event\": \"end\", \"cases\": " + std::to_string(stats.numTestCasesPassingFilters) +
             ", \"failed\": " + std::to_string(stats.numTestCasesFailed) + "}");
}

void ResultsListener::test_case_start(const doctest::TestCaseData& test_case) {
  State& s = state();
  s.current = &test_case;
  s.current_failed = false;
  s.current_reason.clear();
  s.subcases.clear();
  s.failures.clear();
  write_line("{\"event\": \"start\", " + case_members(test_case) + "}");
}

void ResultsListener::test_case_reenter(const doctest::TestCaseData&) { state().subcases.clear(); }

void ResultsListener::test_case_end(const doctest::CurrentTestCaseStats& stats) {
  State& s = state();
  if (s.current == nullptr) return;
  const bool failed = !stats.testCaseSuccess || s.current_failed;
  const std::string status = failed ? "failed" : !s.current_reason.empty() ? "skipped" : "passed";
  std::string failures = "[";
  for (std::size_t i = 0; i < s.failures.size(); ++i) failures += (i ? ", " : "") + s.failures[i];
  failures += "]";
  if (failed && s.failures.empty()) {  // a doctest decorator's verdict (timeout, should_fail): no assertion
    failures = "[{\"kind\": \"message\", \"file\": " + quoted(s.current->m_file.c_str()) +
               ", \"line\": " + std::to_string(s.current->m_line) + ", \"message\": " +
               quoted("the case failed (doctest's failure flags " + std::to_string(stats.failure_flags) + ")") +
               ", \"context\": [], \"subcases\": []}]";
  }
  write_line("{\"event\": \"case\", " + case_members(*s.current) + ", \"status\": " + quoted(status) +
             ", \"reason\": " + (status == "skipped" ? quoted(s.current_reason) : std::string("null")) +
             ", \"seconds\": " + std::to_string(stats.seconds) + ", \"failures\": " + failures + "}");
  s.current = nullptr;
}

void ResultsListener::test_case_exception(const doctest::TestCaseException& exception) {
  add_failure(exception.is_crash ? "crash" : "exception", "\"message\": " + quoted(exception.error_string.c_str()),
              stringified_context());
}

void ResultsListener::subcase_start(const doctest::SubcaseSignature& subcase) {
  state().subcases.emplace_back(subcase.m_name.c_str());
}

void ResultsListener::subcase_end() {
  State& s = state();
  if (!s.subcases.empty()) s.subcases.pop_back();
}

void ResultsListener::log_assert(const doctest::AssertData& a) {
  if (!a.m_failed) return;
  std::string members = where(a.m_file, a.m_line) + ", \"assertion\": " + quoted(doctest::assertString(a.m_at)) +
                        ", \"expression\": " + quoted(a.m_expr ? a.m_expr : "");
  if (a.m_at & doctest::assertType::is_throws_as) members += ", \"expected_type\": " + quoted(a.m_exception_type);
  if (a.m_at & doctest::assertType::is_throws_with)
    members += ", \"expected_message\": " + quoted(a.m_exception_string.c_str());
  members += std::string(", \"threw\": ") + (a.m_threw ? "true" : "false");
  if (a.m_threw) members += ", \"exception\": " + quoted(a.m_exception.c_str());
  if (!a.m_threw && a.m_decomp.size() > 0) members += ", \"values\": " + quoted(a.m_decomp.c_str());
  add_failure("assert", members, active_context());
}

void ResultsListener::log_message(const doctest::MessageData& message) {
  if (message.m_severity & doctest::assertType::is_warn) return;  // MESSAGE/WARN: no failure
  add_failure("message", where(message.m_file, message.m_line) + ", \"message\": " + quoted(message.m_string.c_str()),
              active_context());
}

void ResultsListener::test_case_skipped(const doctest::TestCaseData& test_case) {
  State& s = state();
  const auto reason = s.before_run.find(&test_case);
  if (!test_case.m_skip || reason == s.before_run.end()) return;  // filtered out, not skipped
  s.reasons_skipped_before_run.insert(reason->second);
  write_line("{\"event\": \"case\", " + case_members(test_case) + ", \"status\": \"skipped\", \"reason\": " +
             quoted(reason->second) + ", \"seconds\": 0, \"failures\": []}");
}

}  // namespace attn::test
