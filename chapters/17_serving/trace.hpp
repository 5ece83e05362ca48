/// \file
/// Chapter 17's request trace, the clock a trace is served on, and the schedulers that reserve each sequence's
/// maximum: chapter code the story and the bench share. A scheduler (Scheduler) is driven one step at a time by
/// serve(): on the step clock (serve_on_steps(): every step takes 1, whatever it computes) for the lesson's
/// deterministic tables, or on a clock of seconds for the bench, which runs every step's work and times it, with
/// requests arriving in seconds (open loop). The paged schedulers, one on the learner's schedule_step() and one with
/// chunked prefill under a per-step token budget, are in serve_sim.hpp. Book page: book/17_serving.md.
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

/// What one scheduler did over a whole trace. Times are on the clock the trace was served on (serve()): steps on the
/// step clock, seconds when every step is run and timed.
struct ServeStats {
  std::size_t steps = 0;               ///< the step clock: steps until the last request finished (idle ones included);
                                       ///< a timed clock: steps run
  std::size_t generated = 0;           ///< tokens generated
  double mean_running = 0.0;           ///< sequences running, averaged over the time
  std::size_t most_running = 0;        ///< the most at once
  double cached_token_steps = 0.0;     ///< ∫ over time of the tokens whose keys and values are cached
  double reserved_token_steps = 0.0;   ///< ∫ over time of the token slots held (reserved or allocated)
  std::vector<std::size_t> latency;    ///< (requests) the step clock only: steps from arrival to the last token, by id
  std::vector<double> first_token_at;  ///< (requests) the clock when each request's first token came out, by id
  std::vector<double> finished_at;     ///< (requests) the clock when its last token came out, by id
  double elapsed = 0.0;                ///< the clock when the last request finished
  std::size_t preemptions = 0;         ///< sequences sent back to the queue
  std::size_t recomputed = 0;          ///< prompt tokens prefilled again after preemptions
  std::size_t prefilled = 0;           ///< prompt tokens prefilled, the recomputed ones included
  /// KV memory wasted: the share of the slots held that hold no token, averaged over time, 1 − cached / reserved.
  double waste() const { return reserved_token_steps > 0 ? 1.0 - cached_token_steps / reserved_token_steps : 0.0; }
  /// Tokens generated per step.
  double tokens_per_step() const { return steps > 0 ? static_cast<double>(generated) / static_cast<double>(steps) : 0; }
};

/// One prompt's chunk of prefill in a step: \p tokens prompt tokens computed over the \p cached before them.
struct PrefillChunk {
  std::size_t id = 0;      ///< the request
  std::size_t cached = 0;  ///< its tokens already cached (earlier chunks, a shared prefix)
  std::size_t tokens = 0;  ///< the chunk's tokens, each attending to the cached ones and the chunk's before it
  bool last = true;        ///< the chunk ends the prompt: its last token's output is a generated token
};

/// The work of one scheduler step, for a caller that computes it (`ch17_serving bench` times a model's layers on
/// it): what the step's plan means in tokens.
struct StepWork {
  std::vector<std::size_t> decode_lengths;  ///< per sequence that decodes a token: its cached tokens, the new one's
                                            ///< included (what its attention reads)
  std::vector<PrefillChunk> prefills;       ///< per sequence prefilled (admitted, readmitted, or a prompt's next chunk)
  std::vector<std::size_t> first_token;     ///< requests whose prefill ended in this step (a readmitted one again)
  std::vector<std::size_t> finished;        ///< requests that finished at the step before this one, by id
  std::vector<std::size_t> preempted;       ///< requests sent back to the queue in this step
  std::size_t recomputed = 0;               ///< tokens the preempted will prefill again
  double idle_before = 0.0;  ///< clock just before this step with nothing running or waiting, skipped (not observed)
  /// Tokens the step computes: one per decode, every token of every chunk.
  std::size_t tokens() const;
  /// Tokens the step generates: one per decode, one per chunk that ends its prompt.
  std::size_t generated() const;
};
/// Called once per step with its work, before the next step is planned; steps with nothing running or waiting are
/// skipped (the clock jumps to the next arrival) and counted in the next observed step's idle_before.
using StepObserver = std::function<void(const StepWork&)>;
/// How long a step takes on the clock a trace is served on: 1 on the step clock, the seconds its work took when it
/// is run. Called once per step with its work, as a StepObserver is.
using StepClock = std::function<double(const StepWork&)>;

/// A scheduler, one step at a time: what serve() drives. Each of the chapter's schedulers is one.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// Request \p r joins the queue. \throws std::invalid_argument naming the request when it could never be served.
  virtual void arrive(const Request& r) = 0;
  /// Plans one step and changes the state to its end: who finished, decoded, was prefilled or preempted.
  virtual StepWork step() = 0;
  virtual bool idle() const = 0;                  ///< nothing running or waiting
  virtual double cached_tokens() const = 0;       ///< tokens whose keys and values are cached now
  virtual double held_slots() const = 0;          ///< token slots held now (reserved or allocated)
  virtual std::size_t running_count() const = 0;  ///< sequences running now
};

/// Serves \p trace on \p scheduler, request i arriving at clock \p arrivals[i] (open loop: arrivals do not wait for
/// the server), each step taking clock(work). Requests that arrived by the start of a step join the queue before it
/// is planned. A request's first token comes out at the end of the step whose prefill ends its prompt, its last at
/// the end of the step before the one that lists it finished. When nothing runs or waits the clock jumps to the next
/// arrival. The time integrals are weighted by each step's duration.
/// \throws std::invalid_argument naming the request whose id is not its place in the trace (the statistics are
///         indexed by it), naming arrivals when there is not one per request or they are not finite, non-negative and
///         in order, naming the step when clock gives a duration that is negative or not finite, and as the
///         scheduler's arrive() does.
ServeStats serve(const std::vector<Request>& trace, const std::vector<double>& arrivals, Scheduler& scheduler,
                 const StepClock& clock);

/// serve() on the step clock: request i arrives at step trace[i].arrival, every step takes 1 whatever it computes (a
/// prefill of 1,000 tokens, a recompute after a preemption and a decode alike: the step clock makes them free), and
/// \p observe, unless empty, sees every step. Fills latency and steps in steps.
ServeStats serve_on_steps(const std::vector<Request>& trace, Scheduler& scheduler, const StepObserver& observe = {});

/// Arrival times of \p requests requests, a Poisson process of \p rate per unit of time (seconds for an open-loop
/// benchmark): gaps ~ Exponential(rate), std::mt19937_64 seeded with \p seed.
/// \throws std::invalid_argument naming requests when it is 0, rate when it is not a positive finite number.
std::vector<double> poisson_arrivals(std::size_t requests, double rate, std::uint64_t seed);

/// Each served request's time to first token (arrival → first token) and time per output token ((last − first) /
/// (output − 1), for outputs of at least two tokens), in the clock's units.
struct TokenLatency {
  std::vector<double> ttft;  ///< (requests)
  std::vector<double> tpot;  ///< (requests with output ≥ 2)
};
/// \throws std::invalid_argument naming the sizes when stats, trace and arrivals do not hold one entry per request,
///         and naming the request whose times are not finite.
TokenLatency token_latency(const ServeStats& stats, const std::vector<Request>& trace,
                           const std::vector<double>& arrivals);

/// The mean of \p latency (steps per request).
/// \throws std::invalid_argument when latency is empty.
double latency_mean(const std::vector<std::size_t>& latency);
/// The \p q quantile of \p latency (0 … 1, nearest rank: the smallest value at least a share q of them reach).
/// \throws std::invalid_argument when latency is empty or q is outside [0, 1].
std::size_t latency_quantile(const std::vector<std::size_t>& latency, double q);
/// The same quantile of times (seconds): nearest rank.
/// \throws std::invalid_argument naming times when it is empty or holds a NaN or an infinity, and q when it is outside
/// [0, 1].
double time_quantile(const std::vector<double>& times, double q);

/// How a scheduler that reserves each sequence's maximum batches.
enum class Batching {
  fixed,       ///< static batching: a batch starts together and the next starts when all of it has finished
  continuous,  ///< Orca's continuous batching: a finished sequence leaves at once and a waiting one takes its place
};

/// A scheduler that reserves \p max_len token slots for every sequence it admits (the longest it may grow: the
/// memory a contiguous cache must set aside before it knows the output's length), \p budget_tokens slots in all, at
/// most \p max_running sequences at once, first come first served. Each admitted prompt is prefilled whole in the step
/// that admits it.
class ReservingScheduler final : public Scheduler {
 public:
  /// \throws std::invalid_argument naming the sizes when max_running or max_len is 0, when budget_tokens holds no
  ///         sequence of max_len, and naming batching when it is neither value.
  ReservingScheduler(Batching batching, std::size_t budget_tokens, std::size_t max_len, std::size_t max_running);
  /// \throws std::invalid_argument naming the request when its prompt or output is 0 or prompt + output − 1 exceeds
  ///         max_len.
  void arrive(const Request& r) override;
  StepWork step() override;
  bool idle() const override;
  double cached_tokens() const override;
  double held_slots() const override;
  std::size_t running_count() const override { return running_.size(); }

 private:
  struct Reserved {
    std::size_t id, cached, remaining;  // its request, the tokens it has cached and those still to generate
  };
  Batching batching_;
  std::size_t max_len_, slots_;    // slots_: sequences the reservations allow
  std::vector<Request> waiting_;   // in arrival order, from waiting_front_
  std::size_t waiting_front_ = 0;  // the queue's front in waiting_ (popped requests stay behind it)
  std::vector<Reserved> running_;
};

/// serve_on_steps() with a ReservingScheduler.
/// \p observe, unless empty, is given each step's work. Idle stretches (nothing running or waiting) cost nothing: the
/// clock jumps to the next arrival, with the same statistics as stepping through them.
/// \throws std::invalid_argument as ReservingScheduler does, checking every request before the first step, and as
///         serve() does.
ServeStats serve_reserving(const std::vector<Request>& trace, Batching batching, std::size_t budget_tokens,
                           std::size_t max_len, std::size_t max_running, const StepObserver& observe = {});

}  // namespace attn::ch17
