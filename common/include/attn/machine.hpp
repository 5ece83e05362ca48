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

/// The machine's hardware threads (at least 1): OpenBLAS's default thread count, and the threads the chapters'
/// own kernels run on in their benchmarks (the ceilings are then measured with as many).
int hardware_threads();

/// What runs the course's matrix products.
struct BlasInfo {
  std::string library;      ///< "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." (openblas_get_config())
  std::string kernel;       ///< the kernel set in use: "SkylakeX", "Haswell", "Prescott"... (openblas_get_corename())
  std::string best_kernel;  ///< the fastest kernel set this CPU supports, from its feature flags ("" if none is better
                            ///< than generic)
  std::string chosen_by;    ///< who set the kernel: "OpenBLAS's pick by CPU model", "picked by the course from the
                            ///< CPU flags" or "set by you: OPENBLAS_CORETYPE"
  int threads = 0;          ///< OpenBLAS's thread count now (openblas_get_num_threads())
};

/// The BLAS this process runs, as above.
BlasInfo blas_info();

/// The CPU's model name from /proc/cpuinfo, short enough for a line of output: "Intel(R) Xeon(R) Platinum
/// 8480+ Processor" → "Intel Xeon Platinum 8480+" (see short_cpu_name()). ATTN_FAKE_CPUINFO=FILE reads FILE
/// instead of /proc/cpuinfo, here and in cpu_flags(): tests make a program believe it runs on another CPU.
std::string cpu_name();

/// A model name without trademark signs, "CPU"/"Processor" and the clock ("@ 2.10GHz"), at most 40
/// columns (longer names end in "..."): every line that names the machine fits the course's 100 columns.
std::string short_cpu_name(const std::string& model_name);

/// cpu_name() and the hardware threads: "AMD EPYC 9R14 96-Core (2 hardware threads)".
std::string cpu_model();

/// The widest vector instruction set the CPU and the OS support: "AVX-512", "AVX2+FMA", "SVE", "NEON" or
/// "portable" (vector_isa_for(cpu_flags())), read from the CPU's flags. The one the course's kernels run is
/// attn::vector_path() (attn/vector.hpp), which ATTN_VECTOR_ISA can narrow: the machine lines print that one.
std::string vector_isa();

/// The rule vector_isa() applies, on its own: x86-64's flags (AVX-512 F, BW, DQ, VL and CD; AVX2 and FMA) or
/// arm64's features ("sve"; "asimd", arm64's name for NEON).
std::string vector_isa_for(const std::set<std::string>& cpu_flags);

/// An arm64 CPU's name from its /proc/cpuinfo "CPU implementer" and "CPU part" values ("0x41", "0xd0c" →
/// "Arm Neoverse-N1"; arm64 Linux writes no "model name"): the designer and, for Arm's own cores, the core;
/// unknown ones by their numbers ("Arm part 0xd99"); "" when the implementer is not a number.
std::string arm_cpu_name(const std::string& implementer, const std::string& part);

/// The OpenBLAS kernel the course would pick for this CPU when OpenBLAS's own choice is a weaker one:
/// "Cooperlake" (AVX-512 with BF16) or "SkylakeX" (AVX-512) or "Haswell" (AVX2 and FMA); "" when OpenBLAS's
/// choice already uses the widest instructions the CPU has, or when the user set OPENBLAS_CORETYPE.
std::string better_blas_kernel();

/// The rule better_blas_kernel() applies, on its own: given the CPU's feature flags (words of the "flags"
/// line of /proc/cpuinfo) and the kernel OpenBLAS picked, the better kernel or "". AVX-512 (F, BW, DQ, VL,
/// CD) → "Cooperlake" with avx512_bf16, else "SkylakeX"; AVX2 and FMA → "Haswell"; only when OpenBLAS's
/// pick uses narrower instructions. Decided from features, never from a table of CPU models.
std::string better_blas_kernel_for(const std::set<std::string>& cpu_flags, const std::string& openblas_kernel);

/// The words of the "flags" line of /proc/cpuinfo ("avx2", "avx512f", ...; arm64: its "Features" line, "asimd",
/// "sve", ...): what the CPU has and the operating system lets programs use. Empty when unreadable. An arm64
/// build asks the kernel (the auxiliary vector's HWCAP bits) instead, unless ATTN_FAKE_CPUINFO is set: under
/// emulation /proc/cpuinfo is the host's.
std::set<std::string> cpu_flags();

/// Called first in every course program: when better_blas_kernel() names a kernel, sets OPENBLAS_CORETYPE
/// to it and restarts the program (OpenBLAS reads the variable once, when it is loaded) with the command
/// line it was started with, read from /proc/self/cmdline (whatever main() did to argv); otherwise returns.
/// If the restart fails it prints a note saying what to set, and returns. ATTN_BLAS_NO_REEXEC=1 turns the
/// restart off. For tests on any machine: ATTN_FAKE_OPENBLAS_KERNEL=Prescott makes the course believe
/// OpenBLAS picked that kernel, and ATTN_TRACE_BLAS_RESTART=1 makes the restarted program say on stderr
/// that it was restarted, with its arguments.
void use_best_blas_kernel();

/// One line naming the CPU, the vector path its kernels run (attn::vector_path_description()), the BLAS library,
/// its kernel (and who chose it) and the thread counts, e.g.
/// "AMD EPYC (2 hardware threads), AVX-512; OpenBLAS 0.3.21, kernel Cooperlake (OpenBLAS's pick by CPU
/// model), 2 BLAS threads". Each side of the "; " fits 92 columns with any CPU (recordings put them on
/// lines of their own).
std::string machine_line();

/// Adds the CPU, the BLAS library, its kernel and the thread counts to Google Benchmark's context, so
/// every benchmark run prints them in its header.
void add_machine_to_benchmark_context();

}  // namespace attn
