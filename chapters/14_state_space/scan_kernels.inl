// Chapter 14's selective-scan kernels (see scan_kernels.hpp), written once for any instruction set `Isa`:
// scan_kernels.cpp defines, in Highway's namespace of each instruction set, a struct Isa with a vector type V of W
// floats and the operations below, and includes this file there. No include guard on purpose: it is read once per
// instruction set.
// Book page: book/14_state_space.md, "The selective scan".
//
// Layout: the state and Aᵀ are (N, wp), channels contiguous, so every loop over channels is whole vectors. A token
// costs N·w exponentials (the decays exp(Δ_c·A(c, k)): no two are the same) and N·w updates of the state; at
// d_state = 16 the exponentials are most of the time. They are computed in one call over the whole (N, wp) block,
// then used: an exponential's polynomial needs many registers, so nothing else is kept live around it.

/// Lanes [w, wp) of a staged row: a unit step (Δ = 1) with no input (x = 0), so that the padding's state stays 0
/// and its decay reaches the fix-up's underflow like any channel's.
inline void pad_lanes(float* delta, float* x, std::size_t w, std::size_t wp) {
  for (std::size_t c = w; c < wp; ++c) {
    delta[c] = 1.0f;
    x[c] = 0.0f;
  }
}

/// Copies w floats (the slice's part of a row) to a padded row.
inline void stage(const float* from, std::size_t w, float* to) {
  for (std::size_t c = 0; c < w; ++c) to[c] = from[c];
}

/// E (N, wp) ← exp(A(c, k) · s(c)) for every state entry k and lane c: the decay of a step (s = Δ) or of many
/// (s = ΣΔ). A loop of its own, apart from the update that uses E: the exponential's polynomial needs many
/// registers, and here nothing else is live. An exponential that works on whole blocks (Isa::kExpOnBlocks) gets
/// the products first, then one call.
template <class I = Isa>  // a template, so that only the branch for I is compiled
void decays(const float* AT, const float* s, std::size_t N, std::size_t wp, float* E) {
  for (std::size_t k = 0; k < N; ++k)
    for (std::size_t c = 0; c < wp; c += I::W) {
      const typename I::V product = I::mul(I::load(AT + k * wp + c), I::load(s + c));
      if constexpr (I::kExpOnBlocks)
        I::store(E + k * wp + c, product);
      else
        I::store(E + k * wp + c, I::exp(product));
    }
  if constexpr (I::kExpOnBlocks) I::exp_block(E, N * wp);
}

/// to[0, n) ← e^from, n a multiple of W (ScanKernels::exp: the exponential alone, for the benchmark).
template <class I = Isa>
void exp_to(const float* from, float* to, std::size_t n) {
  if constexpr (I::kExpOnBlocks) {
    for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
    I::exp_block(to, n);
  } else {
    for (std::size_t i = 0; i < n; i += I::W) I::store(to + i, I::exp(I::load(from + i)));
  }
}

/// true when every lane of v is 0 (all the values folded into a "finiteness" sum by add(sum, 0·v) were finite).
inline bool all_zero(Isa::V v) {
  float lane[Isa::W];
  Isa::store(lane, v);
  bool zero = true;
  for (std::size_t i = 0; i < Isa::W; ++i) zero = zero && lane[i] == 0.0f;
  return zero;
}

// [scan_kernel]
bool scan(const ScanSlice& s, const float* AT, float* hT, float* sum_delta, float* work) {
  using V = Isa::V;
  const std::size_t N = s.N, w = s.w, wp = s.wp;
  float* E = work;                // (N, wp) the decays of one token
  float* delta_row = E + N * wp;  // (wp) the token's Δ, x and y, padded (only when w is not whole vectors)
  float* x_row = delta_row + wp;
  float* y_row = x_row + wp;
  const bool ragged = w != wp;
  pad_lanes(delta_row, x_row, w, wp);
  const V zero = Isa::broadcast(0.0f);
  V finite = zero, smallest = Isa::broadcast(1.0f);  // Σ 0·v over the x and Δ read (0 unless one is NaN or ±inf), min Δ
  float finite_BC = 0.0f;                            // the same for B and C
  for (std::size_t t = s.t0; t < s.t1; ++t) {
    const float* delta = s.delta + t * s.d + s.c0;  // (w) this token's row, or its padded copy
    const float* x = s.x + t * s.d + s.c0;
    float* y = s.y + (t - s.t0) * s.ld_y;
    if (ragged) {
      stage(delta, w, delta_row);
      stage(x, w, x_row);
      delta = delta_row;
      x = x_row;
      y = y_row;
    }
    const float* B = s.B + t * N;  // (N)
    const float* C = s.C + t * N;  // (N)
    for (std::size_t k = 0; k < N; ++k) finite_BC += 0.0f * B[k] + 0.0f * C[k];
    decays(AT, delta, N, wp, E);
    for (std::size_t c = 0; c < wp; c += Isa::W) {  // one vector of channels, down the N state entries
      const V step = Isa::load(delta + c), input = Isa::load(x + c);
      finite = Isa::add(finite, Isa::add(Isa::mul(step, zero), Isa::mul(input, zero)));
      smallest = Isa::min(smallest, step);
      const V dx = Isa::mul(step, input);  // Δ·x: Mamba's first-order B̄·x, before B
      // State entry k: h_k ← E_k ∘ h_k + B_k·Δx, and C_k h_k added to the output.
      const auto update = [&](std::size_t k, V acc) {
        float* h = hT + k * wp + c;
        const V h_new = Isa::fma(Isa::load(E + k * wp + c), Isa::load(h), Isa::mul(Isa::broadcast(B[k]), dx));
        Isa::store(h, h_new);
        return Isa::fma(Isa::broadcast(C[k]), h_new, acc);
      };
      // y = Σ_k C_k h_k in four partial sums: one sum would chain N multiply-adds, each waiting for the last.
      V acc0 = zero, acc1 = zero, acc2 = zero, acc3 = zero;
      std::size_t k = 0;
      for (; k + 4 <= N; k += 4) {
        acc0 = update(k, acc0);
        acc1 = update(k + 1, acc1);
        acc2 = update(k + 2, acc2);
        acc3 = update(k + 3, acc3);
      }
      for (; k < N; ++k) acc0 = update(k, acc0);
      Isa::store(y + c, Isa::add(Isa::add(acc0, acc1), Isa::add(acc2, acc3)));
      Isa::store(sum_delta + c, Isa::add(Isa::load(sum_delta + c), step));
    }
    if (ragged) stage(y_row, w, s.y + (t - s.t0) * s.ld_y);
  }
  float smallest_lane[Isa::W];
  Isa::store(smallest_lane, smallest);
  bool positive = true;
  for (std::size_t i = 0; i < Isa::W; ++i) positive = positive && smallest_lane[i] > 0.0f;
  return all_zero(finite) && finite_BC == 0.0f && positive;
}
// [scan_kernel]

// [correct_kernel]
std::size_t correct(const ScanSlice& s, const float* AT, const float* H, float* work) {
  using V = Isa::V;
  const std::size_t N = s.N, w = s.w, wp = s.wp;
  float* E = work;                // (N, wp) the decays since the chunk began
  float* delta_row = E + N * wp;  // (wp) the token's Δ and y, padded (only when w is not whole vectors)
  float* x_row = delta_row + wp;  // (wp) unused but padded, as the scan's
  float* y_row = x_row + wp;
  float* sum = y_row + wp;    // (wp) S = Σ Δ since the chunk began
  float* slowest = sum + wp;  // (wp) max_k A(c, k): the slowest decay of each channel
  const V zero = Isa::broadcast(0.0f);
  const V underflow = Isa::broadcast(-104.0f);  // e^−104 < 2^−150: rounds to 0 in float32
  const bool ragged = w != wp;
  pad_lanes(delta_row, x_row, w, wp);
  for (std::size_t c = 0; c < wp; c += Isa::W) {
    V a = Isa::load(AT + c);
    for (std::size_t k = 1; k < N; ++k) a = Isa::max(a, Isa::load(AT + k * wp + c));
    Isa::store(slowest + c, a);
    Isa::store(sum + c, Isa::broadcast(0.0f));
  }
  for (std::size_t t = s.t0; t < s.t1; ++t) {
    const float* delta = s.delta + t * s.d + s.c0;
    float* y = s.y + (t - s.t0) * s.ld_y;
    if (ragged) {
      stage(delta, w, delta_row);
      stage(y, w, y_row);
      delta = delta_row;
      y = y_row;
    }
    bool forgotten = true;  // has every channel's carry decayed below float32's smallest number?
    for (std::size_t c = 0; c < wp; c += Isa::W) {
      const V S = Isa::add(Isa::load(sum + c), Isa::load(delta + c));
      Isa::store(sum + c, S);
      forgotten = forgotten && Isa::all_less(Isa::mul(Isa::load(slowest + c), S), underflow);
    }
    if (forgotten) return t - s.t0;
    decays(AT, sum, N, wp, E);
    const float* C = s.C + t * N;  // (N)
    for (std::size_t c = 0; c < wp; c += Isa::W) {
      const auto carried = [&](std::size_t k, V acc) {  // C_k · (e^{A_k S} ∘ H_k), added to acc
        return Isa::fma(Isa::broadcast(C[k]), Isa::mul(Isa::load(E + k * wp + c), Isa::load(H + k * wp + c)), acc);
      };
      V acc0 = Isa::load(y + c), acc1 = zero, acc2 = zero, acc3 = zero;  // four partial sums, as in scan()
      std::size_t k = 0;
      for (; k + 4 <= N; k += 4) {
        acc0 = carried(k, acc0);
        acc1 = carried(k + 1, acc1);
        acc2 = carried(k + 2, acc2);
        acc3 = carried(k + 3, acc3);
      }
      for (; k < N; ++k) acc0 = carried(k, acc0);
      Isa::store(y + c, Isa::add(Isa::add(acc0, acc1), Isa::add(acc2, acc3)));
    }
    if (ragged) stage(y_row, w, s.y + (t - s.t0) * s.ld_y);
  }
  return s.t1 - s.t0;
}
// [correct_kernel]
