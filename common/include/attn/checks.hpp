/// \file
/// The checks every kernel of the course shares, written once: size arithmetic that cannot wrap, the
/// inputs of an attention call (finite, and small enough that no score overflows), worker threads whose
/// errors reach the caller, and OpenBLAS's thread count set for a call and restored after it.
///
/// **The overflow policy** (one for every function that takes Q, K and V): the inputs must be finite, and
/// d_k · max|q| · max|k| (largest entries in magnitude) must stay below attn::kMaxScoreBound, a quarter of
/// float's largest value. Every partial sum of a dot product is at most Σ_c |q_c||k_c| ≤ d_k · max|q| ·
/// max|k|, so every score q·k/√d_k and every difference of two scores (what exp() sees in a softmax) is
/// then a finite float: no kernel ever meets an overflowed score. Inputs beyond the bound are refused
/// with std::invalid_argument naming the numbers. At d_k = 64 the bound is about 1e18 per entry: no
/// trained model comes near it, and a real input that does is a bug upstream. (One pass over the inputs,
/// the same pass that checks them for NaN: it costs about what the plain NaN check did.) Scores that are
/// not q·k (GAT's a·[h_i ‖ h_j], GATv2's Σ a_c·LeakyReLU(l_c + r_c)) follow the same rule through
/// require_bounded_products(): terms · max|x| · max|y| ≤ kMaxScoreBound for the two factors of their products.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>

#include "attn/blas_threads.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// The product a · b · … of sizes, or std::invalid_argument naming \p what and the factors when it does
/// not fit in std::size_t. Use it for every element or byte count computed from sizes the caller chose.
std::size_t checked_product(const char* what, std::initializer_list<std::size_t> factors);

/// The sum a + b + … of sizes, or std::invalid_argument naming \p what and the terms when it does not fit.
std::size_t checked_sum(const char* what, std::initializer_list<std::size_t> terms);

/// The bytes a · b · … an allocation would take, after two checks made before allocating anything: the
/// product fits in std::size_t (checked_product()), and it is no more than the memory the system reports as
/// available now (attn::available_memory_bytes(); not checked where the system does not say). Either failure
/// is std::invalid_argument naming \p what, the factors and the estimate, e.g. "sinusoidal_encoding: the
/// encoding n × d × 4 = 1099511627776 × 1024 × 4 bytes = 4.5 PB, more than the 12 GB available now". Use it
/// for every buffer whose size the caller chose, so an absurd size is refused at once instead of ending in
/// std::bad_alloc, the OOM killer or minutes of swapping.
std::size_t checked_allocation(const char* what, std::initializer_list<std::size_t> factors);

/// a + b, or the largest std::size_t when that overflows: for window ends like i + w, where w may be "the
/// whole sequence" written as SIZE_MAX.
constexpr std::size_t saturating_add(std::size_t a, std::size_t b) {
  return b > std::numeric_limits<std::size_t>::max() - a ? std::numeric_limits<std::size_t>::max() : a + b;
}

/// The largest d_k · max|q| · max|k| the kernels accept (see the file's overflow policy): FLT_MAX / 4.
constexpr double kMaxScoreBound = static_cast<double>(std::numeric_limits<float>::max()) / 4.0;

/// The one input check of every function that takes queries, keys and values: every element finite
/// (naming the first that is not), and d_k · max|q| · max|k| ≤ kMaxScoreBound, so no score can overflow.
/// \p Q (…, d_k) rows of queries, \p K (…, d_k) rows of keys, \p V any shape; all row-major, contiguous.
/// \throws std::invalid_argument "where: Q[3] is nan …" or "where: d_k = … times max|q| = … times …".
/// \p q_row and \p k_row are the lengths of one query and one key (both d_k when the shapes fit; the
/// caller's own shape check reports it when they do not). With \p threads > 1 the scan is shared among that many
/// threads (run_on_threads(); the calling thread is one): the same answer, the same first culprit named, in
/// less wall-clock time for a kernel whose own work runs on those threads next (inputs under 64K floats in
/// all are scanned on the calling thread alone: a thread's start would cost more).
void require_attention_inputs(const char* where, const float* Q, std::size_t q_size, std::size_t q_row, const float* K,
                              std::size_t k_size, std::size_t k_row, const float* V, std::size_t v_size,
                              std::size_t threads = 1);

/// The same for xtensor containers: \p Q and \p K end in d_k (their last dimension).
template <class TQ, class TK, class TV>
void require_attention_inputs(const char* where, const TQ& Q, const TK& K, const TV& V) {
  const auto last = [](const auto& T) { return T.dimension() ? T.shape(T.dimension() - 1) : std::size_t{0}; };
  require_attention_inputs(where, Q.data(), Q.size(), last(Q), K.data(), K.size(), last(K), V.data(), V.size());
}

/// The same policy for any score that is a sum of \p terms products x_c·y_c of an entry of \p x and one of \p y
/// (chapter 15's GAT scores: x the attention vector a, y the projected features): every entry of both finite
/// (naming the first that is not, as "x_name[i]"), and terms · max|x| · max|y| ≤ kMaxScoreBound, so every such
/// score and every difference of two is a finite float.
/// \throws std::invalid_argument "where: a[3] is nan …" or "where: 16 terms times max|a| = … times max|H| = …".
void require_bounded_products(const char* where, const char* x_name, const float* x, std::size_t x_size,
                              const char* y_name, const float* y, std::size_t y_size, std::size_t terms);

/// A mask is either empty in both dimensions, (0, 0) for "no mask", or exactly (n_q, n_kv). A mask
/// with one dimension 0 and the other not is a mistake, refused naming its shape and \p operands (say,
/// "Q is (2, 4) and K is (3, 4)").
void require_mask_shape(const char* where, const Mask& mask, std::size_t n_q, std::size_t n_kv,
                        const std::string& operands);

/// The same, with n_q and n_kv the rows of \p Q and \p K, both named in the message.
template <class TQ, class TK>
void require_mask_fits(const char* where, const Mask& mask, const TQ& Q, const TK& K) {
  require_mask_shape(where, mask, Q.shape(0), K.shape(0), "Q is " + shape_str(Q) + " and K is " + shape_str(K));
}

/// Runs \p work on \p threads threads at once (the calling thread is one of them) and waits for all.
/// An exception thrown by any of them, or by starting a thread, reaches the caller: the first one is
/// rethrown after every thread has finished (the others are dropped). Work is usually a loop that takes
/// items from a shared atomic counter.
void run_on_threads(std::size_t threads, const std::function<void()>& work);

}  // namespace attn
