/// \file
/// attn::Chapter: the frame of every chapter executable. It parses the command line (CLI11), turns a bad
/// command line into a clear message and exit status 2, runs the chapter's story (a function's refusal inside it
/// is reported as that, status 1), captures it for the book, and runs the chapter's Google Benchmarks for
/// `chNN_name bench`.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace attn {

/// Exit statuses shared by every chapter executable.
enum ExitStatus : int {
  kExitOk = 0,
  kExitError = 1,           ///< something went wrong that is not the command line: a function refused its input
  kExitUsage = 2,           ///< a bad command line: the message names the option (attn::UsageError)
  kExitNotImplemented = 3,  ///< the exercise track ran a function the learner has not written yet
};

/// A bad command line that only the story can see (an option checked against another option or against the
/// machine): its message names the option. attn::Chapter::run() prints it with "Run '… --help'" and exits with
/// status 2. Any other std::invalid_argument that reaches run() is a check inside a function the story called
/// (the learner's, in the exercise track), and is reported as that, with status 1.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Throws attn::UsageError with \p message, which names the option, when \p ok is false.
inline void require_option(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

/// Parses \p argv into \p app by the rules every chapter's command line follows (attn::Chapter uses it; so do the
/// MPI programs, which are not Chapters but parse their own command line on every rank): every value is checked
/// before CLI11 converts it (numbers well-formed and finite, no "-1" for an unsigned option, no "" or "0x10" for a
/// number, text at most 4096 characters). A mistake prints, when \p report, one line naming the option, then
/// "Run '\p name --help' for the options."; --help prints the options when \p report.
/// \return nothing when the program goes on; else its exit status: 0 after --help, 2 (kExitUsage) after a mistake.
std::optional<int> parse_command_line(CLI::App& app, const std::string& name, int argc, char** argv,
                                      bool report = true);

/// One chapter executable. Typical use in main.cpp:
/// \code
/// attn::Chapter chapter("ch01_intuition", "Knowing where to look");
/// chapter.cli().add_option("--sentence", sentence, "...");
/// return chapter.run(argc, argv, [&] { tell_the_story(chapter); });
/// \endcode
/// Every chapter accepts `--book DIR` (write the output and the figures into DIR, without colour or
/// timings: the book includes them), `--figures DIR` (also write the SVG figures there) and `--no-color`.
/// DIR is created when missing; one that holds anything but chapters' files (chNN_…) is refused.
/// Every value is checked before the chapter runs: numbers must be well-formed and finite (no "-1" for an
/// unsigned option, no "nan", no ""), text at most 4096 characters. A bad command line prints one line
/// naming the option, then "Run '… --help'", and exits with status 2.
/// `chNN_name bench [google benchmark flags]` runs the benchmarks registered in the executable (the chapter's
/// bench.cpp), after the machine's ceilings at the thread counts its attn::BenchCeilings names (attn/ceilings.hpp).
class Chapter {
 public:
  Chapter(std::string name, std::string title);

  /// The command line, for the chapter to add its own options before run().
  CLI::App& cli() { return app_; }

  /// Parses \p argv and runs \p story. Returns the process's exit status (see ExitStatus); never throws.
  int run(int argc, char** argv, const std::function<void()>& story);

  /// Adds an option naming a file the chapter will write (shown as FILE): a directory, a missing directory
  /// or a place the user cannot write is refused at parse time, naming the option (status 2).
  CLI::Option* add_output_file(const std::string& name, std::string& file, const std::string& description);

  /// True while the book captures the output: no colour, no wall-clock times, no progress lines.
  bool book_mode() const { return book_dir_.has_value(); }

  /// Where to write the figure \p file_name, or nothing when the run writes no figures.
  std::optional<std::string> figure_path(const std::string& file_name) const;

  /// Tells the reader a figure was written (not in the book's captured text, where it would be noise).
  void announce_figure(const std::string& path) const;

 private:
  int run_benchmarks(int argc, char** argv);

  std::string name_;
  std::string title_;  ///< "Chapter NN: ...", the first line of the chapter's output
  CLI::App app_;
  std::optional<std::string> book_dir_;
  std::optional<std::string> figures_dir_;
  bool no_color_ = false;
};

}  // namespace attn
