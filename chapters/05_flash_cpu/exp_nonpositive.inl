// Chapter 05's exponential for scores minus their max, on a vector of any instruction set (attn/vector.hpp):
// included after <hwy/highway.h> by every kernel file that needs it (row_ops.cpp's exp_shift_sum, chapter 15's
// csr.cpp), and compiled again for each instruction set with the file. Highway's guard for such a header: it is
// read once per instruction set, not once per file.
#if defined(ATTN_CH05_EXP_NONPOSITIVE_INL) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTN_CH05_EXP_NONPOSITIVE_INL
#undef ATTN_CH05_EXP_NONPOSITIVE_INL
#else
#define ATTN_CH05_EXP_NONPOSITIVE_INL
#endif

HWY_BEFORE_NAMESPACE();
namespace attn::ch05::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// [vector_exp]
// e^x for x ≤ 0 (scores minus their running max), lane by lane, Cephes' expf: x = k·ln2 + r with |r| ≤ ln2/2,
// e^r by a degree-6 polynomial, 2^k by writing the exponent bits. Below −87, e^x is under float's smallest
// normal number (1.2e-38) and the result is 0: nothing beside ℓ ≥ 1, and exactly 0 for a masked −inf. Not the
// clamped e^-87 ≈ 1.6e-38: a row of such weights times V sums subnormal numbers, which Intel's cores compute
// through a microcode assist, tens of times slower (chapter 11's ALiBi, whose distant keys all land there, ran at
// a quarter of the speed). Not Highway's own hwy/contrib/math Exp: accurate over all floats, it pays for that
// range in every lane, and the row pass ran markedly slower on it (measured when the layer was chosen; the
// commit that brought this file gives the numbers).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonpositive(D d, V x) {
  const hn::RebindToUnsigned<D> du;
  // k = round(x / ln2) by the 1.5·2^23 trick: adding it leaves round(x / ln2) in the low mantissa bits, read as
  // an integer for 2^k's exponent below. Unsigned arithmetic on those bits is defined for any x, so x needs no
  // clamp: a lane below −87 gets a meaningless 2^k and is set to 0 at the end. NaN stays NaN (r carries it, and
  // "x < −87" is false for it).
  const V shifted = hn::MulAdd(x, hn::Set(d, 1.44269504f), hn::Set(d, 12582912.0f));
  const V k = hn::Sub(shifted, hn::Set(d, 12582912.0f));
  V r = hn::NegMulAdd(k, hn::Set(d, 0.693359375f), x);  // r = x − k·ln2, ln2 split in two for exactness
  r = hn::MulAdd(k, hn::Set(d, 2.12194440e-4f), r);
  V p = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::Add(hn::MulAdd(hn::Mul(p, r), r, r), hn::Set(d, 1.0f));  // p·r·r + r + 1
  // 2^k: k's integer in the exponent field (0x4B400000 is 1.5·2^23's bits, 127 the exponent's bias).
  const auto bits = hn::Add(hn::BitCast(du, shifted), hn::Set(du, 127u - 0x4B400000u));
  const V two_k = hn::BitCast(d, hn::ShiftLeft<23>(bits));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.0f)), hn::Mul(p, two_k));
}
// [vector_exp]

// min(x, 0) lane by lane, a NaN kept: a score above the max counts as the max itself (e^0 = 1), and a NaN (an
// overflowed score, inf − inf) reaches the result for the caller's check. Not hn::Min, which keeps or drops a NaN
// depending on the instruction set (x86's min returns its second operand, Highway's portable one the first).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V MinZero(D d, V x) {
  return hn::IfThenZeroElse(hn::Gt(x, hn::Zero(d)), x);
}

}  // namespace attn::ch05::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // the per-instruction-set guard
