/// \file
/// Chapter 13, ring attention: the contract the learner implements in exercises/13_ring/ring.cpp.
/// Book page: book/13_ring.md.
///
/// A sequence of n tokens is split over P ranks (processes, or machines). Each rank keeps the query rows
/// of its chunks and its own key/value block, and the key/value blocks travel around a ring: at step s a
/// rank computes attention of its queries against the block it holds while it passes that block on to
/// the next rank and receives the previous rank's. After P steps every query has seen every key, and the
/// partial results (O, lse) of the P blocks, merged with chapter 05's merge_states(), are exactly
/// single-process FlashAttention. Nothing here needs MPI: the transport is a RingLink, which the chapter's
/// MPI program implements with non-blocking sends and receives and the tests implement in one process.
#pragma once

#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "attn/tensor.hpp"

namespace attn::ch13 {

/// \defgroup ch13 Chapter 13: ring attention
/// The ring schedule, the zigzag causal split, and one rank's loop that folds blocks with chapter 05's merge.
/// @{

/// A run of consecutive token positions [begin, end) of the whole sequence.
struct Chunk {
  std::size_t begin = 0;  ///< first position
  std::size_t end = 0;    ///< one past the last position
  /// Number of positions.
  std::size_t size() const { return end - begin; }
};
/// The chunks one rank owns, in order; its local rows are their positions, chunk after chunk.
using Chunks = std::vector<Chunk>;

/// How the sequence is split over the ranks.
enum class Split {
  contiguous,  ///< rank r owns one chunk, the r-th of P near-equal pieces
  zigzag,      ///< rank r owns pieces r and 2P-1-r of 2P: an early and a late piece, for causal balance
};

/// How a block of queries sees a block of keys under the causal rule (key position ≤ query position).
enum class Visibility {
  hidden,    ///< no query sees any key: the block is skipped
  full,      ///< every query sees every key: no mask
  diagonal,  ///< the rule cuts through the block: mask with the offset of CausalBlock
};

/// The causal relation of one (query chunk, key chunk) pair, in local indices.
struct CausalBlock {
  Visibility visibility = Visibility::hidden;
  /// Local query i may see local key j when j ≤ i + offset; offset = q.begin - k.begin.
  std::ptrdiff_t offset = 0;
};

/// A key/value block as it travels around the ring.
struct KVBlock {
  Matrix K;  ///< (rows, d_k)
  Matrix V;  ///< (rows, d_v)
};

/// Block sizes and threads for chapter 05's fast kernel inside each step: its own configuration (B_r query rows
/// and B_c keys per tile, threads within one rank). The default is ch05::default_tiles_on(1): one thread per rank.
using Tiles = ch05::FastConfig;

/// The transport of one rank: it sends to rank + 1 and receives from rank - 1 (mod P).
/// start() begins both transfers and returns at once, so the rank computes while the bytes move;
/// finish() waits for both and returns what arrived. The outgoing block must stay unchanged until then.
class RingLink {
 public:
  virtual ~RingLink() = default;
  /// Begins sending \p outgoing to the next rank and receiving a block of \p incoming_rows rows.
  virtual void start(const KVBlock& outgoing, std::size_t incoming_rows) = 0;
  /// Waits until both transfers of the last start() are done; returns the received block.
  virtual KVBlock finish() = 0;
};

// --- the exercises --------------------------------------------------------------------------------------

/// The rank whose key/value block rank \p rank holds at step \p step (0 ≤ step < P) when every step
/// passes blocks to rank + 1: at step 0 its own, then its left neighbour's, and so on around the ring.
/// \throws std::invalid_argument when P = 0, rank ≥ P or step ≥ P.
std::size_t ring_source(std::size_t rank, std::size_t step, std::size_t P);

/// The zigzag split: the sequence of \p n positions cut into 2P near-equal pieces (even_chunk()), rank
/// \p rank owns pieces rank and 2P-1-rank, in that order. Under the causal rule each rank then does the
/// same work (an early piece sees few keys, a late one many).
/// \return two chunks (either may be empty when n < 2P).
/// \throws std::invalid_argument when P = 0, rank ≥ P or 2P does not fit in std::size_t.
Chunks zigzag_chunks(std::size_t rank, std::size_t P, std::size_t n);

/// How the query chunk \p q sees the key chunk \p k under the causal rule: hidden when every key comes
/// after every query, full when every key comes at or before every query, diagonal otherwise (with the
/// offset that turns the global rule into local indices). An empty chunk is hidden.
/// \throws std::invalid_argument when a chunk ends before it begins or past 2^63 (the offset is signed).
CausalBlock causal_block(Chunk q, Chunk k);

/// Merges a partial result over other keys into rows [row0, row0 + part rows) of \p running, with chapter
/// 05's merge_states(): a result (O, lse) is the state m = lse, ℓ = 1, acc = O (ℓ = 0, acc = 0 when
/// lse = -inf); after the merge O = acc / ℓ and lse = m + log ℓ. Rows with lse = -inf in both stay O = 0.
/// \param running O (rows, d_v) and lse (rows), updated in place.
/// \param row0 the first row of \p running that \p part covers.
/// \param part O (part rows, d_v) and lse (part rows).
/// \throws std::invalid_argument naming the shapes when they do not fit, or naming the first NaN/Inf of an O or
///         NaN/+inf of an lse (running is left unchanged).
void merge_partial(FlashOutput& running, std::size_t row0, const FlashOutput& part);

/// Folds one received key/value block into a rank's running result: for every (query chunk, key chunk)
/// pair, chapter 05's fast flash kernel on that pair (skipped when hidden, causal when diagonal, when
/// \p causal) and merge_partial() into the query chunk's rows.
/// \param running O (rows of q_chunks, d_v) and lse, updated in place.
/// \param Q (rows of q_chunks, d_k) the rank's queries, chunk after chunk.
/// \param q_chunks the positions of Q's rows.
/// \param block K (rows of k_chunks, d_k) and V (rows of k_chunks, d_v).
/// \param k_chunks the positions of the block's rows.
/// \param causal apply the causal rule on global positions.
/// \param tiles block sizes and threads of the fast kernel.
/// \throws std::invalid_argument naming the shapes when they do not fit the chunks, naming the first NaN/Inf of Q, K
///         or V or the numbers when a score could overflow (attn/checks.hpp's overflow policy), and naming the
///         chunks when a diagonal pair does not end together; all before running changes.
void fold_block(FlashOutput& running, const Matrix& Q, const Chunks& q_chunks, const KVBlock& block,
                const Chunks& k_chunks, bool causal, const Tiles& tiles);

/// One rank's whole ring: P steps; at each, start passing the held block on (\p link), fold the held
/// block into the running result, then take the block that arrived. Equal to single-process flash
/// attention on the rank's rows.
/// \param rank this rank, < P.
/// \param P number of ranks.
/// \param n sequence length.
/// \param split how positions are assigned (rank_chunks()).
/// \param Q (rows of rank_chunks(rank), d_k) this rank's queries.
/// \param own this rank's K (rows, d_k) and V (rows, d_v).
/// \param causal apply the causal rule.
/// \param link the transport to the neighbours.
/// \param tiles block sizes and threads of the fast kernel.
/// \return O (rows, d_v) and lse (rows) of this rank's queries.
/// \throws std::invalid_argument naming the shapes when Q or own do not have the rank's rows.
FlashOutput ring_attention_rank(std::size_t rank, std::size_t P, std::size_t n, Split split, const Matrix& Q,
                                const KVBlock& own, bool causal, RingLink& link,
                                const Tiles& tiles = ch05::default_tiles_on(1));

// --- given: the split and the bookkeeping around it (chapters/13_ring/layout.cpp) ----------------------

/// Piece \p index of \p parts near-equal pieces of [0, n): [index·n/parts, (index+1)·n/parts).
/// \throws std::invalid_argument when parts = 0, index ≥ parts, or parts·n does not fit in std::size_t.
Chunk even_chunk(std::size_t index, std::size_t parts, std::size_t n);

/// The chunks rank \p rank owns under \p split (one for contiguous, two for zigzag).
/// \throws std::invalid_argument naming split when it is neither value, and as even_chunk() and zigzag_chunks() do.
inline Chunks rank_chunks(std::size_t rank, std::size_t P, std::size_t n, Split split) {
  require(
      split == Split::contiguous || split == Split::zigzag,
      fmt::format("rank_chunks: split = {} is neither Split::contiguous nor Split::zigzag", static_cast<int>(split)));
  return split == Split::zigzag ? zigzag_chunks(rank, P, n) : Chunks{even_chunk(rank, P, n)};
}

/// Total positions of \p chunks.
/// \throws std::invalid_argument when a chunk ends before it begins or the total does not fit.
std::size_t rows_of(const Chunks& chunks);

/// The rows of \p X (n, d) at the positions of \p chunks, chunk after chunk: (rows_of(chunks), d).
/// \throws std::invalid_argument when a chunk reaches past X's rows.
Matrix gather_rows(const Matrix& X, const Chunks& chunks);

/// Writes \p part (rows_of(chunks), d) into the rows of \p X (n, d) at the positions of \p chunks.
/// \throws std::invalid_argument naming the shapes when they do not fit.
void scatter_rows(Matrix& X, const Matrix& part, const Chunks& chunks);

/// The (query, key) pairs the ring computes for queries at \p q_chunks over all n keys: n per query,
/// or, when \p causal, position + 1 per query (counted, not measured).
/// \throws std::invalid_argument when a chunk ends before it begins or the count does not fit in std::size_t.
std::size_t pairs_computed(const Chunks& q_chunks, std::size_t n, bool causal);

/// Bytes rank r sends around the ring in one attention (float32): it passes on every block except the
/// one it would receive last, i.e. (n - rows of rank r+1) rows of K and V: (n - rows[(r+1) mod P])·(d_k +
/// d_v)·4. \p rows holds every rank's row count (P entries).
/// \throws std::invalid_argument when rank ≥ rows.size() or the count does not fit in std::size_t.
std::size_t ring_bytes_sent(std::size_t rank, const std::vector<std::size_t>& rows, std::size_t d_k, std::size_t d_v);

/// @}

}  // namespace attn::ch13
