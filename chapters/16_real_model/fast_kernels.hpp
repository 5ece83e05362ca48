/// \file
/// The vector kernels of chapter 16's fast forward (chapter code, called by fast_minilm.cpp). Each runs on the path
/// of the course's vector layer (attn/vector.hpp: attn::vector_path(), the widest instruction set the CPU has or the
/// one ATTN_VECTOR_ISA forces):
///   - the product on panel-packed weights (packed_gemm.cpp), written with intrinsics because its register tile is
///     the lesson: a copy for AVX-512, for AVX2+FMA and for NEON; the portable path
///     has none, and the fast forward then keeps its weights transposed for OpenBLAS;
///   - GELU and one head's attention (vector_kernels.cpp), written once on Highway, which compiles them for every
///     path, the portable one included.
#pragma once

#include <cstddef>

namespace attn::ch16::detail {

/// Whether the path in use has a copy of the packed product (every path but portable, on x86-64 built with GCC or
/// Clang and on arm64).
bool has_packed_gemm();

/// Y (n, out) = X (n, in) · W + b, W laid out by pack_linear() in panels of 16 output columns, (out/16, in, 16):
/// the register-blocked product of packed_gemm.cpp, in the copy of the path in use. out must be a multiple of 16.
/// \throws std::logic_error naming the path when it has no copy (has_packed_gemm() is false).
void packed_gemm(const float* X, std::size_t n, std::size_t in, const float* panels, std::size_t out, const float* bias,
                 float* Y);

/// GELU in place, x·½·(1 + erf(x/√2)) on y (n), with erf by the formula of PyTorch's vectorised erf (within
/// 1.5·10⁻⁷ of erf): vector_kernels.cpp's, on the path in use.
void gelu_vector(float* y, std::size_t n);

/// Whether attend_head_vector() takes heads of width \p d_k on the path in use: d_k a whole number of its vectors,
/// and 16 too (the keys are laid out in rows of a multiple of 16).
bool attention_vector_fits(std::size_t d_k);

/// One head's exact attention, softmax(Q Kᵀ/√d_k) V, read from the fused rows qkv (n, 3d) (Q, K, V side by side)
/// and written into the head's d_k columns of out (n, d); keys_t (d_k · n16) and scores (n16) are scratch, with n16
/// = n rounded up to 16. vector_kernels.cpp's, on the path in use; attention_vector_fits(d_k) must hold.
void attend_head_vector(const float* qkv, std::size_t n, std::size_t d, std::size_t d_k, std::size_t head, float* out,
                        float* keys_t, float* scores);

}  // namespace attn::ch16::detail
