// The machine a measurement ran on, and the choice of OpenBLAS kernel (see attn/machine.hpp).
#include "attn/machine.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "attn/print.hpp"

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
// Set only across the restart itself, so the restarted process knows it is one (and can report it).
constexpr const char* kRestarted = "ATTN_BLAS_RESTARTED";

std::string getenv_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

/// /proc/cpuinfo, or the file ATTN_FAKE_CPUINFO names: tests make a program believe it runs on another
/// CPU (a long model name, other flags) without that CPU.
std::string cpuinfo_path() { return getenv_or("ATTN_FAKE_CPUINFO", "/proc/cpuinfo"); }

/// The kernel OpenBLAS picked, or the one ATTN_FAKE_OPENBLAS_KERNEL names (a test's way to take the restart
/// path on a CPU whose OpenBLAS already picks its best kernel).
std::string openblas_pick() { return getenv_or("ATTN_FAKE_OPENBLAS_KERNEL", openblas_get_corename()); }

/// This process's own command line, read back from /proc/self/cmdline: the restart must not depend on an
/// argv that main() may have edited (chapter 07 drops its own bench flags) or not terminated with nullptr.
std::vector<std::string> own_command_line() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  for (std::string word; std::getline(file, word, '\0');) words.push_back(word);
  return words;
}

}  // namespace

std::set<std::string> cpu_flags() {
  std::ifstream cpuinfo(cpuinfo_path());
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

}  // namespace

std::string short_cpu_name(const std::string& model_name) {
  // Trademark signs and filler words say nothing about the machine; they only make lines wrap.
  static const std::regex noise(R"(\((R|r|TM|tm)\)|\b(CPU|Processor|processor)\b|@.*$)");
  std::string name = std::regex_replace(model_name, noise, " ");
  std::istringstream words(name);
  name.clear();
  for (std::string w; words >> w;) name += (name.empty() || w[0] == ',' ? "" : " ") + w;
  if (name.empty()) return "unknown CPU";
  constexpr std::size_t kMaxColumns = 40;  // the machine lines stay inside 100 columns with any CPU
  if (name.size() > kMaxColumns) {
    name.resize(kMaxColumns - 3);
    // A cut UTF-8 character goes whole: its continuation bytes (10xxxxxx), then its first byte (11xxxxxx).
    const auto byte = [&] { return static_cast<unsigned char>(name.back()); };
    while (!name.empty() && (byte() & 0xC0) == 0x80) name.pop_back();
    if (!name.empty() && (byte() & 0xC0) == 0xC0) name.pop_back();
    name += "...";
  }
  return name;
}

std::string cpu_name() {
  std::ifstream cpuinfo(cpuinfo_path());
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) return short_cpu_name(line.substr(line.find(':') + 1));
  return "unknown CPU";
}

std::string cpu_model() {
  return fmt::format("{} ({} hardware threads)", cpu_name(), std::thread::hardware_concurrency());
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
  return better_blas_kernel_for(cpu_flags(), openblas_pick());
}

namespace {

/// Replaces this process by itself with \p kernel chosen; returns (with the reason) only when that failed.
std::string restart_with(const std::string& kernel) {
  const std::vector<std::string> words = own_command_line();
  if (words.empty()) return "restarting failed: /proc/self/cmdline is unreadable";
  std::vector<char*> argv;  // execv wants char* const[] ending in nullptr; words outlives the call
  for (const std::string& w : words) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  setenv(kCoreType, kernel.c_str(), 1);
  setenv(kChosenByCourse, "1", 1);
  setenv(kRestarted, "1", 1);
  execv("/proc/self/exe", argv.data());  // returns only when it failed
  std::string why = fmt::format("restarting failed: {}", std::strerror(errno));
  unsetenv(kCoreType);  // this process still runs the old kernel: say so in its reports
  unsetenv(kChosenByCourse);
  unsetenv(kRestarted);
  return why;
}

/// In a restarted process: forgets the marker (children start as usual) and, for the tests, says on
/// stderr that the restart happened and with which arguments, when ATTN_TRACE_BLAS_RESTART=1.
void note_restart() {
  if (getenv_or(kRestarted, "") != "1") return;
  unsetenv(kRestarted);
  if (getenv_or("ATTN_TRACE_BLAS_RESTART", "") != "1") return;
  std::string args;
  const std::vector<std::string> words = own_command_line();
  for (std::size_t i = 1; i < words.size(); ++i) args += " [" + words[i] + "]";
  fmt::print(stderr, "attn: restarted with OPENBLAS_CORETYPE={}; arguments:{}\n", getenv_or(kCoreType, "?"), args);
}

}  // namespace

void use_best_blas_kernel() {
  note_restart();
  const std::string kernel = better_blas_kernel();
  if (kernel.empty()) return;
  const std::string why =
      getenv_or("ATTN_BLAS_NO_REEXEC", "") == "1" ? std::string("ATTN_BLAS_NO_REEXEC=1") : restart_with(kernel);
  fmt::print(stderr, "{}",
             wrapped(fmt::format("note: OpenBLAS runs its slower '{}' kernels on this {} CPU; run with "
                                 "OPENBLAS_CORETYPE={} ({})",
                                 openblas_pick(), vector_isa(), kernel, why),
                     100, ""));
}

BlasInfo blas_info() {
  BlasInfo info;
  info.library = openblas_get_config();
  info.kernel = openblas_get_corename();
  info.threads = openblas_get_num_threads();
  const auto flags = cpu_flags();
  const int cpu = isa_level(flags);
  info.best_kernel = cpu == 2 ? (flags.count("avx512_bf16") ? "Cooperlake" : "SkylakeX") : cpu == 1 ? "Haswell" : "";
  info.chosen_by = std::getenv(kCoreType) == nullptr       ? "OpenBLAS's pick by CPU model"
                   : getenv_or(kChosenByCourse, "") == "1" ? "picked by the course from the CPU flags"
                                                           : fmt::format("set by you: {}", kCoreType);
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

int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace attn
