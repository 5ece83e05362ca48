// Chapter 13's MPI program, its transport (see transport.hpp). Book page: book/13_ring.md.
#include "13_ring/transport.hpp"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn::ch13 {

World mpi_world() {
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.P);
  return w;
}

int as_count(std::size_t floats) {
  require(floats <= static_cast<std::size_t>(INT_MAX),
          fmt::format("ch13_ring_mpi: a block of {} floats is more than one MPI message can count", floats));
  return static_cast<int>(floats);
}

// [mpi_link]
MpiLink::MpiLink(int rank, int P) : next_((rank + 1) % P), prev_((rank + P - 1) % P) {}

void MpiLink::start(const KVBlock& outgoing, std::size_t incoming_rows) {
  incoming_.K = Matrix(Matrix::shape_type{incoming_rows, outgoing.K.shape(1)});  // (rows, d_k)
  incoming_.V = Matrix(Matrix::shape_type{incoming_rows, outgoing.V.shape(1)});  // (rows, d_v)
  MPI_Irecv(incoming_.K.data(), as_count(incoming_.K.size()), MPI_FLOAT, prev_, 0, MPI_COMM_WORLD, &requests_[0]);
  MPI_Irecv(incoming_.V.data(), as_count(incoming_.V.size()), MPI_FLOAT, prev_, 1, MPI_COMM_WORLD, &requests_[1]);
  MPI_Isend(outgoing.K.data(), as_count(outgoing.K.size()), MPI_FLOAT, next_, 0, MPI_COMM_WORLD, &requests_[2]);
  MPI_Isend(outgoing.V.data(), as_count(outgoing.V.size()), MPI_FLOAT, next_, 1, MPI_COMM_WORLD, &requests_[3]);
  bytes_sent_ += (outgoing.K.size() + outgoing.V.size()) * sizeof(float);
}

KVBlock MpiLink::finish() {
  // What the computation did not hide, on the wall clock and in CPU time: Open MPI polls while it waits.
  const CallSeconds wait = time_calls([&] { MPI_Waitall(4, requests_, MPI_STATUSES_IGNORE); }, {1, 0});
  waited_.wall += wait.wall;
  waited_.cpu += wait.cpu;
  return std::move(incoming_);
}
// [mpi_link]

namespace {

/// Every rank's share of \p total things (tokens or heads): even_chunk(r, P, total), as MPI counts of
/// \p per_item floats each, and where each share starts.
struct Shares {
  std::vector<int> counts, displs;
};
Shares shares_of(std::size_t P, std::size_t total, std::size_t per_item) {
  Shares s;
  for (std::size_t r = 0; r < P; ++r) {
    const Chunk c = even_chunk(r, P, total);
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

}  // namespace

// [ulysses_mpi]
// Rank r's tokens of head block s are contiguous in mine (heads outermost), so they are sent where they lie; what
// arrives is grouped by sender ([r][head][rows_r][d]) and put at the sender's token positions.
Tensor3 tokens_to_heads(const World& w, const Tensor3& mine, std::size_t n, std::size_t& floats_sent) {
  const std::size_t P = static_cast<std::size_t>(w.P), h = mine.shape(0), rows = mine.shape(1), d = mine.shape(2);
  const Chunk heads = even_chunk(static_cast<std::size_t>(w.rank), P, h);
  const std::size_t g = heads.size();
  const Shares send = shares_of(P, h, rows * d), recv = shares_of(P, n, g * d);
  std::vector<float> arrived(g * n * d);  // [sender r][g][rows_r][d]
  MPI_Alltoallv(mine.data(), send.counts.data(), send.displs.data(), MPI_FLOAT, arrived.data(), recv.counts.data(),
                recv.displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  floats_sent += floats_to_others(send, w.rank);
  Tensor3 out(Tensor3::shape_type{g, n, d});  // (g, n, d)
  for (std::size_t r = 0; r < P; ++r) {
    const Chunk tokens = even_chunk(r, P, n);
    const float* from = arrived.data() + static_cast<std::size_t>(recv.displs[r]);
    for (std::size_t j = 0; j < g; ++j, from += tokens.size() * d)
      std::copy(from, from + tokens.size() * d, out.data() + (j * n + tokens.begin) * d);
  }
  return out;
}

// The mirror of tokens_to_heads(): packed by destination before sending, received where it belongs.
Tensor3 heads_to_tokens(const World& w, const Tensor3& O_heads, std::size_t h, std::size_t& floats_sent) {
  const std::size_t P = static_cast<std::size_t>(w.P), g = O_heads.shape(0), n = O_heads.shape(1),
                    d_v = O_heads.shape(2);
  const std::size_t rows = even_chunk(static_cast<std::size_t>(w.rank), P, n).size();
  const Shares send = shares_of(P, n, g * d_v), recv = shares_of(P, h, rows * d_v);
  std::vector<float> packed(g * n * d_v);  // [destination r][g][rows_r][d_v]
  for (std::size_t r = 0; r < P; ++r) {
    const Chunk tokens = even_chunk(r, P, n);
    float* to = packed.data() + static_cast<std::size_t>(send.displs[r]);
    for (std::size_t j = 0; j < g; ++j, to += tokens.size() * d_v) {
      const float* from = O_heads.data() + (j * n + tokens.begin) * d_v;
      std::copy(from, from + tokens.size() * d_v, to);
    }
  }
  Tensor3 O(Tensor3::shape_type{h, rows, d_v});  // (h, rows_r, d_v)
  MPI_Alltoallv(packed.data(), send.counts.data(), send.displs.data(), MPI_FLOAT, O.data(), recv.counts.data(),
                recv.displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  floats_sent += floats_to_others(send, w.rank);
  return O;
}
// [ulysses_mpi]

// [pingpong]
double half_round_trip(const World& w, std::size_t bytes, int repeats) {
  std::vector<char> buffer(bytes);
  const auto exchange = [&] {
    if (w.rank == 0) {
      MPI_Send(buffer.data(), as_count(bytes), MPI_CHAR, 1, 5, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), as_count(bytes), MPI_CHAR, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (w.rank == 1) {
      MPI_Recv(buffer.data(), as_count(bytes), MPI_CHAR, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), as_count(bytes), MPI_CHAR, 0, 5, MPI_COMM_WORLD);
    }
  };
  const double round_trip = time_calls(exchange, {repeats, 1, 0.0, [] { MPI_Barrier(MPI_COMM_WORLD); }}).wall;
  return w.rank == 0 ? round_trip / 2 : 0.0;
}
// [pingpong]

double max_over_ranks(double value) {
  double all = 0;
  MPI_Allreduce(&value, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

double sum_over_ranks(double value) {
  double all = 0;
  MPI_Allreduce(&value, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

int min_over_ranks(int value) {
  int all = 0;
  MPI_Allreduce(&value, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

std::vector<double> gather_on_root(const std::vector<double>& values, const World& w) {
  std::vector<double> all(w.rank == 0 ? values.size() * static_cast<std::size_t>(w.P) : 0);
  MPI_Gather(values.data(), as_count(values.size()), MPI_DOUBLE, all.data(), as_count(values.size()), MPI_DOUBLE, 0,
             MPI_COMM_WORLD);
  return all;
}

namespace {

/// Ranks other than 0 wait for rank 0 without spinning (MPI_Barrier would poll and steal a core from the work
/// rank 0 is timing).
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

}  // namespace

void alone_on_root(const World& w, const std::function<void()>& work) {
  if (w.rank == 0) {
    cpu_set_t bound, every;
    sched_getaffinity(0, sizeof bound, &bound);
    CPU_ZERO(&every);
    for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &every);
    sched_setaffinity(0, sizeof every, &every);  // threads started inside work inherit it
    work();
    sched_setaffinity(0, sizeof bound, &bound);  // mpirun's binding back
  }
  sleep_until_root_done(w);
}

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

}  // namespace attn::ch13
