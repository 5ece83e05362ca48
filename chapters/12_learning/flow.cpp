// Chapter 12's attention flow: the layered attention graph handed to Boost.Graph's max-flow.
// What it demonstrates: Abnar & Zuidema's second reading of attention through layers, beside rollout.
// What it leaves out: the max-flow algorithm itself (Boost.Graph's Edmonds–Karp). Book page:
// book/12_learning.md.
#include "12_learning/flow.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#if ATTN_HAVE_BOOST_GRAPH
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/edmonds_karp_max_flow.hpp>
#endif

namespace attn::ch12 {

bool attention_flow_available() { return ATTN_HAVE_BOOST_GRAPH != 0; }

namespace {

void require_layers(const std::vector<Matrix>& layers, std::size_t position) {
  require(!layers.empty(), "attention_flow: no layers; give at least one (n, n) attention matrix");
  const std::size_t n = layers.front().shape(0);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Matrix& A = layers[l];
    require(A.shape(0) == n && A.shape(1) == n,
            fmt::format("attention_flow: layer {} is {}; every layer must be ({}, {}) like the first", l + 1,
                        shape_str(A), n, n));
    for (const float a : A)
      require(std::isfinite(a) && a >= 0.0f,
              fmt::format("attention_flow: layer {} has the weight {}; capacities must be finite and ≥ 0", l + 1,
                          static_cast<double>(a)));
  }
  require(position < n, fmt::format("attention_flow: position {} of a sequence of {}", position, n));
}

}  // namespace

#if ATTN_HAVE_BOOST_GRAPH

namespace {

/// The capacity of the edge from j to i across layer \p A: Ã(i, j) = ½·A(i, j) + ½·[i = j]. Position i after
/// the layer holds half of its own stream (the residual) and half of the attention's mix.
double capacity_of(const Matrix& A, std::size_t i, std::size_t j) {
  return 0.5 * static_cast<double>(A(i, j)) + (i == j ? 0.5 : 0.0);
}

}  // namespace

// [attention_flow]
Vector attention_flow(const std::vector<Matrix>& layers, std::size_t position) {
  require_layers(layers, position);
  using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
  using Graph = boost::adjacency_list<
      boost::vecS, boost::vecS, boost::directedS, boost::no_property,
      boost::property<boost::edge_capacity_t, double,
                      boost::property<boost::edge_residual_capacity_t, double,
                                      boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;
  const std::size_t n = layers.front().shape(0), L = layers.size();
  Graph g(static_cast<Graph::vertices_size_type>((L + 1) * n));  // node l·n + i: position i after l layers
  auto capacity = boost::get(boost::edge_capacity, g);
  auto reverse = boost::get(boost::edge_reverse, g);
  // Max-flow works on a residual graph: every edge needs a twin of capacity 0 to push flow back along.
  auto add_edge = [&](std::size_t from, std::size_t to, double c) {
    const auto e = boost::add_edge(from, to, g).first, back = boost::add_edge(to, from, g).first;
    capacity[e] = c;
    capacity[back] = 0.0;
    reverse[e] = back;
    reverse[back] = e;
  };
  // Only nodes with a path to the sink can carry flow to it: the graph keeps those (with causal layers,
  // positions ≤ position), which makes each max-flow smaller without changing its value.
  std::vector<bool> reaches((L + 1) * n, false);  // node l·n + i has a path to the sink
  reaches[L * n + position] = true;
  for (std::size_t l = L; l-- > 0;)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (reaches[(l + 1) * n + i] && capacity_of(layers[l], i, j) > 0.0) reaches[l * n + j] = true;
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (reaches[(l + 1) * n + i] && capacity_of(layers[l], i, j) > 0.0)
          add_edge(l * n + j, (l + 1) * n + i, capacity_of(layers[l], i, j));
  Vector flow = xt::zeros<float>({n});  // (n)
  const std::size_t sink = L * n + position;
  for (std::size_t j = 0; j < n; ++j)  // one max-flow per input token; the algorithm resets the residuals
    if (reaches[j]) flow(j) = static_cast<float>(boost::edmonds_karp_max_flow(g, j, sink));
  return flow;
}
// [attention_flow]

#else

Vector attention_flow(const std::vector<Matrix>& layers, std::size_t position) {
  require_layers(layers, position);
  throw std::runtime_error("attention_flow: this build has no Boost.Graph (apt-get install libboost-graph-dev)");
}

#endif

}  // namespace attn::ch12
