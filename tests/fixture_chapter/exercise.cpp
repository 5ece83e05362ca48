// The fixture chapter's skeleton (tests/fixture_chapter/).
#include "@NN@_fixture/fixture.hpp"
#include "attn/errors.hpp"

namespace attn::fixture {

float scaled_score(const Vector& q, const Vector& k) {
  // TODO(learner): q · k / sqrt(d_k), refusing lengths that differ or are 0.
  throw not_implemented("scaled_score", "@NN@_fixture", "sum q(i) * k(i), then divide by sqrt(q.size()).");
}

}  // namespace attn::fixture
