// Chapter 13's MPI program, its schedule (see schedule.hpp). Book page: book/13_ring.md.
#include "13_ring/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "05_flash_cpu/flash_fast.hpp"
#include "13_ring/ulysses.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace attn::ch13 {

Matrix make_rows(const Chunks& chunks, std::size_t d, std::uint64_t seed, std::uint64_t tensor) {
  Matrix X(Matrix::shape_type{rows_of(chunks), d});  // (rows of chunks, d)
  std::size_t row = 0;
  for (const Chunk& c : chunks)
    for (std::size_t i = c.begin; i < c.end; ++i, ++row) {
      Rng rng(seed * 0x9E3779B97F4A7C15ull + 3 * i + tensor);
      const Matrix x = rng.normal(1, d);  // (1, d)
      std::copy(x.begin(), x.end(), X.data() + row * d);
    }
  return X;
}

RankInputs rank_inputs(const Chunks& chunks, std::size_t n, std::size_t d, std::uint64_t seed) {
  return {n, make_rows(chunks, d, seed, 0), {make_rows(chunks, d, seed, 1), make_rows(chunks, d, seed, 2)}};
}

const char* name_of(Split s) { return s == Split::zigzag ? "zigzag" : "contiguous"; }

void require_heads_for_ulysses(std::size_t h, int P) {
  require(static_cast<std::size_t>(P) <= h,
          fmt::format("--heads {}: Ulysses splits the heads over the ranks, so it needs at least P = {} heads "
                      "(or --heads 0 to skip it)",
                      h, P));
}

namespace {

int g_fail_on_rank = -1;  // --fail-on-rank: the test that a failing rank stops the job instead of hanging it

/// This rank's rows of \p split at length \p n.
Chunks my_chunks(const World& w, std::size_t n, Split split) {
  return rank_chunks(static_cast<std::size_t>(w.rank), static_cast<std::size_t>(w.P), n, split);
}

/// Chapter 05's single-process flash on the whole sequence (the same rows as the ranks').
FlashOutput single_process(std::size_t n, std::size_t d, std::uint64_t seed, bool causal,
                           const ch05::FastConfig& config) {
  const Chunks all{{0, n}};
  return ch05::flash_attention_fast(make_rows(all, d, seed, 0), make_rows(all, d, seed, 1), make_rows(all, d, seed, 2),
                                    causal, config);
}

/// The whole sequence's result on rank 0: every rank's rows sent there and put at their positions.
FlashOutput gather_output(const World& w, const FlashOutput& mine, std::size_t n, Split split) {
  const std::size_t d_v = mine.O.shape(1);
  FlashOutput all{Matrix(Matrix::shape_type{n, d_v}, 0.0f), Vector(Vector::shape_type{n}, 0.0f)};
  if (w.rank != 0) {
    MPI_Send(mine.O.data(), as_count(mine.O.size()), MPI_FLOAT, 0, 2, MPI_COMM_WORLD);
    MPI_Send(mine.lse.data(), as_count(mine.lse.size()), MPI_FLOAT, 0, 3, MPI_COMM_WORLD);
    return all;
  }
  for (int r = 0; r < w.P; ++r) {
    const Chunks chunks = rank_chunks(static_cast<std::size_t>(r), static_cast<std::size_t>(w.P), n, split);
    FlashOutput part = mine;
    if (r != 0) {
      part.O = Matrix(Matrix::shape_type{rows_of(chunks), d_v});  // (rows_r, d_v)
      part.lse = Vector(Vector::shape_type{rows_of(chunks)});     // (rows_r)
      MPI_Recv(part.O.data(), as_count(part.O.size()), MPI_FLOAT, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Recv(part.lse.data(), as_count(part.lse.size()), MPI_FLOAT, r, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    scatter_rows(all.O, part.O, chunks);
    const Matrix lse_col = xt::reshape_view(part.lse, {part.lse.size(), std::size_t{1}});  // (rows_r, 1)
    Matrix lse_all = xt::reshape_view(all.lse, {n, std::size_t{1}});                       // (n, 1)
    scatter_rows(lse_all, lse_col, chunks);
    all.lse = xt::reshape_view(lse_all, {n});
  }
  return all;
}

/// Every rank's rows of \p split at length \p n, in rank order.
std::vector<std::size_t> rows_per_rank(const World& w, std::size_t n, Split split) {
  std::vector<std::size_t> rows;
  for (int r = 0; r < w.P; ++r)
    rows.push_back(rows_of(rank_chunks(static_cast<std::size_t>(r), static_cast<std::size_t>(w.P), n, split)));
  return rows;
}

// Both sides are float32 flash over ≤ 101 keys in a different summation order (n·2^-24 ≈ 6e-6 relative),
// the ring adding one merge per block (a few ulp): 1e-5 absolute plus 1e-5 relative.
constexpr double kTol = 1e-5;

bool within_tolerance(double got, double want) { return std::fabs(got - want) <= kTol + kTol * std::fabs(want); }

/// This rank's tokens (even_chunk(rank, P, n)) of every head.
struct HeadInputs {
  Tensor3 Q, K, V;  // (h, rows_r, d) each
};

/// Q, K or V of every head at \p chunks' positions: (h, rows, d), head j drawn as make_rows() with its own seed,
/// so the single-process reference (all tokens) makes the same numbers.
Tensor3 make_heads(const Chunks& chunks, std::size_t h, std::size_t d, std::uint64_t seed, std::uint64_t tensor) {
  Tensor3 X(Tensor3::shape_type{h, rows_of(chunks), d});  // (h, rows, d)
  for (std::size_t j = 0; j < h; ++j) {
    const Matrix head = make_rows(chunks, d, seed + 7919 * (j + 1), tensor);  // (rows, d)
    std::copy(head.begin(), head.end(), X.data() + j * head.size());
  }
  return X;
}

HeadInputs head_inputs(const World& w, std::size_t n, std::size_t h, std::size_t d, std::uint64_t seed) {
  const Chunks mine{even_chunk(static_cast<std::size_t>(w.rank), static_cast<std::size_t>(w.P), n)};
  return {make_heads(mine, h, d, seed, 0), make_heads(mine, h, d, seed, 1), make_heads(mine, h, d, seed, 2)};
}

struct UlyssesRankRun {
  Tensor3 O;  // (h, rows_r, d_v)
  std::size_t bytes_sent = 0;
};

// [ulysses_rank]
/// One rank of DeepSpeed-Ulysses: Q, K, V to heads (three all-to-alls, transport.hpp), chapter 05's flash on
/// this rank's heads over the whole sequence (single-threaded: one core per rank), O back to tokens.
UlyssesRankRun ulysses_rank(const World& w, const HeadInputs& in, std::size_t n, bool causal) {
  const std::size_t h = in.Q.shape(0);
  require_heads_for_ulysses(h, w.P);
  std::size_t floats = 0;
  const Tensor3 Q = tokens_to_heads(w, in.Q, n, floats), K = tokens_to_heads(w, in.K, n, floats),
                V = tokens_to_heads(w, in.V, n, floats);                                             // (g, n, d) each
  const Tensor3 O_heads = ch05::flash_attention_fast(Q, K, V, causal, ch05::default_tiles_on(1)).O;  // (g, n, d_v)
  UlyssesRankRun run{heads_to_tokens(w, O_heads, h, floats), 0};
  run.bytes_sent = floats * sizeof(float);
  return run;
}
// [ulysses_rank]

/// Medians over \p repeats calls of \p run_once (after one warm-up): the wall time of the slowest rank, and the
/// CPU seconds of all ranks together. run_once returns this rank's seconds.
CallSeconds median_over_ranks(int repeats, const std::function<CallSeconds()>& run_once) {
  std::vector<double> walls, cpus;
  for (int k = 0; k < repeats + 1; ++k) {
    const CallSeconds mine = run_once();
    const double wall = max_over_ranks(mine.wall), cpu = sum_over_ranks(mine.cpu);
    if (k == 0) continue;
    walls.push_back(wall);
    cpus.push_back(cpu);
  }
  CallSeconds t;
  t.wall = median(walls);
  t.cpu = median(cpus);
  return t;
}

/// Chapter 05's flash through \p work on rank 0 with every core, the other ranks asleep: its median wall and CPU
/// seconds (repeats after a warm-up), on rank 0.
CallSeconds time_alone_on_root(const World& w, int repeats, const std::function<void()>& work) {
  CallSeconds t;
  alone_on_root(w, [&] { t = time_calls(work, {repeats, 1}); });
  return t;
}

}  // namespace

void fail_on_rank(int rank) { g_fail_on_rank = rank; }

RankRun run_rank(const World& w, const RankInputs& in, Split split, bool causal, const Tiles& tiles) {
  const std::size_t P = static_cast<std::size_t>(w.P), rank = static_cast<std::size_t>(w.rank);
  MpiLink link(w.rank, w.P);
  MPI_Barrier(MPI_COMM_WORLD);
  // The other ranks go on into the ring and wait for this rank's block, which never comes.
  if (w.rank == g_fail_on_rank) throw std::runtime_error("injected failure before the ring (--fail-on-rank)");
  RankRun run;
  run.time = time_calls([&] { run.out = ring_attention_rank(rank, P, in.n, split, in.Q, in.own, causal, link, tiles); },
                        {1, 0});
  run.bytes_sent = link.bytes_sent();
  run.waited = link.waited();
  return run;
}

std::vector<CheckLine> check_ring(const World& w) {
  std::vector<CheckLine> lines;
  for (std::size_t n : {1ul, 7ul, 50ul, 101ul})
    for (bool causal : {false, true})
      for (Split split : {Split::contiguous, Split::zigzag}) {
        const RankInputs in = rank_inputs(my_chunks(w, n, split), n, 16, 1000 + n);
        const RankRun run = run_rank(w, in, split, causal, {4, 8, 1});
        const std::size_t expected =
            ring_bytes_sent(static_cast<std::size_t>(w.rank), rows_per_rank(w, n, split), 16, 16);
        CheckLine line{n, fmt::format("{:<10} causal = {:d}", name_of(split), causal), false, false, 0, 0};
        line.bytes_ok = min_over_ranks(run.bytes_sent == expected ? 1 : 0) == 1;
        if (run.bytes_sent != expected)
          fmt::print(stderr, "ch13_ring_mpi rank {}: sent {} bytes, the formula says {} (n = {}, {})\n", w.rank,
                     run.bytes_sent, expected, n, name_of(split));
        const FlashOutput all = gather_output(w, run.out, n, split);
        int equal = 1;
        if (w.rank == 0) {
          const FlashOutput ref = single_process(n, 16, 1000 + n, causal, {4, 8, 1});
          line.O_diff = max_abs_diff(all.O, ref.O);
          line.lse_diff = max_abs_diff(all.lse, ref.lse);
          for (std::size_t i = 0; i < all.O.size(); ++i) equal &= within_tolerance(all.O.data()[i], ref.O.data()[i]);
          for (std::size_t i = 0; i < n; ++i) equal &= within_tolerance(all.lse(i), ref.lse(i));
        }
        MPI_Bcast(&equal, 1, MPI_INT, 0, MPI_COMM_WORLD);
        line.ok = equal == 1 && line.bytes_ok;
        lines.push_back(line);
      }
  return lines;
}

std::vector<CheckLine> check_ulysses(const World& w) {
  std::vector<CheckLine> lines;
  const std::size_t P = static_cast<std::size_t>(w.P), d = 16;
  for (std::size_t n : {1ul, 7ul, 50ul, 101ul})
    for (std::size_t h : {P, P + 1})
      for (bool causal : {false, true}) {
        const std::uint64_t seed = 2000 + n;
        const UlyssesRankRun run = ulysses_rank(w, head_inputs(w, n, h, d, seed), n, causal);
        const Chunks all{{0, n}};
        const Tensor3 ref = ch05::flash_attention_fast(make_heads(all, h, d, seed, 0), make_heads(all, h, d, seed, 1),
                                                       make_heads(all, h, d, seed, 2), causal, {4, 8, 1})
                                .O;  // (h, n, d)
        const Chunk mine = even_chunk(static_cast<std::size_t>(w.rank), P, n);
        double O_diff = 0;
        int within = 1;
        for (std::size_t j = 0; j < h; ++j)
          for (std::size_t i = 0; i < mine.size(); ++i)
            for (std::size_t c = 0; c < d; ++c) {
              const double want = ref(j, mine.begin + i, c);
              O_diff = std::max(O_diff, std::fabs(run.O(j, i, c) - want));
              within &= within_tolerance(run.O(j, i, c), want);
            }
        const std::size_t expected = ulysses_bytes_sent(static_cast<std::size_t>(w.rank), P, n, h, d, d);
        if (run.bytes_sent != expected)
          fmt::print(stderr, "ch13_ring_mpi rank {}: Ulysses sent {} bytes, the formula says {} (n = {}, h = {})\n",
                     w.rank, run.bytes_sent, expected, n, h);
        CheckLine line{n, fmt::format("Ulysses h = {}, causal = {:d}", h, causal), false, false, 0, -1};
        line.bytes_ok = min_over_ranks(run.bytes_sent == expected ? 1 : 0) == 1;
        line.ok = min_over_ranks(within) == 1 && line.bytes_ok;
        line.O_diff = max_over_ranks(O_diff);
        lines.push_back(line);
      }
  return lines;
}

RingTimes time_ring(const World& w, std::size_t n, std::size_t d, bool causal, int repeats, bool memory) {
  RingTimes t;
  if (!memory) {  // single-process flash on as many threads as there are ranks, the others asleep
    const ch05::FastConfig config = ch05::default_tiles_on(w.P);
    const Chunks all{{0, n}};
    Matrix Q, K, V;  // (n, d) each, on rank 0 only
    if (w.rank == 0) Q = make_rows(all, d, 13, 0), K = make_rows(all, d, 13, 1), V = make_rows(all, d, 13, 2);
    t.single = time_alone_on_root(w, repeats, [&] { (void)ch05::flash_attention_fast(Q, K, V, causal, config); });
  }
  for (Split split : {Split::contiguous, Split::zigzag}) {
    if (memory && split == Split::contiguous) continue;
    const RankInputs in = rank_inputs(my_chunks(w, n, split), n, d, 13);
    std::vector<double> walls, cpus, polls, waits, busy;
    for (int k = 0; k < repeats + (memory ? 0 : 1); ++k) {  // an extra first run warms caches and connections
      const RankRun run = run_rank(w, in, split, causal, ch05::default_tiles_on(1));
      const double wall = max_over_ranks(run.time.wall);  // the ring ends with its slowest rank
      const double cpu = sum_over_ranks(run.time.cpu), poll = sum_over_ranks(run.waited.cpu);
      if (k == 0 && !memory) continue;
      walls.push_back(wall);
      cpus.push_back(cpu);
      polls.push_back(poll);
      waits.push_back(run.waited.wall);
      busy.push_back(run.time.wall - run.waited.wall);  // computing (and copying), not waiting for a block
    }
    SplitTimes s{split, median(walls), median(cpus), median(polls), {}, {}};
    // Every rank's busy time and exposed wait (medians) to rank 0, in rank order.
    const std::vector<double> all = gather_on_root({median(busy), median(waits)}, w);
    for (std::size_t r = 0; r < all.size() / 2; ++r) {
      s.computing.push_back(all[2 * r]);
      s.waiting.push_back(all[2 * r + 1]);
    }
    t.splits.push_back(s);
  }
  return t;
}

UlyssesTimes time_ulysses_beside_ring(const World& w, std::size_t n, std::size_t d, std::size_t h, bool causal,
                                      int repeats) {
  const std::size_t P = static_cast<std::size_t>(w.P), rank = static_cast<std::size_t>(w.rank);
  require_heads_for_ulysses(h, w.P);
  UlyssesTimes t;
  const Chunks all{{0, n}};
  Tensor3 Q, K, V;  // (h, n, d) each, on rank 0 only
  if (w.rank == 0) Q = make_heads(all, h, d, 13, 0), K = make_heads(all, h, d, 13, 1), V = make_heads(all, h, d, 13, 2);
  t.single = time_alone_on_root(
      w, repeats, [&] { (void)ch05::flash_attention_fast(Q, K, V, causal, ch05::default_tiles_on(w.P)); });

  // The ring on h heads: one ring per head (zigzag), each head's rows made as Ulysses' are.
  const Chunks zig = rank_chunks(rank, P, n, Split::zigzag);
  std::vector<RankInputs> heads;
  for (std::size_t j = 0; j < h; ++j) {
    const std::uint64_t seed = 13 + 7919 * (j + 1);
    heads.push_back({n, make_rows(zig, d, seed, 0), {make_rows(zig, d, seed, 1), make_rows(zig, d, seed, 2)}});
  }
  t.ring = median_over_ranks(repeats, [&] {
    CallSeconds mine;
    t.ring_bytes = 0;
    for (const RankInputs& in : heads) {
      const RankRun run = run_rank(w, in, Split::zigzag, causal, ch05::default_tiles_on(1));
      mine.wall += run.time.wall;
      mine.cpu += run.time.cpu;
      t.ring_bytes += run.bytes_sent;
    }
    return mine;
  });

  const HeadInputs in = head_inputs(w, n, h, d, 13);
  t.ulysses = median_over_ranks(repeats, [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    return time_calls([&] { t.ulysses_bytes = ulysses_rank(w, in, n, causal).bytes_sent; }, {1, 0});
  });
  t.ring_formula = h * ring_bytes_sent(0, rows_per_rank(w, n, Split::zigzag), d, d);
  t.ulysses_formula = ulysses_bytes_sent(0, P, n, h, d, d);
  return t;
}

}  // namespace attn::ch13
