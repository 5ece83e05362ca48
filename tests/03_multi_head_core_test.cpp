// Chapter 03's hand-built layer, cost and graph files on bad input (heads.hpp) and merge_heads (multi_head.hpp),
// on the solution track only (the exercise suites stay as they are).
#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "03_multi_head/heads.hpp"
#include "03_multi_head/multi_head.hpp"
#include "support/throws.hpp"

namespace ch03 = attn::ch03;
namespace fs = std::filesystem;

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("03_multi_head: bad input") {
  TEST_CASE("embed refuses a word chapter 01's lexicon does not know; multi_head_cost a head count that does not fit") {
    CHECK_THROWS_NAMING(ch03::embed({"猫", "dog"}), std::invalid_argument, "unknown word 'dog'");
    // h = 0 divided d_model by 0: every cost NaN or infinite, silently.
    CHECK_THROWS_NAMING(ch03::multi_head_cost(8, 16, 0), std::invalid_argument, "h = 0");
    CHECK_THROWS_NAMING(ch03::multi_head_cost(8, 16, 3), std::invalid_argument, "d_model = 16", "h = 3");
    CHECK(ch03::multi_head_cost(0, 16, 4).total_flops() == 0.0);  // no tokens: no work
  }

  TEST_CASE("write_attention_dot refuses weights that are no weights and labels that would break the file") {
    const fs::path dir = fs::temp_directory_path() / "attn_ch03_core_test";
    fs::create_directories(dir);
    const std::string path = (dir / "a.dot").string();
    const attn::Matrix A{{0.5f, 0.5f}, {0.25f, 0.75f}};
    const std::vector<std::string> tokens{"猫", "它"};
    CHECK_THROWS_NAMING(ch03::write_attention_dot(path, A, {"猫"}, "t"), std::invalid_argument, "(2, 2)", "1 tokens");
    attn::Matrix bad = A;
    bad(1, 0) = std::numeric_limits<float>::quiet_NaN();  // NaN broke std::stable_sort's ordering
    CHECK_THROWS_NAMING(ch03::write_attention_dot(path, bad, tokens, "t"), std::invalid_argument, "A(1, 0) = nan");
    bad(1, 0) = 2.0f;  // an edge colour of 160·(1 − 2) = −160: no colour at all
    CHECK_THROWS_NAMING(ch03::write_attention_dot(path, bad, tokens, "t"), std::invalid_argument, "A(1, 0) = 2");
    CHECK_THROWS_NAMING(ch03::write_attention_dot(path, A, tokens, "say \"hi\""), std::invalid_argument, "title");
    CHECK_THROWS_NAMING(ch03::write_attention_dot(path, A, {"猫", "a\\b"}, "t"), std::invalid_argument, "token 1");
    CHECK_THROWS_AS(ch03::write_attention_dot((dir / "no" / "a.dot").string(), A, tokens, "t"), std::runtime_error);
    fs::remove_all(dir);
  }

  TEST_CASE("render_dot_svg refuses a path that would end the shell's quoting, and a missing file") {
    const fs::path dir = fs::temp_directory_path() / "attn_ch03_core_test_svg";
    fs::create_directories(dir);
    // A path with a single quote ran whatever followed it as a shell command.
    const std::string quoted = (dir / "x'; touch pwned; '.dot").string();
    CHECK_THROWS_NAMING(ch03::render_dot_svg(quoted, (dir / "x.svg").string()), std::invalid_argument, "single quote");
    CHECK_THROWS_NAMING(ch03::render_dot_svg((dir / "a.dot").string(), (dir / "it's.svg").string()),
                        std::invalid_argument, "single quote");
    CHECK_FALSE(fs::exists(dir / "pwned"));
    CHECK_FALSE(fs::exists("pwned"));
    CHECK_THROWS_AS(ch03::render_dot_svg((dir / "missing.dot").string(), (dir / "m.svg").string()), std::runtime_error);
    fs::remove_all(dir);
  }

  TEST_CASE("merge_heads answers any number of heads: a copy, no heads giving (n, 0)") {
    // bad input answered: merge_heads
    CHECK(attn::merge_heads(attn::Tensor3(xt::zeros<float>({0, 3, 2}))).shape(1) == 0);
    CHECK(attn::merge_heads(attn::Tensor3(xt::zeros<float>({2, 0, 2}))).shape(0) == 0);
  }
}
