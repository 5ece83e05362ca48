// The fixture chapter's tests (tests/fixture_chapter/): a closed form and a refusal.
#include <doctest/doctest.h>

#include <stdexcept>

#include "@NN@_fixture/fixture.hpp"

TEST_SUITE("@NN@_fixture") {
  TEST_CASE("scaled_score divides q · k by sqrt(d_k)" * doctest::test_suite("@NN@_fixture/scaled_score")) {
    CHECK(attn::fixture::scaled_score({1.0f, 2.0f, 3.0f, 4.0f}, {1.0f, 1.0f, 1.0f, 1.0f}) == doctest::Approx(5.0));
  }
  TEST_CASE("scaled_score refuses lengths that differ" * doctest::test_suite("@NN@_fixture/scaled_score")) {
    CHECK_THROWS_AS(attn::fixture::scaled_score({1.0f}, {1.0f, 2.0f}), std::invalid_argument);
  }
}
