// Chapter 17's request trace and the schedulers that reserve each sequence's maximum (trace.hpp). Chapter code: the
// baselines the learner's paged scheduler is measured against. Book page: book/17_serving.md.
#include "17_serving/trace.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn::ch17 {

// [request_trace]
std::vector<Request> request_trace(const TraceSpec& s) {
  require(s.requests > 0, "request_trace: requests = 0; a trace needs at least one");
  require(std::isfinite(s.arrivals_per_step) && s.arrivals_per_step > 0,
          fmt::format("request_trace: arrivals_per_step = {} must be a positive number", s.arrivals_per_step));
  require(s.prompt_min > 0 && s.prompt_min <= s.prompt_max,
          fmt::format("request_trace: prompt_min = {} and prompt_max = {}; need 1 ≤ prompt_min ≤ prompt_max",
                      s.prompt_min, s.prompt_max));
  // Above 1e15 the geometric draw's 1 − 1/output_mean rounds to 1 (its log to 0): the draw would divide by zero.
  require(std::isfinite(s.output_mean) && s.output_mean >= 1.0 && s.output_mean <= 1e15 && s.output_max > 0,
          fmt::format("request_trace: output_mean = {} and output_max = {}; need 1 ≤ output_mean ≤ 1e15 and "
                      "output_max ≥ 1",
                      s.output_mean, s.output_max));
  checked_allocation("request_trace: the requests, requests × 32 bytes", {s.requests, 32});
  std::mt19937_64 rng(s.seed);
  std::exponential_distribution<double> gap(s.arrivals_per_step);
  std::uniform_int_distribution<std::size_t> prompt(s.prompt_min, s.prompt_max);
  std::geometric_distribution<std::size_t> extra(1.0 / s.output_mean);  // failures before a success: 0, 1, …
  std::vector<Request> trace;
  double clock = 0.0;
  for (std::size_t i = 0; i < s.requests; ++i) {
    clock += gap(rng);
    // A double at or past 2^64 has no std::size_t (the conversion is undefined: at a rate of 1e-300 it gave 0).
    if (!(clock < 18446744073709551616.0))
      throw std::invalid_argument(
          fmt::format("request_trace: arrivals_per_step = {} puts request {} at step {}, past "
                      "the last step a std::size_t counts (2^64 - 1); use a higher rate",
                      s.arrivals_per_step, i, clock));
    const std::size_t p = prompt(rng), o = std::min(s.output_max, 1 + extra(rng));
    trace.push_back({i, static_cast<std::size_t>(clock), p, o});
  }
  return trace;
}
// [request_trace]

double latency_mean(const std::vector<std::size_t>& latency) {
  require(!latency.empty(), "latency_mean: latency is empty: no latencies to average");
  double sum = 0.0;
  for (const std::size_t x : latency) sum += static_cast<double>(x);
  return sum / static_cast<double>(latency.size());
}

std::size_t latency_quantile(const std::vector<std::size_t>& latency, double q) {
  require(!latency.empty(), "latency_quantile: latency is empty: no latencies to rank");
  require(q >= 0.0 && q <= 1.0, fmt::format("latency_quantile: q = {} must be in [0, 1]", q));
  std::vector<std::size_t> sorted = latency;
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[rank == 0 ? 0 : rank - 1];
}

namespace {

/// A sequence a reserving scheduler runs: its request, the tokens it has cached and those still to generate.
struct Reserved {
  std::size_t id, cached, remaining;
};

}  // namespace

// [serve_reserving]
ServeStats serve_reserving(const std::vector<Request>& trace, Batching batching, std::size_t budget_tokens,
                           std::size_t max_len, std::size_t max_running, const StepObserver& observe) {
  require(max_running > 0 && max_len > 0 && budget_tokens >= max_len,
          fmt::format("serve_reserving: max_running = {}, max_len = {}, budget_tokens = {}; need at least one "
                      "sequence of max_len in the budget",
                      max_running, max_len, budget_tokens));
  require(batching == Batching::fixed || batching == Batching::continuous,
          fmt::format("serve_reserving: batching = {} is neither Batching::fixed nor Batching::continuous",
                      static_cast<int>(batching)));
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const Request& r = trace[i];
    require(r.id == i, fmt::format("serve_reserving: the trace's request {} has id {}; a request's id is its place in "
                                   "the trace",
                                   i, r.id));
    // prompt + output − 1 ≤ max_len, compared without adding (the sum can wrap past SIZE_MAX).
    require(r.prompt > 0 && r.output > 0 && r.prompt <= max_len && r.output - 1 <= max_len - r.prompt,
            fmt::format("serve_reserving: request {} has prompt {} and output {}; it must fit in max_len = {}", r.id,
                        r.prompt, r.output, max_len));
  }
  const std::size_t slots = std::min(max_running, budget_tokens / max_len);  // sequences the reservations allow
  ServeStats st;
  st.latency.assign(trace.size(), 0);
  std::deque<std::size_t> waiting;  // request indices, in arrival order
  std::vector<Reserved> running;
  std::size_t next = 0, done = 0, step = 0, idle = 0;
  StepWork work;
  for (; done < trace.size(); ++step) {
    work = StepWork{};
    work.idle_before = idle;
    idle = 0;
    while (next < trace.size() && trace[next].arrival <= step) waiting.push_back(next++);
    // Finished sequences leave; their last token was generated at the step before this one.
    for (auto it = running.begin(); it != running.end();) {
      if (it->remaining > 0) {
        ++it;
        continue;
      }
      st.latency[it->id] = step - trace[it->id].arrival;
      work.finished.push_back(it->id);
      ++done;
      it = running.erase(it);
    }
    for (Reserved& s : running) {  // each running sequence decodes one token
      ++s.cached;
      --s.remaining;
      ++st.generated;
      work.decode_lengths.push_back(s.cached);
    }
    // Static batching admits only into an empty batch; continuous batching into every free reservation.
    const bool may_admit = batching == Batching::continuous || running.empty();
    while (may_admit && !waiting.empty() && running.size() < slots) {
      const Request& r = trace[waiting.front()];
      waiting.pop_front();
      running.push_back({r.id, r.prompt, r.output - 1});  // prefilled, and its first token generated
      ++st.generated;
      work.prefill_prompts.push_back(r.prompt);
    }
    if (observe) observe(work);
    std::size_t cached = 0;
    for (const Reserved& s : running) cached += s.cached;
    st.cached_token_steps += static_cast<double>(cached);
    st.reserved_token_steps += static_cast<double>(running.size() * max_len);
    st.mean_running += static_cast<double>(running.size());
    st.most_running = std::max(st.most_running, running.size());
    // Nothing runs or waits: the steps up to the next arrival change nothing and add nothing to the sums, so the clock
    // jumps over them (one at a time, a request arriving at step 2^40 was never reached).
    if (running.empty() && waiting.empty() && next < trace.size() && trace[next].arrival > step + 1) {
      idle = trace[next].arrival - step - 1;
      step = trace[next].arrival - 1;  // the loop's ++step lands on the arrival
    }
  }
  st.steps = step == 0 ? 0 : step - 1;  // the last step only saw the last sequences leave (an empty trace: none)
  st.mean_running /= static_cast<double>(std::max<std::size_t>(st.steps, 1));
  return st;
}
// [serve_reserving]

}  // namespace attn::ch17
