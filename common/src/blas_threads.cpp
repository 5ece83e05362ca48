// OpenBLAS's thread count and the guards that set it for a while (see attn/blas_threads.hpp).
#include "attn/blas_threads.hpp"

#include <mutex>

#include <fmt/format.h>

#include "attn/tensor.hpp"

// OpenBLAS's own extensions (its cblas.h would clash with the cblas header xtensor-blas includes).
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int num_threads);

namespace attn {

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

int blas_threads() { return openblas_get_num_threads(); }

namespace {
std::mutex blas_mutex;
int blas_guards = 0;         // guarded by blas_mutex
int blas_saved_threads = 1;  // guarded by blas_mutex: the count before the first guard
}  // namespace

SingleThreadedBlas::SingleThreadedBlas() {
  const std::lock_guard<std::mutex> lock(blas_mutex);
  if (blas_guards++ == 0) {
    blas_saved_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
  }
}

SingleThreadedBlas::~SingleThreadedBlas() {
  const std::lock_guard<std::mutex> lock(blas_mutex);
  if (--blas_guards == 0) openblas_set_num_threads(blas_saved_threads);
}

BlasThreads::BlasThreads(int threads) : saved_(openblas_get_num_threads()) {
  require(threads >= 1, fmt::format("BlasThreads: OpenBLAS needs at least 1 thread, got {}", threads));
  openblas_set_num_threads(threads);
}

BlasThreads::~BlasThreads() { openblas_set_num_threads(saved_); }

}  // namespace attn
