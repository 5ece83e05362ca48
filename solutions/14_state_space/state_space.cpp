// Chapter 14, reference solutions. Book page: book/14_state_space.md.
// Plain loops over the state: each function is the formula of its doc comment, checked first, then computed.
// The fast scans the chapter benchmarks are chapter code (chapters/14_state_space/scan.cpp), not these.
// Checks format their message only when they fail (`if (!ok) throw`): attn::require() takes a ready-made string,
// and formatting one per entry of A cost more than the decode step itself.
#include "14_state_space/state_space.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

namespace attn {

namespace {

bool finite(Complex z) { return std::isfinite(z.real()) && std::isfinite(z.imag()); }

std::string complex_str(Complex z) {
  return fmt::format("{} {} {}i", z.real(), z.imag() < 0 ? '-' : '+', std::fabs(z.imag()));
}

/// e^z − 1 for Re z ≤ 0, without the cancellation of `std::exp(z) − 1.0f`: for a small step, e^z is within a
/// few ulps of 1 and subtracting 1 keeps only those ulps (at |z| = 5e-4 the result is already 5e-5 wrong).
/// Written as `e^{x+iy} − 1 = (e^x − 1) cos y − 2 sin²(y/2) + i e^x sin y`, with std::expm1 for e^x − 1, nothing
/// cancels: when cos y ≥ 0 both real terms are ≤ 0, and when cos y < 0 the real part is e^x cos y − 1 < −1.
/// In double: z = Δ·A of finite float Δ and A is finite there (in float Δ = 3e38 made Im z infinite, and its sine NaN).
std::complex<double> complex_expm1(std::complex<double> z) {
  const double x = z.real(), y = z.imag(), half_sin = std::sin(0.5 * y);
  return {std::expm1(x) * std::cos(y) - 2.0 * half_sin * half_sin, std::exp(x) * std::sin(y)};
}

/// The largest magnitude among \p count values (all finite: checked before).
double max_abs(const float* values, std::size_t count) {
  float m = 0.0f;
  for (std::size_t i = 0; i < count; ++i) m = std::max(m, std::fabs(values[i]));
  return m;
}

}  // namespace

// [zoh_discretize]
DiscreteSSM zoh_discretize(const DiagonalSSM& ssm, float delta) {
  const std::size_t N = ssm.A.size();
  if (!(ssm.B.size() == N && ssm.C.size() == N))
    throw std::invalid_argument(
        fmt::format("zoh_discretize: A is ({}), B is ({}) and C is ({}); all three need the same N", N, ssm.B.size(),
                    ssm.C.size()));
  if (!(std::isfinite(delta) && delta > 0.0f))
    throw std::invalid_argument(
        fmt::format("zoh_discretize: the step delta is {}; it must be a finite number > 0", delta));
  for (std::size_t k = 0; k < N; ++k) {
    if (!(finite(ssm.A[k]) && finite(ssm.B[k]) && finite(ssm.C[k])))
      throw std::invalid_argument(
          fmt::format("zoh_discretize: entry {} of A, B or C is not finite (A[{}] = {})", k, k, complex_str(ssm.A[k])));
    // Re(A) ≥ 0 would make |exp(ΔA)| ≥ 1: the state would never forget (or blow up), and (Ā − 1)/A is 0/0 at A = 0.
    if (!(ssm.A[k].real() < 0.0f))
      throw std::invalid_argument(fmt::format(
          "zoh_discretize: A[{}] = {} has a real part ≥ 0; a stable SSM needs Re(A) < 0", k, complex_str(ssm.A[k])));
  }
  DiscreteSSM out{ComplexVector(N), ComplexVector(N), ssm.C};
  for (std::size_t k = 0; k < N; ++k) {
    // u held constant over [t, t + Δ]: x(t+Δ) = e^{ΔA} x(t) + ∫₀^Δ e^{sA} ds · B u = e^{ΔA} x(t) + (e^{ΔA} − 1)/A · B
    // u. The (e^{ΔA} − 1) is complex_expm1(), not Ā − 1: Mamba's steps start at Δ = 0.001, where Ā − 1 loses 4 digits.
    // In double: Δ·A of finite floats is finite there (a step of 3e38 gives Ā = 0, the state forgotten, never NaN).
    const std::complex<double> A_k(ssm.A[k]), z = static_cast<double>(delta) * A_k;
    out.A_bar[k] = Complex(std::exp(z));
    out.B_bar[k] = Complex(complex_expm1(z) / A_k * std::complex<double>(ssm.B[k]));
  }
  return out;
}
// [zoh_discretize]

// [selective_step]
Vector selective_step(Matrix& h, const Vector& x, const Vector& delta, const Matrix& A, const Vector& B,
                      const Vector& C) {
  const std::size_t d = h.shape(0), N = h.shape(1);
  if (!(x.size() == d && delta.size() == d && A.shape(0) == d && A.shape(1) == N && B.size() == N && C.size() == N))
    throw std::invalid_argument(
        fmt::format("selective_step: h is {}, x {}, delta {}, A {}, B {} and C {}; they must be (d, N), (d), (d), "
                    "(d, N), (N) and (N)",
                    shape_str(h), shape_str(x), shape_str(delta), shape_str(A), shape_str(B), shape_str(C)));
  require_finite("selective_step", "x", x.data(), d);
  require_finite("selective_step", "delta", delta.data(), d);
  require_finite("selective_step", "A", A.data(), A.size());
  require_finite("selective_step", "B", B.data(), N);
  require_finite("selective_step", "C", C.data(), N);
  for (std::size_t c = 0; c < d; ++c)
    if (!(delta(c) > 0.0f))
      throw std::invalid_argument(fmt::format("selective_step: delta[{}] = {}; every step must be > 0", c, delta(c)));
  for (std::size_t i = 0; i < A.size(); ++i)
    if (!(A.data()[i] < 0.0f))
      throw std::invalid_argument(fmt::format(
          "selective_step: A(c, k) = {} at c = {}, k = {}; a stable state needs A < 0", A.data()[i], i / N, i % N));
  require_finite("selective_step", "h", h.data(), h.size());
  // Finite inputs can still overflow: since exp(ΔA) ≤ 1, every new |h(c, k)| ≤ max|h| + max(Δ|x|)·max|B| and
  // every |y_c| ≤ N·max|C| times that. Refused, h unchanged, when the bound passes float's largest value.
  const auto max_abs = [](const float* v, std::size_t size) {
    double m = 0.0;
    for (std::size_t i = 0; i < size; ++i) m = std::max(m, static_cast<double>(std::fabs(v[i])));
    return m;
  };
  double step_input = 0.0;  // max over c of Δ_c |x_c|
  for (std::size_t c = 0; c < d; ++c)
    step_input = std::max(step_input, static_cast<double>(delta(c) * std::fabs(x(c))));
  const double h_bound = max_abs(h.data(), h.size()) + step_input * max_abs(B.data(), N);
  const double y_bound = static_cast<double>(N) * max_abs(C.data(), N) * h_bound;
  if (!(std::max(h_bound, y_bound) <= static_cast<double>(std::numeric_limits<float>::max())))
    throw std::invalid_argument(fmt::format(
        "selective_step: the state could reach {:.3g} and the output {:.3g}, past float's largest value; scale x, B, "
        "C or h down",
        h_bound, y_bound));
  Vector y = xt::zeros<float>({d});  // (d)
  for (std::size_t c = 0; c < d; ++c) {
    const float dx = delta(c) * x(c);  // Mamba's B̄ = Δ·B: the first-order form of the ZOH input
    float acc = 0.0f;
    for (std::size_t k = 0; k < N; ++k) {
      // The decay is chosen by the token: a large Δ forgets the state and takes in x, a small Δ keeps it.
      h(c, k) = std::exp(delta(c) * A(c, k)) * h(c, k) + dx * B(k);
      acc += C(k) * h(c, k);
    }
    y(c) = acc;
  }
  return y;
}
// [selective_step]

// [scan_combine]
ScanPair scan_combine(ScanPair earlier, ScanPair later) {
  // later(earlier(h)) = later.a · (earlier.a · h + earlier.b) + later.b: decays multiply, the earlier input decays.
  return {later.a * earlier.a, later.a * earlier.b + later.b};
}
// [scan_combine]

// [semiseparable_mask]
Matrix semiseparable_mask(const Vector& a) {
  const std::size_t n = a.size();
  checked_allocation("semiseparable_mask: the (n, n) mask n × n floats", {n, n, sizeof(float)});  // before allocating
  for (std::size_t t = 0; t < n; ++t)
    if (!(std::isfinite(a(t)) && a(t) >= 0.0f && a(t) <= 1.0f))
      throw std::invalid_argument(
          fmt::format("semiseparable_mask: a[{}] = {}; every decay must be in [0, 1]", t, a(t)));
  Matrix L = xt::zeros<float>({n, n});  // (n, n), zero above the diagonal: a token never sees the future
  for (std::size_t i = 0; i < n; ++i) {
    // Walk left from the diagonal: L(i, j) = L(i, j+1) · a_{j+1}, one multiplication per entry.
    L(i, i) = 1.0f;
    for (std::size_t j = i; j-- > 0;) L(i, j) = L(i, j + 1) * a(j + 1);
  }
  return L;
}
// [semiseparable_mask]

// [masked_attention_form]
Matrix masked_attention_form(const Matrix& L, const Matrix& C, const Matrix& B, const Matrix& X) {
  const std::size_t n = C.shape(0);
  if (!(L.shape(0) == n && L.shape(1) == n && B.shape(0) == n && X.shape(0) == n && B.shape(1) == C.shape(1)))
    throw std::invalid_argument(
        fmt::format("masked_attention_form: L is {}, C {}, B {} and X {}; they must be (n, n), (n, N), (n, N) and "
                    "(n, p)",
                    shape_str(L), shape_str(C), shape_str(B), shape_str(X)));
  require_finite("masked_attention_form", "L", L.data(), L.size());
  require_finite("masked_attention_form", "C", C.data(), C.size());
  require_finite("masked_attention_form", "B", B.data(), B.size());
  require_finite("masked_attention_form", "X", X.data(), X.size());
  // Every entry of Y sums n·N products L_ij·C_ik·B_jk·X_jc: the course's overflow policy (attn/checks.hpp) bounds
  // them all, so no sum meets an infinity (3e38 in B made C Bᵀ infinite, and inf − inf NaN).
  const double bound = static_cast<double>(n) * static_cast<double>(C.shape(1)) * max_abs(L.data(), L.size()) *
                       max_abs(C.data(), C.size()) * max_abs(B.data(), B.size()) * max_abs(X.data(), X.size());
  if (!(bound <= kMaxScoreBound))
    throw std::invalid_argument(fmt::format(
        "masked_attention_form: n·N = {} × {} terms times max|L| = {:.3g}, max|C| = {:.3g}, max|B| = {:.3g} and "
        "max|X| = {:.3g} is {:.3g}, beyond {:.3g}: Y could overflow float. Scale L, C, B or X down",
        n, C.shape(1), max_abs(L.data(), L.size()), max_abs(C.data(), C.size()), max_abs(B.data(), B.size()),
        max_abs(X.data(), X.size()), bound, kMaxScoreBound));
  Matrix M = matmul(C, B, /*transpose_b=*/true);  // (n, n)  C Bᵀ: every query against every key, as in attention
  M *= L;                                         // (n, n)  the decay mask replaces softmax (and hides the future)
  return matmul(M, X);                            // (n, p)
}
// [masked_attention_form]

}  // namespace attn
