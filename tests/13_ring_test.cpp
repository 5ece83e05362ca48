// Chapter 13's tests, run against both tracks, without MPI: the ring runs rank after rank in one process
// through LocalLink (chapters/13_ring/local_link.hpp), which checks what each rank sends against the ring's
// schedule. Expected values come from the float64 oracle (tests/oracle/) or from counts made here by
// brute force, never from the other track. The MPI program's own equality checks are ctest cases too
// (chapters/13_ring/chapter.cmake), at np = 1 … 4.
//
// Tolerance of (O, lse) against float64: each rank's partial results are float32 flash outputs over at most
// n ≤ 101 keys (sums of ≤ 101 terms of size ≤ 1: n·2^-24 ≈ 6e-6 relative), and every merge adds a rescaling
// exp and one division (a few ulp). 1e-5 absolute plus 1e-5 relative holds that with room, and a wrong
// block, a missed block or a wrong mask moves outputs of size ~1 by 1e-2 or more.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "04_complexity/heap_counter.hpp"
#include "13_ring/local_link.hpp"
#include "13_ring/ring.hpp"
#include "attn/rng.hpp"
#include "oracle/05_flash_cpu_oracle.hpp"
#include "support/allclose.hpp"
#include "support/hostile_ch13.hpp"
#include "support/throws.hpp"

namespace {

using attn::FlashOutput;
using attn::Matrix;
using attn::Vector;
using attn::ch13::Chunk;
using attn::ch13::Chunks;
using attn::ch13::KVBlock;
using attn::ch13::RingRun;
using attn::ch13::Split;
using attn::ch13::Visibility;
using attn::test::to_oracle;
namespace ch13 = attn::ch13;
namespace oracle = attn::oracle;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr double kAtol = 1e-5, kRtol = 1e-5;  // see the file's opening comment

/// Every position the chunks hold, in order.
std::vector<std::size_t> positions(const Chunks& chunks) {
  std::vector<std::size_t> out;
  for (const Chunk& c : chunks)
    for (std::size_t i = c.begin; i < c.end; ++i) out.push_back(i);
  return out;
}

/// The oracle's answer for queries at q_pos against keys at k_pos, with the causal rule on positions.
struct Expected {
  oracle::Mat O;
  std::vector<double> lse;
};
Expected expected_attention(const Matrix& Q, const std::vector<std::size_t>& q_pos, const Matrix& K, const Matrix& V,
                            const std::vector<std::size_t>& k_pos, bool causal) {
  std::vector<bool> allowed(q_pos.size() * k_pos.size(), true);
  for (std::size_t i = 0; i < q_pos.size(); ++i)
    for (std::size_t j = 0; j < k_pos.size(); ++j) allowed[i * k_pos.size() + j] = !causal || k_pos[j] <= q_pos[i];
  const oracle::Mat q = to_oracle(Q), k = to_oracle(K), v = to_oracle(V);
  return {oracle::attention(q, k, v, &allowed), oracle::log_sum_exp_rows(q, k, &allowed)};
}

FlashOutput empty_result(std::size_t rows, std::size_t d_v) {
  return {Matrix(Matrix::shape_type{rows, d_v}, 0.0f), Vector(Vector::shape_type{rows}, kMinusInf)};
}

FlashOutput to_result(const Expected& e) {
  FlashOutput r = empty_result(e.O.rows, e.O.cols);
  for (std::size_t i = 0; i < e.O.v.size(); ++i) r.O.data()[i] = static_cast<float>(e.O.v[i]);
  for (std::size_t i = 0; i < e.lse.size(); ++i) r.lse(i) = static_cast<float>(e.lse[i]);
  return r;
}

RingRun run_ring(const Matrix& Q, const Matrix& K, const Matrix& V, std::size_t P, Split split, bool causal) {
  return ch13::ring_in_one_process(Q, K, V, P, split, causal, {4, 8, 1});  // small tiles: their edges are crossed too
}

#ifdef ATTN_CH13_MPIRUN
/// The chapter's MPI program of this test program's track, beside it in bin/: ch13_ring_mpi_exercise for
/// ch13_ring_exercise_test, ch13_ring_mpi for ch13_ring_solution_test.
std::string mpi_program() {
  std::array<char, 4096> self{};
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size() - 1);
  const std::string exe(self.data(), length > 0 ? static_cast<std::size_t>(length) : 0);
  const std::string dir = exe.substr(0, exe.rfind('/') + 1);
  return dir + (exe.find("_exercise_test") != std::string::npos ? "ch13_ring_mpi_exercise" : "ch13_ring_mpi");
}

/// The lines of an MPI run that say what went wrong: failed checks, a rank's error, the exit status.
std::string what_went_wrong(const std::string& out) {
  std::string lines;
  std::size_t shown = 0, begin = 0;
  while (begin < out.size() && shown < 12) {
    const std::size_t end = std::min(out.find('\n', begin), out.size());
    const std::string line = out.substr(begin, end - begin);
    if (line.rfind("FAIL", 0) == 0 || line.find("failed:") != std::string::npos || line.rfind("exit status", 0) == 0) {
      lines += "  " + line + "\n";
      ++shown;
    }
    begin = end + 1;
  }
  return lines;
}

/// Runs the MPI program with --check on \p ranks ranks and returns what it printed, then "exit status N".
std::string run_mpi_check(int ranks) {
  // A hang is killed by mpirun's --timeout; LeakSanitizer (the asan preset) would report Open MPI's own memory.
  const std::string command = fmt::format(
      "ATTN_MPI_TIMEOUT=60 ASAN_OPTIONS=\"${{ASAN_OPTIONS:+$ASAN_OPTIONS:}}"
      "detect_leaks=0\" '{}' {} '{}' --check 2>&1",
      ATTN_CH13_MPIRUN, ranks, mpi_program());
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) out += buffer.data();
  const int status = pclose(pipe);
  return out + fmt::format("exit status {}\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
#endif

/// A rank's link that watches the overlap the ring exists for: between start() and finish() the rank must
/// compute (fold the block it holds), so the heap (chapter 04's counting allocator) must move in between;
/// start, finish, then fold (or fold, then start) moves nothing while the block is in flight.
class OverlapWatchingLink : public ch13::RingLink {
 public:
  OverlapWatchingLink(const std::vector<KVBlock>& blocks, std::size_t rank) : link_(blocks, rank) {}
  void start(const KVBlock& outgoing, std::size_t incoming_rows) override {
    link_.start(outgoing, incoming_rows);
    attn::ch04::reset_heap_peak();
    live_at_start_ = attn::ch04::heap_live_bytes();
  }
  KVBlock finish() override {
    if (attn::ch04::heap_peak_bytes() <= live_at_start_) ++idle_transfers;
    return link_.finish();
  }
  std::size_t idle_transfers = 0;  ///< transfers during which the rank computed nothing

 private:
  ch13::LocalLink link_;
  std::size_t live_at_start_ = 0;
};

}  // namespace

TEST_SUITE("13_ring") {
  TEST_CASE("ring_source at step 0 is the rank's own block, and each step brings its left neighbour's" *
            doctest::test_suite("13_ring/ring_source")) {
    for (std::size_t P = 1; P <= 6; ++P) {
      // Pass the blocks by hand: after a step, rank r holds what rank r - 1 held before.
      std::vector<std::size_t> holds(P);
      for (std::size_t r = 0; r < P; ++r) holds[r] = r;
      for (std::size_t step = 0; step < P; ++step) {
        for (std::size_t r = 0; r < P; ++r)
          CHECK_MESSAGE(ch13::ring_source(r, step, P) == holds[r],
                        "P = " << P << ", rank " << r << ", step " << step << ": blocks move to rank + 1 each step");
        std::vector<std::size_t> next(P);
        for (std::size_t r = 0; r < P; ++r) next[(r + 1) % P] = holds[r];
        holds = next;
      }
    }
  }

  TEST_CASE("ring_source over P steps shows every rank every block exactly once" *
            doctest::test_suite("13_ring/ring_source")) {
    for (std::size_t P = 1; P <= 7; ++P)
      for (std::size_t r = 0; r < P; ++r) {
        std::set<std::size_t> seen;
        for (std::size_t s = 0; s < P; ++s) seen.insert(ch13::ring_source(r, s, P));
        CHECK_MESSAGE(seen.size() == P, "P = " << P << ", rank " << r << " saw " << seen.size() << " distinct blocks");
      }
  }

  TEST_CASE("ring_source rejects P = 0, a rank past P and a step past P" * doctest::test_suite("13_ring/ring_source")) {
    CHECK_THROWS_AS(ch13::ring_source(0, 0, 0), std::invalid_argument);
    CHECK_THROWS_AS(ch13::ring_source(4, 0, 4), std::invalid_argument);
    CHECK_THROWS_AS(ch13::ring_source(0, 4, 4), std::invalid_argument);
  }

  TEST_CASE("zigzag_chunks of all ranks cover every position exactly once, ragged n and n < 2P included" *
            doctest::test_suite("13_ring/zigzag_chunks")) {
    for (std::size_t P = 1; P <= 5; ++P)
      for (std::size_t n : {0ul, 1ul, 3ul, 7ul, 10ul, 37ul, 101ul}) {
        std::vector<int> owners(n, 0);
        for (std::size_t r = 0; r < P; ++r) {
          const Chunks c = ch13::zigzag_chunks(r, P, n);
          REQUIRE_MESSAGE(c.size() == 2, "a zigzag rank owns two chunks");
          CHECK_MESSAGE(c[0].begin <= c[1].begin, "the early chunk comes first");
          for (std::size_t i : positions(c)) {
            REQUIRE(i < n);
            ++owners[i];
          }
        }
        for (std::size_t i = 0; i < n; ++i)
          CHECK_MESSAGE(owners[i] == 1,
                        "P = " << P << ", n = " << n << ": position " << i << " owned " << owners[i] << " times");
      }
  }

  TEST_CASE("zigzag_chunks gives rank r pieces r and 2P-1-r of 2P near-equal pieces" *
            doctest::test_suite("13_ring/zigzag_chunks")) {
    const Chunks c = ch13::zigzag_chunks(1, 4, 80);  // pieces of 10
    CHECK(c[0].begin == 10);
    CHECK(c[0].end == 20);
    CHECK(c[1].begin == 60);
    CHECK(c[1].end == 70);
    CHECK_THROWS_AS(ch13::zigzag_chunks(4, 4, 80), std::invalid_argument);
    CHECK_THROWS_AS(ch13::zigzag_chunks(0, 0, 80), std::invalid_argument);
  }

  TEST_CASE("zigzag_chunks balances causal work within 5% of the mean, where the contiguous split does not" *
            doctest::test_suite("13_ring/zigzag_chunks")) {
    for (std::size_t n : {16384ul, 1000ul, 4099ul})
      for (std::size_t P = 2; P <= 8; ++P) {
        auto work = [&](Split split) {  // causal pairs per rank, counted one query at a time
          std::vector<double> w;
          for (std::size_t r = 0; r < P; ++r) {
            double pairs = 0;
            for (std::size_t i : positions(ch13::rank_chunks(r, P, n, split))) pairs += static_cast<double>(i + 1);
            w.push_back(pairs);
          }
          return w;
        };
        auto spread = [&](const std::vector<double>& w) {  // largest |w_r - mean| / mean
          const double mean = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0 / static_cast<double>(P);
          double worst = 0;
          for (double x : w) worst = std::max(worst, std::fabs(x - mean) / mean);
          return worst;
        };
        CHECK_MESSAGE(spread(work(Split::zigzag)) <= 0.05, "n = " << n << ", P = " << P);
        // The contiguous split's last rank does about (2P-1)/P times the mean: ≥ 1.5× from P = 2 on.
        CHECK_MESSAGE(spread(work(Split::contiguous)) > 0.4, "n = " << n << ", P = " << P);
      }
  }

  TEST_CASE("causal_block tells hidden, full or diagonal, with the key at the query's own position visible" *
            doctest::test_suite("13_ring/causal_block")) {
    auto check = [](Chunk q, Chunk k, Visibility v, std::ptrdiff_t offset) {
      const ch13::CausalBlock b = ch13::causal_block(q, k);
      CHECK_MESSAGE(b.visibility == v,
                    "q = [" << q.begin << ", " << q.end << "), k = [" << k.begin << ", " << k.end << ")");
      if (v == Visibility::diagonal) CHECK(b.offset == offset);
    };
    check({4, 8}, {0, 4}, Visibility::full, 4);      // keys just before the queries
    check({4, 8}, {3, 5}, Visibility::full, 1);      // key 4 is at query 4's own position: visible
    check({4, 8}, {8, 12}, Visibility::hidden, -4);  // keys just after
    check({4, 8}, {4, 8}, Visibility::diagonal, 0);  // a chunk with itself
    check({4, 8}, {7, 9}, Visibility::diagonal, -3);
    check({4, 8}, {2, 6}, Visibility::diagonal, 2);
    check({4, 8}, {5, 5}, Visibility::hidden, 0);  // empty key chunk
    check({0, 0}, {0, 3}, Visibility::hidden, 0);  // empty query chunk
  }

  TEST_CASE("causal_block agrees with the causal rule counted pair by pair, and its offset localises the rule" *
            doctest::test_suite("13_ring/causal_block")) {
    for (std::size_t qb = 0; qb < 6; ++qb)
      for (std::size_t qe = qb + 1; qe < 8; ++qe)
        for (std::size_t kb = 0; kb < 6; ++kb)
          for (std::size_t ke = kb + 1; ke < 8; ++ke) {
            std::size_t visible = 0;
            const ch13::CausalBlock b = ch13::causal_block({qb, qe}, {kb, ke});
            for (std::size_t i = qb; i < qe; ++i)
              for (std::size_t j = kb; j < ke; ++j) {
                visible += j <= i;
                const auto li = static_cast<std::ptrdiff_t>(i - qb), lj = static_cast<std::ptrdiff_t>(j - kb);
                if (b.visibility == Visibility::diagonal) REQUIRE((lj <= li + b.offset) == (j <= i));
              }
            const std::size_t all = (qe - qb) * (ke - kb);
            const Visibility want = visible == 0     ? Visibility::hidden
                                    : visible == all ? Visibility::full
                                                     : Visibility::diagonal;
            CHECK_MESSAGE(b.visibility == want, "q = [" << qb << ", " << qe << "), k = [" << kb << ", " << ke << ")");
          }
  }

  TEST_CASE("merge_partial of two key sets' results is attention over their union (O and lse)" *
            doctest::test_suite("13_ring/merge_partial")) {
    attn::Rng rng(13);
    const Matrix Q = rng.normal(6, 8), K = rng.normal(11, 8), V = rng.normal(11, 5);
    std::vector<std::size_t> all(11), first(4), second(7);
    for (std::size_t i = 0; i < 11; ++i) all[i] = i;
    std::copy(all.begin(), all.begin() + 4, first.begin());
    std::copy(all.begin() + 4, all.end(), second.begin());
    const std::vector<std::size_t> q_pos(6, 100);  // positions after every key: no masking here
    const Matrix K1 = xt::view(K, xt::range(0, 4), xt::all()), V1 = xt::view(V, xt::range(0, 4), xt::all());
    const Matrix K2 = xt::view(K, xt::range(4, 11), xt::all()), V2 = xt::view(V, xt::range(4, 11), xt::all());
    FlashOutput running = to_result(expected_attention(Q, q_pos, K1, V1, first, false));
    ch13::merge_partial(running, 0, to_result(expected_attention(Q, q_pos, K2, V2, second, false)));
    const Expected want = expected_attention(Q, q_pos, K, V, all, false);
    CHECK_ALLCLOSE(running.O, want.O, kAtol, kRtol);
    CHECK_ALLCLOSE(running.lse, want.lse, kAtol, kRtol);
  }

  TEST_CASE("merge_partial changes only the rows it covers, and rows that saw no key stay O = 0, lse = -inf" *
            doctest::test_suite("13_ring/merge_partial")) {
    attn::Rng rng(7);
    FlashOutput running = empty_result(5, 3);
    running.O = rng.normal(5, 3);
    running.lse = Vector{0.5f, -1.0f, kMinusInf, kMinusInf, 2.0f};
    xt::view(running.O, 2, xt::all()) = 0.0f;
    xt::view(running.O, 3, xt::all()) = 0.0f;
    const FlashOutput before = running;
    FlashOutput part = empty_result(2, 3);
    part.O = rng.normal(2, 3);
    part.lse = Vector{kMinusInf, 1.0f};  // row 2 of running: nothing on either side; row 3: only the part
    xt::view(part.O, 0, xt::all()) = 0.0f;
    ch13::merge_partial(running, 2, part);
    for (std::size_t r : {0ul, 1ul, 4ul}) {
      CHECK_MESSAGE(running.lse(r) == before.lse(r), "row " << r << " is outside the part");
      CHECK(xt::view(running.O, r, xt::all()) == xt::view(before.O, r, xt::all()));
    }
    CHECK(running.lse(2) == kMinusInf);
    CHECK_MESSAGE(xt::all(xt::equal(xt::view(running.O, 2, xt::all()), 0.0f)), "a row with no key is zeros, not NaN");
    CHECK(running.lse(3) == doctest::Approx(1.0f));
    for (std::size_t c = 0; c < 3; ++c) CHECK(running.O(3, c) == doctest::Approx(part.O(1, c)));
  }

  TEST_CASE("merge_partial rejects a part that does not fit, naming the shapes, and leaves running unchanged" *
            doctest::test_suite("13_ring/merge_partial")) {
    FlashOutput running = empty_result(4, 3);
    const FlashOutput before = running;
    CHECK_THROWS_NAMING(ch13::merge_partial(running, 3, empty_result(2, 3)), std::invalid_argument, "2", "3");
    CHECK_THROWS_AS(ch13::merge_partial(running, 0, empty_result(2, 4)), std::invalid_argument);
    CHECK(running.O == before.O);
  }

  TEST_CASE(
      "merge_partial refuses a row0 near SIZE_MAX, NaN or infinite O and NaN or +inf lse, leaving running "
      "unchanged" *
      doctest::test_suite("13_ring/merge_partial")) {
    FlashOutput running = empty_result(4, 3);
    running.lse(1) = 0.5f;
    running.O(1, 2) = 2.0f;
    const FlashOutput before = running;
    FlashOutput part = empty_result(2, 3);
    part.lse(0) = 0.25f;  // a row that saw keys; row 1 saw none (-inf, allowed)
    CHECK_THROWS_NAMING(ch13::merge_partial(running, std::numeric_limits<std::size_t>::max(), part),
                        std::invalid_argument, "row", "18446744073709551615");
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      CAPTURE(bad);
      FlashOutput broken = part;
      broken.O(0, 1) = bad;
      CHECK_THROWS_NAMING(ch13::merge_partial(running, 0, broken), std::invalid_argument, "part", "O", "1");
      broken = part;
      broken.lse(1) = bad;
      CHECK_THROWS_NAMING(ch13::merge_partial(running, 0, broken), std::invalid_argument, "part", "lse", "1");
    }
    CHECK(running.O == before.O);
    CHECK(running.lse == before.lse);
  }

  TEST_CASE("ring_source, zigzag_chunks and causal_block neither wrap nor accept chunks that end before they begin" *
            doctest::test_suite("13_ring/causal_block")) {
    const std::size_t max = std::numeric_limits<std::size_t>::max();
    // After s steps rank r holds rank r − s's block (mod P), also for a P near SIZE_MAX, where rank + P wraps.
    CHECK(ch13::ring_source(5, 2, max) == 3);
    CHECK(ch13::ring_source(0, 1, max) == max - 1);
    CHECK(ch13::ring_source(1, max - 1, max) == 2);
    CHECK_THROWS_AS(ch13::zigzag_chunks(0, max / 2 + 1, 8), std::invalid_argument);  // 2P pieces wrap
    CHECK_THROWS_NAMING(ch13::causal_block(Chunk{5, 2}, Chunk{0, 4}), std::invalid_argument, "5", "2");
    const std::size_t past = std::size_t{1} << 63;  // positions past ptrdiff_t's range
    CHECK_THROWS_AS(ch13::causal_block(Chunk{0, 4}, Chunk{past, past + 4}), std::invalid_argument);
  }

  TEST_CASE("fold_block gives a rank's queries attention over one received block, with the causal rule on positions" *
            doctest::test_suite("13_ring/fold_block")) {
    attn::Rng rng(21);
    const std::size_t n = 37, P = 3;
    const Matrix Q = rng.normal(n, 16), K = rng.normal(n, 16), V = rng.normal(n, 8);
    for (bool causal : {false, true})
      for (std::size_t q_rank = 0; q_rank < P; ++q_rank)
        for (std::size_t k_rank = 0; k_rank < P; ++k_rank) {
          const Chunks qc = ch13::zigzag_chunks(q_rank, P, n), kc = ch13::zigzag_chunks(k_rank, P, n);
          const Matrix Q_r = ch13::gather_rows(Q, qc), K_r = ch13::gather_rows(K, kc), V_r = ch13::gather_rows(V, kc);
          FlashOutput running = empty_result(Q_r.shape(0), 8);
          ch13::fold_block(running, Q_r, qc, {K_r, V_r}, kc, causal, {4, 8, 1});
          const Expected want = expected_attention(Q_r, positions(qc), K_r, V_r, positions(kc), causal);
          INFO("causal = ", causal, ", queries of rank ", q_rank, ", block of rank ", k_rank);
          CHECK_ALLCLOSE(running.O, want.O, kAtol, kRtol);
          CHECK_ALLCLOSE(running.lse, want.lse, kAtol, kRtol);
        }
  }

  TEST_CASE("fold_block rejects a block whose rows do not match its chunks" *
            doctest::test_suite("13_ring/fold_block")) {
    attn::Rng rng(3);
    FlashOutput running = empty_result(4, 2);
    CHECK_THROWS_AS(ch13::fold_block(running, rng.normal(4, 3), {{0, 4}}, {rng.normal(5, 3), rng.normal(5, 2)},
                                     {{4, 8}}, false, {}),
                    std::invalid_argument);
  }

  TEST_CASE("ring_attention_rank on P ranks equals attention over the whole sequence (O and lse), P = 1 to 4, any n" *
            doctest::test_suite("13_ring/ring_attention_rank")) {
    attn::Rng rng(2024);
    for (std::size_t n : {5ul, 37ul, 101ul}) {
      const Matrix Q = rng.normal(n, 16), K = rng.normal(n, 16), V = rng.normal(n, 8);
      std::vector<std::size_t> all(n);
      for (std::size_t i = 0; i < n; ++i) all[i] = i;
      for (bool causal : {false, true}) {
        const Expected want = expected_attention(Q, all, K, V, all, causal);
        for (std::size_t P = 1; P <= 4; ++P)
          for (Split split : {Split::contiguous, Split::zigzag}) {
            INFO("n = ", n, ", P = ", P, ", causal = ", causal,
                 ", split = ", split == Split::zigzag ? "zigzag" : "contiguous");
            const RingRun run = run_ring(Q, K, V, P, split, causal);
            CHECK_ALLCLOSE(run.out.O, want.O, kAtol, kRtol);
            CHECK_ALLCLOSE(run.out.lse, want.lse, kAtol, kRtol);
          }
      }
    }
  }

  TEST_CASE("ring_attention_rank passes P - 1 blocks and sends exactly the bytes of the formula" *
            doctest::test_suite("13_ring/ring_attention_rank")) {
    attn::Rng rng(5);
    const std::size_t n = 53, d_k = 16, d_v = 8;
    const Matrix Q = rng.normal(n, d_k), K = rng.normal(n, d_k), V = rng.normal(n, d_v);
    for (std::size_t P = 1; P <= 5; ++P)
      for (Split split : {Split::contiguous, Split::zigzag}) {
        const RingRun run = run_ring(Q, K, V, P, split, true);
        for (std::size_t r = 0; r < P; ++r) {
          CHECK(run.transfers[r] == P - 1);
          CHECK_MESSAGE(run.bytes_sent[r] == ch13::ring_bytes_sent(r, run.rows, d_k, d_v),
                        "P = " << P << ", rank " << r);
          CHECK(run.bytes_received[r] == (n - run.rows[r]) * (d_k + d_v) * sizeof(float));
        }
      }
  }

  TEST_CASE("ring_attention_rank holds a few blocks at a time, never the whole sequence's keys" *
            doctest::test_suite("13_ring/ring_attention_rank")) {
    // n = 1024 over P = 32 ranks: a block of K and V is 32 rows of 16 + 16 floats, 4 KiB; all n keys and
    // values are 128 KiB. A rank holds its running result, the block it folds, the one arriving and chapter
    // 05's small tiles (4 × 8 here): the reference peaks at 21,536 bytes. The bound, 8 blocks (32 KiB), leaves
    // room for other ways of writing it and fails any rank that gathers all keys (a quarter of them, even).
    attn::Rng rng(31);
    const std::size_t n = 1024, P = 32, d = 16;
    const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
    const std::size_t block = n / P * 2 * d * sizeof(float), bound = 8 * block;
    for (const bool causal : {false, true}) {
      std::vector<KVBlock> blocks;
      for (std::size_t r = 0; r < P; ++r) {
        const Chunks chunks = ch13::rank_chunks(r, P, n, Split::contiguous);
        blocks.push_back({ch13::gather_rows(K, chunks), ch13::gather_rows(V, chunks)});
      }
      const std::size_t rank = P - 1;  // causal: the last rank sees every block
      const Matrix Q_r = ch13::gather_rows(Q, ch13::rank_chunks(rank, P, n, Split::contiguous));
      ch13::LocalLink link(blocks, rank);
      FlashOutput out;
      const std::size_t peak = attn::ch04::measure_heap_peak([&] {
        out = ch13::ring_attention_rank(rank, P, n, Split::contiguous, Q_r, blocks[rank], causal, link, {4, 8, 1});
      });
      CAPTURE(causal);
      CHECK_MESSAGE(peak <= bound, "a rank held ", peak, " bytes of heap at its peak; one block of K and V is ", block,
                    " bytes, all n keys and values ", n * 2 * d * sizeof(float),
                    ": fold each block as it arrives and keep only the running (O, lse), never all the keys");
      CHECK(peak >= block);  // it really measured: the arriving block alone is one
    }
  }

  TEST_CASE("ring_attention_rank starts passing a block on before it folds it, so the transfer overlaps the work" *
            doctest::test_suite("13_ring/ring_attention_rank")) {
    attn::Rng rng(32);
    const std::size_t n = 40, P = 4;
    const Matrix K = rng.normal(n, 8), V = rng.normal(n, 4);
    std::vector<KVBlock> blocks;
    for (std::size_t r = 0; r < P; ++r) {
      const Chunks chunks = ch13::rank_chunks(r, P, n, Split::contiguous);
      blocks.push_back({ch13::gather_rows(K, chunks), ch13::gather_rows(V, chunks)});
    }
    for (std::size_t rank = 0; rank < P; ++rank) {
      OverlapWatchingLink link(blocks, rank);
      const Matrix Q = rng.normal(n / P, 8);
      (void)ch13::ring_attention_rank(rank, P, n, Split::contiguous, Q, blocks[rank], false, link, {4, 8, 1});
      CAPTURE(rank);
      CHECK_MESSAGE(link.idle_transfers == 0, link.idle_transfers, " of ", P - 1,
                    " transfers had no work beside them: at each step call link.start() with the held block, then "
                    "fold_block() it, then link.finish()");
    }
  }

#ifdef ATTN_CH13_MPIRUN
  TEST_CASE("ring_attention_rank across 3 MPI processes equals single-process flash (ch13_ring_mpi --check)" *
            doctest::test_suite("13_ring/ring_attention_rank")) {
    // The chapter's MPI program built on this track's code, started by mpirun: real non-blocking sends and
    // receives between processes, both splits, causal and not, ragged n (and Ulysses, which is given code).
    const std::string out = run_mpi_check(3);
    const bool passed = out.find("FAIL") == std::string::npos && out.find("exit status 0\n") != std::string::npos;
    CHECK_MESSAGE(passed, "mpirun -np 3 ", mpi_program(), " --check:\n", what_went_wrong(out));
  }
#endif

  TEST_CASE("ring_attention_rank rejects queries that are not the rank's rows, naming the shapes" *
            doctest::test_suite("13_ring/ring_attention_rank")) {
    attn::Rng rng(9);
    const std::vector<KVBlock> blocks{{rng.normal(5, 4), rng.normal(5, 2)}, {rng.normal(5, 4), rng.normal(5, 2)}};
    ch13::LocalLink link(blocks, 0);
    CHECK_THROWS_NAMING(
        ch13::ring_attention_rank(0, 2, 10, Split::contiguous, rng.normal(6, 4), blocks[0], false, link),
        std::invalid_argument, "6", "4");
  }
}

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile values,
// each call refused naming what was wrong or answered as the contract says. Chunks are battered as their positions
// (a flat list begin, end, …: support/hostile_ch13.hpp), a FlashOutput and a KVBlock matrix by matrix.
namespace {

namespace hostile = attn::test::hostile;

constexpr std::size_t kMaxPos = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

}  // namespace

TEST_SUITE("13_ring: the hostile battery") {
  TEST_CASE("ring_source under the hostile battery" * doctest::test_suite("13_ring/ring_source")) {
    // hostile battery: ring_source
    hostile::battery(
        "ring_source", {"rank", "step", "P"},
        [](std::size_t rank, std::size_t step, std::size_t P) { return ch13::ring_source(rank, step, P); },
        std::size_t{1}, std::size_t{2}, std::size_t{3})
        .fits([](std::size_t rank, std::size_t step, std::size_t P) { return P > 0 && rank < P && step < P; })
        .answer([](std::size_t r, std::size_t, std::size_t, std::size_t P) { return r < P; })
        .run();
  }

  TEST_CASE("zigzag_chunks under the hostile battery" * doctest::test_suite("13_ring/zigzag_chunks")) {
    // hostile battery: zigzag_chunks
    hostile::battery(
        "zigzag_chunks", {"rank", "P", "n"},
        [](std::size_t rank, std::size_t P, std::size_t n) {
          std::vector<std::size_t> flat;
          for (const Chunk& c : ch13::zigzag_chunks(rank, P, n)) flat.insert(flat.end(), {c.begin, c.end});
          return flat;
        },
        std::size_t{1}, std::size_t{3}, std::size_t{20})
        .fits([](std::size_t rank, std::size_t P, std::size_t n) {
          return P > 0 && rank < P && 2.0L * P * n <= 18446744073709551615.0L;
        })
        .answer([](const std::vector<std::size_t>& flat, std::size_t, std::size_t, std::size_t n) {
          return flat.size() == 4 && flat[0] <= flat[1] && flat[1] <= n && flat[2] <= flat[3] && flat[3] <= n;
        })
        .run();
  }

  TEST_CASE("causal_block under the hostile battery" * doctest::test_suite("13_ring/causal_block")) {
    // hostile battery: causal_block
    hostile::battery(
        "causal_block", {"q_begin|q|chunks", "q_end|q|chunks", "k_begin|k|chunks", "k_end|k|chunks"},
        [](std::size_t qb, std::size_t qe, std::size_t kb, std::size_t ke) {
          return static_cast<int>(ch13::causal_block({qb, qe}, {kb, ke}).visibility);
        },
        std::size_t{4}, std::size_t{8}, std::size_t{2}, std::size_t{6})
        .fits([](std::size_t qb, std::size_t qe, std::size_t kb, std::size_t ke) {
          return qb <= qe && kb <= ke && qe <= kMaxPos && ke <= kMaxPos;
        })
        .run();
  }

  TEST_CASE("merge_partial under the hostile battery" * doctest::test_suite("13_ring/merge_partial")) {
    // hostile battery: merge_partial
    attn::Rng rng(1390);
    const FlashOutput running{rng.normal(4, 3), Vector(xt::row(rng.normal(1, 4), 0))};
    const FlashOutput part{rng.normal(2, 3), Vector(xt::row(rng.normal(1, 2), 0))};
    hostile::battery(
        "merge_partial", {"running", "row0", "part"},
        [](FlashOutput& run, std::size_t row0, const FlashOutput& p) {
          ch13::merge_partial(run, row0, p);
          return run.O;
        },
        running, std::size_t{1}, part)
        .fits([](const FlashOutput& run, std::size_t row0, const FlashOutput& p) {
          const std::size_t rows = run.O.shape(0);
          return run.lse.size() == rows && p.lse.size() == p.O.shape(0) && p.O.shape(1) == run.O.shape(1) &&
                 p.O.shape(0) <= rows && row0 <= rows - p.O.shape(0);
        })
        .run();
  }

  TEST_CASE("fold_block under the hostile battery" * doctest::test_suite("13_ring/fold_block")) {
    // hostile battery: fold_block
    // Rank 0 of 2 under the zigzag split of n = 8: positions 0, 1 and 6, 7, folding its own block (causal).
    attn::Rng rng(1391);
    const std::vector<std::size_t> chunks{0, 2, 6, 8};
    const FlashOutput running{Matrix(xt::zeros<float>({4, 2})), Vector(Vector::shape_type{4}, kMinusInf)};
    hostile::battery(
        "fold_block", {"running", "Q", "q_chunks", "block", "k_chunks", "B_r|tiles", "B_c|tiles", "threads|tiles"},
        [](FlashOutput& run, const Matrix& Q, const std::vector<std::size_t>& q, const KVBlock& block,
           const std::vector<std::size_t>& k, std::size_t B_r, std::size_t B_c, int threads) {
          ch13::fold_block(run, Q, hostile::chunks_of(q), block, hostile::chunks_of(k), true,
                           ch13::Tiles{B_r, B_c, threads});
          return run.O;
        },
        running, Matrix(rng.normal(4, 3)), chunks, KVBlock{rng.normal(4, 3), rng.normal(4, 2)}, chunks, std::size_t{2},
        std::size_t{2}, 1)
        .fits([&](const FlashOutput& run, const Matrix& Q, const std::vector<std::size_t>& q, const KVBlock& block,
                  const std::vector<std::size_t>& k, std::size_t B_r, std::size_t B_c, int threads) {
          // The chunks must be the rank's own (q_chunks and k_chunks a partition's chunks: a diagonal pair ends
          // together); shapes as the contract says.
          const bool own = hostile::chunks_of(q).size() == 2 && hostile::chunks_of(k).size() == 2 &&
                           std::vector<std::size_t>(q.begin(), q.begin() + 4) == chunks &&
                           std::vector<std::size_t>(k.begin(), k.begin() + 4) == chunks;
          return own && Q.shape(0) == 4 && run.O.shape(0) == 4 && run.lse.size() == 4 && block.K.shape(0) == 4 &&
                 block.V.shape(0) == 4 && block.K.shape(1) == Q.shape(1) && run.O.shape(1) == block.V.shape(1) &&
                 B_r >= 1 && B_c >= 1 && threads >= 1 &&
                 // the score tiles (flash_fast.hpp), key tiles cut to a chunk's 2 keys, one per thread that has work
                 // (at most the chunk's 4 rows)
                 static_cast<long double>(B_r) * std::min<std::size_t>(B_c, 2) * std::min(threads, 4) * 4 <
                     (1ull << 30);
        })
        .exempt("B_r = 2^32",
                "score tiles of 32 GiB: answered or refused by the memory available, past the battery's "
                "4 GiB")
        .exempt("every size", "as B_r = 2^32")
        .exempt("running.lse with -inf", "-inf marks a row that saw no key yet: a valid running lse (answered)")
        .run();
  }

  TEST_CASE("ring_attention_rank under the hostile battery" * doctest::test_suite("13_ring/ring_attention_rank")) {
    // hostile battery: ring_attention_rank
    // Rank 0 of a ring of 2 over n = 8 positions, zigzag; its link (LocalLink) holds both ranks' blocks.
    attn::Rng rng(1392);
    const Matrix Q = rng.normal(8, 3), K = rng.normal(8, 3), V = rng.normal(8, 2);
    std::vector<KVBlock> blocks;
    for (std::size_t r = 0; r < 2; ++r) {
      const Chunks c = ch13::rank_chunks(r, 2, 8, Split::zigzag);
      blocks.push_back({ch13::gather_rows(K, c), ch13::gather_rows(V, c)});
    }
    const Matrix Q0 = ch13::gather_rows(Q, ch13::rank_chunks(0, 2, 8, Split::zigzag));
    hostile::battery(
        "ring_attention_rank", {"rank", "P", "n", "split", "Q", "own"},
        [&](std::size_t rank, std::size_t P, std::size_t n, Split split, const Matrix& q, const KVBlock& own) {
          ch13::LocalLink link(blocks, 0);
          return ch13::ring_attention_rank(rank, P, n, split, q, own, true, link, ch13::Tiles{2, 2, 1}).O;
        },
        std::size_t{0}, std::size_t{2}, std::size_t{8}, Split::zigzag, Q0, blocks[0])
        .fits([&](std::size_t rank, std::size_t P, std::size_t n, Split split, const Matrix& q, const KVBlock& own) {
          // The link is rank 0's of this ring: any other ring is refused (by the link, naming the rank).
          return rank == 0 && P == 2 && n == 8 && split == Split::zigzag && q.shape(0) == 4 && q.shape(1) == 3 &&
                 own.K.shape() == blocks[0].K.shape() && own.V.shape() == blocks[0].V.shape();
        })
        .exempt("rank = 1",
                "the link is rank 0's, and rank 1's block has rank 0's shapes: a RingLink does not say "
                "whose it is, so the ring runs with it (the caller's pairing of rank and link)")
        .exempt("own.K with",
                "a value of own other than the link's block is refused by the link (it checks what is "
                "sent against the ring's schedule) or answered when the block travels unchanged")
        .exempt("own.V with", "as own.K")
        .run();
  }
}
