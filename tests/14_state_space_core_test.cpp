// Chapter 14's own code on bad input: the fast selective scan and its helpers (scan.hpp), the LTI kernel (lti.hpp)
// and the recall task (memory.hpp). Chapter code, not an exercise, so these run on the solution track only.
// Expected values are closed forms; a bad size is refused with the estimate, never a crash or a write past an end.
#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <vector>

#include "14_state_space/lti.hpp"
#include "14_state_space/memory.hpp"
#include "14_state_space/scan.hpp"
#include "14_state_space/state_space.hpp"
#include "attn/rng.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace {

using attn::Matrix;
using attn::Vector;
namespace ch14 = attn::ch14;
namespace hostile = attn::test::hostile;

// A complex vector (N) given to the battery as an (N, 2) matrix: column 0 the real parts, column 1 the imaginary
// ones. Any shape is a complex vector: a missing column is zeros, a third is not read.
attn::ComplexVector complex_of(const Matrix& m) {
  attn::ComplexVector v(m.shape(0));
  for (std::size_t k = 0; k < v.size(); ++k)
    v[k] = attn::Complex(m.shape(1) > 0 ? m(k, 0) : 0.0f, m.shape(1) > 1 ? m(k, 1) : 0.0f);
  return v;
}

Matrix columns_of(const attn::ComplexVector& v) {
  Matrix m = Matrix::from_shape({v.size(), 2});
  for (std::size_t k = 0; k < v.size(); ++k) {
    m(k, 0) = v[k].real();
    m(k, 1) = v[k].imag();
  }
  return m;
}

// Whether Ā, B̄, C are one system: the same N, and |Ā_k| ≤ 1.
bool system_fits(const Matrix& a, const Matrix& b, const Matrix& c) {
  bool ok = a.shape(0) == b.shape(0) && a.shape(0) == c.shape(0);
  for (const attn::Complex z : complex_of(a)) ok = ok && std::abs(z) <= 1.0f;
  return ok;
}

const char* const kFitsMemory =
    "16 GiB or more: answered where the memory available holds it (the contract's "
    "limit, past the battery's 4 GiB), refused naming the estimate elsewhere";

}  // namespace

TEST_SUITE("14_state_space") {
  TEST_CASE("selective_scan with no state (N = 0) gives zeros on every split and thread count, and still checks x") {
    attn::Rng rng(1401);
    const std::size_t n = 9, d = 3;
    const Matrix x = rng.normal(n, d), delta(Matrix::shape_type{n, d}, 0.01f), A(Matrix::shape_type{d, 0});
    const Matrix B(Matrix::shape_type{n, 0}), C(Matrix::shape_type{n, 0});
    for (const auto split : {ch14::ScanSplit::time, ch14::ScanSplit::channels})
      for (const int threads : {1, 2, 3}) {
        CAPTURE(threads);
        const ch14::SelectiveScanOutput out = ch14::selective_scan(x, delta, A, B, C, threads, split);
        CHECK(out.y.shape(0) == n);
        CHECK(xt::all(xt::equal(out.y, 0.0f)));  // y_t = Σ over no state entries = 0
        CHECK(out.h.shape(0) == d);
        CHECK(out.h.size() == 0);
      }
    Matrix nan_x = x;
    nan_x(4, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_WITH_AS(ch14::selective_scan(nan_x, delta, A, B, C, 2), doctest::Contains("x[14]"),
                         std::invalid_argument);
  }

  TEST_CASE("selective_scan refuses finite inputs whose state or output overflows float32, on every split") {
    // x = 1e36, Δ = 1, B = C = 1, A = −1e−3: h grows by Δ·B·x = 1e36 per token (its decay e^−0.001 keeps
    // almost all of it) and y = Σ_k C·h ≈ 4·1e36·t passes float32's 3.4e38 near t = 85, every input finite.
    const std::size_t n = 600, d = 2, N = 4;
    const Matrix x(Matrix::shape_type{n, d}, 1e36f), delta(Matrix::shape_type{n, d}, 1.0f);
    const Matrix A(Matrix::shape_type{d, N}, -1e-3f), B(Matrix::shape_type{n, N}, 1.0f), C = B;
    for (const auto split : {ch14::ScanSplit::time, ch14::ScanSplit::channels})
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        CHECK_THROWS_WITH_AS(ch14::selective_scan(x, delta, A, B, C, threads, split), doctest::Contains("overflow"),
                             std::invalid_argument);
      }
  }

  TEST_CASE("vector_exp refuses a count that is not a multiple of 16 instead of writing past the end") {
    std::vector<float> from(32, -1.0f), to(32, 0.0f);
    CHECK_THROWS_WITH_AS(ch14::vector_exp(from.data(), to.data(), 5), doctest::Contains("n = 5"),
                         std::invalid_argument);
    CHECK(to[0] == 0.0f);
    ch14::vector_exp(from.data(), to.data(), 32);
    CHECK(to[31] == doctest::Approx(0.36787944).epsilon(1e-6));  // e^-1
  }

  TEST_CASE("ssm_kernel and orthonormal_rows refuse, before allocating, sizes that cannot fit in memory") {
    const attn::DiscreteSSM ssm{{attn::Complex(0.5f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}};
    CHECK_THROWS_WITH_AS(ch14::ssm_kernel(ssm, std::size_t{1} << 40), doctest::Contains("available"),
                         std::invalid_argument);
    CHECK(ch14::ssm_kernel(ssm, 0).size() == 0);
    attn::Rng rng(1402);
    CHECK_THROWS_WITH_AS(ch14::orthonormal_rows(rng, 1, std::size_t{1} << 40), doctest::Contains("available"),
                         std::invalid_argument);
    CHECK(ch14::orthonormal_rows(rng, 0, 4).size() == 0);
  }

  TEST_CASE("relative_error refuses matrices of different shapes and NaN, instead of reading past the first") {
    const Matrix V = {{1.0f, 2.0f}}, recalled = {{1.0f, 2.0f}, {3.0f, 4.0f}, {5.0f, 6.0f}};
    CHECK_THROWS_WITH_AS(ch14::relative_error(V, Matrix(xt::zeros<float>({3, 4}))), doctest::Contains("(3, 4)"),
                         std::invalid_argument);
    CHECK_THROWS_AS(ch14::relative_error(recalled, V), std::invalid_argument);
    CHECK_THROWS_AS(ch14::relative_error(Matrix{{std::numeric_limits<float>::quiet_NaN(), 2.0f}}, V),
                    std::invalid_argument);
    CHECK(ch14::relative_error(Matrix{{1.0f, 0.0f}}, V) == doctest::Approx(0.894427191));  // ‖(0, −2)‖/‖(1, 2)‖ = 2/√5
  }

  TEST_CASE("the LTI kernel, recurrence and convolutions refuse NaN or infinity, and a state that would grow") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const attn::Vector u = {1.0f, 2.0f, nan}, K = {0.5f, 0.25f};
    CHECK_THROWS_WITH_AS(ch14::causal_convolution_direct(K, u), doctest::Contains("u[2]"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(
        ch14::causal_convolution_direct(attn::Vector{std::numeric_limits<float>::infinity()}, attn::Vector{1.0f}),
        doctest::Contains("K[0]"), std::invalid_argument);
    if (ch14::fft_available())
      CHECK_THROWS_WITH_AS(ch14::causal_convolution_fft(K, u), doctest::Contains("u[2]"), std::invalid_argument);
    const attn::DiscreteSSM stable{
        {attn::Complex(0.5f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}, {attn::Complex(1.0f, 0.0f)}};
    CHECK_THROWS_WITH_AS(ch14::ssm_recurrence(stable, u), doctest::Contains("u[2]"), std::invalid_argument);
    attn::DiscreteSSM growing = stable;
    growing.A_bar[0] = attn::Complex(0.0f, 2.0f);  // |Ā| = 2: the kernel doubles every tap, inf past 128 taps
    CHECK_THROWS_WITH_AS(ch14::ssm_kernel(growing, 200), doctest::Contains("|A_bar[0]| = 2"), std::invalid_argument);
    attn::DiscreteSSM broken = stable;
    broken.C[0] = attn::Complex(nan, 0.0f);
    CHECK_THROWS_WITH_AS(ch14::ssm_recurrence(broken, attn::Vector{1.0f}), doctest::Contains("entry 0"),
                         std::invalid_argument);
  }
}

// Bad input, one case per function of memory.hpp, scan.hpp and state_space.hpp that had none
// (cmake/check_bad_input.py).
TEST_SUITE("14_state_space: bad input") {
  TEST_CASE("recall_task refuses keys and values that differ in rows, and a NaN or infinity in either, by name") {
    const attn::Matrix K{{1.0f, 0.0f}, {0.0f, 1.0f}}, V{{2.0f}, {3.0f}};  // (2, 2), (2, 1)
    CHECK_THROWS_NAMING(attn::ch14::recall_task(K, attn::Matrix{{2.0f}}), std::invalid_argument, "(2, 2)", "(1, 1)");
    attn::Matrix bad_K = K, bad_V = V;
    bad_K(1, 0) = std::numeric_limits<float>::quiet_NaN();
    bad_V(0, 0) = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_NAMING(attn::ch14::recall_task(bad_K, V), std::invalid_argument, "recall_task", "K");
    CHECK_THROWS_NAMING(attn::ch14::recall_task(K, bad_V), std::invalid_argument, "recall_task", "V");
  }

  TEST_CASE("scan_inputs refuses sizes that wrap or cannot fit, before allocating") {
    attn::Rng rng(1401);
    constexpr std::size_t kBig = std::size_t{1} << 40;
    CHECK_THROWS_NAMING(attn::ch14::scan_inputs(rng, kBig, 2, 1), std::invalid_argument, "rows × cols");
    CHECK_THROWS_NAMING(attn::ch14::scan_inputs(rng, 4, 2, kBig), std::invalid_argument, "scan_inputs", "d × N");
    CHECK(attn::ch14::scan_inputs(rng, 0, 2, 3).x.size() == 0);  // no tokens: empty inputs, A still (2, 3)
  }

  TEST_CASE("selective_scan_bytes answers for any sizes without wrapping, and use_scan_kernels refuses a bad name") {
    // bad input answered: selective_scan_bytes, use_scan_kernels, scan_combine
    // d = 2^63: 3d + 2N in size_t wrapped to 2^63 and gave a third of the bytes.
    const double d = std::ldexp(1.0, 63);
    CHECK(attn::ch14::selective_scan_bytes(1, std::size_t{1} << 63, 0) == 4.0 * 3.0 * d);
    CHECK(attn::ch14::selective_scan_bytes(0, 5, 7) == 0.0);
    const std::string before = attn::ch14::scan_kernel_isa();
    CHECK_FALSE(attn::ch14::use_scan_kernels("no such kernels"));
    CHECK_FALSE(attn::ch14::use_scan_kernels(""));
    CHECK(before == attn::ch14::scan_kernel_isa());  // unchanged
    // scan_combine propagates a NaN or an infinity (its contract): the result says so, it is never a finite lie.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    CHECK(std::isnan(attn::scan_combine({nan, 0.0f}, {0.5f, 1.0f}).a));
    CHECK(std::isnan(attn::scan_combine({0.5f, 1.0f}, {0.5f, nan}).b));
    CHECK(std::isinf(attn::scan_combine({0.5f, inf}, {0.5f, 0.0f}).b));
  }
}

TEST_SUITE("14_state_space: the benchmarks' systems") {
  TEST_CASE("s4d_lin and random_vector give empty results for no states or no tokens, and refuse what cannot fit") {
    // bad input answered: s4d_lin, random_vector
    attn::Rng rng(14);
    const attn::DiagonalSSM none = ch14::s4d_lin(0, rng);
    CHECK((none.A.empty() && none.B.empty() && none.C.empty()));
    const attn::DiagonalSSM four = ch14::s4d_lin(4, rng);
    REQUIRE(four.A.size() == 4);
    CHECK(four.A[3] == std::complex<float>(-0.5f, static_cast<float>(3 * M_PI)));
    CHECK(ch14::random_vector(rng, 0).size() == 0);
    CHECK(ch14::random_vector(rng, 5).size() == 5);
    CHECK_THROWS_AS(ch14::random_vector(rng, std::size_t{1} << 62), std::invalid_argument);
  }
}

// The defect a hostile call found in chapter 14's own code.
TEST_SUITE("14_state_space: hostile input") {
  TEST_CASE("relative_error against V = 0 is infinite for a recall that is not 0, and 0 for one that is") {
    // bad input answered: relative_error
    const Matrix zeros = xt::zeros<float>({2, 3}), ones = xt::ones<float>({2, 3});
    CHECK(std::isinf(ch14::relative_error(ones, zeros)));  // 0 before: any recall of nothing looked perfect
    CHECK(ch14::relative_error(zeros, zeros) == 0.0);
    CHECK(ch14::relative_error(Matrix(xt::zeros<float>({0, 3})), Matrix(xt::zeros<float>({0, 3}))) == 0.0);
  }
}

// The hostile-input battery (tests/support/hostile.hpp) on chapter 14's own code: every argument replaced in turn by
// its type's hostile values, each call refused naming what was wrong or answered as the contract says.
TEST_SUITE("14_state_space: hostile battery") {
  TEST_CASE("the time-invariant SSM under the hostile battery") {
    // hostile battery: ssm_kernel, ssm_recurrence, causal_convolution_direct, causal_convolution_fft
    attn::Rng rng(1461);
    const attn::DiscreteSSM ssm = attn::zoh_discretize(ch14::s4d_lin(3, rng), 0.1f);
    const Matrix A_bar = columns_of(ssm.A_bar), B_bar = columns_of(ssm.B_bar), C = columns_of(ssm.C);
    hostile::battery(
        "ssm_kernel", {"A_bar|Ā", "B_bar|B̄", "C", "n"},
        [](const Matrix& a, const Matrix& b, const Matrix& c, std::size_t n) {
          return ch14::ssm_kernel({complex_of(a), complex_of(b), complex_of(c)}, n);
        },
        A_bar, B_bar, C, std::size_t{6})
        .fits([](const Matrix& a, const Matrix& b, const Matrix& c, std::size_t n) {
          return system_fits(a, b, c) && n < (std::size_t{1} << 32);
        })
        .answer(
            [](const Vector& K, const Matrix&, const Matrix&, const Matrix&, std::size_t n) { return K.size() == n; })
        .exempt("n = 2^32", kFitsMemory)
        .run();
    hostile::battery(
        "ssm_recurrence", {"A_bar|Ā", "B_bar|B̄", "C", "u"},
        [](const Matrix& a, const Matrix& b, const Matrix& c, const Vector& u) {
          return ch14::ssm_recurrence({complex_of(a), complex_of(b), complex_of(c)}, u);
        },
        A_bar, B_bar, C, ch14::random_vector(rng, 6))
        .fits([](const Matrix& a, const Matrix& b, const Matrix& c, const Vector&) { return system_fits(a, b, c); })
        .answer([](const Vector& y, const Matrix&, const Matrix&, const Matrix&, const Vector& u) {
          return y.size() == u.size();
        })
        .run();
    for (const bool fft : {false, true}) {
      if (fft && !ch14::fft_available()) {
        MESSAGE("skipped: causal_convolution_fft's battery needs FFTW3 (the course was built without it)");
        continue;
      }
      const auto convolve = [fft](const Vector& K, const Vector& u) {
        return fft ? ch14::causal_convolution_fft(K, u) : ch14::causal_convolution_direct(K, u);
      };
      hostile::battery(fft ? "causal_convolution_fft" : "causal_convolution_direct", {"K", "u"}, convolve,
                       Vector{1.0f, 0.5f, -0.25f}, Vector{0.5f, 2.0f, -1.0f, 3.0f, 1.0f})
          .answer([](const Vector& y, const Vector&, const Vector& u) { return y.size() == u.size(); })
          .run();
    }
  }

  TEST_CASE("the systems, inputs and memory task under the hostile battery") {
    // hostile battery: s4d_lin, random_vector, orthonormal_rows, recall_task, relative_error, scan_inputs
    hostile::battery(
        "s4d_lin", {"N", "rng"},
        [](std::size_t N, attn::Rng& rng) {
          const attn::DiagonalSSM s = ch14::s4d_lin(N, rng);
          return std::vector<std::size_t>{s.A.size(), s.B.size(), s.C.size()};
        },
        std::size_t{4}, attn::Rng(1462))
        .fits([](std::size_t N, const attn::Rng&) { return N < (std::size_t{1} << 32); })
        .answer([](const std::vector<std::size_t>& sizes, std::size_t N, const attn::Rng&) {
          return sizes == std::vector<std::size_t>{N, N, N};
        })
        .exempt("N = 2^32", kFitsMemory)
        .run();
    hostile::battery(
        "random_vector", {"rng", "n"}, [](attn::Rng& rng, std::size_t n) { return ch14::random_vector(rng, n); },
        attn::Rng(1463), std::size_t{5})
        .fits([](const attn::Rng&, std::size_t n) { return n < (std::size_t{1} << 32); })
        .answer([](const Vector& u, const attn::Rng&, std::size_t n) { return u.size() == n; })
        .exempt("n = 2^32", kFitsMemory)
        .run();
    hostile::battery(
        "orthonormal_rows", {"rng", "m", "d"},
        [](attn::Rng& rng, std::size_t m, std::size_t d) { return ch14::orthonormal_rows(rng, m, d); }, attn::Rng(1464),
        std::size_t{3}, std::size_t{5})
        .fits([](const attn::Rng&, std::size_t m, std::size_t d) {
          std::size_t md = 0;
          return m <= d && !__builtin_mul_overflow(m, d, &md) && md < (std::size_t{1} << 32);
        })
        .answer([](const Matrix& Q, const attn::Rng&, std::size_t m, std::size_t d) {
          return Q.shape(0) == m && Q.shape(1) == d;
        })
        .exempt("d = 2^32", kFitsMemory)
        .run();
    attn::Rng draw(1465);
    hostile::battery(
        "recall_task", {"K", "V"}, [](const Matrix& K, const Matrix& V) { return ch14::recall_task(K, V).X; },
        Matrix(draw.normal(3, 4)), Matrix(draw.normal(3, 2)))
        .fits([](const Matrix& K, const Matrix& V) { return K.shape(0) == V.shape(0); })
        .answer([](const Matrix& X, const Matrix& K, const Matrix& V) {
          return X.shape(0) == 2 * K.shape(0) && X.shape(1) == V.shape(1);
        })
        .run();
    hostile::battery(
        "relative_error", {"recalled", "V"},
        [](const Matrix& recalled, const Matrix& V) { return ch14::relative_error(recalled, V); },
        Matrix(draw.normal(3, 2)), Matrix(draw.normal(3, 2)))
        .fits([](const Matrix& recalled, const Matrix& V) { return recalled.shape() == V.shape(); })
        .answer([](double e, const Matrix&, const Matrix&) { return e >= 0; })
        .run();
    hostile::battery(
        "scan_inputs", {"rng", "n", "d", "N"},
        [](attn::Rng& rng, std::size_t n, std::size_t d, std::size_t N) {
          const ch14::ScanInputs in = ch14::scan_inputs(rng, n, d, N);
          return std::vector<std::size_t>{in.x.shape(0), in.x.shape(1), in.A.shape(1), in.B.shape(0)};
        },
        attn::Rng(1466), std::size_t{4}, std::size_t{3}, std::size_t{2})
        .fits([](const attn::Rng&, std::size_t n, std::size_t d, std::size_t N) {
          std::size_t nd = 0, dN = 0, nN = 0;
          return !__builtin_mul_overflow(n, d, &nd) && !__builtin_mul_overflow(d, N, &dN) &&
                 !__builtin_mul_overflow(n, N, &nN) && nd < (std::size_t{1} << 32) && dN < (std::size_t{1} << 32) &&
                 nN < (std::size_t{1} << 32);
        })
        .answer([](const std::vector<std::size_t>& s, const attn::Rng&, std::size_t n, std::size_t d, std::size_t N) {
          return s == std::vector<std::size_t>{n, d, N, n};
        })
        .exempt("= 2^32", kFitsMemory)
        .run();
  }

  TEST_CASE("the selective scan and its kernels under the hostile battery") {
    // hostile battery: selective_scan, use_scan_kernels, vector_exp, selective_scan_bytes
    attn::Rng rng(1467);
    const ch14::ScanInputs in = ch14::scan_inputs(rng, 6, 3, 4);
    hostile::battery(
        "selective_scan", {"x", "delta|Δ", "A", "B", "C", "threads", "split"},
        [](const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B, const Matrix& C, int threads,
           ch14::ScanSplit split) { return ch14::selective_scan(x, delta, A, B, C, threads, split).y; },
        in.x, in.delta, in.A, in.B, in.C, 2, ch14::ScanSplit::time)
        .fits([](const Matrix& x, const Matrix& delta, const Matrix& A, const Matrix& B, const Matrix& C, int threads,
                 ch14::ScanSplit split) {
          bool ok = delta.shape() == x.shape() && A.shape(0) == x.shape(1) && B.shape(0) == x.shape(0) &&
                    C.shape() == B.shape() && B.shape(1) == A.shape(1) && threads >= 1 &&
                    (split == ch14::ScanSplit::time || split == ch14::ScanSplit::channels);
          for (const float v : delta) ok = ok && v > 0;
          for (const float v : A) ok = ok && v < 0;
          return ok;
        })
        .answer([](const Matrix& y, const Matrix& x, const Matrix&, const Matrix&, const Matrix&, const Matrix&, int,
                   ch14::ScanSplit) { return y.shape() == x.shape() && hostile::all_finite(y); })
        .exempt("threads = 2147483647",
                "more threads than tokens or channels leave the extra ones idle (documented): answered, or refused "
                "where they cannot start")
        .run();
    const std::string isa = ch14::scan_kernel_isa();
    hostile::battery(
        "use_scan_kernels", {"isa"},
        [](const std::string& name) {
          const std::string before = ch14::scan_kernel_isa();
          const bool ok = ch14::use_scan_kernels(name);
          const bool unchanged = before == ch14::scan_kernel_isa();
          ch14::use_scan_kernels("auto");
          return ok || unchanged;  // a refused name changes nothing
        },
        std::string("auto"))
        .answer([](bool consistent, const std::string&) { return consistent; })
        .run();
    CHECK(isa == ch14::scan_kernel_isa());
    std::vector<float> from(32);
    for (std::size_t i = 0; i < from.size(); ++i) from[i] = -0.25f * static_cast<float>(i);
    hostile::battery(
        "vector_exp", {"from", "n"},
        [](const std::vector<float>& f, std::size_t n) {
          // a list, passed on where it holds n values (a size past it cannot be seen through a pointer), or where n
          // is no multiple of 16 (refused before any read, as documented)
          std::vector<float> to(f.size(), -1.0f);
          if (n <= f.size() || n % 16 != 0) ch14::vector_exp(f.data(), to.data(), n);
          return to;
        },
        from, std::size_t{32})
        .fits([](const std::vector<float>&, std::size_t n) { return n % 16 == 0; })
        .exempt("from with",
                "its contract is values ≤ 0 (the scan's decays, checked there): any value is computed "
                "as its exponential, NaN stays NaN")
        .exempt("= 2^", "a multiple of 16 past the list: not passed on (a size past it cannot be seen)")
        .exempt("every size", "as = 2^")
        .run();
    hostile::battery(
        "selective_scan_bytes", {"n", "d", "N"},
        [](std::size_t n, std::size_t d, std::size_t N) { return ch14::selective_scan_bytes(n, d, N); }, std::size_t{6},
        std::size_t{3}, std::size_t{4})
        .answer([](double bytes, std::size_t n, std::size_t d, std::size_t N) {
          const double want = 4.0 * double(n) * (3.0 * double(d) + 2.0 * double(N));
          return bytes == want || std::fabs(bytes - want) <= 1e-12 * want;
        })
        .run();
  }
}
