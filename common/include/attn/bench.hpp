/// \file
/// What every chapter's bench.cpp shares beside Google Benchmark: the inputs (random tensors drawn once per run),
/// the results a summary row reads (recorded by the benchmarks, or measured when they did not run), and the
/// chapter's own bench flags. The timing helper is attn::time_calls() and attn::time_benchmark_calls()
/// (attn/measure.hpp), the ceilings are attn::ceilings() (attn/ceilings.hpp), OpenBLAS's thread count is held by the
/// guards of attn/blas_threads.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attn/tensor.hpp"

namespace attn {

/// A flag of the chapter's own for `chNN bench`, declared at namespace scope in its bench.cpp: attn::Chapter
/// takes every `--NAME=VALUE` out of the arguments before Google Benchmark reads them, and hands VALUE to \p set.
/// \code
/// std::string plot_file;
/// const attn::BenchFlag plot_flag{"--plot", [](const std::string& file) { plot_file = file; }};
/// \endcode
struct BenchFlag {
  BenchFlag(std::string name, std::function<void(const std::string&)> set);
};

/// Takes the chapter's BenchFlag arguments out of \p args (handing each its value) and returns the rest, in order.
std::vector<char*> take_bench_flags(const std::vector<char*>& args);

/// \p count tensors (heads, n, d) of N(0, 1) entries, drawn from Rng(\p seed) head by head (for each head, tensor
/// 0, 1, …), made on first use and kept for the run: the benchmarks of one shape share them, and none times
/// their drawing. One head of one tensor as an (n, d) matrix is made on first use too (head()).
class RandomInputs {
 public:
  RandomInputs(std::size_t count, std::size_t heads, std::size_t n, std::size_t d, std::uint64_t seed);
  /// Tensor \p i: (heads, n, d).
  const Tensor3& tensor(std::size_t i) const { return tensors_.at(i); }
  /// Head \p h of tensor \p i: (n, d), a copy made once.
  const Matrix& head(std::size_t i, std::size_t h) const;

 private:
  std::vector<Tensor3> tensors_;
  mutable std::map<std::pair<std::size_t, std::size_t>, Matrix> heads_;
};

/// The run's one cache of benchmark inputs: RandomInputs(count, heads, n, d, seed), made once per argument list.
const RandomInputs& random_inputs(std::size_t count, std::size_t heads, std::size_t n, std::size_t d,
                                  std::uint64_t seed);

/// Writes \p value under \p series at \p n into bench_record() (attn/measure.hpp), for the summaries.
void record(const std::string& series, std::size_t n, double value);

/// The value a benchmark of this run recorded under \p series at \p n, or, when none did (a filter left it out,
/// or it runs later), \p measure()'s, recorded now. Summary rows read every figure through this, so what they
/// report does not depend on the order in which the benchmarks ran, nor on which of them a filter kept.
double recorded_or_measured(const std::string& series, std::size_t n, const std::function<double()>& measure);

}  // namespace attn
