// Chapter 13 — ring attention across processes with MPI: the same ring_attention_rank() as the chapter's
// tests, one rank per process, the blocks moving by MPI_Isend/MPI_Irecv while each rank computes; and
// DeepSpeed-Ulysses, the second scheme, with two MPI_Alltoallv around ordinary (chapter 05) attention.
//
// What it shows: (1) --check: for several ragged n, causal and not, both splits, the gathered (O, lse)
// equals chapter 05's single-process flash on rank 0, and every rank's counted bytes equal the formula;
// Ulysses likewise (h = P and P + 1 heads, so heads need not be a multiple of P); a mismatch makes every rank
// exit with status 1. (2) the default run: the ring at --n, each rank's compute time and its exposed wait,
// for the contiguous and the zigzag split, against single-process flash with as many threads as ranks (the
// other ranks sleep meanwhile; it may use every core, whatever core mpirun bound rank 0 to), in wall time and
// in CPU-seconds of all ranks; then Ulysses beside the ring on --heads heads, with the bytes each sent.
// What it leaves out: layers, GPUs, any transport but the MPI library's own.
// Run it: ./course run 13 (mpirun -np 4 --oversubscribe), or chapters/13_ring/mpirun.sh NP ch13_ring_mpi ARGS;
// chapters/13_ring/record.sh re-takes the book's recording.
// Book page: book/13_ring.md. A rank that throws prints its message and aborts the whole job (MPI_Abort):
// no rank waits forever for a block that will never come.
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "05_flash_cpu/flash_fast.hpp"
#include "13_ring/ring.hpp"
#include "13_ring/ulysses.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"

namespace {

namespace ch13 = attn::ch13;
using attn::FlashOutput;
using attn::Matrix;
using ch13::Split;

int as_count(std::size_t floats) {
  attn::require(floats <= static_cast<std::size_t>(INT_MAX),
                fmt::format("ch13_ring_mpi: a block of {} floats is more than one MPI message can count", floats));
  return static_cast<int>(floats);
}

/// CPU seconds this process has used so far, every thread's (std::clock is process CPU time on Linux).
double process_cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// [mpi_link]
/// The ring's transport over MPI: non-blocking, so the rank's flash work runs while the block moves.
class MpiLink : public ch13::RingLink {
 public:
  MpiLink(int rank, int P) : next_((rank + 1) % P), prev_((rank + P - 1) % P) {}

  void start(const ch13::KVBlock& outgoing, std::size_t incoming_rows) override {
    incoming_.K = Matrix(Matrix::shape_type{incoming_rows, outgoing.K.shape(1)});  // (rows, d_k)
    incoming_.V = Matrix(Matrix::shape_type{incoming_rows, outgoing.V.shape(1)});  // (rows, d_v)
    MPI_Irecv(incoming_.K.data(), as_count(incoming_.K.size()), MPI_FLOAT, prev_, 0, MPI_COMM_WORLD, &requests_[0]);
    MPI_Irecv(incoming_.V.data(), as_count(incoming_.V.size()), MPI_FLOAT, prev_, 1, MPI_COMM_WORLD, &requests_[1]);
    MPI_Isend(outgoing.K.data(), as_count(outgoing.K.size()), MPI_FLOAT, next_, 0, MPI_COMM_WORLD, &requests_[2]);
    MPI_Isend(outgoing.V.data(), as_count(outgoing.V.size()), MPI_FLOAT, next_, 1, MPI_COMM_WORLD, &requests_[3]);
    bytes_sent_ += (outgoing.K.size() + outgoing.V.size()) * sizeof(float);
  }

  ch13::KVBlock finish() override {
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = process_cpu_seconds();
    MPI_Waitall(4, requests_, MPI_STATUSES_IGNORE);  // what the computation did not hide
    wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    wait_cpu_s_ += process_cpu_seconds() - cpu0;  // Open MPI polls while it waits: a core kept busy
    return std::move(incoming_);
  }

  std::size_t bytes_sent() const { return bytes_sent_; }
  double wait_seconds() const { return wait_s_; }
  double wait_cpu_seconds() const { return wait_cpu_s_; }

 private:
  int next_, prev_;
  MPI_Request requests_[4] = {};
  ch13::KVBlock incoming_;
  std::size_t bytes_sent_ = 0;
  double wait_s_ = 0, wait_cpu_s_ = 0;
};
// [mpi_link]

struct World {
  int rank = 0, P = 1;
};

/// Q, K or V rows at \p chunks' positions, each row drawn from its own seed (position, tensor), so a rank
/// makes only its own rows (memory ∝ n/P) and every rank, and the single-process reference, agree on them.
Matrix make_rows(const ch13::Chunks& chunks, std::size_t d, std::uint64_t seed, std::uint64_t tensor) {
  Matrix X(Matrix::shape_type{ch13::rows_of(chunks), d});  // (rows of chunks, d)
  std::size_t row = 0;
  for (const ch13::Chunk& c : chunks)
    for (std::size_t i = c.begin; i < c.end; ++i, ++row) {
      attn::Rng rng(seed * 0x9E3779B97F4A7C15ull + 3 * i + tensor);
      const Matrix x = rng.normal(1, d);  // (1, d)
      std::copy(x.begin(), x.end(), X.data() + row * d);
    }
  return X;
}

/// This rank's queries and its own key/value block.
struct Inputs {
  std::size_t n = 0;
  Matrix Q;           // (rows, d)
  ch13::KVBlock own;  // K (rows, d), V (rows, d)
};
Inputs make_inputs(const ch13::Chunks& chunks, std::size_t n, std::size_t d, std::uint64_t seed) {
  return {n, make_rows(chunks, d, seed, 0), {make_rows(chunks, d, seed, 1), make_rows(chunks, d, seed, 2)}};
}

/// Chapter 05's single-process flash on the whole sequence (the same rows as the ranks').
FlashOutput single_process(std::size_t n, std::size_t d, std::uint64_t seed, bool causal,
                           const attn::ch05::FastConfig& config) {
  const ch13::Chunks all{{0, n}};
  return attn::ch05::flash_attention_fast(make_rows(all, d, seed, 0), make_rows(all, d, seed, 1),
                                          make_rows(all, d, seed, 2), causal, config);
}

/// The whole sequence's result on rank 0: every rank's rows sent there and put at their positions.
FlashOutput gather_on_root(const World& w, const FlashOutput& mine, std::size_t n, Split split) {
  const std::size_t d_v = mine.O.shape(1);
  FlashOutput all{Matrix(Matrix::shape_type{n, d_v}, 0.0f), attn::Vector(attn::Vector::shape_type{n}, 0.0f)};
  if (w.rank != 0) {
    MPI_Send(mine.O.data(), as_count(mine.O.size()), MPI_FLOAT, 0, 2, MPI_COMM_WORLD);
    MPI_Send(mine.lse.data(), as_count(mine.lse.size()), MPI_FLOAT, 0, 3, MPI_COMM_WORLD);
    return all;
  }
  for (int r = 0; r < w.P; ++r) {
    const ch13::Chunks chunks = ch13::rank_chunks(static_cast<std::size_t>(r), static_cast<std::size_t>(w.P), n, split);
    FlashOutput part = mine;
    if (r != 0) {
      part.O = Matrix(Matrix::shape_type{ch13::rows_of(chunks), d_v});           // (rows_r, d_v)
      part.lse = attn::Vector(attn::Vector::shape_type{ch13::rows_of(chunks)});  // (rows_r)
      MPI_Recv(part.O.data(), as_count(part.O.size()), MPI_FLOAT, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Recv(part.lse.data(), as_count(part.lse.size()), MPI_FLOAT, r, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    ch13::scatter_rows(all.O, part.O, chunks);
    const Matrix lse_col = xt::reshape_view(part.lse, {part.lse.size(), std::size_t{1}});  // (rows_r, 1)
    Matrix lse_all = xt::reshape_view(all.lse, {n, std::size_t{1}});                       // (n, 1)
    ch13::scatter_rows(lse_all, lse_col, chunks);
    all.lse = xt::reshape_view(lse_all, {n});
  }
  return all;
}

struct RankRun {
  FlashOutput out;
  std::size_t bytes_sent = 0;
  double seconds = 0, wait_seconds = 0;
  double cpu_seconds = 0;       // this process's CPU time: computing, and MPI's polling while it waits
  double wait_cpu_seconds = 0;  // the part of it spent in MPI_Waitall
};

int g_fail_on_rank = -1;  // --fail-on-rank: the test that a failing rank stops the job instead of hanging it

RankRun run_rank(const World& w, const Inputs& in, Split split, bool causal, const ch13::Tiles& tiles) {
  const std::size_t P = static_cast<std::size_t>(w.P), rank = static_cast<std::size_t>(w.rank);
  MpiLink link(w.rank, w.P);
  MPI_Barrier(MPI_COMM_WORLD);
  // The other ranks go on into the ring and wait for this rank's block, which never comes.
  if (w.rank == g_fail_on_rank) throw std::runtime_error("injected failure before the ring (--fail-on-rank)");
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  RankRun run{ch13::ring_attention_rank(rank, P, in.n, split, in.Q, in.own, causal, link, tiles), link.bytes_sent(), 0,
              0};
  run.cpu_seconds = process_cpu_seconds() - cpu0;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.wait_seconds = link.wait_seconds();
  run.wait_cpu_seconds = link.wait_cpu_seconds();
  return run;
}

/// Every rank's bytes_sent, as rank 0 sees them.
std::vector<std::size_t> rows_per_rank(const World& w, std::size_t n, Split split) {
  std::vector<std::size_t> rows;
  for (int r = 0; r < w.P; ++r)
    rows.push_back(
        ch13::rows_of(ch13::rank_chunks(static_cast<std::size_t>(r), static_cast<std::size_t>(w.P), n, split)));
  return rows;
}

const char* name_of(Split s) { return s == Split::zigzag ? "zigzag" : "contiguous"; }

// --- (1) the equality checks ------------------------------------------------------------------------------

// Both sides are float32 flash over ≤ 101 keys in a different summation order (n·2^-24 ≈ 6e-6 relative),
// the ring adding one merge per block (a few ulp): 1e-5 absolute plus 1e-5 relative.
constexpr double kTol = 1e-5;

bool check_all(const World& w) {
  bool ok = true;
  for (std::size_t n : {1ul, 7ul, 50ul, 101ul})
    for (bool causal : {false, true})
      for (Split split : {Split::contiguous, Split::zigzag}) {
        const Inputs in =
            make_inputs(ch13::rank_chunks(static_cast<std::size_t>(w.rank), static_cast<std::size_t>(w.P), n, split), n,
                        16, 1000 + n);
        const RankRun run = run_rank(w, in, split, causal, {4, 8, 1});
        const std::size_t expected_bytes =
            ch13::ring_bytes_sent(static_cast<std::size_t>(w.rank), rows_per_rank(w, n, split), 16, 16);
        int bytes_ok = run.bytes_sent == expected_bytes ? 1 : 0, all_bytes_ok = 0;
        MPI_Allreduce(&bytes_ok, &all_bytes_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!bytes_ok)
          std::fprintf(stderr, "ch13_ring_mpi rank %d: sent %zu bytes, the formula says %zu (n = %zu, %s)\n", w.rank,
                       run.bytes_sent, expected_bytes, n, name_of(split));
        const FlashOutput all = gather_on_root(w, run.out, n, split);
        int equal = 1;
        if (w.rank == 0) {
          const FlashOutput ref = single_process(n, 16, 1000 + n, causal, {4, 8, 1});
          double dO = 0, dl = 0;
          bool within = true;
          for (std::size_t i = 0; i < all.O.size(); ++i) {
            const double diff = std::fabs(static_cast<double>(all.O.data()[i]) - ref.O.data()[i]);
            dO = std::max(dO, diff);
            within = within && diff <= kTol + kTol * std::fabs(ref.O.data()[i]);
          }
          for (std::size_t i = 0; i < n; ++i) {
            const double diff = std::fabs(static_cast<double>(all.lse(i)) - ref.lse(i));
            dl = std::max(dl, diff);
            within = within && diff <= kTol + kTol * std::fabs(ref.lse(i));
          }
          equal = within ? 1 : 0;
          std::printf("%s P = %d, n = %3zu, %-10s causal = %d: max |dO| = %.1e, max |dlse| = %.1e, bytes %s\n",
                      within && all_bytes_ok ? "ok  " : "FAIL", w.P, n, name_of(split), causal ? 1 : 0, dO, dl,
                      all_bytes_ok ? "= formula" : "!= formula");
        }
        MPI_Bcast(&equal, 1, MPI_INT, 0, MPI_COMM_WORLD);
        ok = ok && equal && all_bytes_ok;
      }
  return ok;
}

// --- Ulysses over MPI: two all-to-alls around ordinary attention -------------------------------------------

/// Every rank's share of \p total things (tokens or heads): even_chunk(r, P, total), as MPI counts of
/// \p per_item floats each, and where each share starts.
struct Shares {
  std::vector<int> counts, displs;
};
Shares shares_of(std::size_t P, std::size_t total, std::size_t per_item) {
  Shares s;
  for (std::size_t r = 0; r < P; ++r) {
    const ch13::Chunk c = ch13::even_chunk(r, P, total);
    s.counts.push_back(as_count(c.size() * per_item));
    s.displs.push_back(as_count(c.begin * per_item));
  }
  return s;
}

/// Floats this rank sends to the other ranks in one all-to-all whose send counts are \p sent.
std::size_t floats_to_others(const Shares& sent, int rank) {
  std::size_t floats = 0;
  for (std::size_t r = 0; r < sent.counts.size(); ++r)
    if (static_cast<int>(r) != rank) floats += static_cast<std::size_t>(sent.counts[r]);
  return floats;
}

// [ulysses_mpi]
/// The first all-to-all, for one of Q, K, V: \p mine (h, rows_r, d) holds every head of this rank's tokens;
/// it returns (g, n, d), this rank's g heads (even_chunk(rank, P, h)) for every token. Rank r's tokens of
/// head block s are contiguous in \p mine (heads outermost), so they are sent where they lie; what arrives is
/// grouped by sender ([r][head][rows_r][d]) and put at the sender's token positions.
attn::Tensor3 tokens_to_heads(const World& w, const attn::Tensor3& mine, std::size_t n, std::size_t& floats_sent) {
  const std::size_t P = static_cast<std::size_t>(w.P), h = mine.shape(0), rows = mine.shape(1), d = mine.shape(2);
  const ch13::Chunk heads = ch13::even_chunk(static_cast<std::size_t>(w.rank), P, h);
  const std::size_t g = heads.size();
  const Shares send = shares_of(P, h, rows * d), recv = shares_of(P, n, g * d);
  std::vector<float> arrived(g * n * d);  // [sender r][g][rows_r][d]
  MPI_Alltoallv(mine.data(), send.counts.data(), send.displs.data(), MPI_FLOAT, arrived.data(), recv.counts.data(),
                recv.displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  floats_sent += floats_to_others(send, w.rank);
  attn::Tensor3 out(attn::Tensor3::shape_type{g, n, d});  // (g, n, d)
  for (std::size_t r = 0; r < P; ++r) {
    const ch13::Chunk tokens = ch13::even_chunk(r, P, n);
    const float* from = arrived.data() + static_cast<std::size_t>(recv.displs[r]);
    for (std::size_t j = 0; j < g; ++j, from += tokens.size() * d)
      std::copy(from, from + tokens.size() * d, out.data() + (j * n + tokens.begin) * d);
  }
  return out;
}

/// The second all-to-all: \p O_heads (g, n, d_v), this rank's heads for every token, goes back as
/// (h, rows_r, d_v), every head of this rank's tokens. The mirror of tokens_to_heads(): packed by
/// destination before sending, received where it belongs.
attn::Tensor3 heads_to_tokens(const World& w, const attn::Tensor3& O_heads, std::size_t h, std::size_t& floats_sent) {
  const std::size_t P = static_cast<std::size_t>(w.P), g = O_heads.shape(0), n = O_heads.shape(1),
                    d_v = O_heads.shape(2);
  const std::size_t rows = ch13::even_chunk(static_cast<std::size_t>(w.rank), P, n).size();
  const Shares send = shares_of(P, n, g * d_v), recv = shares_of(P, h, rows * d_v);
  std::vector<float> packed(g * n * d_v);  // [destination r][g][rows_r][d_v]
  for (std::size_t r = 0; r < P; ++r) {
    const ch13::Chunk tokens = ch13::even_chunk(r, P, n);
    float* to = packed.data() + static_cast<std::size_t>(send.displs[r]);
    for (std::size_t j = 0; j < g; ++j, to += tokens.size() * d_v) {
      const float* from = O_heads.data() + (j * n + tokens.begin) * d_v;
      std::copy(from, from + tokens.size() * d_v, to);
    }
  }
  attn::Tensor3 O(attn::Tensor3::shape_type{h, rows, d_v});  // (h, rows_r, d_v)
  MPI_Alltoallv(packed.data(), send.counts.data(), send.displs.data(), MPI_FLOAT, O.data(), recv.counts.data(),
                recv.displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  floats_sent += floats_to_others(send, w.rank);
  return O;
}

/// This rank's tokens (even_chunk(rank, P, n)) of every head, before and after.
struct HeadInputs {
  attn::Tensor3 Q, K, V;  // (h, rows_r, d) each
};

struct UlyssesRankRun {
  attn::Tensor3 O;  // (h, rows_r, d_v)
  std::size_t bytes_sent = 0;
};

/// One rank of DeepSpeed-Ulysses: Q, K, V to heads (three all-to-alls), chapter 05's flash on this rank's
/// heads over the whole sequence (single-threaded: one core per rank), O back to tokens.
UlyssesRankRun ulysses_rank(const World& w, const HeadInputs& in, std::size_t n, bool causal) {
  const std::size_t h = in.Q.shape(0);
  attn::require(static_cast<std::size_t>(w.P) <= h,
                fmt::format("Ulysses splits the heads over the ranks: h = {} heads cannot feed P = {} ranks (a rank "
                            "would have none); use --heads ≥ {}",
                            h, w.P, w.P));
  std::size_t floats = 0;
  const attn::Tensor3 Q = tokens_to_heads(w, in.Q, n, floats), K = tokens_to_heads(w, in.K, n, floats),
                      V = tokens_to_heads(w, in.V, n, floats);                                       // (g, n, d) each
  const attn::Tensor3 O_heads = attn::ch05::flash_attention_fast(Q, K, V, causal, {128, 512, 1}).O;  // (g, n, d_v)
  UlyssesRankRun run{heads_to_tokens(w, O_heads, h, floats), 0};
  run.bytes_sent = floats * sizeof(float);
  return run;
}
// [ulysses_mpi]

/// Q, K or V of every head at this rank's tokens: (h, rows_r, d), head j drawn as make_rows() with its own
/// seed, so the single-process reference (all tokens) makes the same numbers.
attn::Tensor3 make_heads(const ch13::Chunks& chunks, std::size_t h, std::size_t d, std::uint64_t seed,
                         std::uint64_t tensor) {
  attn::Tensor3 X(attn::Tensor3::shape_type{h, ch13::rows_of(chunks), d});  // (h, rows, d)
  for (std::size_t j = 0; j < h; ++j) {
    const Matrix head = make_rows(chunks, d, seed + 7919 * (j + 1), tensor);  // (rows, d)
    std::copy(head.begin(), head.end(), X.data() + j * head.size());
  }
  return X;
}
HeadInputs make_head_inputs(const World& w, std::size_t n, std::size_t h, std::size_t d, std::uint64_t seed) {
  const ch13::Chunks mine{ch13::even_chunk(static_cast<std::size_t>(w.rank), static_cast<std::size_t>(w.P), n)};
  return {make_heads(mine, h, d, seed, 0), make_heads(mine, h, d, seed, 1), make_heads(mine, h, d, seed, 2)};
}

/// Ulysses against single-process flash (every head, every token, on each rank for its own tokens), and each
/// rank's bytes against ulysses_bytes_sent(): n that P does not divide, h = P and h = P + 1 (not a multiple
/// of P), causal and not. Tolerance as the ring's (kTol).
bool check_ulysses(const World& w) {
  bool ok = true;
  const std::size_t P = static_cast<std::size_t>(w.P), d = 16;
  for (std::size_t n : {1ul, 7ul, 50ul, 101ul})
    for (std::size_t h : {P, P + 1})
      for (bool causal : {false, true}) {
        const std::uint64_t seed = 2000 + n;
        const UlyssesRankRun run = ulysses_rank(w, make_head_inputs(w, n, h, d, seed), n, causal);
        const ch13::Chunks all{{0, n}};
        const attn::Tensor3 ref =
            attn::ch05::flash_attention_fast(make_heads(all, h, d, seed, 0), make_heads(all, h, d, seed, 1),
                                             make_heads(all, h, d, seed, 2), causal, {4, 8, 1})
                .O;  // (h, n, d)
        const ch13::Chunk mine = ch13::even_chunk(static_cast<std::size_t>(w.rank), P, n);
        double dO = 0;
        int within = 1;
        for (std::size_t j = 0; j < h; ++j)
          for (std::size_t i = 0; i < mine.size(); ++i)
            for (std::size_t c = 0; c < d; ++c) {
              const double want = ref(j, mine.begin + i, c), diff = std::fabs(run.O(j, i, c) - want);
              dO = std::max(dO, diff);
              if (diff > kTol + kTol * std::fabs(want)) within = 0;
            }
        const std::size_t expected = ch13::ulysses_bytes_sent(static_cast<std::size_t>(w.rank), P, n, h, d, d);
        int bytes_ok = run.bytes_sent == expected ? 1 : 0, all_bytes_ok = 0, all_within = 0;
        if (!bytes_ok)
          std::fprintf(stderr,
                       "ch13_ring_mpi rank %d: Ulysses sent %zu bytes, the formula says %zu (n = %zu, h = %zu)\n",
                       w.rank, run.bytes_sent, expected, n, h);
        double max_dO = 0;
        MPI_Allreduce(&bytes_ok, &all_bytes_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&within, &all_within, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&dO, &max_dO, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (w.rank == 0)
          std::printf("%s P = %d, n = %3zu, Ulysses h = %zu, causal = %d: max |dO| = %.1e, bytes %s\n",
                      all_within && all_bytes_ok ? "ok  " : "FAIL", w.P, n, h, causal ? 1 : 0, max_dO,
                      all_bytes_ok ? "= formula" : "!= formula");
        ok = ok && all_within && all_bytes_ok;
      }
  return ok;
}

// --- (2) the timed run ------------------------------------------------------------------------------------

/// Ranks other than 0 wait for rank 0 without spinning (MPI_Barrier would poll and steal a core from the
/// single-process flash that rank 0 is timing).
void sleep_until_root_done(const World& w) {
  int token = 0;
  if (w.rank == 0) {
    for (int r = 1; r < w.P; ++r) MPI_Send(&token, 1, MPI_INT, r, 9, MPI_COMM_WORLD);
    return;
  }
  int arrived = 0;
  while (!arrived) {
    MPI_Iprobe(0, 9, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE);
    if (!arrived) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  MPI_Recv(&token, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/// Runs \p work with this process allowed on every core, then gives back mpirun's binding: at np ≤ 2 Open MPI
/// binds each rank to one core, and the single-process reference's threads must not share that one core.
template <class Work>
void on_every_core(Work&& work) {
  cpu_set_t bound, every;
  sched_getaffinity(0, sizeof bound, &bound);
  CPU_ZERO(&every);
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &every);
  sched_setaffinity(0, sizeof every, &every);  // threads started inside work inherit it
  work();
  sched_setaffinity(0, sizeof bound, &bound);
}

/// Median wall seconds and median CPU seconds (this process, every thread) of \p work on rank 0, every core
/// allowed, while the other ranks sleep.
struct Timing {
  double wall = 0, cpu = 0;
};
template <class Work>
Timing time_single_process(const World& w, int repeats, Work&& work) {
  Timing t;
  if (w.rank == 0)
    on_every_core([&] {
      std::vector<double> cpu;
      t.wall = attn::median_seconds(
          [&] {
            const double c0 = process_cpu_seconds();
            work();
            cpu.push_back(process_cpu_seconds() - c0);
          },
          repeats, 1);
      std::sort(cpu.begin() + 1, cpu.end());  // the first call is median_seconds' warm-up
      t.cpu = cpu[1 + (cpu.size() - 1) / 2];
    });
  sleep_until_root_done(w);
  return t;
}

/// Medians over \p repeats calls of \p run_once (after one warm-up): the wall time of the slowest rank, and
/// the CPU seconds of all ranks together. run_once returns this rank's (wall, CPU) seconds.
template <class RunOnce>
Timing time_all_ranks(int repeats, RunOnce&& run_once) {
  std::vector<double> walls, cpus;
  for (int k = 0; k < repeats + 1; ++k) {
    const Timing mine = run_once();
    Timing total;
    MPI_Allreduce(&mine.wall, &total.wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&mine.cpu, &total.cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (k == 0) continue;
    walls.push_back(total.wall);
    cpus.push_back(total.cpu);
  }
  std::sort(walls.begin(), walls.end());
  std::sort(cpus.begin(), cpus.end());
  return {walls[walls.size() / 2], cpus[cpus.size() / 2]};
}

/// On rank 0, a note when some machine runs more ranks than it has cores ("" otherwise). Ranks that share a
/// core take turns, so their times say how the scheduler interleaved them, not how balanced the ring is.
std::string oversubscription_note(const World& w) {
  MPI_Comm node;  // the ranks of this rank's machine
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node);
  int here = 1;
  MPI_Comm_size(node, &here);
  MPI_Comm_free(&node);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int cores = online > 0 ? static_cast<int>(online) : 1;
  // (ranks beyond the cores, cores) of the machine with the most ranks beyond its cores.
  int worst[2] = {here - cores, cores}, worst_all[2] = {0, 0};
  MPI_Reduce(worst, worst_all, 1, MPI_2INT, MPI_MAXLOC, 0, MPI_COMM_WORLD);
  if (w.rank != 0 || worst_all[0] <= 0) return "";
  const int cores_there = worst_all[1];
  return fmt::format(
      "note: {} ranks share {} cores on one machine, so ranks take turns on a core: the times below show how "
      "the system interleaved them, not the balance of the splits. Time with at most {} ranks here.",
      cores_there + worst_all[0], cores_there, cores_there);
}

void timed_run(const World& w, std::size_t n, std::size_t d, bool causal, int repeats, bool memory) {
  Timing single;
  if (!memory) {  // single-process flash on as many threads as there are ranks, the others asleep
    const attn::ch05::FastConfig config{128, 512, w.P};
    const ch13::Chunks all{{0, n}};
    Matrix Q, K, V;  // (n, d) each, on rank 0 only
    if (w.rank == 0) Q = make_rows(all, d, 13, 0), K = make_rows(all, d, 13, 1), V = make_rows(all, d, 13, 2);
    single = time_single_process(w, repeats, [&] { (void)attn::ch05::flash_attention_fast(Q, K, V, causal, config); });
  }
  const std::string note = oversubscription_note(w);
  if (w.rank == 0) {
    std::printf("\nn = %zu, d = %zu, causal = %d, %d ranks, 1 thread each; median of %d runs\n", n, d, causal ? 1 : 0,
                w.P, repeats);
    std::printf("%s", attn::wrapped(note, 100, "").c_str());
    if (!memory)
      std::printf("single-process flash (chapter 05, %d threads): %.3f s, %.3f CPU-s\n", w.P, single.wall, single.cpu);
  }
  for (Split split : {Split::contiguous, Split::zigzag}) {
    if (memory && split == Split::contiguous) continue;
    const Inputs in = make_inputs(
        ch13::rank_chunks(static_cast<std::size_t>(w.rank), static_cast<std::size_t>(w.P), n, split), n, d, 13);
    std::vector<double> times, waits, busy, cpus, polls;
    for (int k = 0; k < repeats + (memory ? 0 : 1); ++k) {  // an extra first run warms caches and connections
      const RankRun run = run_rank(w, in, split, causal, {128, 512, 1});
      double wall = 0, cpu = 0;
      MPI_Allreduce(&run.seconds, &wall, 1, MPI_DOUBLE, MPI_MAX,
                    MPI_COMM_WORLD);  // the ring ends with its slowest rank
      double poll = 0;
      MPI_Allreduce(&run.cpu_seconds, &cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(&run.wait_cpu_seconds, &poll, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (k == 0 && !memory) continue;
      times.push_back(wall);
      cpus.push_back(cpu);
      polls.push_back(poll);
      waits.push_back(run.wait_seconds);
      busy.push_back(run.seconds - run.wait_seconds);  // computing (and copying), not waiting for a block
    }
    std::sort(times.begin(), times.end());
    std::sort(cpus.begin(), cpus.end());
    std::sort(polls.begin(), polls.end());
    const double median = times[times.size() / 2], median_cpu = cpus[cpus.size() / 2],
                 median_poll = polls[polls.size() / 2];
    // Every rank's busy time and exposed wait (medians) to rank 0, in rank order.
    std::sort(waits.begin(), waits.end());
    std::sort(busy.begin(), busy.end());
    const double mine[2] = {busy[busy.size() / 2], waits[waits.size() / 2]};
    std::vector<double> all(2 * static_cast<std::size_t>(w.P));
    MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (w.rank == 0) {
      std::printf("ring, %-10s: %.3f s", name_of(split), median);
      if (!memory) std::printf(" = %.2f x single-process", median / single.wall);
      std::printf("; %.3f CPU-s", median_cpu);
      if (!memory) std::printf(" = %.2f x", median_cpu / single.cpu);

      std::printf("\n  computing per rank (s):");
      for (int r = 0; r < w.P; ++r) std::printf(" %.3f", all[2 * static_cast<std::size_t>(r)]);
      std::printf("\n  waiting for a block per rank (s):");
      for (int r = 0; r < w.P; ++r) std::printf(" %.3f", all[2 * static_cast<std::size_t>(r) + 1]);
      std::printf(" (all ranks: %.3f CPU-s polling)\n", median_poll);
    }
  }
}

/// Ulysses beside the ring on \p h heads: single-process flash on all heads (P threads), the zigzag ring one
/// head after another, and Ulysses; wall time, CPU seconds of all ranks, bytes rank 0 sent and the formulas.
void ulysses_beside_ring(const World& w, std::size_t n, std::size_t d, std::size_t h, bool causal, int repeats) {
  const std::size_t P = static_cast<std::size_t>(w.P), rank = static_cast<std::size_t>(w.rank);
  attn::require(P <= h, fmt::format("--heads {}: Ulysses splits the heads, so it needs at least P = {} of them", h, P));
  const ch13::Chunks all{{0, n}};
  attn::Tensor3 Q, K, V;  // (h, n, d) each, on rank 0 only
  if (w.rank == 0) Q = make_heads(all, h, d, 13, 0), K = make_heads(all, h, d, 13, 1), V = make_heads(all, h, d, 13, 2);
  const Timing single = time_single_process(w, repeats, [&] {
    (void)attn::ch05::flash_attention_fast(Q, K, V, causal, {128, 512, w.P});
  });

  // The ring on h heads: one ring per head (zigzag), each head's rows made as Ulysses' are.
  const ch13::Chunks zig = ch13::rank_chunks(rank, P, n, Split::zigzag);
  std::vector<Inputs> heads;
  for (std::size_t j = 0; j < h; ++j) {
    const std::uint64_t seed = 13 + 7919 * (j + 1);
    heads.push_back({n, make_rows(zig, d, seed, 0), {make_rows(zig, d, seed, 1), make_rows(zig, d, seed, 2)}});
  }
  std::size_t ring_bytes = 0;
  const Timing ring = time_all_ranks(repeats, [&] {
    Timing t;
    ring_bytes = 0;
    for (const Inputs& in : heads) {
      const RankRun run = run_rank(w, in, Split::zigzag, causal, {128, 512, 1});
      t.wall += run.seconds;
      t.cpu += run.cpu_seconds;
      ring_bytes += run.bytes_sent;
    }
    return t;
  });

  const HeadInputs in = make_head_inputs(w, n, h, d, 13);
  std::size_t ulysses_bytes = 0;
  const Timing ulysses = time_all_ranks(repeats, [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    ulysses_bytes = ulysses_rank(w, in, n, causal).bytes_sent;
    return Timing{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  process_cpu_seconds() - c0};
  });
  if (w.rank != 0) return;
  const std::vector<std::size_t> rows = rows_per_rank(w, n, Split::zigzag);
  std::printf("\nUlysses beside the ring: h = %zu heads, n = %zu, d = %zu, causal = %d, %d ranks; median of %d runs\n",
              h, n, d, causal ? 1 : 0, w.P, repeats);
  std::printf("single-process flash (chapter 05, %d threads, all heads): %.3f s, %.3f CPU-s\n", w.P, single.wall,
              single.cpu);
  std::printf("ring, zigzag, one ring per head: %.3f s = %.2f x, %.3f CPU-s = %.2f x\n", ring.wall,
              ring.wall / single.wall, ring.cpu, ring.cpu / single.cpu);
  std::printf("Ulysses, all-to-all over heads:  %.3f s = %.2f x, %.3f CPU-s = %.2f x\n", ulysses.wall,
              ulysses.wall / single.wall, ulysses.cpu, ulysses.cpu / single.cpu);
  std::printf("bytes rank 0 sent: ring %zu (formula %zu), Ulysses %zu (formula %zu)\n", ring_bytes,
              h * ch13::ring_bytes_sent(0, rows, d, d), ulysses_bytes, ch13::ulysses_bytes_sent(0, P, n, h, d, d));
}

// --- (3) the link between two ranks: α and β for chapter 13's model -----------------------------------------

// [pingpong]
/// Half the round trip of a message of \p bytes between ranks 0 and 1 (median of \p repeats), on rank 0.
double half_round_trip(const World& w, std::size_t bytes, int repeats) {
  std::vector<char> buffer(bytes);
  std::vector<double> times;
  for (int k = 0; k < repeats + 1; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    if (w.rank == 0) {
      MPI_Send(buffer.data(), as_count(bytes), MPI_CHAR, 1, 5, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), as_count(bytes), MPI_CHAR, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (w.rank == 1) {
      MPI_Recv(buffer.data(), as_count(bytes), MPI_CHAR, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), as_count(bytes), MPI_CHAR, 0, 5, MPI_COMM_WORLD);
    }
    if (k > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 2);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void pingpong(const World& w) {
  attn::require(w.P >= 2, "--pingpong needs at least 2 ranks (mpirun -np 2)");
  const std::string note = oversubscription_note(w);
  if (w.rank == 0)
    std::printf("\nping-pong between ranks 0 and 1 (half a round trip, median of 21):\n%s",
                attn::wrapped(note, 100, "").c_str());
  for (std::size_t bytes : {8ul, 1024ul, 65536ul, 1ul << 20, 16ul << 20, 64ul << 20}) {
    const double t = half_round_trip(w, bytes, 21);
    if (w.rank == 0)
      std::printf("  %9zu bytes: %9.2f us  %8.2f GB/s\n", bytes, t * 1e6, static_cast<double>(bytes) / t / 1e9);
  }
}
// [pingpong]

}  // namespace

int main(int argc, char** argv) {
  attn::use_best_blas_kernel();  // before MPI starts: the restart replaces this process
  MPI_Init(&argc, &argv);
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.P);
  CLI::App app("Chapter 13: ring attention over MPI ranks (launch with mpirun -np P)", "ch13_ring_mpi");
  bool check = false, causal = true, memory = false, ping = false;
  std::size_t n = 8192, d = 64, heads = 4;
  int repeats = 3;
  app.add_flag("--check", check, "Check equality with single-process flash and the byte formula, then exit");
  app.add_option("--n", n, "Sequence length of the timed run")->check(CLI::Range(1, 1 << 20));
  app.add_option("--d", d, "Head size of the timed run")->check(CLI::Range(1, 512));
  app.add_flag("--causal,!--no-causal", causal, "Causal timed run (the default; --no-causal for full attention)");
  app.add_flag("--pingpong", ping, "Measure latency and bandwidth between ranks 0 and 1, then exit");
  app.add_flag("--memory", memory,
               "Memory run: zigzag only, one run, no single-process reference (each rank makes only its rows)");
  app.add_option("--heads", heads, "Heads of the timed Ulysses-beside-the-ring run (0: skip it; else at least P)")
      ->check(CLI::Range(0, 256));
  app.add_option("--fail-on-rank", g_fail_on_rank, "Make this rank throw (tests that the job stops)")
      ->check(CLI::Validator(
          [](const std::string& value) { return value.empty() ? std::string("an empty value names no rank") : ""; },
          "RANK"))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", repeats, "Timed runs (median reported)")->check(CLI::Range(1, 100));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = w.rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    MPI_Finalize();
    return status == 0 ? 0 : 2;
  }
  // Checks every rank makes alike on the parsed values, so that all of them stop with status 2 together.
  const auto refuse = [&](const std::string& message) {
    if (w.rank == 0) std::fprintf(stderr, "%s\n", message.c_str());
    MPI_Finalize();
    return 2;
  };
  if (ping && w.P < 2)
    return refuse(
        fmt::format("--pingpong: it measures between ranks 0 and 1, so it needs at least 2 "
                    "ranks (mpirun -np 2); this job has {}",
                    w.P));
  if (g_fail_on_rank >= w.P)
    return refuse(fmt::format("--fail-on-rank {}: there is no such rank in a job of {} (ranks 0 to {})", g_fail_on_rank,
                              w.P, w.P - 1));
  if (!check && !ping && !memory && heads > 0 && heads < static_cast<std::size_t>(w.P))
    return refuse(
        fmt::format("--heads {}: Ulysses splits the heads over the ranks, so it needs at least P = {} heads "
                    "(or --heads 0 to skip it)",
                    heads, w.P));
  int status = 0;
  try {
    attn::set_blas_threads(1);  // one core per rank: OpenBLAS must not start its own threads on top
    if (check) {
      const bool ring_ok = check_all(w), ulysses_ok = check_ulysses(w);
      status = ring_ok && ulysses_ok ? 0 : 1;
    } else if (ping) {
      pingpong(w);
    } else {
      timed_run(w, n, d, causal, repeats, memory);
      if (!memory && heads > 0) ulysses_beside_ring(w, n, d, heads, causal, repeats);
      // Peak resident memory of every rank (Linux getrusage), gathered on rank 0.
      const double rss = static_cast<double>(attn::peak_rss_bytes());
      std::vector<double> all_rss(static_cast<std::size_t>(w.P));
      MPI_Gather(&rss, 1, MPI_DOUBLE, all_rss.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (w.rank == 0) {
        std::printf("peak resident memory per rank:");
        for (double x : all_rss) std::printf(" %s", attn::human_bytes(x).c_str());
        std::printf("\n");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ch13_ring_mpi rank %d of %d failed: %s\n(the whole job stops: MPI_Abort)\n", w.rank, w.P,
                 e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
