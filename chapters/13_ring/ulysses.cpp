// DeepSpeed-Ulysses in one process (see ulysses.hpp). Book page: book/13_ring.md.
#include "13_ring/ulysses.hpp"

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "13_ring/ring.hpp"
#include "attn/checks.hpp"

namespace attn::ch13 {

namespace {
/// Tokens [c.begin, c.end) of heads [h0, h1) of T: (h1 - h0, |c|, d).
Tensor3 slab(const Tensor3& T, std::size_t h0, std::size_t h1, Chunk c) {
  return xt::view(T, xt::range(h0, h1), xt::range(c.begin, c.end), xt::all());
}
}  // namespace

UlyssesRun ulysses_in_one_process(const Tensor3& Q, const Tensor3& K, const Tensor3& V, std::size_t P, bool causal) {
  const std::size_t h = Q.shape(0), n = Q.shape(1), d_k = Q.shape(2), d_v = V.shape(2);
  require(K.shape(0) == h && V.shape(0) == h && K.shape(1) == n && V.shape(1) == n && K.shape(2) == d_k,
          fmt::format("ulysses_in_one_process: Q {}, K {} and V {} must be (h, n, d_k), (h, n, d_k), (h, n, d_v)",
                      shape_str(Q), shape_str(K), shape_str(V)));
  require(P > 0 && P <= h,
          fmt::format("ulysses_in_one_process: P = {} ranks, h = {} heads: Ulysses splits the heads, so it needs "
                      "1 ≤ P ≤ h",
                      P, h));
  UlyssesRun run{Tensor3(Tensor3::shape_type{h, n, d_v}), std::vector<std::size_t>(P, 0)};

  // [ulysses_exchange]
  // Before: rank r holds every head of its tokens. The all-to-all gives rank s heads even_chunk(s, P, h) of
  // all tokens: g_s = h/P of them when P divides h, else ⌊h/P⌋ or ⌈h/P⌉.
  std::vector<Tensor3> O_by_heads;  // rank s: (g_s, n, d_v)
  for (std::size_t s = 0; s < P; ++s) {
    const Chunk heads = even_chunk(s, P, h);
    const std::size_t g = heads.size();
    Tensor3 Q_s(Tensor3::shape_type{g, n, d_k}), K_s(Tensor3::shape_type{g, n, d_k});  // (g, n, d_k)
    Tensor3 V_s(Tensor3::shape_type{g, n, d_v});                                       // (g, n, d_v)
    for (std::size_t r = 0; r < P; ++r) {
      const Chunk c = even_chunk(r, P, n);
      xt::view(Q_s, xt::all(), xt::range(c.begin, c.end), xt::all()) = slab(Q, heads.begin, heads.end, c);
      xt::view(K_s, xt::all(), xt::range(c.begin, c.end), xt::all()) = slab(K, heads.begin, heads.end, c);
      xt::view(V_s, xt::all(), xt::range(c.begin, c.end), xt::all()) = slab(V, heads.begin, heads.end, c);
      if (r != s) run.bytes_sent[r] += g * c.size() * (2 * d_k + d_v) * sizeof(float);  // what r sent to s
    }
    // Ordinary attention over the whole sequence, head by head: no ring, no merge.
    O_by_heads.push_back(ch05::flash_attention_fast(Q_s, K_s, V_s, causal, ch05::default_tiles_on(1)).O);
  }
  // The second all-to-all: rank s returns to rank r the rows of r's tokens for its heads.
  for (std::size_t s = 0; s < P; ++s)
    for (std::size_t r = 0; r < P; ++r) {
      const Chunk c = even_chunk(r, P, n), heads = even_chunk(s, P, h);
      const std::size_t g = heads.size();
      xt::view(run.O, xt::range(heads.begin, heads.end), xt::range(c.begin, c.end), xt::all()) =
          xt::view(O_by_heads[s], xt::all(), xt::range(c.begin, c.end), xt::all());
      if (r != s) run.bytes_sent[s] += g * c.size() * d_v * sizeof(float);
    }
  // [ulysses_exchange]
  return run;
}

std::size_t ulysses_bytes_sent(std::size_t rank, std::size_t P, std::size_t n, std::size_t h, std::size_t d_k,
                               std::size_t d_v) {
  require(P > 0 && P <= h && rank < P,
          fmt::format("ulysses_bytes_sent: rank {} of P = {} ranks, h = {} heads (needs rank < P ≤ h)", rank, P, h));
  const std::size_t rows = even_chunk(rank, P, n).size(), g = even_chunk(rank, P, h).size();
  // Refused, never wrapped, each naming the sizes it multiplies.
  constexpr const char* width_what = "ulysses_bytes_sent: a token's Q, K and V, 2·d_k + d_v";
  constexpr const char* bytes_what =
      "ulysses_bytes_sent: the bytes, ((h - g)·rows·(2·d_k + d_v) + g·(n - rows)·d_v)·4 for this rank's g heads and "
      "rows tokens";
  const std::size_t width = checked_sum(width_what, {checked_product(width_what, {2, d_k}), d_v});
  return checked_product(bytes_what, {checked_sum(bytes_what, {checked_product(bytes_what, {h - g, rows, width}),
                                                               checked_product(bytes_what, {g, n - rows, d_v})}),
                                      sizeof(float)});
}

}  // namespace attn::ch13
