// The machine a measurement ran on, and the choice of OpenBLAS kernel (see attn/machine.hpp).
#include "attn/machine.hpp"

#include <unistd.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "attn/print.hpp"
#include "attn/vector.hpp"

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

namespace {

/// The value after "key:" on the first line of /proc/cpuinfo (or the fake) that starts with \p key; "" when none.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream cpuinfo(cpuinfo_path());
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind(key, 0) != 0 || line.find(':') == std::string::npos) continue;
    const std::string rest = line.substr(key.size(), line.find(':') - key.size());
    if (rest.find_first_not_of(" \t") != std::string::npos) continue;  // "flags" is not "flagship"
    const std::size_t start = line.find_first_not_of(" \t", line.find(':') + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

#if defined(__aarch64__)
/// An arm64 process's features as the kernel reports them to it (the auxiliary vector), named as arm64's
/// /proc/cpuinfo names them. Under emulation (qemu-user) /proc/cpuinfo is the host's, an x86-64 list that says
/// nothing about the CPU the program runs on; the auxiliary vector is the emulated CPU's.
std::set<std::string> arm64_hwcaps() {
  std::set<std::string> features;
  const unsigned long caps = getauxval(AT_HWCAP), caps2 = getauxval(AT_HWCAP2);
  if (caps & HWCAP_FP) features.insert("fp");
  if (caps & HWCAP_ASIMD) features.insert("asimd");
#ifdef HWCAP_SVE
  if (caps & HWCAP_SVE) features.insert("sve");
#endif
#ifdef HWCAP2_SVE2
  if (caps2 & HWCAP2_SVE2) features.insert("sve2");
#endif
  (void)caps2;
  return features;
}
#endif

}  // namespace

std::set<std::string> cpu_flags() {
#if defined(__aarch64__)
  if (std::getenv("ATTN_FAKE_CPUINFO") == nullptr) return arm64_hwcaps();
#endif
  // x86-64 names them on its "flags" line, arm64 on its "Features" line.
  std::string line = cpuinfo_field("flags");
  if (line.empty()) line = cpuinfo_field("Features");
  std::istringstream words(line);
  std::set<std::string> flags;
  for (std::string w; words >> w;) flags.insert(w);
  return flags;
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

std::string arm_cpu_name(const std::string& implementer, const std::string& part) {
  // The designers (the "CPU implementer" codes) and Arm's own cores most readers meet; others go by number.
  static const std::map<unsigned long, const char*> designers{
      {0x41, "Arm"},      {0x42, "Broadcom"}, {0x46, "Fujitsu"},   {0x48, "HiSilicon"}, {0x4e, "NVIDIA"},
      {0x51, "Qualcomm"}, {0x61, "Apple"},    {0x6d, "Microsoft"}, {0xc0, "Ampere"}};
  static const std::map<unsigned long, const char*> arm_cores{
      {0xd03, "Cortex-A53"},  {0xd05, "Cortex-A55"},  {0xd07, "Cortex-A57"},  {0xd08, "Cortex-A72"},
      {0xd0b, "Cortex-A76"},  {0xd0c, "Neoverse-N1"}, {0xd40, "Neoverse-V1"}, {0xd41, "Cortex-A78"},
      {0xd49, "Neoverse-N2"}, {0xd4f, "Neoverse-V2"}, {0xd84, "Neoverse-V3"}, {0xd8e, "Neoverse-N3"}};
  const auto number = [](const std::string& text, unsigned long& value) {
    char* end = nullptr;
    errno = 0;
    value = std::strtoul(text.c_str(), &end, 0);
    return !text.empty() && errno == 0 && end != nullptr && *end == '\0';
  };
  unsigned long who = 0, core = 0;
  if (!number(implementer, who)) return "";
  const auto designer = designers.find(who);
  std::string name = designer != designers.end() ? designer->second : fmt::format("arm64 ({})", implementer);
  if (!number(part, core)) return name;  // not const: returned by move
  const auto known = who == 0x41 ? arm_cores.find(core) : arm_cores.end();
  return known != arm_cores.end() ? fmt::format("{} {}", name, known->second) : fmt::format("{} part {}", name, part);
}

std::string cpu_name() {
  const std::string model = cpuinfo_field("model name");  // x86-64 (and 32-bit Arm)
  if (!model.empty()) return short_cpu_name(model);
  const std::string arm = arm_cpu_name(cpuinfo_field("CPU implementer"), cpuinfo_field("CPU part"));
  return arm.empty() ? "unknown CPU" : short_cpu_name(arm);
}

std::string cpu_model() {
  return fmt::format("{} ({} hardware threads)", cpu_name(), std::thread::hardware_concurrency());
}

std::string vector_isa_for(const std::set<std::string>& flags) {
  if (flags.count("sve") > 0) return "SVE";
  if (flags.count("asimd") > 0) return "NEON";                       // "Advanced SIMD", arm64's name for NEON
  static const char* names[] = {"portable", "AVX2+FMA", "AVX-512"};  // vector_path_name()'s spellings
  return names[isa_level(flags)];
}

std::string vector_isa() { return vector_isa_for(cpu_flags()); }

std::string better_blas_kernel_for(const std::set<std::string>& cpu_flags, const std::string& openblas_kernel) {
  const int cpu = isa_level(cpu_flags);
  if (cpu <= kernel_level(openblas_kernel)) return "";
  if (cpu == 2) return cpu_flags.count("avx512_bf16") ? "Cooperlake" : "SkylakeX";
  return "Haswell";
}

std::string better_blas_kernel() {
#if defined(__x86_64__)
  if (std::getenv(kCoreType) != nullptr) return "";
  return better_blas_kernel_for(cpu_flags(), openblas_pick());
#else
  return "";  // the kernel names and the rule are x86-64's; OpenBLAS's own pick stands elsewhere
#endif
}

namespace {

/// Replaces this process by itself with \p kernel chosen; returns (with the reason) only when that failed.
std::string restart_with(const std::string& kernel) {
  const std::vector<std::string> words = own_command_line();
  if (words.empty()) return "restarting failed: /proc/self/cmdline is unreadable";
  std::vector<char*> argv;  // execv wants char* const[] ending in nullptr; words outlives the call
  argv.reserve(words.size() + 1);
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
#if !defined(__x86_64__)
  (void)cpu;
  info.best_kernel = "";
#else
  info.best_kernel = cpu == 2 ? (flags.count("avx512_bf16") ? "Cooperlake" : "SkylakeX") : cpu == 1 ? "Haswell" : "";
#endif
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
  return fmt::format("{}, {}; {} {}, kernel {} ({}), {} BLAS threads", cpu_model(), vector_path_description(), name,
                     version, blas.kernel, blas.chosen_by, blas.threads);
}

void add_machine_to_benchmark_context() {
  const BlasInfo blas = blas_info();
  benchmark::AddCustomContext("cpu", fmt::format("{}, {}", cpu_model(), vector_path_description()));
  benchmark::AddCustomContext("blas", blas.library);
  benchmark::AddCustomContext("blas_kernel", fmt::format("{} ({})", blas.kernel, blas.chosen_by));
  benchmark::AddCustomContext("blas_threads",
                              fmt::format("{} (each benchmark sets its own; see its name)", blas.threads));
}

int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace attn
