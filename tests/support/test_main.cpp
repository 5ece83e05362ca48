// doctest's main, compiled once for every chapter's test executables. The tests run with the OpenBLAS
// kernel the course's programs run with (attn/machine.hpp): the program restarts itself with it when needed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "attn/machine.hpp"
#include "support/results.hpp"

// The skips and the results file of every test program (support/results.hpp): ./course check reads the file.
REGISTER_LISTENER("attn_results", 0, attn::test::ResultsListener);

int main(int argc, char** argv) {
  attn::use_best_blas_kernel();
  return doctest::Context(argc, argv).run();
}
