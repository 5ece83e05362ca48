// Chapter 06, your exercises: planning a FlashAttention launch on the host. The kernel exercise (rung 3's
// inner loop) is in flash_cuda_inner.cu next to this file. Book page: book/06_flash_cuda.md.
// Check your progress with `./course check 06`; stuck? `./course hint 06`.
// Watch your code run the chapter: `./course run 06 --track exercise`.
#include "06_flash_cuda/flash_cuda.hpp"

#include <string>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/errors.hpp"
#include "attn/tensor.hpp"

namespace attn {

namespace {
constexpr const char* kChapter = "06_flash_cuda";
}

std::size_t flash_smem_bytes(std::size_t B_r, std::size_t B_c, std::size_t d, std::size_t element_bytes) {
  // TODO(learner): bytes of Q_i (B_r, d), K_j and V_j (B_c, d) in the element type, plus S_ij (B_r, B_c) in
  //   fp32. Any argument 0 is std::invalid_argument naming the values; so is a count that does not fit in
  //   std::size_t (attn::checked_product and attn::checked_sum from attn/checks.hpp refuse it for you: give each
  //   a `what` that names the sizes it combines, "B_r + 2·B_c", so the message names them).
  throw not_implemented("flash_smem_bytes", kChapter, "three tiles of d columns in the element type, one fp32 tile.");
}

LaunchShape flash_launch_shape(std::size_t batch, std::size_t heads, std::size_t n_q, std::size_t B_r,
                               unsigned threads_per_block) {
  // TODO(learner): grid = (query tiles, heads, batch), block = (threads_per_block, 1, 1). Reject zeros and
  //   heads or batch above 65535 (CUDA's grid.y/grid.z limit) with std::invalid_argument. Count the query tiles
  //   without (n_q + B_r − 1), which wraps for n_q near SIZE_MAX, and refuse more than 2^31 − 1 of them (grid.x),
  //   naming n_q and B_r.
  throw not_implemented("flash_launch_shape", kChapter,
                        "one block per query tile per head per batch entry; round the tile count up.");
}

bool plan_fits(std::size_t smem_bytes, unsigned threads_per_block, const DeviceLimits& limits) {
  // TODO(learner): true when both the shared memory and the thread count are within the device's limits.
  throw not_implemented("plan_fits", kChapter, "two comparisons; a plan exactly at the limit fits.");
}

std::size_t causal_kv_tiles(std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q, std::size_t n_kv) {
  // TODO(learner): the number of K/V tiles (B_c keys each) that causal query tile q_tile (B_r queries) must
  //   visit. Query i sits at position i + (n_kv - n_q). Reject bad tiles and sizes with std::invalid_argument.
  throw not_implemented("causal_kv_tiles", kChapter,
                        "only the tile's last query matters: it sees the most keys; count tiles up to its position.");
}

}  // namespace attn
