// attn_machine: what the driver asks about this machine (./course uses it; a reader may too).
//   attn_machine                  one line: CPU, vector instructions, BLAS library, its kernel, threads
//   attn_machine --better-kernel  the OpenBLAS kernel the course sets for this CPU, or nothing when OpenBLAS's
//                                 own choice is already the best (or OPENBLAS_CORETYPE is set)
//   attn_machine --vector-paths   the vector paths this CPU runs, widest first: the values ATTN_VECTOR_ISA takes
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "attn/machine.hpp"
#include "attn/vector.hpp"

int main(int argc, char** argv) try {
  if (argc == 2 && std::strcmp(argv[1], "--better-kernel") == 0) {
    fmt::print("{}\n", attn::better_blas_kernel());
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--vector-paths") == 0) {
    for (const attn::VectorPath path : attn::vector_paths_available()) fmt::print("{}\n", attn::vector_path_key(path));
    return 0;
  }
  if (argc != 1) {
    fmt::print(stderr, "usage: {} [--better-kernel | --vector-paths]\n", argv[0]);
    return 2;
  }
  attn::use_best_blas_kernel();
  fmt::print("{}\n", attn::machine_line());
  return 0;
} catch (const std::exception& e) {  // an ATTN_VECTOR_ISA this CPU cannot honour, named by the message
  fmt::print(stderr, "attn_machine: {}\n", e.what());
  return 2;
}
