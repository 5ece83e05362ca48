/// \file
/// Chapter 17's paged continuous batching over a request trace, as two Schedulers that serve() drives (trace.hpp):
/// PagedScheduler runs the learner's schedule_step() at every step, each admitted prompt prefilled whole in one step;
/// ChunkedScheduler adds what vLLM V1's scheduler does with max_num_batched_tokens (and Sarathi-Serve before it): a
/// per-step token budget that a step fills with its decodes first and then with prompt chunks, so that a long prompt
/// is prefilled over several steps instead of stalling every decode behind it. Header-only because both call the
/// contract, which each track supplies. Book page: book/17_serving.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "17_serving/serving.hpp"
#include "17_serving/trace.hpp"
#include "attn/checks.hpp"

namespace attn::ch17 {

namespace detail {

/// ⌈n / B⌉ without wrapping.
inline std::size_t blocks_for(std::size_t n, std::size_t B) { return n / B + (n % B != 0 ? 1 : 0); }

/// Throws, naming \p where and the request, unless it has a prompt and an output and fits in a pool of \p blocks
/// blocks of \p block_size tokens at its longest (prompt + output − 1 tokens, compared without wrapping).
inline void require_fits_pool(const char* where, const Request& r, std::size_t blocks, std::size_t block_size) {
  const std::size_t most = block_size > std::numeric_limits<std::size_t>::max() / blocks
                               ? std::numeric_limits<std::size_t>::max()
                               : blocks * block_size;
  if (r.prompt == 0 || r.output == 0 || r.prompt > most || r.output - 1 > most - r.prompt)
    throw std::invalid_argument(
        fmt::format("{}: request {} has prompt {} and output {}; it needs at least one of each, and the pool's {} "
                    "blocks of B = {} hold {} tokens",
                    where, r.id, r.prompt, r.output, blocks, block_size, most));
}

/// The work of a step \p plan of schedule_step() left \p running and \p waiting in: each decoded sequence's cached
/// length, each admitted one's prefill (its prompt, over the part a shared prefix already holds) and the tokens the
/// preempted, at the front of the queue, will prefill again.
inline StepWork step_work(const StepPlan& plan, const std::vector<Sequence>& running,
                          const std::deque<Sequence>& waiting) {
  StepWork work;
  work.finished = plan.finished;
  work.preempted = plan.preempted;
  work.first_token = plan.admitted;
  for (const Sequence& s : running) {
    const bool admitted = std::find(plan.admitted.begin(), plan.admitted.end(), s.id) != plan.admitted.end();
    if (admitted)
      work.prefills.push_back({s.id, s.table.length - s.prompt, s.prompt, true});
    else
      work.decode_lengths.push_back(s.table.length);
  }
  // The preempted wait at the front: only the front is read (the rest of the queue is no business of the step's).
  for (std::size_t i = 0; i < plan.preempted.size() && i < waiting.size(); ++i)
    if (std::find(plan.preempted.begin(), plan.preempted.end(), waiting[i].id) != plan.preempted.end())
      work.recomputed += waiting[i].prompt;
  return work;
}

}  // namespace detail

// [serve_paged]
/// Continuous batching over a pool of \p blocks blocks of \p block_size tokens, at most \p max_running sequences at
/// once: the learner's schedule_step() decides every step. A step's cost is schedule_step()'s: what it runs, admits
/// and preempts, not the queue's length.
class PagedScheduler final : public Scheduler {
 public:
  /// \throws std::invalid_argument as BlockAllocator and schedule_step() do.
  PagedScheduler(std::size_t blocks, std::size_t block_size, std::size_t max_running)
      : pool_(blocks, block_size), max_running_(max_running) {
    require(max_running > 0, "serve_paged: max_running = 0; at least one sequence must be able to run");
  }
  /// \throws std::invalid_argument naming the request when it has a prompt or output of 0 or could never fit in the
  ///         pool (prompt + output − 1 past its tokens).
  void arrive(const Request& r) override {
    detail::require_fits_pool("serve_paged", r, pool_.total_blocks(), pool_.block_size());
    waiting_.push_back(Sequence{r.id, r.prompt, r.output, {}});
  }
  StepWork step() override {
    const StepPlan plan = schedule_step(pool_, waiting_, running_, max_running_);
    return detail::step_work(plan, running_, waiting_);
  }
  bool idle() const override { return running_.empty() && waiting_.empty(); }
  double cached_tokens() const override {
    double cached = 0.0;  // in double: a sum of lengths, like blocks × B below, may pass 2^64
    for (const Sequence& s : running_) cached += static_cast<double>(s.table.length);
    return cached;
  }
  double held_slots() const override {
    return static_cast<double>(pool_.used_blocks()) * static_cast<double>(pool_.block_size());
  }
  std::size_t running_count() const override { return running_.size(); }

 private:
  BlockAllocator pool_;
  std::size_t max_running_;
  std::deque<Sequence> waiting_;
  std::vector<Sequence> running_;
};

/// serve_on_steps() with a PagedScheduler: \p trace served on the step clock.
/// \p observe, unless empty, is given each step's work. Idle stretches (nothing running or waiting) cost nothing: the
/// clock jumps to the next arrival, with the same statistics as stepping through them.
/// \throws std::invalid_argument as PagedScheduler does (each request checked once, as it arrives) and as serve() does.
inline ServeStats serve_paged(const std::vector<Request>& trace, std::size_t blocks, std::size_t block_size,
                              std::size_t max_running, const StepObserver& observe = {}) {
  PagedScheduler scheduler(blocks, block_size, max_running);
  return serve_on_steps(trace, scheduler, observe);
}
// [serve_paged]

// [chunked]
/// Continuous batching over a paged pool with chunked prefill under a per-step token budget (vLLM V1's
/// max_num_batched_tokens; Sarathi-Serve's stall-free batching). Each step, in this order:
///  1. finished sequences leave, their blocks freed;
///  2. running sequences, oldest first, while the budget lasts: a decoding one takes one token of it, one whose
///     prompt is not all prefilled takes its next chunk, min(tokens left, budget left); its slots are reserved with
///     append_slot(), preempting the youngest running sequence (possibly itself) when the pool is dry, as
///     schedule_step() does: it goes to the front of the queue to prefill everything it had again (recompute);
///  3. waiting requests, front first, while the budget lasts and fewer than max_running run: the front's first chunk,
///     min(prompt, budget left), when its blocks are free, else admission stops (first come, first served).
/// A chunk that ends its prompt yields the request's first token. A step computes at most \p token_budget tokens, so
/// its duration is bounded whatever the prompts: decodes are never stalled behind a prompt longer than the budget.
class ChunkedScheduler final : public Scheduler {
 public:
  /// \throws std::invalid_argument as BlockAllocator does, naming max_running or token_budget when 0.
  ChunkedScheduler(std::size_t blocks, std::size_t block_size, std::size_t max_running, std::size_t token_budget)
      : pool_(blocks, block_size), max_running_(max_running), budget_(token_budget) {
    require(max_running > 0 && token_budget > 0,
            fmt::format("serve_chunked: max_running = {} and token_budget = {}; each must be at least 1", max_running,
                        token_budget));
  }
  /// \throws std::invalid_argument as PagedScheduler::arrive() does.
  void arrive(const Request& r) override {
    detail::require_fits_pool("serve_chunked", r, pool_.total_blocks(), pool_.block_size());
    waiting_.push_back(Running{Sequence{r.id, r.prompt, r.output, {}}, r.prompt});
  }
  StepWork step() override {
    StepWork work;
    for (auto it = running_.begin(); it != running_.end();) {  // 1. finished
      if (it->todo > 0 || it->seq.remaining > 0) {
        ++it;
        continue;
      }
      release_table(pool_, it->seq.table);
      work.finished.push_back(it->seq.id);
      it = running_.erase(it);
    }
    std::size_t budget = budget_;
    for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {  // 2. running: decodes and next chunks
      const std::size_t tokens = running_[i].todo > 0 ? std::min(running_[i].todo, budget) : 1;
      if (!reserve(i, tokens, work)) break;  // it was the youngest and is preempted: no one runs after it
      record(running_[i], tokens, work);
      budget -= tokens;
    }
    while (budget > 0 && !waiting_.empty() && running_.size() < max_running_) {  // 3. admit first chunks
      Running& next = waiting_.front();
      const std::size_t tokens = std::min(next.todo, budget), B = pool_.block_size();
      if (detail::blocks_for(next.seq.table.length + tokens, B) - next.seq.table.blocks.size() > pool_.free_blocks())
        break;
      for (std::size_t t = 0; t < tokens; ++t) append_slot(next.seq.table, pool_);  // fits: checked above
      running_.push_back(std::move(next));
      waiting_.pop_front();
      record(running_.back(), tokens, work);
      budget -= tokens;
    }
    return work;
  }
  bool idle() const override { return running_.empty() && waiting_.empty(); }
  double cached_tokens() const override {
    double cached = 0.0;
    for (const Running& r : running_) cached += static_cast<double>(r.seq.table.length);
    return cached;
  }
  double held_slots() const override {
    return static_cast<double>(pool_.used_blocks()) * static_cast<double>(pool_.block_size());
  }
  std::size_t running_count() const override { return running_.size(); }

 private:
  struct Running {
    Sequence seq;          // prompt: the tokens to prefill when (re)admitted; table: the slots reserved so far
    std::size_t todo = 0;  // prompt tokens not yet prefilled (0: it decodes)
  };

  /// Reserves \p tokens slots for running_[i], preempting the youngest while the pool is dry; false when running_[i]
  /// was the youngest and is preempted itself.
  bool reserve(std::size_t i, std::size_t tokens, StepWork& work) {
    const std::size_t before = running_[i].seq.table.length;
    for (std::size_t k = 0; k < tokens; ++k) {
      std::optional<Slot> slot = append_slot(running_[i].seq.table, pool_);
      while (!slot) {
        const bool self = i + 1 == running_.size();
        preempt_youngest(self ? before : running_.back().seq.table.length, work);
        if (self) return false;
        slot = append_slot(running_[i].seq.table, pool_);
      }
    }
    return true;
  }

  /// Sends the youngest running sequence, which held \p cached tokens at the start of the step, to the front of the
  /// queue, its blocks freed: it will prefill its cached tokens, the prompt tokens it had not reached yet and, when
  /// it was decoding, the last token it generated.
  void preempt_youngest(std::size_t cached, StepWork& work) {
    Running victim = std::move(running_.back());
    running_.pop_back();
    const std::size_t last = victim.todo == 0 ? 1 : 0;  // a decoding sequence's last generated token
    const std::size_t again = cached + victim.todo + last;
    release_table(pool_, victim.seq.table);
    victim.seq.prompt = victim.todo = again;  // remaining unchanged: it generated nothing this step
    work.preempted.push_back(victim.seq.id);
    // Computed again: the cached tokens thrown away, and a decoding sequence's last token (as schedule_step() counts
    // it); the prompt tokens a sequence had not reached were never computed, so they are no recompute.
    work.recomputed += cached + last;
    waiting_.push_front(std::move(victim));
  }

  /// What \p tokens of work mean for \p r: a decode, or a chunk of its prompt (the last one yields its first token).
  static void record(Running& r, std::size_t tokens, StepWork& work) {
    if (r.todo == 0) {
      work.decode_lengths.push_back(r.seq.table.length);
      --r.seq.remaining;
      return;
    }
    r.todo -= tokens;
    work.prefills.push_back({r.seq.id, r.seq.table.length - tokens, tokens, r.todo == 0});
    if (r.todo == 0) {
      --r.seq.remaining;
      work.first_token.push_back(r.seq.id);
    }
  }

  BlockAllocator pool_;
  std::size_t max_running_, budget_;
  std::deque<Running> waiting_;
  std::vector<Running> running_;
};
// [chunked]

/// serve_on_steps() with a ChunkedScheduler: \p trace served on the step clock.
/// \throws std::invalid_argument as ChunkedScheduler does and as serve() does.
inline ServeStats serve_chunked(const std::vector<Request>& trace, std::size_t blocks, std::size_t block_size,
                                std::size_t max_running, std::size_t token_budget, const StepObserver& observe = {}) {
  ChunkedScheduler scheduler(blocks, block_size, max_running, token_budget);
  return serve_on_steps(trace, scheduler, observe);
}

}  // namespace attn::ch17
