// Chapter 06's own code, which no learner writes: the shapes every rung refuses, rung 4's alignment
// check and its shared-memory indexing (bank arithmetic checked on the host), and on a GPU the rungs'
// refusals before launching. Solution track only (like common/'s tests); the exercises' tests are in
// 06_flash_cuda_test.cpp. Cases whose name starts with "on the GPU" need a device
// (tests/support/gpu_skip.hpp). Book page: book/06_flash_cuda.md.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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
#include "support/hostile.hpp"
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

namespace {

namespace hostile = attn::test::hostile;
namespace ch06 = attn::ch06;

// The shape check's rule (ladder.hpp, check_shape), in the battery's terms.
bool shape_fits(int bh, int n_q, int n_kv, int d, bool causal) {
  return bh >= 1 && bh <= 65535 && n_q >= 1 && n_kv >= 1 && d >= 1 && d <= 128 && (!causal || n_q <= n_kv) &&
         static_cast<double>(bh) * n_q * std::max(n_kv, d) <= 4.6e18;
}

}  // namespace

// The hostile-input battery (tests/support/hostile.hpp) on chapter 06's host side: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says. A shape is
// given to the battery as its five fields.
TEST_SUITE("06_flash_cuda: hostile battery") {
  TEST_CASE("the shape checks and the plans under the hostile battery") {
    // hostile battery: check_shape, check_tc_alignment, kernel_plans
    hostile::battery(
        "check_shape", {"bh", "n_q", "n_kv", "d", "causal", "who"},
        [](int bh, int n_q, int n_kv, int d, bool causal, const std::string& who) {
          ch06::check_shape({bh, n_q, n_kv, d, causal}, who);
        },
        2, 96, 128, 64, true, std::string("rung"))
        .fits([](int bh, int n_q, int n_kv, int d, bool causal, const std::string&) {
          return shape_fits(bh, n_q, n_kv, d, causal);
        })
        .run();
    // The bf16 pointers as byte offsets into a 16-byte-aligned buffer (never read: only their alignment is).
    alignas(16) static std::uint16_t buffer[64] = {};
    const auto at = [](std::size_t offset) {
      return reinterpret_cast<const std::uint16_t*>(reinterpret_cast<std::uintptr_t>(buffer) + offset);
    };
    hostile::battery(
        "check_tc_alignment", {"Q16", "K16", "V16", "d"},
        [at](std::size_t q, std::size_t k, std::size_t v, int d) {
          ch06::DeviceQKV t;
          t.Q16 = at(q);
          t.K16 = at(k);
          t.V16 = at(v);
          ch06::check_tc_alignment(t, d);
        },
        std::size_t{0}, std::size_t{32}, std::size_t{64}, 64)
        .fits([](std::size_t q, std::size_t k, std::size_t v, int d) {
          return (d != 64 && d != 128) || (q % 16 == 0 && k % 16 == 0 && v % 16 == 0);
        })
        .run();
    hostile::battery(
        "kernel_plans", {"d"}, [](std::size_t d) { return ch06::kernel_plans(d).size(); }, std::size_t{64})
        .fits([](std::size_t d) { return d >= 1 && d <= 128; })
        .answer([](std::size_t plans, std::size_t) { return plans == 2; })
        .run();
  }

  TEST_CASE("the rungs and the workspace refuse a bad shape under the hostile battery, before touching a device") {
    // hostile battery: naive_forward, cublas_forward, flash_fp32_forward, flash_tc_forward, GpuWorkspace
#if ATTN_HAVE_CUDA
    // Every rung and the workspace check the shape first (check_shape), before any CUDA call: the shapes no rung runs
    // are passed on, and must be refused naming them, with or without a GPU. A shape that fits is not passed on here
    // (its launch needs a device and device buffers of its size): the "on the GPU" cases run those.
    using Launch = std::function<void(const ch06::Shape&)>;
    const std::vector<std::pair<const char*, Launch>> calls = {
        {"naive_forward", [](const ch06::Shape& s) { ch06::naive_forward(s, {}); }},
        {"cublas_forward", [](const ch06::Shape& s) { ch06::cublas_forward(s, {}); }},
        {"flash_fp32_forward", [](const ch06::Shape& s) { attn::flash_fp32_forward(s, {}); }},
        {"flash_tc_forward", [](const ch06::Shape& s) { ch06::flash_tc_forward(s, {}); }},
        {"GpuWorkspace::GpuWorkspace", [](const ch06::Shape& s) { ch06::GpuWorkspace(s, true); }},
    };
    for (const auto& [name, launch] : calls) {
      CAPTURE(name);
      hostile::battery(
          name, {"bh", "n_q", "n_kv", "d", "causal"},
          [launch = launch](int bh, int n_q, int n_kv, int d, bool causal) {
            if (!shape_fits(bh, n_q, n_kv, d, causal)) launch({bh, n_q, n_kv, d, causal});
          },
          2, 96, 128, 64, true)
          .fits(shape_fits)
          .run();
    }
#else
    MESSAGE("skipped: built without CUDA, the rungs and the workspace are not compiled");
#endif
  }

  TEST_CASE("on the GPU, the workspace's upload and timing under the hostile battery") {
    // hostile battery: upload, median_ms
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA
    ch06::GpuWorkspace workspace({1, 4, 4, 8, false}, false);
    const std::vector<float> Q(32, 1.0f), K(32, 0.5f), V(32, -1.0f);
    hostile::battery(
        "GpuWorkspace::upload", {"Q", "K", "V"},
        [&workspace](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
          workspace.upload(q, k, v);
        },
        Q, K, V)
        .fits([](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
          return q.size() == 32 && k.size() == 32 && v.size() == 32;
        })
        .non_finite_passes("copied to the device as they are: the rungs' outputs are checked against the CPU")
        .run();
    hostile::battery(
        "GpuWorkspace::median_ms", {"repeats", "warmup"},
        [&workspace](int repeats, int warmup) { return workspace.median_ms([] {}, repeats, warmup); }, 3, 1)
        .fits([](int repeats, int warmup) { return repeats >= 1 && repeats <= 1000 && warmup >= 0 && warmup <= 1000; })
        .answer([](double ms, int, int) { return ms >= 0; })
        .exempt("= 2147483647", "asks for 2^31 samples (or warm-ups) of ~2 ms each: the caller's time, not a bad value")
        .run();
#endif
  }

  TEST_CASE("the timing run's order under the hostile battery") {
    // hostile battery: check_then_time
    // The checks' verdicts as a list, and whether each callable is empty: an empty one must be refused naming it.
    hostile::battery(
        "check_then_time", {"verdicts", "no_check|check", "no_time|time"},
        [](const std::vector<bool>& verdicts, bool no_check, bool no_time) {
          std::size_t timed = 0;
          const std::function<std::vector<ch06::RungCheck>()> check = [&verdicts] {
            std::vector<ch06::RungCheck> out;
            for (const bool ok : verdicts) out.push_back({"rung", 64, false, ok, ""});
            return out;
          };
          const std::function<void(const std::vector<ch06::RungCheck>&)> time =
              [&timed](const std::vector<ch06::RungCheck>& checks) { timed = checks.size() + 1; };
          try {
            ch06::check_then_time(no_check ? nullptr : check, no_time ? nullptr : time);
          } catch (const std::runtime_error&) {  // its documented verdict on failed checks, after the timing
            return timed == verdicts.size() + 1 ? std::size_t{0} : std::size_t{1};
          }
          return timed == verdicts.size() + 1 ? std::size_t{0} : std::size_t{1};
        },
        std::vector<bool>{true, false, true}, false, false)
        .fits([](const std::vector<bool>&, bool no_check, bool no_time) { return !no_check && !no_time; })
        .answer([](std::size_t wrong, const std::vector<bool>&, bool, bool) { return wrong == 0; })
        .run();
  }

  TEST_CASE("the roofline's arithmetic under the hostile battery") {
    // hostile battery: attention_flops, roofline, round_to_bf16
    hostile::battery(
        "attention_flops", {"bh", "n_q", "n_kv", "d", "causal"},
        [](int bh, int n_q, int n_kv, int d, bool causal) {
          return ch06::attention_flops({bh, n_q, n_kv, d, causal});
        },
        2, 96, 128, 64, true)
        .fits(shape_fits)
        .answer([](double flops, int bh, int n_q, int n_kv, int d, bool causal) {
          const double full = 4.0 * bh * double(n_q) * n_kv * d;
          return flops > 0 && flops <= full && (causal || flops == full);
        })
        .run();
    hostile::battery(
        "roofline", {"bh", "n_q", "n_kv", "d", "causal", "element_bytes"},
        [](int bh, int n_q, int n_kv, int d, bool causal, std::size_t e) {
          std::vector<double> out;
          for (const ch06::RooflineRow& r : ch06::roofline({bh, n_q, n_kv, d, causal}, e))
            out.insert(out.end(), {r.flops, r.bytes, r.intensity});
          return out;
        },
        2, 96, 128, 64, true, std::size_t{2})
        .fits([](int bh, int n_q, int n_kv, int d, bool causal, std::size_t e) {
          return shape_fits(bh, n_q, n_kv, d, causal) && e >= 1 && e <= 8;
        })
        .answer([](const std::vector<double>& r, int, int, int, int, bool, std::size_t) {
          for (const double v : r)
            if (!(v > 0 && std::isfinite(v))) return false;
          return r.size() == 6;
        })
        .run();
    hostile::battery(
        "round_to_bf16", {"x"}, [](float x) { return ch06::round_to_bf16(x); }, 1.2345f)
        .answer([](float y, float x) {
          if (std::isinf(x)) return y == x;
          if (std::fabs(x) > 3.3961e38f) return std::isinf(y) && (y > 0) == (x > 0);  // past bf16's largest finite
          return std::fabs(y - x) <= std::fabs(x) * 0x1.0p-8f;                        // half a bf16 ulp
        })
        .exempt("x = NaN", "documented: NaN stays NaN")
        .run();
  }

  TEST_CASE("the bf16 reference and the hash draws under the hostile battery") {
    // hostile battery: bf16_reference_attention, hash_bits, hash_uniform, hash_normal
    using Row = std::vector<float>;
    Row q(3 * 4), k(5 * 4), v(5 * 4);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = ch06::hash_normal(1, i);
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = ch06::hash_normal(2, i);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = ch06::hash_normal(3, i);
    const auto holds = [](const Row& x, int rows, int d) {
      return rows < 1 || d < 1 || static_cast<std::size_t>(rows) * static_cast<std::size_t>(d) <= x.size();
    };
    hostile::battery(
        "bf16_reference_attention", {"Q", "K", "V", "n_q", "n_kv", "d", "causal"},
        [holds](const Row& Q, const Row& K, const Row& V, int n_q, int n_kv, int d, bool causal) {
          // the lists are passed on where they hold the sizes, or where the sizes are refused before any read
          if (shape_fits(1, n_q, n_kv, d, causal) && !(holds(Q, n_q, d) && holds(K, n_kv, d) && holds(V, n_kv, d)))
            return Row{};
          return ch06::bf16_reference_attention(Q.data(), K.data(), V.data(), n_q, n_kv, d, causal);
        },
        q, k, v, 3, 5, 4, true)
        .fits([](const Row&, const Row&, const Row&, int n_q, int n_kv, int d, bool causal) {
          return shape_fits(1, n_q, n_kv, d, causal);
        })
        .answer([](const Row& O, const Row&, const Row&, const Row&, int n_q, int, int d, bool) {
          return O.empty() || O.size() == static_cast<std::size_t>(n_q) * static_cast<std::size_t>(d);
        })
        .run();
    hostile::battery(
        "hash_bits", {"seed", "i"}, [](std::uint64_t seed, std::uint64_t i) { return ch06::hash_bits(seed, i); },
        std::uint64_t{42}, std::uint64_t{7})
        .answer([](std::uint64_t bits, std::uint64_t seed, std::uint64_t i) {
          return bits == ch06::hash_bits(seed, i) && (i == 0 || bits != ch06::hash_bits(seed, i - 1));
        })
        .run();
    hostile::battery(
        "hash_uniform", {"seed", "i"}, [](std::uint64_t seed, std::uint64_t i) { return ch06::hash_uniform(seed, i); },
        std::uint64_t{42}, std::uint64_t{7})
        .answer([](float u, std::uint64_t, std::uint64_t) { return u >= -1.0f && u < 1.0f; })
        .run();
    hostile::battery(
        "hash_normal", {"seed", "i"}, [](std::uint64_t seed, std::uint64_t i) { return ch06::hash_normal(seed, i); },
        std::uint64_t{42}, std::uint64_t{7})
        .answer([](float z, std::uint64_t, std::uint64_t) { return std::isfinite(z) && std::fabs(z) <= 5.8f; })
        .run();
  }
}
