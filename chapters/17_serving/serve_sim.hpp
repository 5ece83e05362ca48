/// \file
/// Chapter 17's paged continuous batching over a request trace: the learner's schedule_step() at every step, with
/// the same clock and statistics as the reserving schedulers of trace.hpp. Header-only because it calls the contract,
/// which each track supplies. Book page: book/17_serving.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "17_serving/serving.hpp"
#include "17_serving/trace.hpp"
#include "attn/checks.hpp"

namespace attn::ch17 {

namespace detail {

/// The work of a step \p plan of schedule_step() left \p running in: each decoded sequence's cached length and each
/// admitted one's prompt (its prefill: the prompt, without the part a shared prefix already holds).
inline StepWork step_work(const StepPlan& plan, const std::vector<Sequence>& running) {
  StepWork work;
  work.finished = plan.finished;
  for (const Sequence& s : running) {
    const bool admitted = std::find(plan.admitted.begin(), plan.admitted.end(), s.id) != plan.admitted.end();
    if (admitted)
      work.prefill_prompts.push_back(s.prompt);
    else
      work.decode_lengths.push_back(s.table.length);
  }
  return work;
}

}  // namespace detail

// [serve_paged]
/// Serves \p trace with continuous batching over a pool of \p blocks blocks of \p block_size tokens, at most
/// \p max_running sequences at once: schedule_step() decides every step.
/// \p observe, unless empty, is given each step's work. Idle stretches (nothing running or waiting) cost nothing: the
/// clock jumps to the next arrival, with the same statistics as stepping through them. A step's cost is
/// schedule_step()'s: what it runs, admits and preempts, not the queue's length. \throws std::invalid_argument as
/// BlockAllocator and schedule_step() do, naming the request when it arrives with a
///         prompt or output of 0 or could never fit in the pool (prompt + output − 1 past its tokens), and
///         naming the request whose id is not its place in the trace (the statistics are indexed by it).
inline ServeStats serve_paged(const std::vector<Request>& trace, std::size_t blocks, std::size_t block_size,
                              std::size_t max_running, const StepObserver& observe = {}) {
  for (std::size_t i = 0; i < trace.size(); ++i)
    require(trace[i].id == i, fmt::format("serve_paged: the trace's request {} has id {}; a request's id is its place "
                                          "in the trace",
                                          i, trace[i].id));
  BlockAllocator pool(blocks, block_size);
  std::deque<Sequence> waiting;
  std::vector<Sequence> running;
  ServeStats st;
  st.latency.assign(trace.size(), 0);
  std::size_t next = 0, done = 0, step = 0, idle = 0;
  for (; done < trace.size(); ++step) {
    for (; next < trace.size() && trace[next].arrival <= step; ++next) {
      const Request& r = trace[next];  // checked once, as it arrives (schedule_step() checks only its front)
      const std::size_t most = block_size > std::numeric_limits<std::size_t>::max() / blocks
                                   ? std::numeric_limits<std::size_t>::max()
                                   : blocks * block_size;
      if (r.prompt == 0 || r.output == 0 || r.prompt > most || r.output - 1 > most - r.prompt)
        throw std::invalid_argument(
            fmt::format("serve_paged: request {} has prompt {} and output {}; it needs at "
                        "least one of each, and the pool's {} blocks of B = {} hold {} tokens",
                        r.id, r.prompt, r.output, blocks, block_size, most));
      waiting.push_back(Sequence{r.id, r.prompt, r.output, {}});
    }
    const StepPlan plan = schedule_step(pool, waiting, running, max_running);
    for (const std::size_t id : plan.finished) st.latency[id] = step - trace[id].arrival;
    if (observe) {
      StepWork work = detail::step_work(plan, running);
      work.idle_before = idle;
      observe(work);
    }
    idle = 0;
    done += plan.finished.size();
    st.generated += plan.decoded.size() + plan.admitted.size();
    st.preemptions += plan.preempted.size();
    // The preempted wait at the front, their prompts to be prefilled again: only the front is read (the rest of the
    // queue is the step's business no more than the scheduler's).
    for (std::size_t i = 0; i < plan.preempted.size() && i < waiting.size(); ++i)
      if (std::find(plan.preempted.begin(), plan.preempted.end(), waiting[i].id) != plan.preempted.end())
        st.recomputed += waiting[i].prompt;
    double cached = 0.0;  // in double: a sum of lengths, like blocks × B below, may pass 2^64
    for (const Sequence& s : running) cached += static_cast<double>(s.table.length);
    st.cached_token_steps += cached;
    st.reserved_token_steps += static_cast<double>(pool.used_blocks()) * static_cast<double>(block_size);
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
// [serve_paged]

}  // namespace attn::ch17
