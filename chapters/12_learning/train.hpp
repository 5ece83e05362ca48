/// \file
/// Chapter 12's training loop: the model (model.hpp) trained by the learner's train_step() (learning.hpp), on
/// fresh batches at every step. Header-only because it calls the contract, which each track supplies (chapter
/// code in model.cpp may not).
/// Single-threaded on purpose: the same seed gives the same loss curve bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "12_learning/pronoun.hpp"
#include "attn/checks.hpp"
#include "attn/rng.hpp"

namespace attn::ch12 {

/// The most optimiser steps train() takes, and the most sequences mean_accuracy() reads: a million, far past the
/// chapter's runs (hundreds), so that 2^32 of them is refused instead of running for weeks.
inline constexpr std::size_t kMaxTrainSteps = 1000000;

/// What to train and how.
struct TrainSettings {
  std::size_t length = 20;  ///< tokens per sequence (make_induction draws the period)
  std::size_t batch = 16;   ///< sequences per step
  std::size_t steps = 800;  ///< optimiser steps
  AdamW adamw{3e-3f, 0.9, 0.98, 1e-8f, 0.0f};
  std::uint64_t seed = 12;  ///< model initialisation and data
};

/// A trained model and its loss at every step.
struct TrainResult {
  Model model;
  std::vector<double> loss;  ///< (steps) the batch's mean cross-entropy on the predictable positions
};

/// Trains a fresh model (seeded) on fresh batches from \p draw (a sequence from an Rng&); \p on_step sees the
/// model after each step, for snapshots. No steps give the fresh model and no losses.
/// \throws std::invalid_argument when s.batch is 0 (a step with no sequence has no loss to follow) or its sequences
///         would not fit in memory, or s.steps is above kMaxTrainSteps, before any work; as init_model() does for
///         \p config; as the sequences, the loss or adamw_step() refuse theirs.
namespace detail {
/// train()'s refusals of \p s, before any work.
inline void require_train_settings(const TrainSettings& s) {
  require(s.batch > 0, "train: batch = 0 sequences per step; a step needs at least one");
  require(s.steps <= kMaxTrainSteps, fmt::format("train: steps = {}; at most {} (the chapter trains for hundreds; "
                                                 "2^32 steps would run for weeks)",
                                                 s.steps, kMaxTrainSteps));
  // A step holds its batch's sequences (two lists each) at once: refused here, before drawing them one by one.
  checked_allocation("train: the batch of sequences, batch × two token lists", {s.batch, 2 * sizeof(Sequence)});
}
}  // namespace detail

// [train]
template <class Draw, class OnStep>
TrainResult train(const Config& config, const TrainSettings& s, Draw&& draw, OnStep&& on_step) {
  detail::require_train_settings(s);  // batch ≥ 1, steps ≤ kMaxTrainSteps, a batch that fits in memory
  TrainResult r{init_model(config, s.seed), {}};
  Model m = zeros_like(r.model), v = zeros_like(r.model);  // AdamW's moments start at zero
  Rng data(s.seed + 1);
  for (std::size_t t = 1; t <= s.steps; ++t) {
    std::vector<Sequence> batch;  // (batch) fresh sequences at every step
    for (std::size_t b = 0; b < s.batch; ++b) {
      const auto drawn = draw(data);
      batch.push_back({drawn.tokens, drawn.targets});
    }
    r.loss.push_back(train_step(r.model, m, v, t, batch, s.adamw));  // your exercise
    on_step(t, r.model);
  }
  return r;
}
// [train]

/// Trains a fresh model (seeded) on freshly generated induction batches; \p on_step (may be empty) sees the
/// model after each step, for snapshots.
template <class OnStep>
TrainResult train_induction(const Config& config, const TrainSettings& s, OnStep&& on_step) {
  return train(
      config, s, [&](Rng& rng) { return make_induction(s.length, config.vocab, rng); }, on_step);
}

/// train_induction() without a per-step callback.
inline TrainResult train_induction(const Config& config, const TrainSettings& s) {
  return train_induction(config, s, [](std::size_t, const Model&) {});
}

/// The model for the pronoun task: the chapter's sizes, its vocabulary and context.
inline Config pronoun_config() {
  Config c;
  c.vocab = pronoun_vocabulary().size();
  c.context = kPronounMaxLength;
  return c;
}

/// Trains a fresh model (seeded) on freshly generated pronoun sentences (s.length is not used).
inline TrainResult train_pronoun(const Config& config, const TrainSettings& s) {
  return train(
      config, s, [](Rng& rng) { return make_pronoun(rng); }, [](std::size_t, const Model&) {});
}

/// Mean accuracy on the predictable part of \p count fresh sequences from \p draw, drawn from their own seed
/// (unseen in training).
/// \throws std::invalid_argument when count is 0 (the mean of nothing: it was 0/0 = NaN) or above kMaxTrainSteps,
///         and as forward() and accuracy() do.
template <class Draw>
double mean_accuracy(const Model& model, std::size_t count, std::uint64_t seed, Draw&& draw,
                     const HeadMask& keep = HeadMask()) {
  require(count > 0, "mean_accuracy: count = 0 sequences; the mean accuracy of none is undefined");
  require(
      count <= kMaxTrainSteps,
      fmt::format("mean_accuracy: count = {} sequences; at most {} (more would run for days)", count, kMaxTrainSteps));
  Rng rng(seed);
  double sum = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto s = draw(rng);
    sum += accuracy(forward(model, s.tokens, keep).logits, s.targets);
  }
  return sum / static_cast<double>(count);
}

/// Accuracy on the predictable part of \p count fresh induction sequences.
inline double induction_accuracy(const Model& model, std::size_t length, std::size_t count, std::uint64_t seed,
                                 const HeadMask& keep = HeadMask()) {
  return mean_accuracy(
      model, count, seed, [&](Rng& rng) { return make_induction(length, model.config.vocab, rng); }, keep);
}

/// Fraction of \p count fresh pronoun sentences whose antecedent the model predicts.
inline double pronoun_accuracy(const Model& model, std::size_t count, std::uint64_t seed,
                               const HeadMask& keep = HeadMask()) {
  return mean_accuracy(
      model, count, seed, [](Rng& rng) { return make_pronoun(rng); }, keep);
}

}  // namespace attn::ch12
