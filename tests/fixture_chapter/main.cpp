// The fixture chapter's story (tests/fixture_chapter/): one score, printed.
#include <cstdio>

#include "@NN@_fixture/fixture.hpp"
#include "attn/chapter.hpp"

int main(int argc, char** argv) {
  attn::Chapter chapter("ch@NN@_fixture", "Chapter @NN@: a fixture");
  return chapter.run(argc, argv, [] {
    const attn::Vector q = {1.0f, 2.0f, 3.0f, 4.0f};  // (d_k)
    const attn::Vector k = {1.0f, 1.0f, 1.0f, 1.0f};  // (d_k)
    std::printf("q · k / √d_k = %.1f\n", static_cast<double>(attn::fixture::scaled_score(q, k)));
  });
}
