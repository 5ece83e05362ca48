// Benchmark inputs and the record the summary rows read (see attn/bench.hpp).
#include "attn/bench.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include "attn/measure.hpp"
#include "attn/rng.hpp"

namespace attn {

namespace {
std::vector<std::pair<std::string, std::function<void(const std::string&)>>>& bench_flags() {
  static std::vector<std::pair<std::string, std::function<void(const std::string&)>>> flags;
  return flags;
}
}  // namespace

BenchFlag::BenchFlag(std::string name, std::function<void(const std::string&)> set) {
  bench_flags().emplace_back(std::move(name) + "=", std::move(set));
}

std::vector<char*> take_bench_flags(const std::vector<char*>& args) {
  std::vector<char*> rest;
  for (char* arg : args) {
    const std::string a = arg;
    bool taken = false;
    for (const auto& [prefix, set] : bench_flags())
      if (a.rfind(prefix, 0) == 0) {
        set(a.substr(prefix.size()));
        taken = true;
      }
    if (!taken) rest.push_back(arg);
  }
  return rest;
}

RandomInputs::RandomInputs(std::size_t count, std::size_t heads, std::size_t n, std::size_t d, std::uint64_t seed)
    : tensors_(count, Tensor3(xt::zeros<float>({heads, n, d}))) {
  Rng rng(seed);
  for (std::size_t h = 0; h < heads; ++h)
    for (Tensor3& t : tensors_) xt::view(t, h) = rng.normal(n, d);
}

const Matrix& RandomInputs::head(std::size_t i, std::size_t h) const {
  auto it = heads_.find({i, h});
  if (it == heads_.end()) it = heads_.emplace(std::make_pair(i, h), Matrix(xt::view(tensor(i), h))).first;
  return it->second;
}

const RandomInputs& random_inputs(std::size_t count, std::size_t heads, std::size_t n, std::size_t d,
                                  std::uint64_t seed) {
  using Key = std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::uint64_t>;
  static std::map<Key, std::unique_ptr<RandomInputs>> cache;
  std::unique_ptr<RandomInputs>& entry = cache[Key{count, heads, n, d, seed}];
  if (!entry) entry = std::make_unique<RandomInputs>(count, heads, n, d, seed);
  return *entry;
}

void record(const std::string& series, std::size_t n, double value) { bench_record()[series][n] = value; }

double recorded_or_measured(const std::string& series, std::size_t n, const std::function<double()>& measure) {
  auto& record = bench_record();
  const auto found = record.find(series);
  if (found != record.end() && found->second.count(n)) return found->second.at(n);
  const double value = measure();
  record[series][n] = value;
  return value;
}

}  // namespace attn
