// The fixture chapter's answer (tests/fixture_chapter/).
#include <cmath>

#include "@NN@_fixture/fixture.hpp"
#include "attn/errors.hpp"

namespace attn::fixture {

float scaled_score(const Vector& q, const Vector& k) {
  require(q.size() == k.size() && q.size() > 0,
          "scaled_score: q has " + std::to_string(q.size()) + " entries, k has " + std::to_string(k.size()));
  float dot = 0.0f;
  for (std::size_t i = 0; i < q.size(); ++i) dot += q(i) * k(i);
  return dot / std::sqrt(static_cast<float>(q.size()));
}

}  // namespace attn::fixture
