// Chapter 05's own code on bad input: the slow/fast memory model (io_model.hpp), the row passes (row_ops.hpp)
// and the micro-kernels' entry points (tile_kernels.hpp), on the solution track only (the exercise suites stay
// as they are). A bad size or leading dimension must be refused with the numbers named, never a call through a
// null kernel, a wrapped allocation or a simulation of 10^19 steps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "05_flash_cpu/flash_cpu.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "05_flash_cpu/io_model.hpp"
#include "05_flash_cpu/row_ops.hpp"
#include "05_flash_cpu/tile_kernels.hpp"
#include "attn/rng.hpp"
#include "support/hostile.hpp"
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

namespace hostile = attn::test::hostile;

// Whether a raw (rows, width) block with leading dimension ld lies inside a buffer of `size` floats, without wrapping:
// the battery's calls of the pointer kernels pass only such blocks (a size past the caller's buffer cannot be seen
// through a pointer).
bool inside(std::size_t rows, std::size_t ld, std::size_t width, std::size_t size) {
  if (rows == 0 || width == 0) return true;
  std::size_t end = 0;
  return !__builtin_mul_overflow(rows - 1, ld, &end) && !__builtin_add_overflow(end, width, &end) && end <= size;
}

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
    for (const std::string isa : {"AVX-512", "AVX2+FMA", "NEON"}) {
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

// The hostile-input battery (tests/support/hostile.hpp) on chapter 05's own code: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says. The kernels
// that take raw pointers get their buffers as lists: a size past the list is not passed on (it cannot be seen through
// a pointer), every other call is.
TEST_SUITE("05_flash_cpu: hostile battery") {
  // empty_state() is chapter code, inline in the contract's header (no exercise): its case is here, where it runs
  // against the chapter's code alone.
  TEST_CASE("empty_state under the hostile battery") {
    // hostile battery: empty_state
    hostile::battery(
        "empty_state", {"rows", "d_v"},
        [](std::size_t rows, std::size_t d_v) {
          const attn::OnlineState s = attn::empty_state(rows, d_v);
          return std::vector<std::size_t>{s.m.size(), s.l.size(), s.acc.shape(0), s.acc.shape(1)};
        },
        std::size_t{3}, std::size_t{2})
        .fits([](std::size_t rows, std::size_t d_v) {
          // m and ℓ hold rows floats, acc rows·d_v: sizes of 2^63 and more are impossible (no d_v is with 0 rows)
          std::size_t bytes = 0;
          return rows < (std::size_t{1} << 61) && !__builtin_mul_overflow(rows, d_v, &bytes) &&
                 !__builtin_mul_overflow(bytes, sizeof(float), &bytes);
        })
        .answer([](const std::vector<std::size_t>& r, std::size_t rows, std::size_t d_v) {
          return r[0] == rows && r[1] == rows && r[2] == rows && r[3] == d_v;
        })
        .exempt("= 2^32",
                "16 GiB or more: answered where the memory available holds it (the contract's limit, past the "
                "battery's 4 GiB), refused naming the estimate elsewhere")
        .run();
  }

  TEST_CASE("FastMemory under the hostile battery") {
    // hostile battery: FastMemory, load, allocate, store, release
    hostile::battery(
        "FastMemory::FastMemory", {"capacity"},
        [](std::size_t capacity) { return ch05::FastMemory(capacity).capacity(); }, std::size_t{10})
        .answer([](std::size_t got, std::size_t capacity) { return got == capacity; })
        .run();
    // A memory of M = 10 with 4 floats resident and 3 read and written: each member on it, and a refusal changes
    // nothing (count, peak: what the member's contract promises).
    const auto on_memory = [](auto member) {
      return [member](std::size_t floats) {
        ch05::FastMemory fast(10);
        fast.load(3);
        fast.allocate(1);
        fast.store(3);
        try {
          member(fast, floats);
        } catch (const std::invalid_argument&) {
          if (fast.count().reads != 3 || fast.count().writes != 3 || fast.peak() != 4)
            throw std::logic_error("a refused call changed the memory");
          throw;
        }
        return std::vector<std::uint64_t>{fast.count().reads, fast.count().writes, fast.peak()};
      };
    };
    using Counts = std::vector<std::uint64_t>;
    hostile::battery("FastMemory::load", {"floats"}, on_memory([](ch05::FastMemory& f, std::size_t n) { f.load(n); }),
                     std::size_t{2})
        .fits([](std::size_t n) { return n <= 6; })
        .answer([](const Counts& c, std::size_t n) { return c[0] == 3 + n && c[2] == std::max<std::size_t>(4, 4 + n); })
        .run();
    hostile::battery("FastMemory::allocate", {"floats"},
                     on_memory([](ch05::FastMemory& f, std::size_t n) { f.allocate(n); }), std::size_t{2})
        .fits([](std::size_t n) { return n <= 6; })
        .answer([](const Counts& c, std::size_t n) { return c[0] == 3 && c[2] == 4 + n; })
        .run();
    hostile::battery("FastMemory::store", {"floats"}, on_memory([](ch05::FastMemory& f, std::size_t n) { f.store(n); }),
                     std::size_t{2})
        .fits([](std::size_t n) { return n <= std::numeric_limits<std::uint64_t>::max() - 3; })
        .answer([](const Counts& c, std::size_t n) { return c[1] == 3 + n; })
        .run();
    hostile::battery("FastMemory::release", {"floats"},
                     on_memory([](ch05::FastMemory& f, std::size_t n) { f.release(n); }), std::size_t{2})
        .fits([](std::size_t n) { return n <= 4; })
        .answer([](const Counts& c, std::size_t) { return c[0] == 3 && c[2] == 4; })
        .run();
  }

  TEST_CASE("plan_tiles and the simulations under the hostile battery") {
    // hostile battery: plan_tiles, simulate_standard, simulate_tiled
    const auto working_set = [](double d, double r, double c) { return 2 * r * d + 2 * r + 2 * c * d + r * c; };
    hostile::battery(
        "plan_tiles", {"d", "M"},
        [](std::size_t d, std::size_t M) {
          const ch05::TilePlan p = ch05::plan_tiles(d, M);
          return std::vector<std::size_t>{p.B_r, p.B_c};
        },
        std::size_t{4}, std::size_t{256})
        .fits([&](std::size_t d, std::size_t M) {
          return M <= ch05::kMaxFastMemory && working_set(double(d), 1, 1) <= double(M);
        })
        .answer([&](const std::vector<std::size_t>& p, std::size_t d, std::size_t M) {
          return p[0] >= 1 && p[1] == std::max<std::size_t>(1, std::min(p[0], d)) &&
                 working_set(double(d), double(p[0]), double(p[1])) <= double(M);
        })
        .run();
    hostile::battery(
        "simulate_standard", {"n", "d", "M"},
        [](std::size_t n, std::size_t d, std::size_t M) { return ch05::simulate_standard(n, d, M).total(); },
        std::size_t{6}, std::size_t{2}, std::size_t{32})
        .fits([](std::size_t n, std::size_t d, std::size_t M) {
          // M holds two rows of d and a score (2d + 1), within the model; n is small enough to step through
          return M <= ch05::kMaxFastMemory && d <= M / 2 && 2 * d + 1 <= M && n < (std::size_t{1} << 20);
        })
        .run();
    hostile::battery(
        "simulate_tiled", {"n", "d", "M", "B_r", "B_c"},
        [](std::size_t n, std::size_t d, std::size_t M, std::size_t B_r, std::size_t B_c) {
          return ch05::simulate_tiled(n, d, M, {B_r, B_c}).total();
        },
        std::size_t{6}, std::size_t{2}, std::size_t{64}, std::size_t{3}, std::size_t{2})
        .fits([&](std::size_t n, std::size_t d, std::size_t M, std::size_t B_r, std::size_t B_c) {
          return B_r > 0 && B_c > 0 && working_set(double(d), double(B_r), double(B_c)) <= double(M) &&
                 M <= ch05::kMaxFastMemory && n < (std::size_t{1} << 20);
        })
        .answer([](std::size_t total, std::size_t n, std::size_t d, std::size_t, std::size_t B_r, std::size_t) {
          return total == attn::tiled_io_floats(n, d, B_r);
        })
        .run();
  }

  TEST_CASE("the row passes under the hostile battery") {
    // hostile battery: row_max, exp_shift_sum, scale_row
    using Row = std::vector<float>;
    hostile::battery(
        "row_max", {"s", "n"},
        [](const Row& s, std::size_t n) {
          return n <= s.size() ? ch05::row_max(s.data(), n) : 0.0f;  // see the suite's comment
        },
        Row{1.0f, 3.0f, -2.0f}, std::size_t{3})
        .answer([](float m, const Row& s, std::size_t n) {
          if (n > s.size()) return true;
          float want = -std::numeric_limits<float>::infinity();
          for (std::size_t j = 0; j < n; ++j) want = std::max(want, s[j]);
          return m == want;
        })
        .non_finite_passes("a row's max takes the scores as they are: -inf is a masked score")
        .run();
    hostile::battery(
        "exp_shift_sum", {"s", "n", "m"},
        [](Row s, std::size_t n, float m) { return n <= s.size() ? ch05::exp_shift_sum(s.data(), n, m) : 0.0f; },
        Row{1.0f, 3.0f, -2.0f}, std::size_t{3}, 3.0f)
        .answer([](float sum, const Row& s, std::size_t n, float m) {
          if (n > s.size() || !std::isfinite(m)) return true;
          double want = 0.0;
          for (std::size_t j = 0; j < n; ++j) {
            if (!(s[j] <= m)) return true;  // outside the contract: meaningless, but no UB (and no NaN: checked)
            want += std::exp(static_cast<double>(s[j]) - m);
          }
          return std::fabs(sum - want) <= 1e-5 * std::max(1.0, want);
        })
        .non_finite_passes("its contract is a masked row's scores (-inf included): NaN stays NaN, documented")
        .exempt("m = NaN", "outside the contract, documented: the result is NaN, never undefined behaviour")
        .run();
    hostile::battery(
        "scale_row", {"o", "n", "alpha"},
        [](Row o, std::size_t n, float alpha) {
          if (n <= o.size()) ch05::scale_row(o.data(), n, alpha);
          return o;
        },
        Row{1.0f, -2.0f, 0.5f}, std::size_t{3}, 0.5f)
        .answer([](const Row& out, const Row& o, std::size_t n, float alpha) {
          for (std::size_t j = 0; j < o.size(); ++j)
            if (out[j] != (j < n && n <= o.size() ? o[j] * alpha : o[j])) return false;
          return true;
        })
        .non_finite_passes("a rescale multiplies what it is given: the product's NaN or infinity, as documented")
        .exempt("alpha = NaN", "documented: a NaN alpha makes the row NaN, as the product does")
        .run();
  }

  TEST_CASE("the tile kernels' set-up under the hostile battery") {
    // hostile battery: use_tile_kernels, key_panels, pack_keys, PackedKeys, head
    const std::string isa = ch05::tile_kernel_isa();
    hostile::battery(
        "use_tile_kernels", {"isa"},
        [](const std::string& name) {
          const std::string before = ch05::tile_kernel_isa();
          const bool ok = ch05::use_tile_kernels(name);
          const bool unchanged = before == ch05::tile_kernel_isa();
          ch05::use_tile_kernels("auto");
          return ok || unchanged;  // refused names change nothing
        },
        std::string("auto"))
        .answer([](bool consistent, const std::string&) { return consistent; })
        .run();
    CHECK(isa == ch05::tile_kernel_isa());
    const std::size_t w = ch05::key_panel_width();
    hostile::battery(
        "key_panels", {"n_kv"}, [](std::size_t n) { return ch05::key_panels(n); }, std::size_t{40})
        .answer([w](std::size_t p, std::size_t n) { return w == 0 ? p == 0 : p == n / w + (n % w != 0); })
        .run();
    using Row = std::vector<float>;
    attn::Rng rng(5054);
    const attn::Matrix key_matrix = rng.normal(5, 3);
    const Row keys(key_matrix.begin(), key_matrix.end());
    hostile::battery(
        "pack_keys", {"K", "n_kv", "d_k"},
        [w](const Row& K, std::size_t n_kv, std::size_t d_k) {
          if (!inside(n_kv, d_k, d_k, K.size())) return Row{};  // see the suite's comment
          Row packed(ch05::key_panels(n_kv) * d_k * w, -1.0f);
          ch05::pack_keys(K.data(), n_kv, d_k, packed.data());
          return packed;
        },
        keys, std::size_t{5}, std::size_t{3})
        .answer([w](const Row& packed, const Row& K, std::size_t n_kv, std::size_t d_k) {
          if (packed.empty() || w == 0) return true;
          for (std::size_t j = 0; j < ch05::key_panels(n_kv) * w; ++j)
            for (std::size_t c = 0; c < d_k; ++c)
              if (packed[(j / w) * d_k * w + c * w + j % w] != (j < n_kv ? K[j * d_k + c] : 0.0f)) return false;
          return true;
        })
        .non_finite_passes("a copy, in another order: the keys are checked by the kernel that packs them")
        .run();
    hostile::battery(
        "PackedKeys::PackedKeys", {"K", "h", "n_kv", "d_k", "use"},
        [](const Row& K, std::size_t h, std::size_t n_kv, std::size_t d_k, bool use) {
          ch05::PackedKeys packed(K.data(), h, n_kv, d_k, use);
          std::size_t all = 0;
          // the keys are read at head(): only where the list holds every head's keys
          if (packed.used() && !__builtin_mul_overflow(h, n_kv, &all) && inside(all, d_k, d_k, K.size()))
            for (std::size_t i = 0; i < h; ++i) packed.head(i);
          return packed.used();
        },
        keys, std::size_t{1}, std::size_t{5}, std::size_t{3}, true)
        .answer([w](bool used, const Row&, std::size_t h, std::size_t n_kv, std::size_t d_k, bool use) {
          return used == (use && w > 0 && h * n_kv * d_k > 0);
        })
        .non_finite_passes("packed as they are: the kernel that uses them checked them (require_attention_inputs)")
        .run();
    hostile::battery(
        "PackedKeys::head", {"h"},
        [&keys](std::size_t h) {
          ch05::PackedKeys packed(keys.data(), 1, 5, 3, true);
          try {
            return packed.head(h) != nullptr;
          } catch (const std::out_of_range& e) {  // its documented refusal: judged as one, by its message
            throw std::invalid_argument(e.what());
          }
        },
        std::size_t{0})
        .fits([w](std::size_t h) { return h < 1 && w > 0; })
        .run();
  }

  TEST_CASE("scores_tile and accumulate_pv under the hostile battery") {
    // hostile battery: scores_tile, accumulate_pv
    const std::size_t w = ch05::key_panel_width();
    if (w == 0) {
      MESSAGE(
          "skipped: no micro-kernels on this CPU (tile_kernel_isa() is \"\"): scores_tile and accumulate_pv "
          "refuse every call, as their bad-input case checks");
      return;
    }
    using Row = std::vector<float>;
    attn::Rng rng(5055);
    const attn::Matrix Qm = rng.normal(3, 4), Km = rng.normal(5, 4);
    const Row queries(Qm.begin(), Qm.end()), keys(Km.begin(), Km.end());
    Row packed(ch05::key_panels(5) * 4 * w);
    ch05::pack_keys(keys.data(), 5, 4, packed.data());
    constexpr std::size_t kMaxS = std::size_t{1} << 16;  // the largest S the battery's calls allocate
    hostile::battery(
        "scores_tile", {"Q", "rows", "ld_q", "d_k", "K_panels", "panels", "scale", "ld_s"},
        [w](const Row& Q, std::size_t rows, std::size_t ld_q, std::size_t d_k, const Row& K_panels, std::size_t panels,
            float scale, std::size_t ld_s) {
          std::size_t S_size = 0, panel_floats = 0;
          if (__builtin_mul_overflow(rows, ld_s, &S_size) || S_size > kMaxS ||
              __builtin_mul_overflow(panels, d_k * w, &panel_floats) || panel_floats > K_panels.size() ||
              !inside(rows, ld_q, d_k, Q.size()))
            return Row{};  // see the suite's comment
          Row S(S_size, 0.0f);
          ch05::scores_tile(Q.data(), rows, ld_q, d_k, K_panels.data(), panels, scale, S.data(), ld_s);
          return S;
        },
        queries, std::size_t{3}, std::size_t{4}, std::size_t{4}, packed, std::size_t{1}, 0.5f, w)
        .fits([w](const Row&, std::size_t, std::size_t ld_q, std::size_t d_k, const Row&, std::size_t panels, float,
                  std::size_t ld_s) { return ld_q >= d_k && ld_s / w >= panels; })
        .exempt("= 2^", "a size past the lists is not passed on (see the suite's comment): nothing to judge")
        .exempt("= SIZE_MAX", "as = 2^")
        .exempt("every size", "as = 2^")
        .exempt("scale = ", "a factor of the scores: the caller's (1/√d_k); its NaN or infinity is theirs")
        .exempt("3e38", "a kernel whose caller bounds the scores first (require_attention_inputs)")
        .non_finite_passes("the caller checks Q and K first (require_attention_inputs): the kernel computes")
        .run();
    const attn::Matrix Pm = rng.uniform(3, 5), Vm = rng.normal(5, 2);
    const Row probabilities(Pm.begin(), Pm.end()), values(Vm.begin(), Vm.end());
    hostile::battery(
        "accumulate_pv", {"P", "rows", "cols", "ld_p", "V", "ld_v", "d_v", "ld_o"},
        [](const Row& P, std::size_t rows, std::size_t cols, std::size_t ld_p, const Row& V, std::size_t ld_v,
           std::size_t d_v, std::size_t ld_o) {
          std::size_t O_size = 0;
          if (__builtin_mul_overflow(rows, ld_o, &O_size) || O_size > kMaxS || !inside(rows, ld_p, cols, P.size()) ||
              !inside(cols, ld_v, d_v, V.size()))
            return Row{};  // see the suite's comment
          Row O(O_size, 1.0f);
          ch05::accumulate_pv(P.data(), rows, cols, ld_p, V.data(), ld_v, d_v, O.data(), ld_o);
          return O;
        },
        probabilities, std::size_t{3}, std::size_t{5}, std::size_t{5}, values, std::size_t{2}, std::size_t{2},
        std::size_t{2})
        .fits([](const Row&, std::size_t, std::size_t cols, std::size_t ld_p, const Row&, std::size_t ld_v,
                 std::size_t d_v, std::size_t ld_o) { return ld_p >= cols && ld_v >= d_v && ld_o >= d_v; })
        .exempt("= 2^", "a size past the lists is not passed on (see the suite's comment): nothing to judge")
        .exempt("= SIZE_MAX", "as = 2^")
        .exempt("every size", "as = 2^")
        .exempt("3e38", "the caller's probabilities and checked values (require_attention_inputs)")
        .exempt("1e20", "as 3e38")
        .non_finite_passes("the caller checks V first (require_attention_inputs): the kernel computes")
        .run();
  }

  TEST_CASE("flash_attention_fast under the hostile battery") {
    // hostile battery: flash_attention_fast
    attn::Rng rng(5056);
    const auto heads = [&](std::size_t h, std::size_t n, std::size_t d) {
      attn::Tensor3 t = attn::Tensor3::from_shape({h, n, d});
      const attn::Matrix r = rng.normal(1, h * n * d);
      std::copy(r.begin(), r.end(), t.begin());
      return t;
    };
    hostile::battery(
        "flash_attention_fast", {"Q", "K", "V", "causal", "B_r", "B_c", "threads"},
        [](const attn::Tensor3& Q, const attn::Tensor3& K, const attn::Tensor3& V, bool causal, std::size_t B_r,
           std::size_t B_c, int threads) {
          const ch05::FlashHeadsOutput f = ch05::flash_attention_fast(Q, K, V, causal, {B_r, B_c, threads});
          return f.O;
        },
        heads(2, 3, 4), heads(2, 5, 4), heads(2, 5, 2), true, std::size_t{2}, std::size_t{2}, 2)
        .fits([](const attn::Tensor3& Q, const attn::Tensor3& K, const attn::Tensor3& V, bool causal, std::size_t B_r,
                 std::size_t B_c, int threads) {
          return Q.shape(0) == K.shape(0) && V.shape(0) == K.shape(0) && Q.shape(2) == K.shape(2) &&
                 V.shape(1) == K.shape(1) && B_r > 0 && B_c > 0 && threads > 0 &&
                 (!causal || Q.shape(1) <= K.shape(1)) && B_r < (std::size_t{1} << 32);  // B_r is kept: its tiles
        })
        .exempt("B_r = 2^32",
                "B_r is kept as given (chapter 10 recomputes its blocks): the threads' score tiles of "
                "68 GB are answered where they fit the memory available, refused naming it elsewhere")
        .exempt("every size 2^32", "as B_r = 2^32")
        .answer([](const attn::Tensor3& O, const attn::Tensor3& Q, const attn::Tensor3&, const attn::Tensor3& V, bool,
                   std::size_t, std::size_t,
                   int) { return O.shape(0) == Q.shape(0) && O.shape(1) == Q.shape(1) && O.shape(2) == V.shape(2); })
        .run();
  }
}
