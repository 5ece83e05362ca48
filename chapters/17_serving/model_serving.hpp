/// \file
/// Chapter 12's trained model served as a serving system serves one: many requests at once under continuous
/// batching (the learner's schedule_step()), their keys and values in a paged cache read through block tables (the
/// learner's paged_attention()), requests that start with the same prompt sharing its blocks. And the same model
/// generating one request at a time with chapter 12's own forward pass over the whole sequence (a contiguous
/// computation, no cache): the tokens must be the same. Header-only because it calls the contract, which each
/// track supplies. Book page: book/17_serving.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "11_positions/positions.hpp"
#include "12_learning/model.hpp"
#include "17_serving/serving.hpp"
#include "attn/checks.hpp"

namespace attn::ch17 {

/// A request to the model: its prompt's tokens and how many tokens to generate.
struct Prompt {
  std::vector<std::size_t> tokens;  ///< (n ≥ 1) token ids of the model's vocabulary
  std::size_t generate = 1;         ///< tokens to generate (≥ 1)
};

/// What a batched run did besides its tokens.
struct ModelServeLog {
  std::size_t steps = 0;             ///< scheduler steps
  std::size_t most_running = 0;      ///< the most sequences decoding at once
  std::size_t preemptions = 0;       ///< sequences sent back to the queue
  std::size_t shared_blocks = 0;     ///< blocks of the shared prefix, computed once and held by every request
  std::size_t most_blocks_used = 0;  ///< the most blocks in use at once
};

namespace detail {

/// The most likely next token: the largest logit's index (the first of equals).
inline std::size_t greedy_token(const float* logits, std::size_t vocab) {
  return static_cast<std::size_t>(std::max_element(logits, logits + vocab) - logits);
}

/// Throws, naming \p where and the prompt, unless every prompt has a token, asks for one or more and fits the context.
inline void require_prompts(const char* where, const ch12::Model& model, const std::vector<Prompt>& prompts) {
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const Prompt& p = prompts[i];
    // tokens + generate − 1 ≤ context, compared without adding (generate near SIZE_MAX would wrap the sum).
    require(!p.tokens.empty() && p.generate > 0 && p.tokens.size() <= model.config.context &&
                p.generate - 1 <= model.config.context - p.tokens.size(),
            fmt::format("{}: prompt {} has {} tokens and asks for {}; it needs at least one of each, and at most {} in "
                        "all less one (the model's context)",
                        where, i, p.tokens.size(), p.generate, model.config.context + 1));
  }
}

}  // namespace detail

/// Greedy generation one request at a time, with chapter 12's forward() over the whole sequence at every token (no
/// cache: keys and values recomputed, contiguous): the reference the paged, batched run must equal.
/// \return (prompts) the generated tokens of each prompt.
/// \throws std::invalid_argument as chapter 12's require_model() does (a config and tensors that disagree, a NaN
///         weight), when a prompt is empty, asks for 0 tokens, or would outgrow the model's context, and as chapter
///         12's forward() does (a token outside the vocabulary).
inline std::vector<std::vector<std::size_t>> generate_one_at_a_time(const ch12::Model& model,
                                                                    const std::vector<Prompt>& prompts) {
  ch12::require_model("generate_one_at_a_time", model);  // config and tensors agree, before any division by heads
  detail::require_prompts("generate_one_at_a_time", model, prompts);
  std::vector<std::vector<std::size_t>> out;
  for (const Prompt& p : prompts) {
    std::vector<std::size_t> tokens = p.tokens, generated;
    for (std::size_t i = 0; i < p.generate; ++i) {
      const Matrix logits = ch12::forward(model, tokens).logits;  // (n, vocab)
      const std::size_t vocab = logits.shape(1);
      generated.push_back(detail::greedy_token(logits.data() + (tokens.size() - 1) * vocab, vocab));
      tokens.push_back(generated.back());
    }
    out.push_back(generated);
  }
  return out;
}

namespace detail {

// [model_token_step]
/// The model on one token at position \p position of a sequence whose table already holds its slot: per layer, the
/// token's q, k, v (RoPE at its position), k and v written into the paged cache (copy_on_write() first, in case the
/// block is shared), the attention over tokens 0 … position through the table (paged_attention()), W_O added into
/// the residual stream. \return (vocab) the logits for the next token.
inline Vector model_token_step(const ch12::Model& model, PagedKVCache& cache, BlockTable& table, std::size_t position,
                               std::size_t token) {
  const ch12::Config& c = model.config;
  const std::size_t d_k = c.d_model / c.heads, B = cache.shape().block_size;
  require(copy_on_write(cache, table, position / B),
          "model_token_step: no free block to copy a shared block into; give the pool more blocks");
  BlockTable seen{std::vector<BlockId>(table.blocks.begin(), table.blocks.begin() + position / B + 1), position + 1};
  Matrix x = ch12::embed_tokens(model, {token});  // (1, d_model)
  for (std::size_t l = 0; l < c.layers; ++l) {
    const ch12::Layer& L = model.layers[l];
    const Matrix Q = matmul(x, L.W_Q), K = matmul(x, L.W_K), V = matmul(x, L.W_V);  // (1, d_model) each
    Matrix q = xt::zeros<float>({c.heads, d_k}), k = q, v = q;                      // (heads, d_k): one row per head
    for (std::size_t h = 0; h < c.heads; ++h) {
      Matrix qh = xt::view(Q, xt::all(), xt::range(h * d_k, (h + 1) * d_k));  // (1, d_k)
      Matrix kh = xt::view(K, xt::all(), xt::range(h * d_k, (h + 1) * d_k));
      apply_rope(qh, position, c.rope_base);  // chapter 11, at the token's own position
      apply_rope(kh, position, c.rope_base);
      xt::row(q, h) = xt::row(qh, 0);
      xt::row(k, h) = xt::row(kh, 0);
      xt::row(v, h) = xt::view(V, 0, xt::range(h * d_k, (h + 1) * d_k));
    }
    cache.write(l, table.blocks[position / B], position % B, k, v);
    const Matrix heads = paged_attention(cache, l, seen, q);  // (heads, d_k): every head its own KV head
    Matrix concat = Matrix::from_shape({1, c.d_model});       // (1, d_model): the heads side by side
    std::copy(heads.begin(), heads.end(), concat.begin());
    x = x + matmul(concat, L.W_O);
  }
  const Matrix logits = matmul(x, model.unembed);  // (1, vocab)
  return xt::row(logits, 0);
}
// [model_token_step]

}  // namespace detail

// [generate_batched]
/// Greedy generation of every prompt at once: continuous batching by schedule_step() over a paged cache of
/// \p blocks blocks of \p block_size tokens, at most \p max_running sequences at once. The whole blocks of the
/// prompts' longest common beginning are computed once and shared by every request (share_table()); the rest of
/// each prompt is prefilled when the request is admitted, again after a preemption (recompute).
/// \return (prompts) the generated tokens of each prompt; \p log says what the run did.
/// \throws std::invalid_argument as chapter 12's require_model() does (heads 0 or not dividing d_model, a layer
///         count other than the config's, a weight of the wrong shape, a NaN weight: named, before anything is
///         computed), when a prompt is empty, asks for 0 tokens, or would outgrow the model's context, and as
///         PagedKVCache and schedule_step() do.
inline std::vector<std::vector<std::size_t>> generate_batched(const ch12::Model& model,
                                                              const std::vector<Prompt>& prompts,
                                                              std::size_t block_size, std::size_t blocks,
                                                              std::size_t max_running, ModelServeLog& log) {
  // The model is a plain struct: its config and its tensors are checked to agree (heads > 0 dividing d_model, as
  // many layers as the config says, every weight's shape, no NaN) before d_model / heads and every layer are used.
  ch12::require_model("generate_batched", model);
  const ch12::Config& c = model.config;
  const std::size_t d_k = c.d_model / c.heads;
  detail::require_prompts("generate_batched", model, prompts);
  const KvShape shape{c.layers, c.heads, d_k, d_k, block_size};
  PagedKVCache cache(shape, checked_product("generate_batched: the cache's bytes, blocks × block bytes",
                                            {blocks, kv_block_bytes(shape, sizeof(float))}));
  log = ModelServeLog{};
  // The shared prefix: the whole blocks of the prompts' common beginning, prefilled once (no logits needed).
  std::size_t common = prompts.empty() ? 0 : prompts[0].tokens.size();
  for (const Prompt& p : prompts)
    common = std::min<std::size_t>(
        common,
        static_cast<std::size_t>(std::mismatch(p.tokens.begin(), p.tokens.begin() + std::min(common, p.tokens.size()),
                                               prompts[0].tokens.begin())
                                     .first -
                                 p.tokens.begin()));
  if (prompts.size() < 2) common = 0;
  const std::size_t shared_len = std::min(common, prompts.empty() ? 0 : prompts[0].tokens.size() - 1) / block_size *
                                 block_size;  // whole blocks, and at least one token of each prompt left to prefill
  BlockTable prefix;
  for (std::size_t t = 0; t < shared_len; ++t) {
    require(append_slot(prefix, cache.pool()).has_value(), "generate_batched: the pool cannot hold the shared prefix");
    detail::model_token_step(model, cache, prefix, t, prompts[0].tokens[t]);
  }
  log.shared_blocks = prefix.blocks.size();
  // Every request waits holding the shared blocks; its prompt is the rest.
  std::map<std::size_t, std::vector<std::size_t>> tokens;  // request id → prompt and generated tokens
  std::deque<Sequence> waiting;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    tokens[i] = prompts[i].tokens;
    waiting.push_back(
        Sequence{i, prompts[i].tokens.size() - shared_len, prompts[i].generate, share_table(cache.pool(), prefix)});
  }
  release_table(cache.pool(), prefix);  // the requests hold the prefix now; it is freed with the last of them
  std::vector<Sequence> running;
  std::vector<std::vector<std::size_t>> out(prompts.size());
  const auto generated = [&](std::size_t id, const Vector& logits) {
    out[id].push_back(detail::greedy_token(logits.data(), c.vocab));
    tokens[id].push_back(out[id].back());
  };
  while (!waiting.empty() || !running.empty()) {
    const StepPlan plan = schedule_step(cache.pool(), waiting, running, max_running);
    require(!running.empty() || !plan.finished.empty(),
            fmt::format("generate_batched: no request can run: the pool's {} blocks cannot hold the next prompt beside "
                        "the shared prefix's",
                        blocks));
    ++log.steps;
    log.preemptions += plan.preempted.size();
    log.most_running = std::max(log.most_running, running.size());
    log.most_blocks_used = std::max(log.most_blocks_used, cache.pool().used_blocks());
    for (Sequence& s : running) {
      const bool admitted = std::find(plan.admitted.begin(), plan.admitted.end(), s.id) != plan.admitted.end();
      const bool decoded = std::find(plan.decoded.begin(), plan.decoded.end(), s.id) != plan.decoded.end();
      if (admitted) {  // prefill the prompt's positions, the last one's logits give the first new token
        Vector logits;
        for (std::size_t t = s.table.length - s.prompt; t < s.table.length; ++t)
          logits = detail::model_token_step(model, cache, s.table, t, tokens[s.id][t]);
        generated(s.id, logits);
      } else if (decoded) {  // the last generated token, at the slot the step reserved for it
        const std::size_t t = s.table.length - 1;
        generated(s.id, detail::model_token_step(model, cache, s.table, t, tokens[s.id][t]));
      }
    }
  }
  return out;
}
// [generate_batched]

}  // namespace attn::ch17
