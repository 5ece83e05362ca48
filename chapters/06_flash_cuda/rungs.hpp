/// \file
/// Chapter 06's ladder, in the order taught: the four rungs the story checks and times and the benchmarks
/// time again. Inline, because rung 3 is the contract's flash_fp32_forward: each track's executable (the
/// reference's and the learner's) gets the ladder of its own code.
#pragma once

#include <vector>

#include "06_flash_cuda/flash_cuda.hpp"
#include "06_flash_cuda/ladder.hpp"

namespace attn::ch06 {

#if ATTN_HAVE_CUDA
/// The four rungs: naive (S materialised), cuBLAS without TF32, fused fp32 flash, tensor-core bf16 flash.
inline std::vector<Rung> ladder() {
  return {{"1 naive", false, true, naive_forward},
          {"2 cublas (no TF32)", false, true, cublas_forward},
          {"3 flash fp32", false, false, attn::flash_fp32_forward},
          {"4 flash tc bf16", true, false, flash_tc_forward}};
}
#endif

}  // namespace attn::ch06
