/// \file
/// OpenBLAS's thread count: its one home. A chapter never sets it bare; it holds a guard for as long as its
/// work needs a count, and the guard puts the count back when it ends, also when the work throws:
///   - attn::SingleThreadedBlas: kernels that run threads of their own (OpenBLAS must not add more on top);
///   - attn::BlasThreads: a benchmark or a story that runs OpenBLAS on a chosen number of threads.
#pragma once

namespace attn {

/// Sets OpenBLAS's thread count for the rest of the process. Only the guards below and the ceilings call it;
/// a chapter holds a guard instead (cmake/check_one_home.py refuses a bare call in chapters/).
void set_blas_threads(int threads);

/// OpenBLAS's current thread count (what the guards save and restore).
int blas_threads();

/// While alive, OpenBLAS runs single-threaded: for kernels that run their own threads, so the two never
/// oversubscribe the cores. The first guard of the process saves OpenBLAS's thread count and the last one
/// to end restores it, so concurrent calls from several threads, and calls that throw, leave it as it was.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;
};

/// While alive, OpenBLAS runs on \p threads threads; the count before it comes back when it ends. For one
/// thread at a time (a benchmark, a chapter's story): kernels that start threads use SingleThreadedBlas.
/// \throws std::invalid_argument when threads < 1.
class BlasThreads {
 public:
  explicit BlasThreads(int threads);
  ~BlasThreads();
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int saved_;
};

}  // namespace attn
