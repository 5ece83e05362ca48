// The machine a measurement ran on, and the choice of OpenBLAS kernel (see attn/machine.hpp).
#include "attn/machine.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

// OpenBLAS's own extensions (the build insists on OpenBLAS: see the top-level CMakeLists.txt).
extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
int openblas_get_num_threads(void);
}

namespace attn {
namespace {

constexpr const char* kCoreType = "OPENBLAS_CORETYPE";
// Set beside OPENBLAS_CORETYPE when the course chose the kernel, so the restarted program can say so.
constexpr const char* kChosenByCourse = "ATTN_BLAS_KERNEL_CHOSEN_BY_COURSE";

}  // namespace

std::set<std::string> cpu_flags() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

namespace {

/// 2: AVX-512 (the subsets OpenBLAS's SkylakeX kernels use), 1: AVX2 and FMA, 0: neither.
int isa_level(const std::set<std::string>& f) {
  const auto has = [&](const char* flag) { return f.count(flag) > 0; };
  if (has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl") && has("avx512cd")) return 2;
  if (has("avx2") && has("fma")) return 1;
  return 0;
}

/// The same levels for OpenBLAS's kernel sets: what instructions the named kernels are written with.
int kernel_level(const std::string& kernel) {
  static const std::set<std::string> avx512{"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const std::set<std::string> avx2{"Haswell", "Zen"};
  return avx512.count(kernel) ? 2 : avx2.count(kernel) ? 1 : 0;
}

std::string getenv_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

}  // namespace

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return fmt::format("{} ({} hardware threads)", model, std::thread::hardware_concurrency());
}

std::string vector_isa() {
  static const char* names[] = {"baseline", "AVX2+FMA", "AVX-512"};
  return names[isa_level(cpu_flags())];
}

std::string better_blas_kernel_for(const std::set<std::string>& cpu_flags, const std::string& openblas_kernel) {
  const int cpu = isa_level(cpu_flags);
  if (cpu <= kernel_level(openblas_kernel)) return "";
  if (cpu == 2) return cpu_flags.count("avx512_bf16") ? "Cooperlake" : "SkylakeX";
  return "Haswell";
}

std::string better_blas_kernel() {
  if (std::getenv(kCoreType) != nullptr) return "";
  return better_blas_kernel_for(cpu_flags(), openblas_get_corename());
}

void use_best_blas_kernel(char** argv) {
  const std::string kernel = better_blas_kernel();
  if (kernel.empty()) return;
  std::string why = "ATTN_BLAS_NO_REEXEC=1";
  if (getenv_or("ATTN_BLAS_NO_REEXEC", "") != "1") {
    setenv(kCoreType, kernel.c_str(), 1);
    setenv(kChosenByCourse, "1", 1);
    execv("/proc/self/exe", argv);  // returns only when it failed
    why = fmt::format("restarting failed: {}", std::strerror(errno));
    unsetenv(kCoreType);  // this process still runs the old kernel: say so in its reports
    unsetenv(kChosenByCourse);
  }
  fmt::print(stderr, "note: OpenBLAS runs its slower '{}' kernels on this {} CPU; run with OPENBLAS_CORETYPE={} ({})\n",
             openblas_get_corename(), vector_isa(), kernel, why);
}

BlasInfo blas_info() {
  BlasInfo info;
  info.library = openblas_get_config();
  info.kernel = openblas_get_corename();
  info.threads = openblas_get_num_threads();
  const auto flags = cpu_flags();
  const int cpu = isa_level(flags);
  info.best_kernel = cpu == 2 ? (flags.count("avx512_bf16") ? "Cooperlake" : "SkylakeX") : cpu == 1 ? "Haswell" : "";
  const char* set = std::getenv(kCoreType);
  info.chosen_by = set == nullptr ? "chosen by OpenBLAS from the CPU model"
                   : getenv_or(kChosenByCourse, "") == "1"
                       ? fmt::format("chosen by the course from the CPU flags: {}={}", kCoreType, set)
                       : fmt::format("set by the user: {}={}", kCoreType, set);
  return info;
}

std::string machine_line() {
  const BlasInfo blas = blas_info();
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..." → "OpenBLAS 0.3.21": the build options are noise here.
  std::istringstream words(blas.library);
  std::string name, version;
  words >> name >> version;
  return fmt::format("{}, {}; {} {}, kernel {} ({}), {} BLAS threads", cpu_model(), vector_isa(), name, version,
                     blas.kernel, blas.chosen_by, blas.threads);
}

void add_machine_to_benchmark_context() {
  const BlasInfo blas = blas_info();
  benchmark::AddCustomContext("cpu", fmt::format("{}, {}", cpu_model(), vector_isa()));
  benchmark::AddCustomContext("blas", blas.library);
  benchmark::AddCustomContext("blas_kernel", fmt::format("{} ({})", blas.kernel, blas.chosen_by));
  benchmark::AddCustomContext("blas_threads",
                              fmt::format("{} (each benchmark sets its own; see its name)", blas.threads));
}

}  // namespace attn
