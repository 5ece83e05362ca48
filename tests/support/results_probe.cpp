// A test program whose cases pass, fail, skip and crash on purpose: tests/driver/test_results.py runs it with
// ATTN_TEST_RESULTS and checks what the results file says of each (tests/support/results.hpp). Not a test of
// the course: ctest does not run its cases, only that check.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "support/results.hpp"
#include "support/throws.hpp"

namespace {
int three() { return 3; }
void refuse(const std::string& message) { throw std::invalid_argument(message); }
}  // namespace

TEST_SUITE("99_probe/passes") {
  TEST_CASE("a case that passes") { CHECK(three() == 3); }
}

TEST_SUITE("99_probe/fails") {
  TEST_CASE("a case with two failed assertions and a logged value") {
    const int k = 7;
    CAPTURE(k);
    INFO("the step: ", k + 1);
    CHECK(three() == 4);
    CHECK_MESSAGE(three() == 5, "three is not five");
    CHECK(three() == 3);
  }
  TEST_CASE("a case that throws") {
    CHECK(three() == 3);
    refuse("thrown from the case");
  }
}

TEST_SUITE("99_probe/skips") {
  TEST_CASE("a case that skips itself") {
    attn::test::skip("no model: ./course setup fetches it");
    return;
  }
  TEST_CASE("a case that fails, then skips: failed") {
    CHECK(three() == 2);
    attn::test::skip("too late");
  }
}

TEST_SUITE("99_probe/names") {
  TEST_CASE("errors named as the contract says") {
    // Numbers as number tokens, names as words, in any quoting or bracket style.
    CHECK_THROWS_NAMING(refuse("'v' of (2, 3) wants [6]"), std::invalid_argument, "v", "2", "3", "6");
    CHECK_THROWS_NAMING(refuse("3 heads, mask of 2x3"), std::invalid_argument, "3", "2");
  }
  TEST_CASE("errors that do not name what the contract says") {
    CHECK_THROWS_NAMING(refuse("shape (2, 33)"), std::invalid_argument, "3");     // 33 is not 3
    CHECK_THROWS_NAMING(refuse("the tensor vv"), std::invalid_argument, "v");     // vv is not v
    CHECK_THROWS_NAMING(refuse("fine"), std::runtime_error, "fine");              // another type
    CHECK_THROWS_NAMING(static_cast<void>(three()), std::invalid_argument, "3");  // no throw
  }
}

TEST_SUITE("99_probe: chapter code") {
  TEST_CASE("a case of the chapter's own code") { CHECK(three() == 3); }
}

TEST_SUITE("99_probe/crashes") {
  TEST_CASE("a case that crashes the program") {
    if (std::getenv("ATTN_PROBE_CRASH") != nullptr) std::raise(SIGSEGV);  // doctest's signal handler sees it
    if (std::getenv("ATTN_PROBE_EXIT") != nullptr) std::_Exit(70);        // nothing sees it
    CHECK(three() == 3);
  }
}
