// Chapter 14's S4D computations (see lti.hpp). Book page: book/14_state_space.md, "Two computations".
#include "14_state_space/lti.hpp"

#include <algorithm>
#include <complex>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "attn/checks.hpp"

#if ATTN_HAVE_FFTW
#include <fftw3.h>
#endif

namespace attn::ch14 {

namespace {

/// Ā, B̄ and C of one size N, every entry finite, and |Ā_k| ≤ 1: a state that grows would overflow the kernel and
/// the recurrence to inf without a word (zoh_discretize() of a stable A gives |Ā_k| < 1).
void require_same_n(const char* where, const DiscreteSSM& ssm) {
  require(ssm.B_bar.size() == ssm.A_bar.size() && ssm.C.size() == ssm.A_bar.size(),
          fmt::format("{}: A_bar is ({}), B_bar ({}) and C ({}); all three need the same N", where, ssm.A_bar.size(),
                      ssm.B_bar.size(), ssm.C.size()));
  const auto finite = [](Complex z) { return std::isfinite(z.real()) && std::isfinite(z.imag()); };
  for (std::size_t k = 0; k < ssm.A_bar.size(); ++k) {
    require(finite(ssm.A_bar[k]) && finite(ssm.B_bar[k]) && finite(ssm.C[k]),
            fmt::format("{}: entry {} of A_bar, B_bar or C is not finite", where, k));
    require(std::abs(ssm.A_bar[k]) <= 1.0f,
            fmt::format("{}: |A_bar[{}]| = {} is above 1: the state would grow without bound", where, k,
                        std::abs(ssm.A_bar[k])));
  }
}

/// The largest |z| of \p v (0 for none).
double max_abs(const ComplexVector& v) {
  double m = 0.0;
  for (const Complex z : v) m = std::max(m, static_cast<double>(std::abs(z)));
  return m;
}

/// a·b·… for the terms of an overflow bound: the largest std::size_t where the product passes it (a bound that big
/// refuses any input that is not all zeros, as it should: no float sum of that many terms is trustworthy).
[[maybe_unused]] std::size_t saturating_product(std::initializer_list<std::size_t> factors) {
  std::size_t p = 1;
  for (const std::size_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) return std::numeric_limits<std::size_t>::max();
  return p;
}

}  // namespace

// [ssm_kernel]
Vector ssm_kernel(const DiscreteSSM& ssm, std::size_t n) {
  require_same_n("ssm_kernel", ssm);
  checked_allocation("ssm_kernel: the kernel n floats", {n, sizeof(float)});  // before allocating
  using ComplexDouble = std::complex<double>;
  Vector K = xt::zeros<float>({n});  // (n)
  // (N) Ā^l ∘ B̄, one multiplication per entry and tap. In double: each multiplication rounds, and in float the
  // errors of l of them add up (relative l·ε, 2e-4 at l = 4,096 when |Ā| ≈ 1); in double they stay below float's
  // rounding, and K_l rounds once, at the end.
  std::vector<ComplexDouble> power(ssm.B_bar.begin(), ssm.B_bar.end());
  for (std::size_t l = 0; l < n; ++l) {
    ComplexDouble sum = 0.0;
    for (std::size_t k = 0; k < power.size(); ++k) {
      sum += ComplexDouble(ssm.C[k]) * power[k];
      power[k] *= ComplexDouble(ssm.A_bar[k]);
    }
    K(l) = static_cast<float>(sum.real());
  }
  return K;
}
// [ssm_kernel]

// [ssm_recurrence]
Vector ssm_recurrence(const DiscreteSSM& ssm, const Vector& u) {
  require_same_n("ssm_recurrence", ssm);
  require_finite("ssm_recurrence", "u", u.data(), u.size());
  const std::size_t n = u.size(), N = ssm.A_bar.size();
  // |x_t| ≤ n·max|B̄|·max|u| (|Ā| ≤ 1) and |y_t| ≤ N·max|C|·that: the course's overflow policy (attn/checks.hpp)
  // bounds both, so the float state never meets an infinity (3e38 in B̄ made C·x inf − inf = NaN).
  double max_u = 0.0;
  for (const float v : u) max_u = std::max(max_u, static_cast<double>(std::fabs(v)));
  const double bound = static_cast<double>(n) * static_cast<double>(N) * max_abs(ssm.B_bar) * max_abs(ssm.C) * max_u;
  require(bound <= kMaxScoreBound,
          fmt::format("ssm_recurrence: n·N = {} × {} times max|B_bar| = {:.3g}, max|C| = {:.3g} and max|u| = {:.3g} "
                      "is {:.3g}, beyond {:.3g}: the state or y could overflow float. Scale B_bar, C or u down",
                      n, N, max_abs(ssm.B_bar), max_abs(ssm.C), max_u, bound, kMaxScoreBound));
  Vector y = xt::zeros<float>({n});  // (n)
  ComplexVector x(N);                // (N) the state: all the model remembers of u_0 … u_t
  for (std::size_t t = 0; t < n; ++t) {
    Complex sum = 0.0f;
    for (std::size_t k = 0; k < N; ++k) {
      x[k] = ssm.A_bar[k] * x[k] + ssm.B_bar[k] * u(t);
      sum += ssm.C[k] * x[k];
    }
    y(t) = sum.real();
  }
  return y;
}
// [ssm_recurrence]

// [convolution_direct]
Vector causal_convolution_direct(const Vector& K, const Vector& u) {
  require_finite("causal_convolution_direct", "K", K.data(), K.size());
  require_finite("causal_convolution_direct", "u", u.data(), u.size());
  const std::size_t n = u.size(), taps = std::min(K.size(), n);
  // (n) the sums in double: y_t adds up to n products, and a float sum errs by up to n·ε of their magnitudes
  // (2.4e-4 at n = 4,096). A product of two floats is exact in double, and n double additions err by n·2^-53:
  // y_t is then right to float's rounding. It costs about twice the float loop (half as many lanes).
  std::vector<double> sums(n, 0.0);
  // Tap by tap: y[j:] += K_j · u[:n−j]. The inner loop runs over contiguous memory and vectorises.
  for (std::size_t j = 0; j < taps; ++j) {
    const double k = K(j);
    double* out = sums.data() + j;
    const float* in = u.data();
    for (std::size_t t = 0; t + j < n; ++t) out[t] += k * static_cast<double>(in[t]);
  }
  Vector y = xt::zeros<float>({n});  // (n)
  for (std::size_t t = 0; t < n; ++t) y(t) = static_cast<float>(sums[t]);
  return y;
}
// [convolution_direct]

#if ATTN_HAVE_FFTW

namespace {

/// FFTW plans for one padded length L, with the buffers they were made for. Making a plan costs more than
/// running it, and FFTW's planner is not thread-safe: plans are made once per L, under a lock, and each
/// thread keeps its own (execution on a plan's own buffers is safe per thread).
struct FftPlan {
  std::size_t L;
  float* real;            // (L)
  fftwf_complex* freq_u;  // (L/2 + 1)
  fftwf_complex* freq_k;  // (L/2 + 1)
  fftwf_plan forward_u, forward_k, backward;

  explicit FftPlan(std::size_t length) : L(length) {
    const std::lock_guard<std::mutex> lock(planner_lock());
    real = fftwf_alloc_real(L);
    freq_u = fftwf_alloc_complex(L / 2 + 1);
    freq_k = fftwf_alloc_complex(L / 2 + 1);
    if (!real || !freq_u || !freq_k) throw std::bad_alloc();
    const int size = static_cast<int>(L);
    // FFTW_ESTIMATE: a plan from heuristics, in microseconds, and the same plan on every run.
    forward_u = fftwf_plan_dft_r2c_1d(size, real, freq_u, FFTW_ESTIMATE);
    forward_k = fftwf_plan_dft_r2c_1d(size, real, freq_k, FFTW_ESTIMATE);
    backward = fftwf_plan_dft_c2r_1d(size, freq_u, real, FFTW_ESTIMATE);
  }
  ~FftPlan() {
    const std::lock_guard<std::mutex> lock(planner_lock());
    fftwf_destroy_plan(forward_u);
    fftwf_destroy_plan(forward_k);
    fftwf_destroy_plan(backward);
    fftwf_free(real);
    fftwf_free(freq_u);
    fftwf_free(freq_k);
  }
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  static std::mutex& planner_lock() {
    static std::mutex m;
    return m;
  }
};

FftPlan& plan_for(std::size_t L) {
  thread_local std::map<std::size_t, std::unique_ptr<FftPlan>> plans;
  auto& slot = plans[L];
  if (!slot) slot = std::make_unique<FftPlan>(L);
  return *slot;
}

/// The smallest power of two ≥ \p n: FFTW is fastest there, and doubling at most doubles the work.
std::size_t next_power_of_two(std::size_t n) {
  std::size_t L = 1;
  while (L < n) L *= 2;
  return L;
}

}  // namespace

bool fft_available() { return true; }

// [convolution_fft]
Vector causal_convolution_fft(const Vector& K, const Vector& u) {
  require_finite("causal_convolution_fft", "K", K.data(), K.size());
  require_finite("causal_convolution_fft", "u", u.data(), u.size());
  const std::size_t n = u.size(), taps = std::min(K.size(), n);
  Vector y = xt::zeros<float>({n});  // (n)
  if (n == 0 || taps == 0) return y;
  // Cyclic convolution of length L equals the linear one when L ≥ n + taps − 1: nothing wraps around.
  const std::size_t padded = next_power_of_two(n + taps - 1);
  require(padded <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
          fmt::format("causal_convolution_fft: n = {} needs a transform of {} points; FFTW's plans take at most {}", n,
                      padded, std::numeric_limits<int>::max()));
  // Every bin of û·K̂ is at most n·max|u| · taps·max|K|, and the inverse transform sums L of them: bounded by the
  // course's overflow policy (attn/checks.hpp), no float of the transforms meets an infinity (3e38 made NaN).
  require_bounded_products("causal_convolution_fft", "K", K.data(), K.size(), "u", u.data(), u.size(),
                           saturating_product({padded, n, taps}));
  FftPlan& p = plan_for(padded);
  const std::size_t L = p.L, bins = L / 2 + 1;
  std::fill(p.real, p.real + L, 0.0f);
  std::copy(u.data(), u.data() + n, p.real);
  fftwf_execute(p.forward_u);  // û = FFT(u, zero-padded)
  std::fill(p.real, p.real + L, 0.0f);
  std::copy(K.data(), K.data() + taps, p.real);
  fftwf_execute(p.forward_k);  // K̂ = FFT(K, zero-padded)
  // Convolution in time is multiplication in frequency; FFTW's inverse is unnormalised, hence the 1/L.
  const float scale = 1.0f / static_cast<float>(L);
  for (std::size_t b = 0; b < bins; ++b) {
    const float re = p.freq_u[b][0] * p.freq_k[b][0] - p.freq_u[b][1] * p.freq_k[b][1];
    const float im = p.freq_u[b][0] * p.freq_k[b][1] + p.freq_u[b][1] * p.freq_k[b][0];
    p.freq_u[b][0] = re * scale;
    p.freq_u[b][1] = im * scale;
  }
  fftwf_execute(p.backward);  // overwrites freq_u (c2r transforms destroy their input): nothing reads it again
  std::copy(p.real, p.real + n, y.data());
  return y;
}
// [convolution_fft]

#else

bool fft_available() { return false; }

Vector causal_convolution_fft(const Vector&, const Vector&) {
  throw std::runtime_error(
      "causal_convolution_fft: the course was built without FFTW3; install Debian's libfftw3-dev (./course setup) "
      "and reconfigure");
}

#endif

// [s4d_lin]
/// S4D-Lin's initialisation (Gu et al., 2022): A_k = −1/2 + iπk, B_k = 1; C drawn at random. The real part
/// −1/2 makes every mode forget at the same rate, the imaginary part πk makes mode k turn k half-turns per
/// unit of time: a bank of damped oscillators.
attn::DiagonalSSM s4d_lin(std::size_t N, attn::Rng& rng) {
  attn::DiagonalSSM ssm;
  const Matrix c = rng.normal(N, 2, 0.0f, 0.5f);  // (N, 2) real and imaginary parts of C
  for (std::size_t k = 0; k < N; ++k) {
    ssm.A.emplace_back(-0.5f, static_cast<float>(M_PI * static_cast<double>(k)));
    ssm.B.emplace_back(1.0f, 0.0f);
    ssm.C.emplace_back(c(k, 0), c(k, 1));
  }
  return ssm;
}
// [s4d_lin]

Vector random_vector(Rng& rng, std::size_t n) { return xt::flatten(Matrix(rng.normal(n, 1))); }

}  // namespace attn::ch14
