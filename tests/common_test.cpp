// Tests of common/: what every chapter relies on to show its results.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "attn/ceilings.hpp"
#include "attn/checks.hpp"
#include "attn/format.hpp"
#include "attn/machine.hpp"
#include "attn/measure.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/svg.hpp"
#include "attn/tensor.hpp"
#include "attn/vector.hpp"

TEST_SUITE("common") {
  TEST_CASE("display_width counts CJK characters as two columns") {
    CHECK(attn::display_width("cat") == 3);
    CHECK(attn::display_width("猫") == 2);
    CHECK(attn::display_width("垫子上 it") == 9);
  }

  TEST_CASE("display_width counts fullwidth punctuation as two, combining marks as zero, shade glyphs as one") {
    CHECK(attn::display_width("猫坐在垫子上，它很累") == 20);  // the seed's comma is fullwidth
    CHECK(attn::display_width("e\u0301") == 1);                // e and a combining acute accent: one column
    CHECK(attn::display_width("░▒▓█▀▄") == 6);
    CHECK(attn::display_width("a\377b") == 3);  // a byte that is not UTF-8 (0xff) still takes a column
  }

  TEST_CASE("human_bytes picks the unit") {
    CHECK(attn::human_bytes(512) == "512 B");
    CHECK(attn::human_bytes(1536) == "1.50 KiB");
    CHECK(attn::human_bytes(40e9, false) == "40.0 GB");
  }

  TEST_CASE("a product whose factors do not fit names the product and each factor's shape as multiplied") {
    // A learner's dK = dS·Q where dSᵀ·Q was meant: the message says which product, and the shapes that meet.
    const attn::Matrix dS = xt::zeros<float>({3, 5}), Q = xt::zeros<float>({3, 4});
    CHECK_THROWS_WITH_AS(attn::matmul(dS, Q, false, 1.0f, "dK = dS·Q"),
                         "dK = dS·Q: dS is (3, 5) and Q is (3, 4): the columns of dS (5) are not the rows of Q (3)",
                         std::invalid_argument);
    const attn::Matrix Q4 = xt::zeros<float>({4, 4});
    CHECK_THROWS_WITH_AS(attn::matmul_transpose_a(dS, Q4, 1.0f, "dK = dSᵀ·Q"),
                         doctest::Contains("dK = dSᵀ·Q: dSᵀ is (5, 3) and Q is (4, 4)"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::matmul_transpose_a(dS, Q4), doctest::Contains("Aᵀ is (5, 3) and B is (4, 4)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::matmul(dS, Q, true), doctest::Contains("A is (3, 5) and Bᵀ is (4, 3)"),
                         std::invalid_argument);
  }

  TEST_CASE("a heat map whose labels do not match the matrix is refused, naming the shape") {
    const attn::Matrix m = xt::zeros<float>({2, 3});
    CHECK_THROWS_WITH_AS(attn::write_svg_heatmap("/tmp/x.svg", m, {"a", "b"}, {"c"}, "t"), doctest::Contains("(2, 3)"),
                         std::invalid_argument);
  }

  TEST_CASE("a heat map of 64 x 64 entries fits the book's column (at most 896 px wide and tall)") {
    // 896 px is the book's column at 1280 px (book/book.css: 64em of 14 px); a numbered 52 px cell for
    // every entry made this figure 3376 px wide, three screens.
    const std::string path = "attn_common_test_heatmap.svg";
    const attn::Matrix m = xt::zeros<float>({64, 64});
    const std::vector<std::string> labels(64, "");
    attn::write_svg_heatmap(path, m, labels, labels, "a 64 x 64 grid");
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(path.c_str());
    int width = 0, height = 0;
    REQUIRE(std::sscanf(text.str().c_str(), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\"",
                        &width, &height) == 2);
    CHECK(width <= 896);
    CHECK(height <= 896);
    CHECK(width >= 64 * 6);  // still a readable cell (6 px) per entry
  }

  TEST_CASE("write_svg_plot draws an SVG with gnuplot and refuses mismatched series") {
    const std::string path = "attn_common_test_plot.svg";
    attn::write_svg_plot(path, {"t", "n", "s", true, true, {{"f", {1, 2, 4}, {1, 4, 16}}}});
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str().find("<svg") != std::string::npos);
    std::remove(path.c_str());
    CHECK_THROWS_AS(attn::write_svg_plot(path, {"t", "x", "y", false, false, {{"bad", {1, 2}, {1}}}}),
                    std::invalid_argument);
    CHECK_THROWS_AS(attn::write_svg_plot(path, {"t", "x", "y", true, false, {{"bad", {0, 2}, {1, 1}}}}),
                    std::invalid_argument);
  }

  TEST_CASE("a plot's legend sits under the plot's frame, off the data") {
    // A line that fills the frame's top-left corner, where gnuplot's legend used to sit.
    const std::string path = "attn_common_test_legend.svg";
    attn::write_svg_plot(path, {"t", "x", "y", false, false, {{"LEGEND_PROBE", {0, 1, 2, 3}, {9, 9, 9, 0}}}});
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(path.c_str());
    const std::string svg = text.str();
    // The frame: gnuplot's closed path of four lines, M x0,y0 L x0,y1 L x1,y1 L x1,y0 L x0,y0 Z.
    double frame_bottom = -1;
    for (std::size_t at = svg.find("d='M"); at != std::string::npos; at = svg.find("d='M", at + 1)) {
      double p[10];
      if (std::sscanf(svg.c_str() + at, "d='M%lf,%lf L%lf,%lf L%lf,%lf L%lf,%lf L%lf,%lf Z", &p[0], &p[1], &p[2], &p[3],
                      &p[4], &p[5], &p[6], &p[7], &p[8], &p[9]) == 10)
        frame_bottom = std::max({p[1], p[3], p[5], p[7]});
    }
    REQUIRE(frame_bottom > 0);
    const std::size_t entry = svg.find("<title>LEGEND_PROBE</title>");
    REQUIRE(entry != std::string::npos);
    const std::size_t at = svg.find("translate(", entry);
    REQUIRE(at != std::string::npos);
    double x = 0, y = 0;
    REQUIRE(std::sscanf(svg.c_str() + at, "translate(%lf,%lf)", &x, &y) == 2);
    CHECK(y > frame_bottom);  // below the frame's bottom edge (SVG's y grows downwards)
  }

  TEST_CASE("median_seconds returns the median of the timed runs") {
    int calls = 0;
    const double t = attn::median_seconds([&] { ++calls; }, 5, 2);
    CHECK(calls == 7);
    CHECK(t >= 0.0);
  }

  TEST_CASE("require_finite finds and names a NaN or infinity anywhere, in any block of its vectorised scan") {
    std::vector<float> v(10000, 1.5f);
    CHECK_NOTHROW(attn::require_finite("here", "v", v.data(), v.size()));
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (std::size_t at : {std::size_t{0}, std::size_t{4095}, std::size_t{4096}, std::size_t{9999}})
      for (float bad : {nan, inf, -inf, -nan}) {
        std::vector<float> w = v;
        w[at] = bad;
        CAPTURE(at);
        CAPTURE(bad);
        const std::string name = "v[" + std::to_string(at) + "]";
        CHECK_THROWS_WITH_AS(attn::require_finite("here", "v", w.data(), w.size()), doctest::Contains(name.c_str()),
                             std::invalid_argument);
      }
    v[7] = std::numeric_limits<float>::max();  // the largest finite float, and the smallest subnormal, pass
    v[8] = std::numeric_limits<float>::denorm_min();
    v[9] = -std::numeric_limits<float>::max();
    CHECK_NOTHROW(attn::require_finite("here", "v", v.data(), v.size()));
  }

  TEST_CASE(
      "require_attention_inputs on several threads names the first NaN or infinity of Q, K, V and finds the largest "
      "|q|, |k| in any piece") {
    // Q, K and V large enough to be shared among the threads (64K floats or more in all), V's length odd so that
    // the pieces differ in length; the culprits sit at the ends of arrays and at the pieces' edges.
    const std::size_t n = 40000, d_k = 64;
    const std::vector<float> clean_q(n, 0.5f), clean_k(n, -0.25f), clean_v(n + 1, 2.0f);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    struct Bad {
      int array;  // 0 Q, 1 K, 2 V
      std::size_t at;
      float value;
    };
    const std::vector<std::pair<std::vector<Bad>, std::string>> cases = {
        {{{0, 0, nan}}, "Q[0] is nan"},
        {{{0, n - 1, inf}, {1, 0, nan}}, "Q[39999] is inf"},
        {{{1, 5000, -inf}, {1, 4999, nan}, {1, 39999, nan}}, "K[4999] is nan"},  // 5000: where a piece of 8 starts
        {{{2, n, nan}, {1, 13334, inf}}, "K[13334] is inf"},
        {{{2, 30001, inf}, {2, n, nan}}, "V[30001] is inf"},
        {{{2, n, -inf}}, "V[40000] is -inf"}};
    for (const std::size_t threads : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
      CAPTURE(threads);
      CHECK_NOTHROW(attn::require_attention_inputs("here", clean_q.data(), n, d_k, clean_k.data(), n, d_k,
                                                   clean_v.data(), n + 1, threads));
      for (const auto& entry : cases) {  // not a structured binding: Clang 14 cannot capture one (CAPTURE does)
        const std::vector<Bad>& bad = entry.first;
        const std::string& message = entry.second;
        CAPTURE(message);
        std::vector<float> x[3] = {clean_q, clean_k, clean_v};
        for (const Bad& b : bad) x[b.array][b.at] = b.value;
        CHECK_THROWS_WITH_AS(attn::require_attention_inputs("here", x[0].data(), n, d_k, x[1].data(), n, d_k,
                                                            x[2].data(), n + 1, threads),
                             doctest::Contains(message.c_str()), std::invalid_argument);
      }
      // The overflow bound needs max|q| and max|k| from the last pieces: 64 · 1e20 · 1e20 is past FLT_MAX / 4.
      std::vector<float> q = clean_q, k = clean_k;
      q[n - 1] = 1e20f;
      k[n - 1] = -1e20f;
      CHECK_THROWS_WITH_AS(
          attn::require_attention_inputs("here", q.data(), n, d_k, k.data(), n, d_k, clean_v.data(), n + 1, threads),
          doctest::Contains("max|q| = 1e+20 times max|k| = 1e+20"), std::invalid_argument);
    }
  }

  TEST_CASE("triad_bandwidth_gbs measures on any number of threads, more threads than elements too, and refuses 0") {
    CHECK(attn::triad_bandwidth_gbs(1000, 1, 1) > 0.0);
    CHECK(attn::triad_bandwidth_gbs(3, 4, 1) > 0.0);  // a thread with nothing to do
    CHECK_THROWS_WITH_AS(attn::triad_bandwidth_gbs(1000, 0), doctest::Contains("threads"), std::invalid_argument);
    // 2^62 floats: the product wraps; 2^40: 12 TB, refused before any allocation.
    for (std::size_t floats : {std::size_t{1} << 62, std::size_t{1} << 40})
      CHECK_THROWS_WITH_AS(attn::triad_bandwidth_gbs(floats, 1), doctest::Contains("triad_bandwidth_gbs"),
                           std::invalid_argument);
  }

  TEST_CASE("the OpenBLAS kernel is upgraded only when the CPU's flags allow wider instructions than its pick") {
    const std::set<std::string> avx512{"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"};
    std::set<std::string> avx512_bf16 = avx512;
    avx512_bf16.insert("avx512_bf16");
    const std::set<std::string> avx2{"sse4_2", "avx", "avx2", "fma"};
    CHECK(attn::better_blas_kernel_for(avx512, "Prescott") == "SkylakeX");  // the fallback on new Xeons
    CHECK(attn::better_blas_kernel_for(avx512_bf16, "Prescott") == "Cooperlake");
    CHECK(attn::better_blas_kernel_for(avx512, "Haswell") == "SkylakeX");  // AVX2 kernels on an AVX-512 CPU
    CHECK(attn::better_blas_kernel_for(avx2, "Sandybridge") == "Haswell");
    CHECK(attn::better_blas_kernel_for(avx2, "Zen") == "");  // Zen's kernels are AVX2 already
    CHECK(attn::better_blas_kernel_for(avx512, "SkylakeX") == "");
    CHECK(attn::better_blas_kernel_for(avx512_bf16, "Cooperlake") == "");
    // A CPU missing one AVX-512 subset or FMA gets nothing it could not run.
    CHECK(attn::better_blas_kernel_for({"avx2", "fma", "avx512f"}, "Prescott") == "Haswell");
    CHECK(attn::better_blas_kernel_for({"avx", "avx2"}, "Prescott") == "");
  }

  TEST_CASE("the tests run with the best OpenBLAS kernel the CPU supports unless the user chose one") {
    const attn::BlasInfo blas = attn::blas_info();
    CHECK(!blas.kernel.empty());
    if (blas.chosen_by.rfind("set by you", 0) == 0) return;                     // the user's choice stands
    CHECK(attn::better_blas_kernel_for(attn::cpu_flags(), blas.kernel) == "");  // main() restarted with it
  }

  TEST_CASE("a CPU's model name is shortened to at most 40 columns, so machine lines fit any CPU") {
    CHECK(attn::short_cpu_name("Intel(R) Xeon(R) Platinum 8480+ Processor") == "Intel Xeon Platinum 8480+");
    CHECK(attn::short_cpu_name("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz") == "Intel Core i7-8700");
    CHECK(attn::short_cpu_name(" AMD EPYC 9R14 96-Core Processor") == "AMD EPYC 9R14 96-Core");
    CHECK(attn::short_cpu_name("") == "unknown CPU");
    const std::string long_name = attn::short_cpu_name(std::string(30, 'x') + " " + std::string(30, 'y'));
    CHECK(long_name.size() == 40);
    CHECK(long_name.substr(37) == "...");
    // A cut never leaves half of a UTF-8 character behind.
    CHECK(attn::short_cpu_name(std::string(36, 'x') + "处理器") == std::string(36, 'x') + "...");
  }

  TEST_CASE("the machine line's CPU and BLAS parts fit a line each with a long model name (ATTN_FAKE_CPUINFO)") {
    const std::string path = "attn_test_cpuinfo.txt";
    std::ofstream(path) << "model name\t: Intel(R) Xeon(R) Platinum 8592+ Processor, as long as a model name "
                           "gets on some machines @ 1.90GHz\nflags\t\t: fpu sse2 avx2 fma\n";
    setenv("ATTN_FAKE_CPUINFO", path.c_str(), 1);
    const std::string line = attn::machine_line(), name = attn::cpu_name();
    const std::set<std::string> flags = attn::cpu_flags();
    unsetenv("ATTN_FAKE_CPUINFO");
    std::remove(path.c_str());
    CHECK(name == "Intel Xeon Platinum 8592+, as long as...");
    CHECK(flags == std::set<std::string>{"fpu", "sse2", "avx2", "fma"});
    // Its two parts go on lines of their own ("# CPU: ...", "# BLAS: ..." in recordings): each fits.
    const std::size_t split = line.find("; ");
    REQUIRE(split != std::string::npos);
    INFO(line);
    CHECK(attn::display_width(line.substr(0, split)) <= 92);
    CHECK(attn::display_width(line.substr(split + 2)) <= 92);
  }

  TEST_CASE("an arm64 /proc/cpuinfo (ATTN_FAKE_CPUINFO) names its core and NEON or SVE, and no x86 kernel") {
    const std::string path = "attn_test_cpuinfo_arm64.txt";
    // As arm64 Linux writes it: one block per core, no "model name", the features on a "Features" line.
    std::ofstream(path) << "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
                           "crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs\nCPU implementer\t: "
                           "0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n";
    setenv("ATTN_FAKE_CPUINFO", path.c_str(), 1);
    const std::string name = attn::cpu_name(), isa = attn::vector_isa(), line = attn::machine_line();
    const std::set<std::string> flags = attn::cpu_flags();
    unsetenv("ATTN_FAKE_CPUINFO");
    std::remove(path.c_str());
    CHECK(name == "Arm Neoverse-N1");
    CHECK(isa == "NEON");
    CHECK(flags.count("asimd") == 1);
    CHECK(line.find("Arm Neoverse-N1") != std::string::npos);
    // OpenBLAS's arm64 kernels are its own pick: no x86 kernel is ever proposed for these features.
    CHECK(attn::better_blas_kernel_for(flags, "NEOVERSEN1") == "");
    CHECK(attn::better_blas_kernel_for(flags, "ARMV8") == "");
    CHECK(attn::vector_isa_for({"fp", "asimd", "sve", "sve2"}) == "SVE");
    CHECK(attn::vector_isa_for({"fpu", "sse2"}) == "portable");
    CHECK(attn::vector_isa_for({"avx2", "fma"}) == "AVX2+FMA");
    CHECK(attn::arm_cpu_name("0x61", "0x022") == "Apple part 0x022");  // Apple silicon under Docker Desktop
    CHECK(attn::arm_cpu_name("0x41", "0xd4f") == "Arm Neoverse-V2");
    CHECK(attn::arm_cpu_name("0x99", "0x1") == "arm64 (0x99) part 0x1");
    CHECK(attn::arm_cpu_name("", "") == "");
    CHECK(attn::arm_cpu_name("0x41", "") == "Arm");
  }

  TEST_CASE("the vector path is the widest this CPU runs, or the one ATTN_VECTOR_ISA forces, and kernels run it") {
    using attn::VectorPath;
    const std::vector<VectorPath> available = attn::vector_paths_available();
    REQUIRE(!available.empty());
    CHECK(available.back() == VectorPath::portable);  // every CPU runs the portable path
    const VectorPath path = attn::vector_path();
    CHECK(std::find(available.begin(), available.end(), path) != available.end());
    const char* forced = std::getenv("ATTN_VECTOR_ISA");  // ctest runs this program once per path (tests/)
    CHECK(path == (forced != nullptr && *forced != '\0' ? attn::vector_path_for(forced, available) : available[0]));
    if (forced != nullptr && *forced != '\0') CHECK(std::string(attn::vector_path_key(path)) == forced);
    // The lanes a dispatched kernel sees: Highway really switched to the path, not only the name.
    const std::size_t lanes = attn::vector_lanes();
    switch (path) {
      case VectorPath::avx512:
        CHECK(lanes == 16);
        break;
      case VectorPath::avx2:
        CHECK(lanes == 8);
        break;
      case VectorPath::neon:
        CHECK(lanes == 4);
        break;
      case VectorPath::portable:
        CHECK((lanes == 1 || lanes == 4));
        break;  // Highway's SCALAR or EMU128
    }
    // The machine line names the path in use.
    CHECK(attn::machine_line().find(attn::vector_path_name(path)) != std::string::npos);
  }

  TEST_CASE("vector_path_for takes the widest path, or the forced one the CPU can run") {
    using attn::VectorPath;
    const std::vector<VectorPath> x86{VectorPath::avx512, VectorPath::avx2, VectorPath::portable};
    CHECK(attn::vector_path_for(nullptr, x86) == VectorPath::avx512);
    CHECK(attn::vector_path_for("", x86) == VectorPath::avx512);
    CHECK(attn::vector_path_for("avx2", x86) == VectorPath::avx2);
    CHECK(attn::vector_path_for("portable", x86) == VectorPath::portable);
    CHECK(attn::vector_path_for("neon", {VectorPath::neon, VectorPath::portable}) == VectorPath::neon);
    for (const VectorPath p : x86)
      CHECK(attn::vector_path_for(attn::vector_path_key(p), x86) == p);  // each key names its path
    CHECK(std::string(attn::vector_path_name(VectorPath::avx2)) == "AVX2+FMA");
    CHECK(std::string(attn::vector_path_name(VectorPath::avx512)) == "AVX-512");
  }

  TEST_CASE("the FMA peak loop runs the vector path the kernels run") {
    std::string isa;
    CHECK(attn::fma_peak_gflops(1, &isa, 1) > 0.0);
    CHECK(isa == attn::vector_path_name(attn::vector_path()));
  }

  TEST_CASE("checked_allocation refuses, with the estimate, a buffer past 64 bits or past the memory available") {
    CHECK(attn::checked_allocation("x", {4, 5, 6}) == 120);
    CHECK(attn::checked_allocation("x", {std::size_t{1} << 62, 0}) == 0);
    // 2^60 bytes (an exabyte) is more than any machine this runs on has available.
    CHECK_THROWS_WITH_AS(attn::checked_allocation("the tiles", {std::size_t{1} << 40, std::size_t{1} << 20}),
                         doctest::Contains("the tiles: 1099511627776 × 1048576 bytes = 1153 PB, more than the"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::checked_allocation("the tiles", {std::size_t{1} << 40, std::size_t{1} << 40}),
                         doctest::Contains("does not fit in 64 bits"), std::invalid_argument);
  }

  TEST_CASE("checked_product multiplies sizes and refuses, naming the factors, a product past 64 bits") {
    CHECK(attn::checked_product("x", {4, 5, 6}) == 120);
    CHECK(attn::checked_product("x", {std::size_t{1} << 62, 0}) == 0);  // a zero factor: nothing to count
    CHECK(attn::checked_product("x", {std::size_t{1} << 31, std::size_t{1} << 32}) == std::size_t{1} << 63);
    CHECK_THROWS_WITH_AS(attn::checked_product("kv cache bytes", {4, std::size_t{1} << 62, 4}),
                         doctest::Contains("kv cache bytes: 4 × 4611686018427387904 × 4"), std::invalid_argument);
    CHECK_THROWS_AS(attn::checked_product("x", {std::numeric_limits<std::size_t>::max(), 2}), std::invalid_argument);
  }

  TEST_CASE("run_on_threads runs the work on every thread and hands the first exception to the caller") {
    for (const std::size_t threads : {1, 2, 5}) {
      CAPTURE(threads);
      std::atomic<std::size_t> ran{0};
      attn::run_on_threads(threads, [&] { ++ran; });
      CHECK(ran == threads);
      std::atomic<std::size_t> finished{0};
      CHECK_THROWS_WITH_AS(attn::run_on_threads(threads,
                                                [&] {
                                                  ++finished;
                                                  throw std::runtime_error("worker failed");
                                                }),
                           "worker failed", std::runtime_error);
      CHECK(finished == threads);  // every thread ran to its end before the exception reached us
    }
  }

  TEST_CASE("SingleThreadedBlas sets one OpenBLAS thread while any guard lives and restores the count after") {
    attn::set_blas_threads(2);
    const int before = attn::blas_threads();
    {
      const attn::SingleThreadedBlas outer;
      CHECK(attn::blas_threads() == 1);
      {
        const attn::SingleThreadedBlas inner;
        CHECK(attn::blas_threads() == 1);
      }
      CHECK(attn::blas_threads() == 1);  // the outer guard still lives
    }
    CHECK(attn::blas_threads() == before);
    std::vector<std::thread> users;  // guards taken and dropped concurrently from several threads
    for (int t = 0; t < 4; ++t)
      users.emplace_back([] {
        for (int k = 0; k < 200; ++k) const attn::SingleThreadedBlas guard;
      });
    for (auto& u : users) u.join();
    CHECK(attn::blas_threads() == before);
  }
}

TEST_SUITE("common: bad input") {
  TEST_CASE("ATTN_VECTOR_ISA refuses a path the CPU cannot run, or no path at all, naming the value and the paths") {
    using attn::VectorPath;
    const std::vector<VectorPath> avx2_cpu{VectorPath::avx2, VectorPath::portable};
    CHECK_THROWS_WITH_AS(attn::vector_path_for("avx512", avx2_cpu),
                         "ATTN_VECTOR_ISA=avx512: this CPU cannot run the AVX-512 path; it can run avx2, portable",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::vector_path_for("neon", avx2_cpu),
                         "ATTN_VECTOR_ISA=neon: this CPU cannot run the NEON path; it can run avx2, portable",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::vector_path_for("AVX2", avx2_cpu),  // keys are lower case, as the README writes them
                         "ATTN_VECTOR_ISA=AVX2: not a vector path (one of avx512, avx2, neon, portable); this "
                         "CPU can run avx2, portable",
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(attn::vector_path_for("sse4", {VectorPath::portable}), doctest::Contains("not a vector path"),
                         std::invalid_argument);
  }

  TEST_CASE("Rng refuses sizes that wrap or cannot fit, before allocating, and parameters its distributions forbid") {
    attn::Rng rng(35);
    constexpr std::size_t kBig = std::size_t{1} << 40;
    // 2^40 × 2^40 wraps 64 bits; 2^20 × 2^20 floats is 4 TB.
    CHECK_THROWS_WITH_AS(rng.normal(kBig, kBig), doctest::Contains("Rng::normal"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(rng.uniform(kBig >> 20, kBig >> 20), doctest::Contains("Rng::uniform"), std::invalid_argument);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (const float stddev : {0.0f, -1.0f, nan, inf}) {
      CAPTURE(stddev);
      CHECK_THROWS_WITH_AS(rng.normal(2, 2, 0.0f, stddev), doctest::Contains("stddev"), std::invalid_argument);
    }
    CHECK_THROWS_WITH_AS(rng.normal(2, 2, nan, 1.0f), doctest::Contains("mean = nan"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(rng.uniform(2, 2, 1.0f, 0.0f), doctest::Contains("low = 1"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(rng.uniform(2, 2, -inf, 0.0f), doctest::Contains("low = -inf"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(rng.uniform(2, 2, -3e38f, 3e38f), doctest::Contains("Rng::uniform"), std::invalid_argument);
    CHECK(rng.normal(0, 3).size() == 0);  // zero rows: an empty matrix
  }
}
