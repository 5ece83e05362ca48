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

std::size_t StepWork::tokens() const {
  std::size_t n = decode_lengths.size();
  for (const PrefillChunk& c : prefills) n += c.tokens;
  return n;
}

std::size_t StepWork::generated() const {
  std::size_t n = decode_lengths.size();
  for (const PrefillChunk& c : prefills) n += c.last ? 1 : 0;
  return n;
}

std::vector<double> poisson_arrivals(std::size_t requests, double rate, std::uint64_t seed) {
  require(requests > 0, "poisson_arrivals: requests = 0; a trace needs at least one");
  require(std::isfinite(rate) && rate > 0, fmt::format("poisson_arrivals: rate = {} must be a positive number", rate));
  checked_allocation("poisson_arrivals: the arrival times, requests × 8 bytes", {requests, 8});
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> at(requests);
  double clock = 0.0;
  for (double& t : at) t = clock += gap(rng);
  return at;
}

// [serve]
ServeStats serve(const std::vector<Request>& trace, const std::vector<double>& arrivals, Scheduler& scheduler,
                 const StepClock& clock) {
  require(arrivals.size() == trace.size(),
          fmt::format("serve: {} arrivals for a trace of {} requests; one each", arrivals.size(), trace.size()));
  for (std::size_t i = 0; i < trace.size(); ++i) {
    require(trace[i].id == i, fmt::format("serve: the trace's request {} has id {}; a request's id is its place in "
                                          "the trace",
                                          i, trace[i].id));
    require(std::isfinite(arrivals[i]) && arrivals[i] >= 0 && (i == 0 || arrivals[i] >= arrivals[i - 1]),
            fmt::format("serve: arrivals[{}] = {}; arrivals are finite, non-negative and in order", i, arrivals[i]));
  }
  const std::size_t n = trace.size();
  ServeStats st;
  st.first_token_at.assign(n, -1.0);  // −1: not yet
  st.finished_at.assign(n, 0.0);
  double now = 0.0, idle = 0.0;
  std::size_t next = 0, done = 0, steps = 0;
  while (done < n) {
    for (; next < n && arrivals[next] <= now; ++next) scheduler.arrive(trace[next]);  // checked once, as it arrives
    StepWork work = scheduler.step();
    work.idle_before = idle;
    idle = 0.0;
    for (const std::size_t id : work.finished) st.finished_at[id] = now;  // its last token: the step before's end
    done += work.finished.size();
    const double dt = clock(work);  // the step's duration: 1 on the step clock, its seconds when its work is run
    require(std::isfinite(dt) && dt >= 0, fmt::format("serve: the clock gave step {} a duration of {}; a step takes "
                                                      "a finite time, 0 or more",
                                                      steps, dt));
    for (const std::size_t id : work.first_token)
      if (st.first_token_at[id] < 0) st.first_token_at[id] = now + dt;  // a readmitted request's first token is older
    st.generated += work.generated();
    st.preemptions += work.preempted.size();
    st.recomputed += work.recomputed;
    for (const PrefillChunk& c : work.prefills) st.prefilled += c.tokens;
    if (done == n) break;  // the last step only saw the last sequences leave: it computed nothing and takes no time
    st.cached_token_steps += scheduler.cached_tokens() * dt;  // in double: sums of lengths may pass 2^64
    st.reserved_token_steps += scheduler.held_slots() * dt;
    st.mean_running += static_cast<double>(scheduler.running_count()) * dt;
    st.most_running = std::max(st.most_running, scheduler.running_count());
    now += dt;
    ++steps;
    // Nothing runs or waits: the time up to the next arrival changes nothing and adds nothing to the integrals, so the
    // clock jumps over it (one step at a time, a request arriving at step 2^40 was never reached).
    if (scheduler.idle() && next < n && arrivals[next] > now) {
      idle = arrivals[next] - now;
      now = arrivals[next];
    }
  }
  st.elapsed = now;
  st.steps = steps;
  st.mean_running /= now > 0 ? now : 1.0;
  return st;
}
// [serve]

ServeStats serve_on_steps(const std::vector<Request>& trace, Scheduler& scheduler, const StepObserver& observe) {
  std::vector<double> arrivals;
  for (const Request& r : trace) arrivals.push_back(static_cast<double>(r.arrival));
  ServeStats st = serve(trace, arrivals, scheduler, [&](const StepWork& work) {
    if (observe) observe(work);
    return 1.0;  // every step alike: what it computes is not charged
  });
  st.steps = static_cast<std::size_t>(st.elapsed);  // steps until the last request finished, the idle ones included
  st.latency.assign(trace.size(), 0);
  for (const Request& r : trace)
    st.latency[r.id] = static_cast<std::size_t>(st.finished_at[r.id] - static_cast<double>(r.arrival));
  return st;
}

TokenLatency token_latency(const ServeStats& stats, const std::vector<Request>& trace,
                           const std::vector<double>& arrivals) {
  require(stats.first_token_at.size() == trace.size() && stats.finished_at.size() == trace.size() &&
              arrivals.size() == trace.size(),
          fmt::format("token_latency: {} first tokens, {} finishes and {} arrivals for a trace of {} requests; one "
                      "each",
                      stats.first_token_at.size(), stats.finished_at.size(), arrivals.size(), trace.size()));
  for (std::size_t i = 0; i < trace.size(); ++i)
    require(std::isfinite(stats.first_token_at[i]) && std::isfinite(stats.finished_at[i]) && std::isfinite(arrivals[i]),
            fmt::format("token_latency: request {} has first_token_at = {}, finished_at = {} and arrivals = {}; each "
                        "is a finite time",
                        i, stats.first_token_at[i], stats.finished_at[i], arrivals[i]));
  TokenLatency out;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    out.ttft.push_back(stats.first_token_at[i] - arrivals[i]);
    if (trace[i].output >= 2)
      out.tpot.push_back((stats.finished_at[i] - stats.first_token_at[i]) / static_cast<double>(trace[i].output - 1));
  }
  return out;
}

double latency_mean(const std::vector<std::size_t>& latency) {
  require(!latency.empty(), "latency_mean: latency is empty: no latencies to average");
  double sum = 0.0;
  for (const std::size_t x : latency) sum += static_cast<double>(x);
  return sum / static_cast<double>(latency.size());
}

namespace {

/// The \p q quantile of \p values by nearest rank: the smallest value at least a share q of them reach.
template <class T>
T nearest_rank(const char* where, const char* name, std::vector<T> values, double q) {
  require(!values.empty(), fmt::format("{}: {} is empty: nothing to rank", where, name));
  require(q >= 0.0 && q <= 1.0, fmt::format("{}: q = {} must be in [0, 1]", where, q));
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[rank == 0 ? 0 : rank - 1];
}

}  // namespace

std::size_t latency_quantile(const std::vector<std::size_t>& latency, double q) {
  return nearest_rank("latency_quantile", "latency", latency, q);
}

double time_quantile(const std::vector<double>& times, double q) {
  for (std::size_t i = 0; i < times.size(); ++i)
    require(std::isfinite(times[i]), fmt::format("time_quantile: times[{}] = {}; a time is finite", i, times[i]));
  return nearest_rank("time_quantile", "times", times, q);
}

// [serve_reserving]
ReservingScheduler::ReservingScheduler(Batching batching, std::size_t budget_tokens, std::size_t max_len,
                                       std::size_t max_running)
    : batching_(batching), max_len_(max_len) {
  require(max_running > 0 && max_len > 0 && budget_tokens >= max_len,
          fmt::format("serve_reserving: max_running = {}, max_len = {}, budget_tokens = {}; need at least one "
                      "sequence of max_len in the budget",
                      max_running, max_len, budget_tokens));
  require(batching == Batching::fixed || batching == Batching::continuous,
          fmt::format("serve_reserving: batching = {} is neither Batching::fixed nor Batching::continuous",
                      static_cast<int>(batching)));
  slots_ = std::min(max_running, budget_tokens / max_len);
}

namespace {

/// Throws, naming the request, unless its prompt and output are at least 1 and prompt + output − 1 ≤ max_len.
void require_fits_reservation(const Request& r, std::size_t max_len) {
  // prompt + output − 1 ≤ max_len, compared without adding (the sum can wrap past SIZE_MAX).
  require(r.prompt > 0 && r.output > 0 && r.prompt <= max_len && r.output - 1 <= max_len - r.prompt,
          fmt::format("serve_reserving: request {} has prompt {} and output {}; it must fit in max_len = {}", r.id,
                      r.prompt, r.output, max_len));
}

}  // namespace

void ReservingScheduler::arrive(const Request& r) {
  require_fits_reservation(r, max_len_);
  waiting_.push_back(r);
}

StepWork ReservingScheduler::step() {
  StepWork work;
  // Finished sequences leave; their last token was generated at the step before this one.
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->remaining > 0) {
      ++it;
      continue;
    }
    work.finished.push_back(it->id);
    it = running_.erase(it);
  }
  for (Reserved& s : running_) {  // each running sequence decodes one token
    ++s.cached;
    --s.remaining;
    work.decode_lengths.push_back(s.cached);
  }
  // Static batching admits only into an empty batch; continuous batching into every free reservation.
  const bool may_admit = batching_ == Batching::continuous || running_.empty();
  while (may_admit && waiting_front_ < waiting_.size() && running_.size() < slots_) {
    const Request& r = waiting_[waiting_front_++];
    running_.push_back({r.id, r.prompt, r.output - 1});  // prefilled whole, and its first token generated
    work.prefills.push_back({r.id, 0, r.prompt, true});
    work.first_token.push_back(r.id);
  }
  if (waiting_front_ == waiting_.size()) {  // the queue is empty: forget the requests it served
    waiting_.clear();
    waiting_front_ = 0;
  }
  return work;
}

double ReservingScheduler::cached_tokens() const {
  double cached = 0.0;
  for (const Reserved& s : running_) cached += static_cast<double>(s.cached);
  return cached;
}

double ReservingScheduler::held_slots() const {
  return static_cast<double>(running_.size()) * static_cast<double>(max_len_);
}

bool ReservingScheduler::idle() const { return running_.empty() && waiting_front_ == waiting_.size(); }

ServeStats serve_reserving(const std::vector<Request>& trace, Batching batching, std::size_t budget_tokens,
                           std::size_t max_len, std::size_t max_running, const StepObserver& observe) {
  ReservingScheduler scheduler(batching, budget_tokens, max_len, max_running);
  for (std::size_t i = 0; i < trace.size(); ++i) {  // every request checked before the first step
    require(trace[i].id == i, fmt::format("serve_reserving: the trace's request {} has id {}; a request's id is its "
                                          "place in the trace",
                                          i, trace[i].id));
    require_fits_reservation(trace[i], max_len);
  }
  return serve_on_steps(trace, scheduler, observe);
}
// [serve_reserving]

}  // namespace attn::ch17
