// Chapter 03's hand-built layer, cost and graph files on bad input (heads.hpp) and merge_heads (multi_head.hpp),
// on the solution track only (the exercise suites stay as they are).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "01_intuition/lexicon.hpp"
#include "03_multi_head/heads.hpp"
#include "03_multi_head/multi_head.hpp"
#include "support/hostile.hpp"
#include "support/throws.hpp"

namespace ch03 = attn::ch03;
namespace fs = std::filesystem;
namespace hostile = attn::test::hostile;

// Bad input, one case per function that had none (cmake/check_bad_input.py).
TEST_SUITE("03_multi_head: bad input") {
  TEST_CASE(
      "embed refuses a word chapter 01's lexicon does not know, and multi_head_cost refuses a head count that does not "
      "fit") {
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

// Every public function of the chapter's own code under the hostile-input battery (tests/support/hostile.hpp): each
// argument replaced in turn by its type's hostile values, each call refused naming what was wrong, or answered as the
// contract says.
TEST_SUITE("03_multi_head: hostile battery") {
  TEST_CASE("the hand-built layer, its cost and its graph files under the battery") {
    // hostile battery: embed, random_weights, multi_head_cost, write_attention_dot, render_dot_svg
    const auto known = [](const std::vector<std::string>& tokens) {
      const std::vector<std::string> vocabulary = attn::ch01::vocabulary();
      for (const std::string& t : tokens)
        if (std::find(vocabulary.begin(), vocabulary.end(), t) == vocabulary.end()) return false;
      return true;
    };
    hostile::battery(
        "embed", {"tokens|word"}, [](const std::vector<std::string>& t) { return ch03::embed(t); },
        std::vector<std::string>{"the", "cat", "it"})
        .fits(known)
        .answer([](const attn::Matrix& X, const std::vector<std::string>& t) {
          return X.shape(0) == t.size() && X.shape(1) == ch03::kDModel;
        })
        .run();
    hostile::battery(
        "random_weights", {"d_model"},
        [](std::size_t d) {
          attn::Rng rng(3);
          return ch03::random_weights(rng, d).W_O;
        },
        std::size_t{4})
        .fits([](std::size_t d) { return d > 0 && d <= 4; })  // 2^32 and past: (d, d) past memory or size_t
        .answer([](const attn::Matrix& W, std::size_t d) { return W.shape(0) == d && W.shape(1) == d; })
        .run();
    hostile::battery(
        "multi_head_cost", {"n|n_tokens", "d_model", "h"},
        [](std::size_t n, std::size_t d, std::size_t h) { return ch03::multi_head_cost(n, d, h).total_flops(); },
        std::size_t{8}, std::size_t{16}, std::size_t{4})
        .fits([](std::size_t, std::size_t d, std::size_t h) { return h > 0 && d % h == 0; })
        .answer([](double flops, std::size_t, std::size_t, std::size_t) { return std::isfinite(flops) && flops >= 0; })
        .run();

    const fs::path dir = fs::temp_directory_path() / "attn_ch03_battery";
    fs::remove_all(dir);
    fs::create_directories(dir);
    // A path argument is a file name in dir (an empty one stays empty): the battery's strings make no file elsewhere.
    const auto in_dir = [dir](const std::string& name) { return name.empty() ? name : (dir / name).string(); };
    const attn::Matrix A{{0.5f, 0.5f, 0.0f}, {0.25f, 0.75f, 0.0f}, {0.2f, 0.3f, 0.5f}};
    hostile::battery(
        "write_attention_dot", {"path", "A", "tokens|token", "title", "per_token", "min_weight"},
        [&](const std::string& path, const attn::Matrix& a, const std::vector<std::string>& tokens,
            const std::string& title, std::size_t per_token,
            double min_weight) { ch03::write_attention_dot(in_dir(path), a, tokens, title, per_token, min_weight); },
        std::string("a.dot"), A, std::vector<std::string>{"猫", "坐在", "它"}, std::string("head 1"), std::size_t{2},
        0.1)
        .fits([](const std::string& path, const attn::Matrix& a, const std::vector<std::string>& tokens,
                 const std::string& title, std::size_t, double) {
          const auto plain = [](const std::string& s) {
            return s.find_first_of(std::string("\"\\\0", 3)) == std::string::npos;
          };
          bool labels = plain(title);
          for (const auto& t : tokens) labels = labels && plain(t);
          return !path.empty() && path.find('\0') == std::string::npos && path.size() < 4096 &&
                 a.shape(0) == tokens.size() && a.shape(1) == tokens.size() && labels;
        })
        .exempt("min_weight = ", "any weight is a threshold: NaN or ±inf draws no edge or every edge (answered)")
        .run();
    const std::string dot = (dir / "good.dot").string();
    ch03::write_attention_dot(dot, A, {"猫", "坐在", "它"}, "head 1");
    hostile::battery(
        "render_dot_svg", {"dot_path", "svg_path"},
        [&](const hostile::Path& d, const std::string& svg) { ch03::render_dot_svg(d.path, in_dir(svg)); },
        hostile::Path{dot}, std::string("a.svg"))
        .fits([](const hostile::Path&, const std::string& svg) {
          return !svg.empty() && svg.find('\0') == std::string::npos && svg.size() < 4096;
        })
        .exempt("dot_path empty", "dot judges the file's syntax: a file it cannot read is its error (runtime_error)")
        .exempt("dot_path truncated", "as dot_path empty")
        .exempt("dot_path lying", "as dot_path empty")
        .run();
    fs::remove_all(dir);
  }
}
