// Chapter 06, the reference answers to the host-side planning exercises. The kernel exercise's answer is
// in flash_cuda_inner.cu next to this file. Book page: book/06_flash_cuda.md.
#include "06_flash_cuda/flash_cuda.hpp"

#include <string>

#include <fmt/format.h>

#include "attn/checks.hpp"
#include "attn/tensor.hpp"

namespace attn {

namespace {
// CUDA's limit on grid.y and grid.z (grid.x may reach 2^31 - 1).
constexpr std::size_t kMaxGridYZ = 65535;
constexpr std::size_t kMaxGridX = 2147483647;
}  // namespace

// [smem_bytes]
std::size_t flash_smem_bytes(std::size_t B_r, std::size_t B_c, std::size_t d, std::size_t element_bytes) {
  require(B_r > 0 && B_c > 0 && d > 0 && element_bytes > 0,
          fmt::format("flash_smem_bytes: B_r = {}, B_c = {}, d = {}, element_bytes = {}: all must be positive", B_r,
                      B_c, d, element_bytes));
  // Q_i (B_r, d), K_j and V_j (B_c, d) in the element type; S_ij (B_r, B_c) always fp32 (it is a sum).
  // Checked arithmetic: absurd tile sizes are refused with their numbers rather than wrapping to a small count.
  // Each step's message names the sizes it combines (B_r = 2^63 made a sum of "9223372036854775936": no size named).
  const std::size_t rows = checked_sum("flash_smem_bytes: the tile rows B_r + 2·B_c",
                                       {B_r, checked_product("flash_smem_bytes: the tile rows 2·B_c", {2, B_c})});
  return checked_sum(
      "flash_smem_bytes: the bytes of Q_i, K_j, V_j and S_ij",
      {checked_product("flash_smem_bytes: Q_i, K_j, V_j, (B_r + 2·B_c) × d × element_bytes", {rows, d, element_bytes}),
       checked_product("flash_smem_bytes: S_ij, B_r × B_c × 4", {B_r, B_c, sizeof(float)})});
}
// [smem_bytes]

// [launch_shape]
LaunchShape flash_launch_shape(std::size_t batch, std::size_t heads, std::size_t n_q, std::size_t B_r,
                               unsigned threads_per_block) {
  require(batch > 0 && heads > 0 && n_q > 0 && B_r > 0 && threads_per_block > 0,
          fmt::format("flash_launch_shape: batch = {}, heads = {}, n_q = {}, B_r = {}, threads = {}: all must be "
                      "positive",
                      batch, heads, n_q, B_r, threads_per_block));
  require(heads <= kMaxGridYZ && batch <= kMaxGridYZ,
          fmt::format("flash_launch_shape: heads = {} and batch = {} become grid.y and grid.z, at most {} each", heads,
                      batch, kMaxGridYZ));
  const std::size_t query_tiles = n_q / B_r + (n_q % B_r != 0);  // the last tile may be ragged; n_q + B_r − 1 can wrap
  require(query_tiles <= kMaxGridX,
          fmt::format("flash_launch_shape: n_q = {} in tiles of B_r = {} is {} query tiles, past grid.x's limit {}",
                      n_q, B_r, query_tiles, kMaxGridX));
  // The outer loop of chapter 05 (over query tiles) becomes the grid; the heads and the batch are more of it.
  LaunchShape s;
  s.grid = {static_cast<unsigned>(query_tiles), static_cast<unsigned>(heads), static_cast<unsigned>(batch)};
  s.block = {threads_per_block, 1, 1};
  return s;
}
// [launch_shape]

// [plan_fits]
bool plan_fits(std::size_t smem_bytes, unsigned threads_per_block, const DeviceLimits& limits) {
  return smem_bytes <= limits.smem_per_block && threads_per_block <= limits.max_threads_per_block;
}
// [plan_fits]

// [causal_tiles]
std::size_t causal_kv_tiles(std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q, std::size_t n_kv) {
  require(B_r > 0 && B_c > 0 && n_q > 0 && n_kv > 0,
          fmt::format("causal_kv_tiles: B_r = {}, B_c = {}, n_q = {}, n_kv = {}: all must be positive", B_r, B_c, n_q,
                      n_kv));
  require(n_q <= n_kv, fmt::format("causal_kv_tiles: n_q = {} > n_kv = {}: queries without their keys", n_q, n_kv));
  const std::size_t query_tiles = (n_q + B_r - 1) / B_r;
  require(q_tile < query_tiles, fmt::format("causal_kv_tiles: q_tile = {} but n_q = {} has {} tiles of B_r = {}",
                                            q_tile, n_q, query_tiles, B_r));
  // The tile's last query decides: it sits at position min((q_tile + 1)·B_r, n_q) - 1 + (n_kv - n_q) and
  // sees every key up to there, so tiles 0 .. position / B_c are visited.
  const std::size_t last_query = std::min((q_tile + 1) * B_r, n_q) - 1;
  const std::size_t position = last_query + (n_kv - n_q);
  return position / B_c + 1;
}
// [causal_tiles]

}  // namespace attn
