/// \file
/// The fixture chapter's contract (tests/fixture_chapter/): one exercise, to prove that a chapter is a folder and
/// one manifest entry.
#pragma once

#include "attn/tensor.hpp"

namespace attn::fixture {

/// The scaled score of one query against one key: `q · k / √d_k`.
/// \param q (d_k) the query.
/// \param k (d_k) the key.
/// \throws std::invalid_argument naming both lengths when they differ or are 0.
float scaled_score(const Vector& q, const Vector& k);

}  // namespace attn::fixture
