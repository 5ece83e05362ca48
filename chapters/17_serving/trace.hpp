/// \file
/// Chapter 17's request trace and the schedulers that reserve each sequence's maximum: chapter code the story and
/// the bench share. Time is counted in steps: at every step each running sequence decodes one token, and a request
/// admitted at a step has its prompt prefilled and its first token generated in it. The paged scheduler of
/// continuous batching is the learner's schedule_step(), driven by serve_sim.hpp. Book page: book/17_serving.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace attn::ch17 {

/// One request of a trace.
struct Request {
  std::size_t id = 0;       ///< its place in the trace
  std::size_t arrival = 0;  ///< the step it arrives at
  std::size_t prompt = 0;   ///< prompt tokens (≥ 1)
  std::size_t output = 0;   ///< tokens it will generate (≥ 1)
};

/// The distributions a trace is drawn from.
struct TraceSpec {
  std::size_t requests = 400;      ///< requests in the trace
  double arrivals_per_step = 2.0;  ///< a Poisson process: gaps between arrivals ~ Exponential(rate)
  std::size_t prompt_min = 32;     ///< prompt lengths ~ Uniform{prompt_min … prompt_max}
  std::size_t prompt_max = 1024;
  double output_mean = 256.0;     ///< output lengths ~ Geometric(1 / output_mean) on 1, 2, …, capped at output_max
  std::size_t output_max = 3072;  ///< prompt_max + output_max is the longest a sequence can be
  std::uint64_t seed = 17;
};

/// The requests of \p spec, in arrival order (std::mt19937_64 seeded with spec.seed: the same trace every run).
/// \throws std::invalid_argument naming the field when requests is 0, the rate is not a positive finite number,
///         prompt_min is 0 or above prompt_max, output_mean is not in [1, 1e15] (above, the geometric
///         draw's 1 − 1/output_mean rounds to 1), or output_max is 0; naming arrivals_per_step when the rate is so
///         low that an arrival falls past step 2^64 − 1 (no std::size_t counts it).
std::vector<Request> request_trace(const TraceSpec& spec);

/// What one scheduler did over a whole trace.
struct ServeStats {
  std::size_t steps = 0;              ///< steps until the last request finished
  std::size_t generated = 0;          ///< tokens generated
  double mean_running = 0.0;          ///< sequences running, averaged over the steps
  std::size_t most_running = 0;       ///< the most at once
  double cached_token_steps = 0.0;    ///< Σ over steps of the tokens whose keys and values are cached
  double reserved_token_steps = 0.0;  ///< Σ over steps of the token slots held (reserved or allocated)
  std::vector<std::size_t> latency;   ///< (requests) steps from arrival to the last token, by request id
  std::size_t preemptions = 0;        ///< sequences sent back to the queue
  std::size_t recomputed = 0;         ///< prompt tokens prefilled again after preemptions
  /// Slots held but not used, averaged over time: 1 − cached / reserved.
  double waste() const { return reserved_token_steps > 0 ? 1.0 - cached_token_steps / reserved_token_steps : 0.0; }
  /// Tokens generated per step.
  double tokens_per_step() const { return steps > 0 ? static_cast<double>(generated) / static_cast<double>(steps) : 0; }
};

/// The work of one scheduler step, for a caller that computes it (`ch17_serving bench` times a model's layers on
/// it): what the step's plan means in tokens.
struct StepWork {
  std::vector<std::size_t> decode_lengths;   ///< per sequence that decodes a token: its cached tokens, the new one's
                                             ///< included (what its attention reads)
  std::vector<std::size_t> prefill_prompts;  ///< per sequence admitted (or readmitted): the tokens prefilled
  std::vector<std::size_t> finished;         ///< requests that finished at the step before this one, by id
  std::size_t idle_before = 0;  ///< steps just before this one with nothing running or waiting, not observed (skipped)
};
/// Called once per step with its work, before the next step is planned; steps with nothing running or waiting are
/// skipped (the clock jumps to the next arrival) and counted in the next observed step's idle_before.
using StepObserver = std::function<void(const StepWork&)>;

/// The mean of \p latency (steps per request).
/// \throws std::invalid_argument when latency is empty.
double latency_mean(const std::vector<std::size_t>& latency);
/// The \p q quantile of \p latency (0 … 1, nearest rank: the smallest value at least a share q of them reach).
/// \throws std::invalid_argument when latency is empty or q is outside [0, 1].
std::size_t latency_quantile(const std::vector<std::size_t>& latency, double q);

/// How a scheduler that reserves each sequence's maximum batches.
enum class Batching {
  fixed,       ///< static batching: a batch starts together and the next starts when all of it has finished
  continuous,  ///< Orca's continuous batching: a finished sequence leaves at once and a waiting one takes its place
};

/// A scheduler that reserves \p max_len token slots for every sequence it admits (the longest it may grow: the
/// memory a contiguous cache must set aside before it knows the output's length), \p budget_tokens slots in all, at
/// most \p max_running sequences at once, first come first served.
/// \p observe, unless empty, is given each step's work. Idle stretches (nothing running or waiting) cost nothing: the
/// clock jumps to the next arrival, with the same statistics as stepping through them.
/// \throws std::invalid_argument naming the sizes when max_running or max_len is 0, when budget_tokens holds no
///         sequence of max_len, naming batching when it is neither value, or naming the request whose id is not its
///         place in the trace, or whose prompt or output is 0 or prompt + output − 1 exceeds max_len.
ServeStats serve_reserving(const std::vector<Request>& trace, Batching batching, std::size_t budget_tokens,
                           std::size_t max_len, std::size_t max_running, const StepObserver& observe = {});

}  // namespace attn::ch17
