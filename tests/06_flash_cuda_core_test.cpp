// Chapter 06's own code, which no learner writes: the shapes every rung refuses, rung 4's alignment
// check and its shared-memory indexing (bank arithmetic checked on the host), and on a GPU the rungs'
// refusals before launching. Solution track only (like common/'s tests); the exercises' tests are in
// 06_flash_cuda_test.cpp. Cases whose name starts with "on the GPU" need a device
// (tests/support/gpu_skip.hpp). Book page: book/06_flash_cuda.md.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "06_flash_cuda/flash_cuda.hpp"
#include "06_flash_cuda/ladder.hpp"
#include "06_flash_cuda/random_inputs.hpp"
#include "06_flash_cuda/tiles.hpp"
#include "support/gpu_skip.hpp"
#include "support/throws.hpp"

TEST_SUITE("06_flash_cuda") {
  TEST_CASE("every rung refuses a causal call with more queries than keys, naming n_q and n_kv") {
    const attn::ch06::Shape bad{2, 300, 256, 64, true};
    CHECK_THROWS_WITH_AS(attn::ch06::check_shape(bad, "flash_tc_forward"),
                         doctest::Contains("flash_tc_forward: a causal call needs n_q <= n_kv"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::ch06::check_shape(bad, "x"), doctest::Contains("n_q = 300, n_kv = 256"),
                         std::invalid_argument);
    CHECK_NOTHROW(attn::ch06::check_shape({2, 256, 256, 64, true}, "x"));
    CHECK_NOTHROW(attn::ch06::check_shape({2, 300, 256, 64, false}, "x"));  // without the mask any n_q is fine
    CHECK_THROWS_WITH_AS(attn::ch06::check_shape({1, 4, 4, 129, false}, "x"), doctest::Contains("d = 129"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::ch06::check_shape({65536, 4, 4, 64, false}, "x"), doctest::Contains("bh = 65536"),
                         std::invalid_argument);
    CHECK_THROWS_AS(attn::ch06::check_shape({1, 0, 4, 64, false}, "x"), std::invalid_argument);
    CHECK_THROWS_AS(attn::ch06::bf16_reference_attention(nullptr, nullptr, nullptr, 5, 4, 8, true),
                    std::invalid_argument);
  }

  TEST_CASE("rung 4 refuses bf16 inputs that are not 16-byte aligned when it reads them 16 bytes at a time") {
    alignas(16) static std::uint16_t buffer[64] = {};
    attn::ch06::DeviceQKV t;
    t.Q16 = buffer;
    t.K16 = buffer;
    t.V16 = buffer;
    CHECK_NOTHROW(attn::ch06::check_tc_alignment(t, 64));
    t.K16 = buffer + 1;  // 2 bytes past a 16-byte boundary
    CHECK_THROWS_WITH_AS(attn::ch06::check_tc_alignment(t, 128), doctest::Contains("K16 must be 16-byte aligned"),
                         std::invalid_argument);
    CHECK_NOTHROW(attn::ch06::check_tc_alignment(t, 40));  // d = 40 takes the element-wise path
  }

  // [vt_store_test]
  TEST_CASE("rung 4 stores every element of V_j transposed exactly once, each warp's 32 stores in 32 banks") {
    namespace tiles = attn::ch06::tiles;
    for (const int D : {64, 128})
      for (const int W : {8, 1}) {  // 16-byte loads (d = D) and the element-wise ragged path
        CAPTURE(D);
        CAPTURE(W);
        const int items = tiles::kTcBc / 2 * D / W;
        // Bank of a word: V_jᵀ starts after Q_i and K_j, (B_r + B_c)·(D + 8) bf16, a multiple of 128 bytes.
        const int vt_offset_words = (tiles::kTcBr + tiles::kTcBc) * tiles::tc_qk_stride(D) / 2;
        CHECK(vt_offset_words % 32 == 0);
        std::vector<int> writes(static_cast<std::size_t>(D * tiles::kTcVtStride / 2), 0);
        int worst_way = 0;
        // Lane l of warp w handles idx = 32·w + l + 128·k: warps' stores are sets of 32 consecutive items.
        for (int first = 0; first < items; first += 32)
          for (int e = 0; e < W; ++e) {
            std::set<int> banks, words;
            for (int idx = first; idx < first + 32 && idx < items; ++idx) {
              const tiles::VtItem it = tiles::tc_vt_item(idx, W);
              REQUIRE(it.pair < tiles::kTcBc / 2);
              REQUIRE(it.c + e < D);
              const int word = tiles::tc_vt_word(it.c + e, it.pair);
              ++writes.at(static_cast<std::size_t>(word));
              words.insert(word);
              banks.insert((vt_offset_words + word) % 32);
            }
            worst_way = std::max(worst_way, static_cast<int>(words.size() - banks.size()) + 1);
            CHECK(banks.size() == 32);
          }
        CHECK(worst_way == 1);
        // Every (column, row pair) word of the B_c real columns written once; the 8 padding bf16 never. The
        // word of (c, p) is where the P·V fragment load reads keys 2p and 2p + 1 of column c: bf16 element
        // c·(B_c + 8) + 2p of V_jᵀ, in the word's lower half.
        for (int c = 0; c < D; ++c)
          for (int p = 0; p < tiles::kTcVtStride / 2; ++p) {
            CHECK(2 * tiles::tc_vt_word(c, p) == c * tiles::kTcVtStride + 2 * p);
            CHECK(writes[static_cast<std::size_t>(tiles::tc_vt_word(c, p))] == (p < tiles::kTcBc / 2 ? 1 : 0));
          }
      }
  }
  // [vt_store_test]

  TEST_CASE("the timing inputs drawn on the GPU are standard normal: mean, variance and tail mass of 10^6 draws") {
    // The kernel calls this same function; here the host draws N = 10^6 values of one stream. Limits at 5
    // standard errors: mean 1/√N = 0.001, variance √(2/N) = 0.0014, the mass beyond 2σ (p = 0.0455)
    // √(p(1 - p)/N) = 0.0002.
    constexpr int N = 1000000;
    double sum = 0.0, sum_sq = 0.0, extreme = 0.0;
    int beyond_2 = 0, not_finite = 0;
    for (int i = 0; i < N; ++i) {
      const double z = attn::ch06::hash_normal(66, static_cast<std::uint64_t>(i));
      not_finite += std::isfinite(z) ? 0 : 1;
      sum += z;
      sum_sq += z * z;
      beyond_2 += std::fabs(z) > 2.0 ? 1 : 0;
      extreme = std::max(extreme, std::fabs(z));
    }
    const double mean = sum / N, variance = sum_sq / N - mean * mean;
    CHECK(not_finite == 0);
    CHECK(std::fabs(mean) < 0.005);
    CHECK(std::fabs(variance - 1.0) < 0.007);
    CHECK(std::fabs(beyond_2 / static_cast<double>(N) - 0.0455) < 0.001);
    CHECK(extreme <= 5.8);  // 24-bit u₁: |z| ≤ √(48 ln 2) = 5.77
    // Q, K and V use neighbouring seeds: their streams must not be shifted copies of each other.
    int equal = 0;
    for (int i = 0; i < 1000; ++i)
      equal += attn::ch06::hash_normal(66, static_cast<std::uint64_t>(i)) ==
                       attn::ch06::hash_normal(67, static_cast<std::uint64_t>(i + 1))
                   ? 1
                   : 0;
    CHECK(equal == 0);
  }

  TEST_CASE("a rung failing its check against the CPU is reported, the timing still runs, and the run fails after") {
    using attn::ch06::RungCheck;
    std::vector<RungCheck> seen;
    bool timed = false;
    const auto checks = [] {
      return std::vector<RungCheck>{{"3 flash fp32", 64, false, true, ""},
                                    {"4 flash tc bf16", 128, true, false, ""},
                                    {"1 naive", 64, false, false, "cudaLaunchKernel failed: too many resources"}};
    };
    const auto time = [&](const std::vector<RungCheck>& c) {
      seen = c;
      timed = true;
    };
    std::string message;
    try {
      attn::ch06::check_then_time(checks, time);
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    CHECK(timed);
    REQUIRE(seen.size() == 3);  // the timing gets every check, to skip a rung that could not run
    CHECK(message.find("4 flash tc bf16 at d = 128, causal: its output differs from the CPU's") != std::string::npos);
    CHECK(message.find("1 naive at d = 64, not causal: it could not run: cudaLaunchKernel failed") !=
          std::string::npos);
    CHECK(message.find("3 flash fp32") == std::string::npos);
    // A timing that stops (a broken rung can break the device) does not hide the failed checks.
    CHECK_THROWS_WITH_AS(
        attn::ch06::check_then_time(checks,
                                    [](const std::vector<RungCheck>&) { throw std::runtime_error("cudaMalloc"); }),
        doctest::Contains("4 flash tc bf16 at d = 128, causal: its output differs from the CPU's\n  1 naive at d = 64, "
                          "not causal: it could not run: cudaLaunchKernel failed: too many resources\nthen the timing "
                          "stopped: cudaMalloc"),
        std::runtime_error);
    // Every check passed: the timing runs and nothing is thrown.
    timed = false;
    CHECK_NOTHROW(attn::ch06::check_then_time(
        [] {
          return std::vector<RungCheck>{{"2 cublas", 64, true, true, ""}};
        },
        time));
    CHECK(timed);
  }

  TEST_CASE("on the GPU, every rung refuses a causal call with more queries than keys before launching") {
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA
    const attn::ch06::Shape fine{1, 96, 64, 64, false}, bad{1, 96, 64, 64, true};
    attn::ch06::GpuWorkspace workspace(fine, /*with_scores=*/true);
    workspace.upload(std::vector<float>(96 * 64, 1.0f), std::vector<float>(64 * 64, 1.0f),
                     std::vector<float>(64 * 64, 1.0f));
    CHECK_THROWS_WITH_AS(attn::ch06::naive_forward(bad, workspace.tensors()), doctest::Contains("n_q = 96, n_kv = 64"),
                         std::invalid_argument);
    CHECK_THROWS_AS(attn::ch06::cublas_forward(bad, workspace.tensors()), std::invalid_argument);
    CHECK_THROWS_AS(attn::flash_fp32_forward(bad, workspace.tensors()), std::invalid_argument);
    CHECK_THROWS_AS(attn::ch06::flash_tc_forward(bad, workspace.tensors()), std::invalid_argument);
    CHECK_THROWS_AS(attn::ch06::GpuWorkspace(bad, false), std::invalid_argument);
#endif
  }
}

// Bad input, one case per function that had none (cmake/check_bad_input.py). The GPU cases run where a device is.
TEST_SUITE("06_flash_cuda: bad input") {
  TEST_CASE("kernel_plans, attention_flops and roofline refuse a head size, shape or element width no rung has") {
    // d = 2^32 became int 0 in the tile arithmetic: plans of a few bytes for a head no rung can run.
    CHECK_THROWS_NAMING(attn::ch06::kernel_plans(std::size_t{1} << 32), std::invalid_argument, "d = 4294967296");
    CHECK_THROWS_NAMING(attn::ch06::kernel_plans(0), std::invalid_argument, "d = 0");
    CHECK_THROWS_NAMING(attn::ch06::kernel_plans(129), std::invalid_argument, "1..128");
    CHECK_THROWS_NAMING(attn::ch06::attention_flops({1, -4, 8, 64, false}), std::invalid_argument, "attention_flops",
                        "n_q = -4");
    CHECK_THROWS_NAMING(attn::ch06::roofline({1, 8, 8, 64, false}, 0), std::invalid_argument, "element_bytes = 0");
    CHECK_THROWS_AS(attn::ch06::roofline({0, 8, 8, 64, false}, 4), std::invalid_argument);
  }

  TEST_CASE("round_to_bf16, plan_fits and the hash draws answer every input as their contracts say") {
    // bad input answered: round_to_bf16, plan_fits, hash_bits, hash_uniform, hash_normal
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    CHECK(std::isnan(attn::ch06::round_to_bf16(nan)));
    CHECK(attn::ch06::round_to_bf16(inf) == inf);
    CHECK(attn::ch06::round_to_bf16(-inf) == -inf);
    CHECK(attn::ch06::round_to_bf16(std::numeric_limits<float>::max()) == inf);  // past bf16's largest: as CUDA rounds
    CHECK_FALSE(attn::plan_fits(1, 1, attn::DeviceLimits{}));
    CHECK(attn::plan_fits(0, 0, attn::DeviceLimits{}));
    CHECK_FALSE(attn::plan_fits(std::numeric_limits<std::size_t>::max(), 1, {1 << 16, 1024}));
    constexpr std::uint64_t kLast = std::numeric_limits<std::uint64_t>::max();
    CHECK(attn::ch06::hash_bits(kLast, kLast) != attn::ch06::hash_bits(kLast, kLast - 1));
    const float u = attn::ch06::hash_uniform(kLast, kLast), z = attn::ch06::hash_normal(kLast, kLast);
    CHECK((u >= -1.0f && u < 1.0f));
    CHECK((std::isfinite(z) && std::fabs(z) <= 5.8f));
  }

  TEST_CASE("on the GPU, the workspace refuses inputs of other sizes and a timing of no samples, before any launch") {
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA  // the workspace exists only in a CUDA build
    attn::ch06::GpuWorkspace workspace({1, 4, 4, 8, false}, false);
    const std::vector<float> Q(32, 1.0f), K(32, 1.0f), short_V(31, 1.0f);
    CHECK_THROWS_NAMING(workspace.upload(Q, K, short_V), std::invalid_argument, "32, 32, 31");
    int launches = 0;
    const auto launch = [&] { ++launches; };
    CHECK_THROWS_NAMING(workspace.median_ms(launch, 0, 1), std::invalid_argument, "repeats = 0");
    CHECK_THROWS_NAMING(workspace.median_ms(launch, 3, -1), std::invalid_argument, "warmup = -1");
    CHECK_THROWS_NAMING(workspace.median_ms(std::function<void()>(), 3, 1), std::invalid_argument, "empty launch");
    CHECK(launches == 0);
#endif
  }
}
