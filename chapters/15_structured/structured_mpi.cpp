// Chapter 15 — one decode step over P processes: the keys and values split over the ranks, each rank's
// partial result (lse, O) merged by MPI itself, with chapter 15's merge_packed() registered as a reduction
// operation (MPI_Op_create), and again along the chapter's binomial tree by hand, counting its rounds.
//
// What it shows: MPI_Allreduce with a user-defined operation equals single-process attention at any P, and
// the hand-made tree needs ⌈log₂P⌉ rounds with one message per rank (a ring would need P − 1 steps).
// --check runs several n (some ranks holding no key when n < P) and prints "FAIL" and exits 1 on a mismatch.
// What it leaves out: timing (a decode step's reduction is microseconds; the launch is not), the KV cache.
// Run it: ./course run 15 (mpirun -np 4 --oversubscribe), or chapters/13_ring/mpirun.sh NP ch15_structured_mpi.
// Book page: book/15_structured.md. A rank that throws prints its message and stops the job (MPI_Abort).
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "13_ring/ring.hpp"
#include "15_structured/reduction.hpp"
#include "15_structured/structured.hpp"
#include "attn/chapter.hpp"
#include "attn/machine.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

namespace ch15 = attn::ch15;
using attn::Matrix;

constexpr double kTolerance = 1e-5;  // float32 merges of ≤ 8 partial softmaxes over ≤ 4096 keys, outputs ~0.1

// [mpi_op]
/// The reduction as MPI calls it: \p len packed rows of the datatype \p type, which is d_v + 1 floats.
/// An exception cannot cross MPI's C frames: it is printed and the job aborted.
void merge_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  try {
    int bytes = 0;
    MPI_Type_size(*type, &bytes);
    const std::size_t d_v = static_cast<std::size_t>(bytes) / sizeof(float) - 1;
    ch15::merge_packed(static_cast<const float*>(in), static_cast<float*>(inout), static_cast<std::size_t>(*len), d_v);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "merge_op failed: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}
// [mpi_op]

/// This rank's packed partial result: queries Q against its share of the keys (empty when n < P).
std::vector<float> partial(const Matrix& Q, const Matrix& K, const Matrix& V, int rank, int P) {
  const attn::ch13::Chunk keys =
      attn::ch13::even_chunk(static_cast<std::size_t>(rank), static_cast<std::size_t>(P), K.shape(0));
  std::vector<float> packed;
  if (keys.size() == 0) {  // no key here: lse = -inf, O = 0, which the merge weighs as nothing
    for (std::size_t i = 0; i < Q.shape(0); ++i) {
      packed.push_back(-std::numeric_limits<float>::infinity());
      packed.insert(packed.end(), V.shape(1), 0.0f);
    }
    return packed;
  }
  const Matrix K_r = xt::view(K, xt::range(keys.begin, keys.end), xt::all());  // (keys, d)
  const Matrix V_r = xt::view(V, xt::range(keys.begin, keys.end), xt::all());  // (keys, d)
  const attn::FlashOutput part = attn::ch05::flash_attention_fast(Q, K_r, V_r, false);
  for (std::size_t i = 0; i < Q.shape(0); ++i) {
    packed.push_back(part.lse(i));
    for (std::size_t c = 0; c < V.shape(1); ++c) packed.push_back(part.O(i, c));
  }
  return packed;
}

Matrix unpack_O(const std::vector<float>& packed, std::size_t n_q, std::size_t d) {
  Matrix O = Matrix::from_shape({n_q, d});  // (n_q, d)
  for (std::size_t i = 0; i < n_q; ++i)
    for (std::size_t c = 0; c < d; ++c) O(i, c) = packed[i * (d + 1) + 1 + c];
  return O;
}

/// The binomial tree by hand: returns the rounds taken; rank 0 ends with the merge of all.
std::size_t tree_by_hand(std::vector<float>& mine, std::size_t n_q, std::size_t d, int rank, int P) {
  const std::size_t rounds = ch15::ceil_log2(static_cast<std::size_t>(P));
  std::vector<float> received(mine.size());
  for (std::size_t round = 0; round < rounds; ++round) {
    const ch15::TreeStep step = ch15::tree_step(static_cast<std::size_t>(rank), round, static_cast<std::size_t>(P));
    const int count = static_cast<int>(mine.size()), partner = static_cast<int>(step.partner);
    if (step.sends) MPI_Send(mine.data(), count, MPI_FLOAT, partner, static_cast<int>(round), MPI_COMM_WORLD);
    if (step.receives) {
      MPI_Recv(received.data(), count, MPI_FLOAT, partner, static_cast<int>(round), MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      ch15::merge_packed(received.data(), mine.data(), n_q, d);
    }
  }
  return rounds;
}

/// One decode step at n keys: Allreduce and the hand-made tree against single-process attention on rank 0.
bool run_case(std::size_t n, std::size_t d, std::size_t n_q, std::uint64_t seed, int rank, int P, bool print) {
  attn::Rng rng(seed);  // every rank draws the same Q, K, V and keeps its share
  const Matrix Q = rng.normal(n_q, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n_q, d), (n, d), (n, d)
  const std::vector<float> mine = partial(Q, K, V, rank, P);

  MPI_Datatype row;  // one packed row: lse and d values
  MPI_Type_contiguous(static_cast<int>(d + 1), MPI_FLOAT, &row);
  MPI_Type_commit(&row);
  MPI_Op merge;
  MPI_Op_create(&merge_op, /*commute=*/1, &merge);
  std::vector<float> all = mine;
  MPI_Allreduce(MPI_IN_PLACE, all.data(), static_cast<int>(n_q), row, merge, MPI_COMM_WORLD);
  MPI_Op_free(&merge);
  MPI_Type_free(&row);

  std::vector<float> tree = mine;
  const std::size_t rounds = tree_by_hand(tree, n_q, d, rank, P);

  const Matrix reference = attn::scaled_dot_product_attention(Q, K, V);  // (n_q, d)
  const double d_all = attn::max_abs_diff(unpack_O(all, n_q, d), reference);
  int ok = d_all <= kTolerance;  // every rank holds the Allreduce result
  double d_tree = 0.0;
  if (rank == 0) {
    d_tree = attn::max_abs_diff(unpack_O(tree, n_q, d), reference);
    ok = ok && d_tree <= kTolerance && rounds == ch15::ceil_log2(static_cast<std::size_t>(P));
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0 && print)
    std::printf(
        "P = %d, n = %zu, d = %zu, n_q = %zu: max |ΔO| Allreduce %.1e, tree %.1e%s\n"
        "  tree: %zu rounds (⌈log₂P⌉ = %zu; a ring: %d steps), each rank but 0 sends one message of %zu bytes\n",
        P, n, d, n_q, d_all, d_tree, all_ok ? "" : "  FAIL", rounds, ch15::ceil_log2(static_cast<std::size_t>(P)),
        P - 1, mine.size() * sizeof(float));
  return all_ok != 0;
}

}  // namespace

int main(int argc, char** argv) {
  attn::use_best_blas_kernel();  // before MPI starts: the restart replaces this process
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  CLI::App app("Chapter 15: a decode step reduced over MPI ranks with the merge as an MPI operation",
               "ch15_structured_mpi");
  bool check = false;
  std::size_t n = 4096, d = 64, n_q = 4;
  std::uint64_t seed = 15;
  app.add_flag("--check", check, "Check several n (some below P) against single-process attention, then exit");
  app.add_option("--n", n, "Keys of the decode step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--d", d, "Head size")->check(CLI::Range(1, 512));
  app.add_option("--queries", n_q, "Query rows reduced at once")->check(CLI::Range(1, 64));
  app.add_option("--seed", seed, "Seed of Q, K, V");
  // Every rank parses alike, by the rules of every chapter's command line (attn::Chapter's); rank 0 says what was
  // wrong.
  if (const std::optional<int> status = attn::parse_command_line(app, "ch15_structured_mpi", argc, argv, rank == 0)) {
    MPI_Finalize();
    return *status;
  }
  int status = 0;
  try {
    const attn::BlasThreads one_thread(1);  // one core per rank
    bool ok = true;
    if (check) {
      for (std::size_t keys : {std::size_t{1}, std::size_t{3}, std::size_t{37}, std::size_t{1000}})
        ok = run_case(keys, 16, 3, seed + keys, rank, P, true) && ok;
    } else {
      ok = run_case(n, d, n_q, seed, rank, P, true);
    }
    status = ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ch15_structured_mpi rank %d of %d failed:\n  %s\n(the whole job stops: MPI_Abort)\n", rank, P,
                 e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
