/// \file
/// ATTN_HOST_DEVICE: one function body for the kernels and for the host's tests (tiles.hpp's index
/// arithmetic, random_inputs.hpp's generator), so what a test checks without a GPU is what runs on it.
#pragma once

#ifdef __CUDACC__
#define ATTN_HOST_DEVICE __host__ __device__
#else
/// Marks a function as callable from both sides: it runs in the kernels and in the host's tests (no GPU
/// needed to check it). nvcc reads it as `__host__ __device__`; a C++ compiler as nothing.
#define ATTN_HOST_DEVICE
#endif
