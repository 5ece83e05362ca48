/// \file
/// The machine a measurement ran on: the CPU, the BLAS library and the kernel it really runs, the thread
/// count; and the choice of OpenBLAS kernel. OpenBLAS picks its kernels by CPU model; a CPU newer than
/// the library (Debian 12 ships 0.3.21) gets a generic fallback ("Prescott") that runs every product 4–6×
/// slower, silently. The course decides from the CPU's feature flags instead, and every course program
/// runs with the best kernel the CPU supports unless the user has set OPENBLAS_CORETYPE.
#pragma once

#include <set>
#include <string>

namespace attn {

/// What runs the course's matrix products.
struct BlasInfo {
  std::string library;      ///< "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." (openblas_get_config())
  std::string kernel;       ///< the kernel set in use: "SkylakeX", "Haswell", "Prescott"... (openblas_get_corename())
  std::string best_kernel;  ///< the fastest kernel set this CPU supports, from its feature flags ("" if none is better
                            ///< than generic)
  std::string chosen_by;  ///< who set the kernel: "OpenBLAS (by CPU model)", "the course (OPENBLAS_CORETYPE=…)", "you
                          ///< (OPENBLAS_CORETYPE=…)"
  int threads = 0;        ///< OpenBLAS's thread count now (openblas_get_num_threads())
};

/// The BLAS this process runs, as above.
BlasInfo blas_info();

/// The CPU's name ("AMD EPYC", "Intel(R) Xeon(R) Platinum ...") from /proc/cpuinfo, and its hardware threads.
std::string cpu_model();

/// The widest vector instruction set the CPU and the OS support: "AVX-512", "AVX2+FMA" or "baseline".
std::string vector_isa();

/// The OpenBLAS kernel the course would pick for this CPU when OpenBLAS's own choice is a weaker one:
/// "Cooperlake" (AVX-512 with BF16) or "SkylakeX" (AVX-512) or "Haswell" (AVX2 and FMA); "" when OpenBLAS's
/// choice already uses the widest instructions the CPU has, or when the user set OPENBLAS_CORETYPE.
std::string better_blas_kernel();

/// The rule better_blas_kernel() applies, on its own: given the CPU's feature flags (words of the "flags"
/// line of /proc/cpuinfo) and the kernel OpenBLAS picked, the better kernel or "". AVX-512 (F, BW, DQ, VL,
/// CD) → "Cooperlake" with avx512_bf16, else "SkylakeX"; AVX2 and FMA → "Haswell"; only when OpenBLAS's
/// pick uses narrower instructions. Decided from features, never from a table of CPU models.
std::string better_blas_kernel_for(const std::set<std::string>& cpu_flags, const std::string& openblas_kernel);

/// The words of the "flags" line of /proc/cpuinfo ("avx2", "avx512f", ...): what the CPU has and the
/// operating system lets programs use. Empty when unreadable.
std::set<std::string> cpu_flags();

/// Called first in every course program: when better_blas_kernel() names a kernel, sets OPENBLAS_CORETYPE
/// to it and restarts the program (OpenBLAS reads the variable once, when it is loaded); otherwise returns.
/// If the restart fails it prints one line saying what to set, and returns. ATTN_BLAS_NO_REEXEC=1 turns
/// the restart off.
void use_best_blas_kernel(char** argv);

/// One line naming the CPU, the BLAS library, its kernel (and who chose it) and the thread counts, e.g.
/// "AMD EPYC (2 hardware threads, AVX-512); OpenBLAS 0.3.21, kernel Cooperlake (chosen by OpenBLAS), 2 BLAS threads".
std::string machine_line();

/// Adds the CPU, the BLAS library, its kernel and the thread counts to Google Benchmark's context, so
/// every benchmark run prints them in its header.
void add_machine_to_benchmark_context();

}  // namespace attn
