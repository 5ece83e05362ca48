/// \file
/// Chapter 12's run, as its story and its benchmarks both use it: the model and the schedules with the
/// chapter's defaults (the command line changes the story's), and the held-out sequences it is judged on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "12_learning/model.hpp"
#include "12_learning/train.hpp"

namespace attn::ch12 {

constexpr std::uint64_t kEvalSeed = 1212;  ///< held-out sequences: a seed training never uses
constexpr std::size_t kEvalCount = 200;    ///< held-out sequences per evaluation

/// The chapter's model and schedule; the command line changes them.
struct Setup {
  Config config;
  TrainSettings train;
  TrainSettings pronoun{0, 16, 150, {3e-3f, 0.9f, 0.98f, 1e-8f, 0.0f}, 12};  ///< length unused
};

}  // namespace attn::ch12
