// Chapter 06's tests, run against both tracks. The planning tests run everywhere and compare with closed
// forms or a brute-force count. The kernel tests (their names start with "on the GPU") need a device:
// without one this program marks them skipped when it starts (doctest counts them as skipped, never as
// passed) and says why (tests/support/gpu_skip.hpp), and ctest reports them as skipped. The chapter's own
// code, which no learner writes, is tested in 06_flash_cuda_core_test.cpp. Kernel results are compared with the float64
// oracle (tests/oracle/06_flash_cuda_oracle.hpp), never with another rung or the other track.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "06_flash_cuda/flash_cuda.hpp"
#include "attn/rng.hpp"
#include "oracle/06_flash_cuda_oracle.hpp"
#include "support/allclose.hpp"
#include "support/gpu_skip.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::DeviceLimits;

// The brute-force count causal_kv_tiles must match: K/V tile j is visited when some query i of the tile
// may see some key k of tile j (k ≤ i + n_kv - n_q), checked pair by pair.
std::size_t visited_tiles_brute_force(std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q,
                                      std::size_t n_kv) {
  std::size_t count = 0;
  for (std::size_t j0 = 0; j0 < n_kv; j0 += B_c) {
    bool seen = false;
    for (std::size_t i = q_tile * B_r; i < std::min((q_tile + 1) * B_r, n_q); ++i)
      for (std::size_t k = j0; k < std::min(j0 + B_c, n_kv); ++k) seen = seen || k <= i + (n_kv - n_q);
    count += seen ? 1 : 0;
  }
  return count;
}

#if ATTN_HAVE_CUDA
struct Result {
  std::vector<float> O, lse;
};

std::vector<float> random_values(attn::Rng& rng, std::size_t count) {
  const attn::Matrix m = rng.normal(1, count);  // (1, count)
  return std::vector<float>(m.begin(), m.end());
}

// Runs one rung on the device, outputs poisoned with NaN first so a row the rung forgets cannot pass.
template <class Launch>
Result run_on_device(const Launch& launch, const attn::ch06::Shape& shape, const std::vector<float>& Q,
                     const std::vector<float>& K, const std::vector<float>& V) {
  attn::ch06::GpuWorkspace workspace(shape, /*with_scores=*/true);
  workspace.upload(Q, K, V);
  workspace.poison_outputs();
  launch(shape, workspace.tensors());
  return {workspace.download_O(), workspace.download_lse()};
}

attn::Matrix as_matrix(const std::vector<float>& v, std::size_t cols) {
  attn::Matrix m = xt::zeros<float>({v.size() / cols, cols});  // (rows, cols)
  std::copy(v.begin(), v.end(), m.begin());
  return m;
}
attn::oracle::Mat as_mat(const std::vector<double>& v, std::size_t cols) {
  attn::oracle::Mat m(v.size() / cols, cols);
  m.v = v;
  return m;
}
attn::Vector as_vector(const std::vector<float>& v) {
  attn::Vector out = xt::zeros<float>({v.size()});  // (n)
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}

// fp32 rungs against float64, entries N(0, 1), d ≤ 128: a float dot product of length d errs by about
// √d·2⁻²⁴·|partial sums| ≈ 1e-6 in s, and the softmax and P·V sums add errors of the same size, so
// 1e-5 absolute plus 1e-5 relative leaves a margin of ten.
constexpr double kAtolFp32 = 1e-5, kRtolFp32 = 1e-5;

void check_fp32_rung(const Result& got, const attn::oracle::AttentionLse& want, std::size_t d) {
  CHECK_ALLCLOSE(as_matrix(got.O, d), as_mat(want.O, d), kAtolFp32, kRtolFp32);
  CHECK_ALLCLOSE(as_vector(got.lse), want.lse, kAtolFp32, kRtolFp32);
}

attn::oracle::AttentionLse oracle_of(const attn::ch06::Shape& s, const std::vector<float>& Q,
                                     const std::vector<float>& K, const std::vector<float>& V) {
  return attn::oracle::attention_lse(Q, K, V, static_cast<std::size_t>(s.bh), static_cast<std::size_t>(s.n_q),
                                     static_cast<std::size_t>(s.n_kv), static_cast<std::size_t>(s.d), s.causal);
}

// Rung 3 (the track's flash_fp32_forward) on random N(0, 1) inputs of each shape, against float64.
void check_flash_fp32_on(const std::vector<attn::ch06::Shape>& shapes, std::uint64_t seed) {
  attn::Rng rng(seed);
  for (const attn::ch06::Shape& shape : shapes) {
    CAPTURE(shape.n_q);
    CAPTURE(shape.n_kv);
    CAPTURE(shape.d);
    const std::size_t nq = static_cast<std::size_t>(shape.bh * shape.n_q) * static_cast<std::size_t>(shape.d);
    const std::size_t nkv = static_cast<std::size_t>(shape.bh * shape.n_kv) * static_cast<std::size_t>(shape.d);
    const std::vector<float> Q = random_values(rng, nq), K = random_values(rng, nkv), V = random_values(rng, nkv);
    check_fp32_rung(run_on_device(attn::flash_fp32_forward, shape, Q, K, V), oracle_of(shape, Q, K, V),
                    static_cast<std::size_t>(shape.d));
  }
}
#endif

}  // namespace

TEST_SUITE("06_flash_cuda") {
  TEST_CASE("flash_smem_bytes counts Q_i, K_j, V_j in the element type and S_ij in fp32" *
            doctest::test_suite("06_flash_cuda/flash_smem_bytes")) {
    CHECK(attn::flash_smem_bytes(64, 64, 128, 2) == (64 + 2 * 64) * 128 * 2 + 64 * 64 * 4);  // 65536
    CHECK(attn::flash_smem_bytes(32, 32, 128, 4) == 96 * 128 * 4 + 32 * 32 * 4);             // 53248
    CHECK(attn::flash_smem_bytes(1, 1, 1, 4) == 16);
    CHECK(attn::flash_smem_bytes(128, 32, 72, 2) == (128 + 64) * 72 * 2 + 128 * 32 * 4);
  }

  TEST_CASE("flash_smem_bytes refuses a byte count past 64 bits instead of wrapping around" *
            doctest::test_suite("06_flash_cuda/flash_smem_bytes")) {
    // 2^40 · 2^40 · 4 bytes of S_ij alone is 2^82: a wrapped count would be 0 and "fit" any device.
    const std::size_t huge = std::size_t{1} << 40;
    CHECK_THROWS_NAMING(attn::flash_smem_bytes(huge, huge, 1, 4), std::invalid_argument, "flash_smem_bytes");
    CHECK_THROWS_AS(attn::flash_smem_bytes(1, std::size_t{1} << 63, 1, 2), std::invalid_argument);  // 2·B_c wraps
  }

  TEST_CASE("flash_smem_bytes rejects a zero size, naming it" * doctest::test_suite("06_flash_cuda/flash_smem_bytes")) {
    CHECK_THROWS_NAMING(attn::flash_smem_bytes(64, 0, 128, 2), std::invalid_argument, "B_c");
    CHECK_THROWS_NAMING(attn::flash_smem_bytes(64, 64, 0, 2), std::invalid_argument, "d");
  }

  TEST_CASE("flash_launch_shape gives one block per query tile, head and batch entry, rounding the tiles up" *
            doctest::test_suite("06_flash_cuda/flash_launch_shape")) {
    const attn::LaunchShape s = attn::flash_launch_shape(2, 16, 4096, 64, 128);
    CHECK(s.grid.x == 64);
    CHECK(s.grid.y == 16);
    CHECK(s.grid.z == 2);
    CHECK(s.block.x == 128);
    CHECK(s.block.y == 1);
    CHECK(s.block.z == 1);
    CHECK(attn::flash_launch_shape(1, 1, 4097, 64, 128).grid.x == 65);  // a ragged last tile is a whole block
    CHECK(attn::flash_launch_shape(1, 1, 1, 64, 32).grid.x == 1);
    CHECK(attn::flash_launch_shape(3, 65535, 100, 100, 64).grid.y == 65535);  // at the limit is fine
  }

  TEST_CASE("flash_launch_shape rejects zeros and more than 65535 heads or batch entries" *
            doctest::test_suite("06_flash_cuda/flash_launch_shape")) {
    CHECK_THROWS_AS(attn::flash_launch_shape(1, 1, 0, 64, 128), std::invalid_argument);
    CHECK_THROWS_AS(attn::flash_launch_shape(1, 1, 64, 64, 0), std::invalid_argument);
    CHECK_THROWS_NAMING(attn::flash_launch_shape(1, 65536, 64, 64, 128), std::invalid_argument, "65535");
    CHECK_THROWS_NAMING(attn::flash_launch_shape(70000, 1, 64, 64, 128), std::invalid_argument, "70000");
  }

  TEST_CASE("plan_fits accepts a plan within or exactly at both limits and refuses one over either" *
            doctest::test_suite("06_flash_cuda/plan_fits")) {
    const DeviceLimits default_48k{48 * 1024, 1024}, h100_optin{227 * 1024, 1024};
    const std::size_t tc_tile = attn::flash_smem_bytes(64, 64, 128, 2);  // 64 KiB
    CHECK_FALSE(attn::plan_fits(tc_tile, 128, default_48k));
    CHECK(attn::plan_fits(tc_tile, 128, h100_optin));
    CHECK(attn::plan_fits(48 * 1024, 1024, default_48k));
    CHECK_FALSE(attn::plan_fits(48 * 1024 + 1, 128, default_48k));
    CHECK_FALSE(attn::plan_fits(1024, 1025, h100_optin));
  }

  TEST_CASE("rung 3's kernel asks for flash_smem_bytes plus one padding float per row of Q_i, K_j, S_ij" *
            doctest::test_suite("06_flash_cuda/flash_smem_bytes")) {
    for (const std::size_t d : {1, 40, 64, 128}) {
      CAPTURE(d);
      const attn::ch06::KernelPlan fp32 = attn::ch06::kernel_plans(d).at(0);
      CHECK(fp32.smem_bytes ==
            attn::flash_smem_bytes(fp32.B_r, fp32.B_c, d, 4) + (2 * fp32.B_r + fp32.B_c) * sizeof(float));
    }
  }

  TEST_CASE("causal_kv_tiles counts exactly the K/V tiles holding a key some query of the tile may see" *
            doctest::test_suite("06_flash_cuda/causal_kv_tiles")) {
    struct Case {
      std::size_t B_r, B_c, n_q, n_kv;
    };
    for (const Case& c : {Case{64, 64, 256, 256}, Case{64, 32, 256, 256}, Case{32, 64, 256, 256},
                          Case{64, 64, 100, 100}, Case{64, 64, 10, 100}, Case{16, 48, 77, 131}, Case{1, 1, 5, 5}}) {
      CAPTURE(c.B_r);
      CAPTURE(c.B_c);
      CAPTURE(c.n_q);
      CAPTURE(c.n_kv);
      for (std::size_t t = 0; t < (c.n_q + c.B_r - 1) / c.B_r; ++t)
        CHECK(attn::causal_kv_tiles(t, c.B_r, c.B_c, c.n_q, c.n_kv) ==
              visited_tiles_brute_force(t, c.B_r, c.B_c, c.n_q, c.n_kv));
    }
    CHECK(attn::causal_kv_tiles(0, 64, 64, 4096, 4096) == 1);  // the first tile sees only its own diagonal tile
    CHECK(attn::causal_kv_tiles(63, 64, 64, 4096, 4096) == 64);
  }

  TEST_CASE("causal_kv_tiles rejects a tile past the end, a zero size and more queries than keys" *
            doctest::test_suite("06_flash_cuda/causal_kv_tiles")) {
    CHECK_THROWS_NAMING(attn::causal_kv_tiles(4, 64, 64, 256, 256), std::invalid_argument, "4");
    CHECK_THROWS_AS(attn::causal_kv_tiles(0, 0, 64, 256, 256), std::invalid_argument);
    CHECK_THROWS_NAMING(attn::causal_kv_tiles(0, 64, 64, 300, 256), std::invalid_argument, "300", "256");
  }

  TEST_CASE("on the GPU, rung 3 with your flash_inner_step equals float64 on ragged sizes, with its log-sum-exp" *
            doctest::test_suite("06_flash_cuda/flash_inner_step")) {
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA
    check_flash_fp32_on({{3, 77, 77, 40, false}, {2, 1, 1, 1, false}, {1, 33, 200, 128, false}}, 61);
#endif
  }

  TEST_CASE("on the GPU, rung 3 causal with flash_inner_step matches float64, skipping tiles past the diagonal" *
            doctest::test_suite("06_flash_cuda/flash_inner_step")) {
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA
    check_flash_fp32_on({{2, 130, 130, 64, true}, {2, 50, 131, 72, true}, {1, 1, 77, 16, true}}, 62);
#endif
  }

  TEST_CASE("on the GPU, rung 3 with flash_inner_step puts all weight on the winning key at scores of ±1e4, no NaN" *
            doctest::test_suite("06_flash_cuda/flash_inner_step")) {
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA
    // d = 4, so s = q·k / 2 exactly in float: scores 1e4, -1e4 and 9900; the first key wins by e^100.
    const attn::ch06::Shape shape{1, 1, 3, 4, false};
    const std::vector<float> Q{200, 0, 0, 0}, K{100, 1, 2, 3, -100, 0, 0, 0, 99, 5, 5, 5};
    const std::vector<float> V{1, 2, 3, 4, 9, 9, 9, 9, -7, -7, -7, -7};
    const Result got = run_on_device(attn::flash_fp32_forward, shape, Q, K, V);
    CHECK_ALLCLOSE(as_matrix(got.O, 4), as_mat({1, 2, 3, 4}, 4), 1e-6, 0.0);
    CHECK_ALLCLOSE(as_vector(got.lse), std::vector<double>{1e4}, 0.0, 1e-7);
#endif
  }

  TEST_CASE("on the GPU, every rung (flash_inner_step in rung 3) matches float64 at d = 16..128, n_q < n_kv" *
            doctest::test_suite("06_flash_cuda/flash_inner_step")) {
    REQUIRE_DEVICE();
#if ATTN_HAVE_CUDA
    attn::Rng rng(63);
    // n_q < n_kv: a causal mask aligned to the top-left (wrong) differs from the bottom-right one, and
    // swapped m/n or strides in a cuBLAS call change the result. n_kv = 131 leaves a ragged, odd last
    // K/V tile; d = 64 and 128 take rung 4's 16-byte loads, 16, 32 and 96 its element-wise path.
    std::vector<attn::ch06::Shape> shapes;
    for (const int d : {16, 32, 64, 96, 128})
      for (const bool causal : {false, true}) shapes.push_back({2, 70, 131, d, causal});
    shapes.push_back({2, 150, 150, 128, true});  // square, two query tiles of rung 4
    shapes.push_back({3, 1, 67, 64, true});      // one query (a decoding step) sees every key
    for (const attn::ch06::Shape& shape : shapes) {
      const auto d = static_cast<std::size_t>(shape.d), n_q = static_cast<std::size_t>(shape.n_q),
                 n_kv = static_cast<std::size_t>(shape.n_kv), bh = static_cast<std::size_t>(shape.bh);
      CAPTURE(shape.causal);
      CAPTURE(n_q);
      CAPTURE(n_kv);
      CAPTURE(d);
      const std::vector<float> Q = random_values(rng, bh * n_q * d), K = random_values(rng, bh * n_kv * d),
                               V = random_values(rng, bh * n_kv * d);
      const attn::oracle::AttentionLse want = oracle_of(shape, Q, K, V);
      check_fp32_rung(run_on_device(attn::flash_fp32_forward, shape, Q, K, V), want, d);
      check_fp32_rung(run_on_device(attn::ch06::naive_forward, shape, Q, K, V), want, d);
      check_fp32_rung(run_on_device(attn::ch06::cublas_forward, shape, Q, K, V), want, d);
      // FlashAttention's rule for bf16: the kernel's largest error against float64 is at most twice the largest
      // error of the same computation done the way a bf16 framework does it (attention_bf16).
      const Result tc = run_on_device(attn::ch06::flash_tc_forward, shape, Q, K, V);
      double tc_err = 0.0, ref_err = 0.0;
      for (std::size_t h = 0; h < bh; ++h) {
        const auto head = [&](const std::vector<float>& x, std::size_t rows) {
          const auto begin = x.begin() + static_cast<std::ptrdiff_t>(h * rows * d);
          return std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(rows * d));
        };
        const std::vector<double> ref =
            attn::oracle::attention_bf16(head(Q, n_q), head(K, n_kv), head(V, n_kv), n_q, n_kv, d, shape.causal);
        for (std::size_t k = 0; k < n_q * d; ++k) {
          const double want_k = want.O[h * n_q * d + k];
          const double e = std::fabs(tc.O[h * n_q * d + k] - want_k);
          tc_err = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(tc_err, e);  // NaN fails
          ref_err = std::max(ref_err, std::fabs(ref[k] - want_k));
        }
      }
      CAPTURE(tc_err);
      CAPTURE(ref_err);
      CHECK(tc_err <= 2.0 * ref_err);
      // Its log-sum-exp against float64 on the bf16-rounded inputs: only fp32 sums and exp2 remain, ~1e-5.
      std::vector<float> Qb = Q, Kb = K, Vb = V;
      for (auto* x : {&Qb, &Kb, &Vb})
        for (float& v : *x) v = static_cast<float>(attn::oracle::to_bf16(v));
      CHECK_ALLCLOSE(as_vector(tc.lse), oracle_of(shape, Qb, Kb, Vb).lse, 1e-4, 1e-4);
    }
#endif
  }

  TEST_CASE("flash_launch_shape counts the query tiles without wrapping for n_q and B_r near SIZE_MAX" *
            doctest::test_suite("06_flash_cuda/flash_launch_shape")) {
    const std::size_t max = std::numeric_limits<std::size_t>::max();
    CHECK(attn::flash_launch_shape(1, 1, max, max, 128).grid.x == 1);      // one tile holds every query (it was 0)
    CHECK(attn::flash_launch_shape(1, 1, max, max / 2, 128).grid.x == 3);  // 2 whole tiles and 1 of a single query
    CHECK_THROWS_AS(attn::flash_launch_shape(1, 1, max, 1, 128), std::invalid_argument);  // past grid.x's limit
  }
}

namespace hostile = attn::test::hostile;

// The hostile-input battery (tests/support/hostile.hpp): every argument replaced in turn by its type's hostile
// values, each call refused naming what was wrong or answered as the contract says. The launch planning is host
// arithmetic: no GPU needed.
TEST_SUITE("06_flash_cuda") {
  TEST_CASE("flash_smem_bytes under the hostile battery" * doctest::test_suite("06_flash_cuda/flash_smem_bytes")) {
    // hostile battery: flash_smem_bytes
    // (B_r + 2·B_c)·d·element_bytes + 4·B_r·B_c, or nothing once it passes 64 bits
    const auto bytes = [](std::size_t B_r, std::size_t B_c, std::size_t d,
                          std::size_t e) -> std::optional<std::size_t> {
      std::size_t rows = 0, tiles = 0, scores = 0, sum = 0;
      if (__builtin_mul_overflow(B_c, 2, &rows) || __builtin_add_overflow(rows, B_r, &rows) ||
          __builtin_mul_overflow(rows, d, &tiles) || __builtin_mul_overflow(tiles, e, &tiles) ||
          __builtin_mul_overflow(B_r, B_c, &scores) || __builtin_mul_overflow(scores, 4, &scores) ||
          __builtin_add_overflow(tiles, scores, &sum))
        return std::nullopt;
      return sum;
    };
    hostile::battery(
        "flash_smem_bytes", {"B_r", "B_c", "d", "element_bytes"},
        [](std::size_t B_r, std::size_t B_c, std::size_t d, std::size_t e) {
          return attn::flash_smem_bytes(B_r, B_c, d, e);
        },
        std::size_t{64}, std::size_t{64}, std::size_t{64}, std::size_t{4})
        .fits([&](std::size_t B_r, std::size_t B_c, std::size_t d, std::size_t e) {
          return B_r > 0 && B_c > 0 && d > 0 && e > 0 && bytes(B_r, B_c, d, e).has_value();
        })
        .answer([&](std::size_t got, std::size_t B_r, std::size_t B_c, std::size_t d, std::size_t e) {
          return bytes(B_r, B_c, d, e) == got;
        })
        .run();
  }

  TEST_CASE("flash_launch_shape under the hostile battery" * doctest::test_suite("06_flash_cuda/flash_launch_shape")) {
    // hostile battery: flash_launch_shape
    hostile::battery(
        "flash_launch_shape", {"batch", "heads", "n_q", "B_r"},
        [](std::size_t batch, std::size_t heads, std::size_t n_q, std::size_t B_r) {
          const attn::LaunchShape s = attn::flash_launch_shape(batch, heads, n_q, B_r, 128);
          return std::vector<unsigned>{s.grid.x, s.grid.y, s.grid.z, s.block.x};
        },
        std::size_t{2}, std::size_t{8}, std::size_t{100}, std::size_t{64})
        .fits([](std::size_t batch, std::size_t heads, std::size_t n_q, std::size_t B_r) {
          return batch > 0 && heads > 0 && n_q > 0 && B_r > 0 && batch <= 65535 && heads <= 65535 &&
                 n_q / B_r + (n_q % B_r != 0) <= 2147483647u;
        })
        .answer(
            [](const std::vector<unsigned>& g, std::size_t batch, std::size_t heads, std::size_t n_q, std::size_t B_r) {
              return g[0] == n_q / B_r + (n_q % B_r != 0) && g[1] == heads && g[2] == batch && g[3] == 128;
            })
        .run();
  }

  TEST_CASE("plan_fits under the hostile battery" * doctest::test_suite("06_flash_cuda/plan_fits")) {
    // hostile battery: plan_fits
    // Any values have an answer (documented): within both limits, equal included.
    hostile::battery(
        "plan_fits", {"smem_bytes", "smem_per_block"},
        [](std::size_t smem, std::size_t limit) {
          return attn::plan_fits(smem, 128, DeviceLimits{limit, 1024});
        },
        std::size_t{49152}, std::size_t{101376})
        .answer([](bool fits, std::size_t smem, std::size_t limit) { return fits == (smem <= limit); })
        .run();
  }

  TEST_CASE("causal_kv_tiles under the hostile battery" * doctest::test_suite("06_flash_cuda/causal_kv_tiles")) {
    // hostile battery: causal_kv_tiles
    // The K/V tiles up to the one holding the tile's last query's position, computed without wrapping.
    const auto tiles = [](std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q,
                          std::size_t n_kv) -> std::optional<std::size_t> {
      if (B_r == 0 || B_c == 0 || n_q == 0 || n_kv == 0 || n_q > n_kv) return std::nullopt;
      if (q_tile >= n_q / B_r + (n_q % B_r != 0)) return std::nullopt;
      std::size_t end = 0;  // (q_tile + 1)·B_r, the tile's end, at most n_q
      if (__builtin_mul_overflow(q_tile + 1, B_r, &end) || end > n_q) end = n_q;
      return (end - 1 + (n_kv - n_q)) / B_c + 1;
    };
    hostile::battery(
        "causal_kv_tiles", {"q_tile", "B_r", "B_c", "n_q", "n_kv"},
        [](std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q, std::size_t n_kv) {
          return attn::causal_kv_tiles(q_tile, B_r, B_c, n_q, n_kv);
        },
        std::size_t{1}, std::size_t{64}, std::size_t{32}, std::size_t{200}, std::size_t{300})
        .fits([&](std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q, std::size_t n_kv) {
          return tiles(q_tile, B_r, B_c, n_q, n_kv).has_value();
        })
        .answer([&](std::size_t got, std::size_t q_tile, std::size_t B_r, std::size_t B_c, std::size_t n_q,
                    std::size_t n_kv) { return tiles(q_tile, B_r, B_c, n_q, n_kv) == got; })
        .run();
  }
}
