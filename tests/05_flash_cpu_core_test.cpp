// Chapter 05's own code on bad input: the slow/fast memory model (io_model.hpp), the row passes (row_ops.hpp)
// and the micro-kernels' entry points (tile_kernels.hpp), on the solution track only (the exercise suites stay
// as they are). A bad size or leading dimension must be refused with the numbers named, never a call through a
// null kernel, a wrapped allocation or a simulation of 10^19 steps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "05_flash_cpu/io_model.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "support/throws.hpp"

namespace {

namespace ch05 = attn::ch05;
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

// Runs the micro-kernels named \p isa for the life of the guard, then the widest this CPU runs again.
struct KernelsInUse {
  bool ok;
  explicit KernelsInUse(const std::string& isa) : ok(ch05::use_tile_kernels(isa)) {}
  ~KernelsInUse() { ch05::use_tile_kernels("auto"); }
};

}  // namespace

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("05_flash_cpu: bad input") {
  TEST_CASE("FastMemory refuses what does not fit, a release of more than is resident and a count that wraps") {
    ch05::FastMemory fast(10);
    fast.allocate(4);
    // 4 resident + (SIZE_MAX − 1) wrapped to 2 ≤ 10: the load was accepted.
    CHECK_THROWS_NAMING(fast.load(kMax - 1), std::invalid_argument, "4 floats resident", "M = 10");
    CHECK_THROWS_NAMING(fast.allocate(7), std::invalid_argument, "7 more");
    CHECK(fast.count().reads == 0);  // refused loads count nothing
    fast.load(4);
    CHECK_THROWS_NAMING(fast.release(9), std::invalid_argument, "releasing 9", "8 are resident");
    fast.store(kMax - 1);
    CHECK_THROWS_NAMING(fast.store(2), std::invalid_argument, "wrap");
    CHECK_THROWS_AS(ch05::FastMemory(0).load(1), std::invalid_argument);  // M = 0 holds nothing
  }

  TEST_CASE("plan_tiles and the simulations refuse a memory too small or too large, and endless simulations") {
    CHECK_THROWS_NAMING(ch05::plan_tiles(64, 100), std::invalid_argument, "M = 100", "d = 64");
    // d near SIZE_MAX wrapped the working set 4d + 3 to 'fits'.
    CHECK_THROWS_AS(ch05::plan_tiles(kMax / 2, 4096), std::invalid_argument);
    // M = 2^40 stepped B_r up one at a time for hours.
    CHECK_THROWS_NAMING(ch05::plan_tiles(1, std::size_t{1} << 40), std::invalid_argument, "at most");
    CHECK_THROWS_NAMING(ch05::simulate_standard(8, 64, 100), std::invalid_argument, "two rows");
    CHECK_THROWS_NAMING(ch05::simulate_standard(std::size_t{1} << 32, 4, 64), std::invalid_argument, "transfers");
    CHECK_THROWS_NAMING(ch05::simulate_tiled(std::size_t{1} << 32, 4, 64, {1, 1}), std::invalid_argument, "transfers");
    CHECK_THROWS_AS(ch05::simulate_tiled(8, 4, 64, {0, 2}), std::invalid_argument);
    // A plan whose working set wraps to a small number was taken to fit.
    CHECK_THROWS_AS(ch05::simulate_tiled(8, 4, 64, {std::size_t{1} << 62, 4}), std::invalid_argument);
    CHECK(ch05::simulate_tiled(0, 4, 64, {2, 2}).total() == 0);  // no tokens: nothing moves
  }

  TEST_CASE("key_panels never wraps, use_tile_kernels refuses a name of no kernels, and the row passes take n = 0") {
    // bad input answered: key_panels, use_tile_kernels, row_max, exp_shift_sum, scale_row, pack_keys
    const std::size_t w = ch05::key_panel_width();
    if (w > 0) CHECK(ch05::key_panels(kMax) == kMax / w + 1);  // (n + w − 1) / w wrapped to 0
    const std::string before = ch05::tile_kernel_isa();
    CHECK_FALSE(ch05::use_tile_kernels("SSE9"));
    CHECK(before == ch05::tile_kernel_isa());  // unchanged
    CHECK(ch05::row_max(nullptr, 0) == -std::numeric_limits<float>::infinity());
    CHECK(ch05::exp_shift_sum(nullptr, 0, 0.0f) == 0.0f);
    ch05::scale_row(nullptr, 0, std::numeric_limits<float>::quiet_NaN());  // nothing to scale
    float row[2] = {1.0f, 2.0f};
    ch05::scale_row(row, 2, std::numeric_limits<float>::quiet_NaN());
    CHECK(std::isnan(row[1]));                // the product's NaN, as the contract says
    ch05::pack_keys(nullptr, 0, 4, nullptr);  // no keys: nothing read or written
  }

  TEST_CASE("scores_tile, accumulate_pv and PackedKeys refuse a call without kernels, short rows and a bad head") {
    std::vector<float> Q(4 * 8, 1.0f), S(4 * 64, 0.0f), P(4 * 8, 0.0f), V(8 * 4, 1.0f), O(4 * 4, 0.0f);
    {
      const KernelsInUse none("none");  // the OpenBLAS path: the kernels were called through a null pointer
      CHECK_THROWS_NAMING(ch05::scores_tile(Q.data(), 4, 8, 8, nullptr, 1, 1.0f, S.data(), 64), std::invalid_argument,
                          "scores_tile");
      CHECK_THROWS_NAMING(ch05::accumulate_pv(P.data(), 4, 8, 8, V.data(), 4, 4, O.data(), 4), std::invalid_argument,
                          "accumulate_pv");
      ch05::PackedKeys unused(Q.data(), 1, 4, 8, true);
      CHECK_THROWS_NAMING(unused.head(0), std::out_of_range, "used() is false");
    }
    const KernelsInUse any("auto");
    if (!any.ok || ch05::key_panel_width() == 0) {
      MESSAGE("no micro-kernels on this CPU: their leading dimensions are not checked here");
      return;
    }
    const std::size_t w = ch05::key_panel_width();
    std::vector<float> panels(w * 8, 0.0f);
    CHECK_THROWS_NAMING(ch05::scores_tile(Q.data(), 4, 7, 8, panels.data(), 1, 1.0f, S.data(), 64),
                        std::invalid_argument, "ld_q = 7");
    CHECK_THROWS_NAMING(ch05::scores_tile(Q.data(), 4, 8, 8, panels.data(), 1, 1.0f, S.data(), w - 1),
                        std::invalid_argument, "ld_s");
    float m[4] = {};
    CHECK_THROWS_NAMING(ch05::scores_tile(Q.data(), 4, 8, 8, panels.data(), 1, 1.0f, S.data(), 64, nullptr, m),
                        std::invalid_argument, "visible columns not given");
    CHECK_THROWS_NAMING(ch05::accumulate_pv(P.data(), 4, 8, 7, V.data(), 4, 4, O.data(), 4), std::invalid_argument,
                        "ld_p = 7");
    CHECK_THROWS_NAMING(ch05::accumulate_pv(P.data(), 4, 8, 8, V.data(), 3, 4, O.data(), 4), std::invalid_argument,
                        "ld_v = 3");
    ch05::PackedKeys keys(Q.data(), 1, 4, 8, true);
    CHECK_THROWS_NAMING(keys.head(1), std::out_of_range, "head 1 of 1");
    CHECK_THROWS_NAMING(ch05::PackedKeys(Q.data(), std::size_t{1} << 40, std::size_t{1} << 20, 64, true),
                        std::invalid_argument, "PackedKeys");
  }

  TEST_CASE("scores_tile and accumulate_pv of no rows do nothing, on every instruction set") {
    // The score kernel shares each panel's prefetches among its row blocks: with no rows there are no blocks, and
    // that share was a division by zero (SIGFPE).
    std::vector<float> Q(8, 1.0f), S(64, 7.0f), V(64 * 4, 1.0f), O(4, 3.0f);
    for (const std::string isa : {"AVX-512", "AVX2+FMA"}) {
      const KernelsInUse in_use(isa);
      if (!in_use.ok) continue;  // this CPU cannot run it
      CAPTURE(isa);
      const std::vector<float> panels(ch05::key_panel_width() * 8, 1.0f);
      float m[1] = {-1.0f};
      const std::size_t visible[1] = {1};
      ch05::scores_tile(Q.data(), 0, 8, 8, panels.data(), 1, 1.0f, S.data(), 64, visible, m);
      ch05::accumulate_pv(S.data(), 0, 8, 8, V.data(), 4, 4, O.data(), 4);
      CHECK(S == std::vector<float>(64, 7.0f));
      CHECK(O == std::vector<float>(4, 3.0f));
      CHECK(m[0] == -1.0f);
    }
  }
}
