// Chapter 17's fast paged decode and split-KV decoding (paged_decode.hpp). Book pages: book/17_serving.md,
// book/measure_17_serving.md.
//
// The learner's paged_attention() is right and simple: per query head, every score, a softmax, the weighted sum,
// each key found through the table. This file is the same computation in chapter 09's one pass, on chapter 09's own
// block step (ch09::detail::GroupAttention): per group of r = h/g query heads, the tokens are walked in steps of 32,
// each made of the stretches that lie together in the cache (never across a block's end), and each step's r × 32
// scores, online softmax and O += P·V are computed while its keys and values are in the core's cache. A block is B
// contiguous rows per KV head, so what paging costs is one table lookup per stretch and, for B < 32, more and
// shorter stretches for the score and P·V loops; the online softmax still runs once per 32 tokens.
//
// Split-KV decoding (Flash-Decoding) cuts the table into ranges of whole blocks, runs one range per thread and
// merges the parts with chapter 05's merge_states(): one sequence's decode step then reads memory on every core.
#include "17_serving/paged_decode.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/row_ops.hpp"
#include "09_mqa_gqa/decode_blocks.hpp"
#include "attn/checks.hpp"

namespace attn::ch17 {

namespace {

constexpr float kNoKey = -std::numeric_limits<float>::infinity();

/// Throws unless the table holds the blocks its length needs: ⌈length / B⌉, computed without wrapping ((length + B −
/// 1) / B wraps for a length near SIZE_MAX, and a table of no blocks passed).
void require_blocks(const char* where, const BlockTable& table, std::size_t B) {
  const std::size_t needed = table.length / B + (table.length % B != 0 ? 1 : 0);
  if (table.blocks.size() != needed)
    throw std::invalid_argument(
        fmt::format("{}: the table holds {} tokens in {} blocks; with B = {} that needs {} "
                    "blocks",
                    where, table.length, table.blocks.size(), B, needed));
}

/// Why a pass over tokens [first, end) left O non-finite (the pass sums e^{s − m}·v before dividing by Σ e^{s − m},
/// so the sum can pass float's limit even when no score does): the scores when d_k · max|q| · max|k| over the range is
/// past the course's bound, else the values.
std::string overflow_reason(const char* where, const char* q_name, const PagedKVCache& cache, std::size_t layer,
                            const BlockTable& table, const Matrix& q, std::size_t first, std::size_t end) {
  const KvShape& s = cache.shape();
  float max_q = 0.0f, max_k = 0.0f, max_v = 0.0f;
  for (std::size_t c = 0; c < q.size(); ++c) max_q = std::max(max_q, std::abs(q.data()[c]));
  for (std::size_t t = first; t < end; ++t)
    for (std::size_t j = 0; j < s.kv_heads; ++j) {
      const BlockId b = table.blocks[t / s.block_size];
      const float* k = cache.keys(layer, b, j) + (t % s.block_size) * s.d_k;
      const float* v = cache.values(layer, b, j) + (t % s.block_size) * s.d_v;
      for (std::size_t c = 0; c < s.d_k; ++c) max_k = std::max(max_k, std::abs(k[c]));
      for (std::size_t c = 0; c < s.d_v; ++c) max_v = std::max(max_v, std::abs(v[c]));
    }
  const double bound = static_cast<double>(s.d_k) * max_q * max_k;
  if (bound > kMaxScoreBound)
    return fmt::format(
        "{}: a score {}·k overflowed float: d_k = {} times max|{}| = {} times max|k| = {} is "
        "past the bound {}; scale the query or the keys down",
        where, q_name, s.d_k, q_name, max_q, max_k, kMaxScoreBound);
  return fmt::format(
      "{}: the values' weighted sum overflowed float: values up to max|v| = {} over {} "
      "tokens, summed before the division by the softmax's total (every q·k within the bound); scale "
      "the values down",
      where, max_v, end - first);
}

/// One step of the walk: up to ch09::kDecodeKeysPerBlock tokens as stretches that lie together in the cache (a whole
/// block, or part of one), `keys` in all.
struct Step {
  std::array<ch09::detail::KeyRows, ch09::kDecodeKeysPerBlock> parts;
  std::size_t count = 0, keys = 0;
};

/// The state of the group's r rows over tokens [first, end): m, ℓ (r) and acc (r, d_v), unnormalised.
// [paged_group]
void attend_group_paged(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, std::size_t group,
                        const float* Q_j, std::size_t r, std::size_t first, std::size_t end, float* m, float* l,
                        float* acc) {
  const KvShape& s = cache.shape();
  const std::size_t B = s.block_size, chunk = ch09::kDecodeKeysPerBlock;
  // The step that starts at token t0: `chunk` tokens (fewer at the end), cut at every block's end, each stretch
  // found through the table (logical block t / B → physical block), its rows contiguous there. Blocks shorter than
  // a chunk share one step, so the online softmax runs once per chunk of tokens whatever B is.
  const auto step_at = [&](std::size_t t0) {
    Step step;
    for (std::size_t t = t0; t < end && step.keys < chunk; t += step.parts[step.count++].keys) {
      const std::size_t offset = t % B, keys = std::min({chunk - step.keys, B - offset, end - t});
      const BlockId block = table.blocks[t / B];
      step.parts[step.count] = {cache.keys(layer, block, group) + offset * s.d_k,
                                cache.values(layer, block, group) + offset * s.d_v, keys};
      step.keys += keys;
    }
    return step;
  };
  ch09::detail::GroupAttention attend(Q_j, r, s.d_k, s.d_v);  // chapter 09's block step
  Step here = step_at(first), next;
  for (std::size_t t0 = first; t0 < end; t0 += here.keys, here = next) {
    next = step_at(t0 + here.keys);
    // Each stretch prefetches the next step's stretch at the same place when that one is as long: the hardware
    // prefetcher stops at page ends, and a block is a page or less.
    for (std::size_t i = 0; i < here.count && i < next.count; ++i)
      if (next.parts[i].keys >= here.parts[i].keys) {
        here.parts[i].K_next = next.parts[i].K;
        here.parts[i].V_next = next.parts[i].V;
      }
    attend.add_parts(here.parts.data(), here.count, m, l, acc);
  }
}
// [paged_group]

}  // namespace

FlashOutput paged_decode_range(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q,
                               std::size_t first, std::size_t end) {
  const KvShape& s = cache.shape();
  const std::size_t h = q.shape(0), g = s.kv_heads;
  require(q.shape(1) == s.d_k, fmt::format("paged_decode: q is {} but the cache holds keys of d_k = {}; q must be "
                                           "(h, {})",
                                           shape_str(q), s.d_k, s.d_k));
  require(h > 0 && h % g == 0, fmt::format("paged_decode: q is {}: h = {} query heads cannot share g = {} key/value "
                                           "heads evenly; g must divide h",
                                           shape_str(q), h, g));
  require(first <= end && end <= table.length, fmt::format("paged_decode: tokens [{}, {}) are not a range of the "
                                                           "table's {} tokens",
                                                           first, end, table.length));
  require_blocks("paged_decode", table, s.block_size);
  require(layer < s.layers, fmt::format("paged_decode: layer {} does not exist; the cache has {}", layer, s.layers));
  require_finite("paged_decode", "q", q.data(), q.size());
  const std::size_t r = h / g;
  const Matrix q_scaled = q * (1.0f / std::sqrt(static_cast<float>(s.d_k)));  // (h, d_k): the 1/√d_k once
  Vector m(Vector::shape_type{h}, kNoKey), l(Vector::shape_type{h}, 0.0f);    // (h) running max and sum
  Matrix acc = xt::zeros<float>({h, s.d_v});                                  // (h, d_v)
  for (std::size_t j = 0; j < g; ++j)  // group j: query rows j·r … j·r + r − 1 share KV head j
    attend_group_paged(cache, layer, table, j, q_scaled.data() + j * r * s.d_k, r, first, end, m.data() + j * r,
                       l.data() + j * r, acc.data() + j * r * s.d_v);
  FlashOutput out{std::move(acc), Vector(Vector::shape_type{h}, kNoKey), 0};
  for (std::size_t i = 0; i < h; ++i) {
    if (l(i) == 0.0f) continue;  // an empty range: O = 0, lse = −inf
    ch05::scale_row(out.O.data() + i * s.d_v, s.d_v, 1.0f / l(i));
    out.lse(i) = m(i) + std::log(l(i));
  }
  // The overflow policy needs the largest cached key, which only this pass reads: an overflowed score, or a sum of
  // values near float's limit, shows as a NaN or an infinity. Which of the two is found after the fact.
  if (!std::all_of(out.O.begin(), out.O.end(), [](float x) { return std::isfinite(x); }))
    throw std::invalid_argument(overflow_reason("paged_decode", "q", cache, layer, table, q, first, end));
  return out;
}

Matrix paged_decode(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q) {
  require(table.length > 0, "paged_decode: the table is empty (length 0): there is no token to attend to");
  return paged_decode_range(cache, layer, table, q, 0, table.length).O;
}

// [paged_prefill]
Tensor3 paged_prefill(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Tensor3& Q,
                      std::size_t first) {
  const KvShape& s = cache.shape();
  const std::size_t h = Q.shape(0), c = Q.shape(1), g = s.kv_heads;
  require(Q.shape(2) == s.d_k && c > 0, fmt::format("paged_prefill: Q is {} but the cache holds keys of d_k = {}; Q "
                                                    "must be (h, c, {}) with c ≥ 1 tokens",
                                                    shape_str(Q), s.d_k, s.d_k));
  require(h > 0 && h % g == 0, fmt::format("paged_prefill: Q is {}: h = {} query heads cannot share g = {} "
                                           "key/value heads evenly; g must divide h",
                                           shape_str(Q), h, g));
  require(first <= table.length && c <= table.length - first,  // first + c ≤ length, without adding
          fmt::format("paged_prefill: a chunk of c = {} tokens from first = {} passes the table's {} tokens; write "
                      "the chunk's keys and values first",
                      c, first, table.length));
  require_blocks("paged_prefill", table, s.block_size);
  require(layer < s.layers, fmt::format("paged_prefill: layer {} does not exist; the cache has {}", layer, s.layers));
  require_finite("paged_prefill", "Q", Q.data(), Q.size());
  const std::size_t r = h / g, rows = c * r;  // per group: the chunk's c tokens × its r query heads
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d_k));
  Tensor3 O = xt::zeros<float>({h, c, s.d_v});                               // (h, c, d_v)
  std::vector<float> Qg(rows * s.d_k), m(rows), l(rows), acc(rows * s.d_v);  // group j's rows, token-major
  for (std::size_t j = 0; j < g; ++j) {
    for (std::size_t i = 0; i < c; ++i)  // row i·r + a: token first + i, query head j·r + a, scaled by 1/√d_k once
      for (std::size_t a = 0; a < r; ++a)
        for (std::size_t x = 0; x < s.d_k; ++x) Qg[(i * r + a) * s.d_k + x] = Q(j * r + a, i, x) * scale;
    std::fill(m.begin(), m.end(), kNoKey);
    std::fill(l.begin(), l.end(), 0.0f);
    std::fill(acc.begin(), acc.end(), 0.0f);
    // The cached prefix: every query of the chunk sees all of it, so its keys are read once for all c·r rows.
    attend_group_paged(cache, layer, table, j, Qg.data(), rows, 0, first, m.data(), l.data(), acc.data());
    // The chunk itself, causal: token first + i sees the chunk's keys first … first + i.
    for (std::size_t i = 0; i < c; ++i)
      attend_group_paged(cache, layer, table, j, Qg.data() + i * r * s.d_k, r, first, first + i + 1, m.data() + i * r,
                         l.data() + i * r, acc.data() + i * r * s.d_v);
    for (std::size_t i = 0; i < c; ++i)  // normalise: every row saw at least its own key, so ℓ > 0
      for (std::size_t a = 0; a < r; ++a)
        for (std::size_t x = 0; x < s.d_v; ++x) O(j * r + a, i, x) = acc[(i * r + a) * s.d_v + x] / l[i * r + a];
  }
  if (!std::all_of(O.begin(), O.end(), [](float x) { return std::isfinite(x); })) {
    const Matrix q_all = xt::reshape_view(Q, {h * c, s.d_k});  // (h·c, d_k): only its largest entry is read
    throw std::invalid_argument(overflow_reason("paged_prefill", "Q", cache, layer, table, q_all, 0, first + c));
  }
  return O;
}
// [paged_prefill]

FlashOutput split_kv_decode(const PagedKVCache& cache, std::size_t layer, const BlockTable& table, const Matrix& q,
                            std::size_t splits, std::size_t threads) {
  require(splits > 0 && threads > 0,
          fmt::format("split_kv_decode: splits = {} and threads = {}; each must be at least 1", splits, threads));
  require(table.length > 0, "split_kv_decode: the table is empty (length 0): there is no token to attend to");
  require_blocks("split_kv_decode", table, cache.shape().block_size);
  const std::size_t B = cache.shape().block_size, blocks = table.blocks.size();
  const std::size_t parts = std::min(splits, blocks);  // each range holds whole blocks, at least one
  // [split_kv]
  std::vector<FlashOutput> part(parts);  // (parts) each range's O (h, d_v) and lse (h)
  std::atomic<std::size_t> next{0};
  run_on_threads(std::min(threads, parts), [&] {
    for (std::size_t p = next++; p < parts; p = next++) {
      const std::size_t first = p * blocks / parts * B, end = std::min(table.length, (p + 1) * blocks / parts * B);
      part[p] = paged_decode_range(cache, layer, table, q, first, end);  // (h, d_v) and lse (h)
    }
  });
  // [split_kv]
  // Chapter 05's merge: a part's result (O, lse) is the online state m = lse, ℓ = 1, acc = O.
  const std::size_t h = q.shape(0), d_v = cache.shape().d_v;
  OnlineState merged = empty_state(h, d_v);
  for (const FlashOutput& p : part) {
    OnlineState st = empty_state(h, d_v);
    for (std::size_t i = 0; i < h; ++i) {
      if (p.lse(i) == kNoKey) continue;
      st.m(i) = p.lse(i);
      st.l(i) = 1.0f;
      std::copy_n(p.O.data() + i * d_v, d_v, st.acc.data() + i * d_v);
    }
    merged = merge_states(merged, st);
  }
  FlashOutput out{xt::zeros<float>({h, d_v}), Vector(Vector::shape_type{h}, kNoKey), 0};
  for (std::size_t i = 0; i < h; ++i) {
    if (merged.l(i) == 0.0f) continue;
    for (std::size_t c = 0; c < d_v; ++c) out.O(i, c) = merged.acc(i, c) / merged.l(i);
    out.lse(i) = merged.m(i) + std::log(merged.l(i));
  }
  return out;
}

}  // namespace attn::ch17
