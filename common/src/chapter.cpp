// The frame of every chapter executable: command line, errors, book capture, benchmarks.
#include "attn/chapter.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <regex>
#include <stdexcept>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "attn/bench.hpp"
#include "attn/ceilings.hpp"
#include "attn/errors.hpp"
#include "attn/machine.hpp"
#include "attn/print.hpp"

namespace attn {
namespace {

/// A text value longer than this is refused (a path, a sentence: nothing a chapter takes is longer).
constexpr std::size_t kMaxTextLength = 4096;

/// What is wrong with \p value for an option of CLI11 type \p type ("UINT", "INT", "FLOAT", "TEXT", maybe
/// followed by its validators), or "" when nothing is. CLI11 alone lets "-1" through for an unsigned
/// option (it wraps), "" through for a number, and "nan" past every range check.
std::string value_problem(const std::string& type, const std::string& value) {
  const auto is = [&](const char* prefix) { return type.rfind(prefix, 0) == 0; };
  if (value.empty()) return "an empty value is not allowed";
  if (is("UINT") || is("INT")) {
    const std::size_t digits_from = is("INT") && value[0] == '-' ? 1 : 0;
    const bool digits =
        value.size() > digits_from && std::all_of(value.begin() + static_cast<std::ptrdiff_t>(digits_from), value.end(),
                                                  [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) return fmt::format("'{}' is not a {} integer", value, is("UINT") ? "non-negative" : "whole");
    errno = 0;
    if (is("UINT"))
      static_cast<void>(std::strtoull(value.c_str(), nullptr, 10));
    else
      static_cast<void>(std::strtoll(value.c_str(), nullptr, 10));
    if (errno == ERANGE) return fmt::format("{} is out of range (64 bits)", value);
  } else if (is("FLOAT")) {
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(x))
      return fmt::format("'{}' is not a finite number", value);
  } else if (value.size() > kMaxTextLength) {
    return fmt::format("{} characters; at most {} are accepted", value.size(), kMaxTextLength);
  }
  return "";
}

/// Gives every option that takes a value the checks of value_problem(), before CLI11 converts it.
void check_every_value(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size_max() == 0) continue;  // a flag: no value
    const std::string type = option->get_type_name();
    option->check([type](const std::string& value) { return value_problem(type, value); }, "", "well-formed value");
  }
}

/// What to say about the mistake \p e: when a value breaks the course's own rules (value_problem()), that, whatever
/// an option's own check (a range, say) said first; else CLI11's message.
std::string course_rule_broken(const CLI::App& app, const CLI::ParseError& e) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_type_size_max() == 0) continue;  // a flag: no value
    for (const std::string& value : option->results()) {
      const std::string problem = value_problem(option->get_type_name(), value);
      if (!problem.empty()) return fmt::format("{}: {}", option->get_name(), problem);
    }
  }
  return e.what();
}

/// A chapter writes only files named chNN_…; a directory holding anything else is not its to write into.
bool written_by_chapters(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!(name.size() > 4 && name.rfind("ch", 0) == 0 && std::isdigit(static_cast<unsigned char>(name[2])) &&
          std::isdigit(static_cast<unsigned char>(name[3]))))
      return false;
  }
  return true;
}

/// Makes \p dir (the value of \p option) ready for the chapter's files: created when missing, refused when
/// it is a file, cannot be created, or already holds files no chapter wrote (so `--book /` or `--book ~`
/// never scatters files into a directory that is not the course's).
void prepare_output_dir(const char* option, const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path path(dir);
  if (std::filesystem::exists(path, ec)) {
    if (!std::filesystem::is_directory(path, ec))
      throw UsageError(fmt::format("{}: '{}' exists and is not a directory", option, dir));
    bool ours = false;
    try {
      ours = written_by_chapters(path);
    } catch (const std::filesystem::filesystem_error& e) {
      throw UsageError(fmt::format("{}: cannot read '{}': {}", option, dir, e.code().message()));
    }
    if (!ours)
      throw UsageError(
          fmt::format("{}: '{}' holds files no chapter wrote; give a new or empty directory (the "
                      "chapters write only chNN_* files, and only into such a directory)",
                      option, dir));
  } else {
    std::filesystem::create_directories(path, ec);
    if (ec) throw UsageError(fmt::format("{}: cannot create '{}': {}", option, dir, ec.message()));
  }
  const std::filesystem::path probe = path / "ch00_write_test";  // can we write there at all?
  if (std::FILE* f = std::fopen(probe.c_str(), "w")) {
    std::fclose(f);
    std::filesystem::remove(probe, ec);
  } else {
    throw UsageError(fmt::format("{}: cannot write into '{}': {}", option, dir, std::strerror(errno)));
  }
}

std::string make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create directory " + dir + ": " + ec.message());
  return dir;
}

}  // namespace

std::optional<int> parse_command_line(CLI::App& app, const std::string& name, int argc, char** argv, bool report) {
  check_every_value(app);
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return report ? app.exit(e) : kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    return report ? app.exit(e) : kExitOk;
  } catch (const CLI::ParseError& e) {  // one line that names the option, not the whole help after it
    if (report)
      fmt::print(stderr, "{}: {}\nRun '{} --help' for the options.\n", name, course_rule_broken(app, e), name);
    return kExitUsage;
  }
}

Chapter::Chapter(std::string name, std::string title)
    : name_(std::move(name)), title_(std::move(title)), app_(title_, name_) {
  app_.add_option("--book", book_dir_, "Write this chapter's output (plain text) and figures into DIR for the book")
      ->type_name("DIR");
  app_.add_option("--figures", figures_dir_, "Also write the chapter's SVG figures into DIR")->type_name("DIR");
  app_.add_flag("--no-color", no_color_, "Plain output even in a terminal (so does NO_COLOR=1)");
  app_.footer(fmt::format("Benchmarks: {} bench [--benchmark_filter=REGEX ...]", name_));
}

CLI::Option* Chapter::add_output_file(const std::string& name, std::string& file, const std::string& description) {
  return app_.add_option(name, file, description)
      ->type_name("FILE")
      ->check(
          [](const std::string& value) -> std::string {
            namespace fs = std::filesystem;
            std::error_code ec;
            const fs::path path(value);
            if (fs::is_directory(path, ec)) return fmt::format("'{}' is a directory, not a file", value);
            const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
            if (!fs::is_directory(parent, ec))
              return fmt::format("'{}': there is no directory {}", value, parent.string());
            if (::access(fs::exists(path, ec) ? path.c_str() : parent.c_str(), W_OK) != 0)
              return fmt::format("'{}' cannot be written: {}", value, std::strerror(errno));
            return "";
          },
          "", "writable file");
}

std::optional<std::string> Chapter::figure_path(const std::string& file_name) const {
  const auto& dir = book_dir_ ? book_dir_ : figures_dir_;
  if (!dir) return std::nullopt;
  return make_dir(*dir) + "/" + file_name;
}

void Chapter::announce_figure(const std::string& path) const {
  if (!book_mode()) fmt::print("(figure written: {})\n", path);
}

int Chapter::run_benchmarks(int argc, char** argv) {
  // argv[1] is "bench": Google Benchmark sees the program name followed by the flags after it.
  // A chapter's own bench flags (attn::BenchFlag, such as chapter 07's --plot=FILE.svg) are taken out first.
  std::vector<char*> args{argv[0]};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args = take_bench_flags(args);
  for (char* arg : args) {  // Google Benchmark reports a bad regex, then runs nothing and exits 0
    const std::string flag = arg, prefix = "--benchmark_filter=";
    if (flag.rfind(prefix, 0) != 0) continue;
    try {
      std::regex(flag.substr(prefix.size()), std::regex::extended);  // the grammar Google Benchmark uses
    } catch (const std::regex_error& e) {
      fmt::print(stderr, "{} bench: --benchmark_filter: '{}' is not a valid regular expression ({})\n", name_,
                 flag.substr(prefix.size()), e.what());
      return kExitUsage;
    }
  }
  const bool listing = std::any_of(args.begin(), args.end(), [](const char* a) {
    return std::string(a).rfind("--benchmark_list_tests", 0) == 0 && std::string(a) != "--benchmark_list_tests=false";
  });
  int bench_argc = static_cast<int>(args.size());
  args.push_back(nullptr);  // argv[argc] is nullptr, as main's own
  benchmark::Initialize(&bench_argc, args.data());
  add_machine_to_benchmark_context();
  if (!listing) add_ceilings_to_benchmark_context(bench_ceiling_threads());  // a list runs nothing: no ceilings
  if (benchmark::ReportUnrecognizedArguments(bench_argc, args.data())) return kExitUsage;
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (ran == 0) fmt::print("{}: no benchmark ran (this chapter has none, or the filter matched none)\n", name_);
  return kExitOk;
}

int Chapter::run(int argc, char** argv, const std::function<void()>& story) {
  use_best_blas_kernel();  // restarts the program with the CPU's best OpenBLAS kernel when it needs one
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return run_benchmarks(argc, argv);
  if (const std::optional<int> status = parse_command_line(app_, name_, argc, argv)) return *status;
  try {
    if (book_dir_) prepare_output_dir("--book", *book_dir_);
    if (figures_dir_) prepare_output_dir("--figures", *figures_dir_);
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: {}\nRun '{} --help' for the options.\n", name_, e.what(), name_);
    return kExitUsage;
  }
  try {
    if (book_dir_) {
      // The book includes exactly what a reader sees, minus colour: send stdout to DIR/<name>.txt.
      const std::string path = make_dir(*book_dir_) + "/" + name_ + ".txt";
      if (std::freopen(path.c_str(), "w", stdout) == nullptr) throw std::runtime_error("cannot write " + path);
      set_color(false);
    } else if (no_color_) {
      set_color(false);
    }
    fmt::print("{}\n", title_);  // every chapter's output starts with its title, in the terminal and the book
    story();
    std::fflush(stdout);
    return kExitOk;
  } catch (const not_implemented& e) {
    std::fflush(stdout);
    fmt::print(stderr,
               "\n{}: this run reached code you have not written yet.\n  {}\n"
               "To watch the reference solution instead: ./course run {}\n",
               name_, e.what(), e.chapter().substr(0, 2));
    return kExitNotImplemented;
  } catch (const UsageError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: error: {}\nRun '{} --help' for the options.\n", name_, e.what(), name_);
    return kExitUsage;
  } catch (const std::invalid_argument& e) {
    // A contract check inside the code that ran (in the exercise track, often the learner's function, or what it
    // passed on): the command line is not at fault, so no pointer to --help.
    std::fflush(stdout);
    fmt::print(stderr, "{}: a function refused its input: {}\n", name_, e.what());
    return kExitError;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: failed: {}\n", name_, e.what());
    return kExitError;
  }
}

}  // namespace attn
