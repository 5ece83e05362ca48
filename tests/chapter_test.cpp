// Tests of attn::Chapter, the frame of every chapter program: how run() reports what stopped a story.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "attn/chapter.hpp"
#include "attn/stats.hpp"
#include "attn/tensor.hpp"

namespace {

struct Outcome {
  int status;
  std::string stderr_text;
};

/// Runs \p story in a chapter program started as `ch00_probe --no-color`, with stderr captured into a file.
Outcome run_probe(const std::function<void()>& story) {
  std::FILE* capture = std::tmpfile();
  REQUIRE(capture != nullptr);
  std::fflush(stderr);
  const int saved = dup(fileno(stderr));
  dup2(fileno(capture), fileno(stderr));
  attn::Chapter chapter("ch00_probe", "Chapter 00: a probe of attn::Chapter");
  std::string name = "ch00_probe", no_color = "--no-color";
  char* argv[] = {name.data(), no_color.data(), nullptr};
  const int status = chapter.run(2, argv, story);
  std::fflush(stderr);
  dup2(saved, fileno(stderr));
  close(saved);
  std::rewind(capture);
  std::string text;
  for (int c = std::fgetc(capture); c != EOF; c = std::fgetc(capture)) text.push_back(static_cast<char>(c));
  std::fclose(capture);
  return {status, text};
}

}  // namespace

TEST_SUITE("common") {
  TEST_CASE("a function's refusal inside the story is reported as that, not as a command-line mistake") {
    // What an exercise does when it passes a wrong shape on: the refusal comes from inside the code that ran.
    const Outcome o = run_probe([] {
      const attn::Matrix a = attn::Matrix::from_shape({2, 3}), b = attn::Matrix::from_shape({3, 2});
      attn::max_abs_diff(a, b);
    });
    CAPTURE(o.stderr_text);
    CHECK(o.status == attn::kExitError);
    CHECK(o.stderr_text.find("max_abs_diff") != std::string::npos);  // the function, and what it was given
    CHECK(o.stderr_text.find("(2, 3)") != std::string::npos);
    CHECK(o.stderr_text.find("--help") == std::string::npos);  // no invitation to fix the command line
  }

  TEST_CASE("a bad option that only the story can see is a command-line mistake: status 2 and a pointer to --help") {
    const Outcome o = run_probe([] { attn::require_option(false, "--max-n 4 is below --min-n 8"); });
    CAPTURE(o.stderr_text);
    CHECK(o.status == attn::kExitUsage);
    CHECK(o.stderr_text.find("--max-n 4 is below --min-n 8") != std::string::npos);
    CHECK(o.stderr_text.find("Run 'ch00_probe --help'") != std::string::npos);
  }
}
