// A chapter program that reaches an exercise the learner has not written (the exercise track's stop), with a
// hint as long as the longest a skeleton gives: tests/support/CMakeLists.txt checks that every line it prints
// fits 100 columns (attn_output_width), as a learner's terminal shows it.
#include "attn/chapter.hpp"
#include "attn/errors.hpp"

int main(int argc, char** argv) {
  attn::Chapter chapter("ch14_state_space_exercise", "Chapter 14: a program stopped at an unwritten exercise");
  return chapter.run(argc, argv, [] {
    throw attn::not_implemented("zoh_discretize", "14_state_space",
                                "holding u constant over one step, x(t+Δ) = e^{ΔA} x(t) + (e^{ΔA} − 1)/A · B u: two "
                                "formulas per entry, not Δ·B (that is Euler's first-order guess); the exact hold "
                                "stays accurate to float32 rounding even where Ā is within a hair of 1.");
  });
}
