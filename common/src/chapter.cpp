// The frame of every chapter executable: command line, errors, book capture, benchmarks.
#include "attn/chapter.hpp"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "attn/ceilings.hpp"
#include "attn/errors.hpp"
#include "attn/machine.hpp"
#include "attn/print.hpp"

namespace attn {
namespace {

std::string make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create directory " + dir + ": " + ec.message());
  return dir;
}

}  // namespace

Chapter::Chapter(std::string name, std::string title) : name_(std::move(name)), app_(title, name_) {
  app_.add_option("--book", book_dir_, "Write this chapter's output (plain text) and figures into DIR for the book");
  app_.add_option("--figures", figures_dir_, "Also write the chapter's SVG figures into DIR");
  app_.add_flag("--no-color", no_color_, "Plain output even in a terminal (so does NO_COLOR=1)");
  app_.footer(fmt::format("Benchmarks: {} bench [--benchmark_filter=REGEX ...]", name_));
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
  std::vector<char*> args{argv[0]};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  int bench_argc = static_cast<int>(args.size());
  benchmark::Initialize(&bench_argc, args.data());
  add_machine_to_benchmark_context();
  add_ceilings_to_benchmark_context(ceiling_threads_);
  if (benchmark::ReportUnrecognizedArguments(bench_argc, args.data())) return kExitUsage;
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (ran == 0) fmt::print("{}: no benchmark ran (this chapter has none, or the filter matched none)\n", name_);
  return kExitOk;
}

int Chapter::run(int argc, char** argv, const std::function<void()>& story) {
  use_best_blas_kernel(argv);  // restarts the program with the CPU's best OpenBLAS kernel when it needs one
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0) return run_benchmarks(argc, argv);
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app_.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app_.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "{}: {}\n\n{}", name_, e.what(), app_.help());
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
  } catch (const std::invalid_argument& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: error: {}\nRun '{} --help' for the options.\n", name_, e.what(), name_);
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "{}: failed: {}\n", name_, e.what());
    return kExitError;
  }
}

}  // namespace attn
