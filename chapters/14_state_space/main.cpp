#include "attn/chapter.hpp"
int main(int argc, char** argv) {
  attn::Chapter chapter("ch14_state_space", "Chapter 14");
  return chapter.run(argc, argv, [&] {});
}
