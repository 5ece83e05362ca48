// Chapter 15's bridge to igraph. igraph's default error handler aborts the process; the chapter replaces it
// with one that only returns the error code, and turns every code into an exception naming the call.
#include "15_structured/igraph_graphs.hpp"

#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "attn/checks.hpp"

#if ATTN_HAVE_IGRAPH
#include <igraph.h>
#endif

namespace attn::ch15 {

#if ATTN_HAVE_IGRAPH

namespace {

constexpr std::size_t kMaxBlocks = 1024, kMaxSbmNodes = std::size_t{1} << 16;

void check_igraph(igraph_error_t code, const std::string& what) {
  if (code != IGRAPH_SUCCESS) throw std::invalid_argument(fmt::format("{}: igraph: {}", what, igraph_strerror(code)));
}

/// An igraph_t that is destroyed however the scope is left.
struct OwnedGraph {
  igraph_t g;
  bool made = false;
  ~OwnedGraph() {
    if (made) igraph_destroy(&g);
  }
};

void quiet_errors() {
  igraph_set_error_handler(igraph_error_handler_ignore);
  igraph_set_warning_handler(igraph_warning_handler_ignore);
}

/// The edges of an igraph graph as the chapter's Graph, checked with check_graph().
Graph graph_of(const igraph_t& source, const std::string& what) {
  igraph_vector_int_t edges;
  check_igraph(igraph_vector_int_init(&edges, 0), what);
  Graph g{static_cast<std::size_t>(igraph_vcount(&source)), {}};
  const igraph_error_t code = igraph_get_edgelist(&source, &edges, false);
  for (igraph_integer_t e = 0; code == IGRAPH_SUCCESS && e + 1 < igraph_vector_int_size(&edges); e += 2)
    g.edges.emplace_back(static_cast<std::size_t>(VECTOR(edges)[e]), static_cast<std::size_t>(VECTOR(edges)[e + 1]));
  igraph_vector_int_destroy(&edges);
  check_igraph(code, what);
  check_graph(g);  // igraph's multigraphs or loops would reach the chapter's code: refuse them here
  return g;
}

}  // namespace

bool have_igraph() { return true; }

Graph famous_graph(const std::string& name) {
  // igraph's names are short words: a long one, or one with a NUL (igraph would read it only up to the NUL), is
  // no name it knows. The message shows at most 40 bytes of it.
  const std::string what =
      fmt::format("famous_graph(name = \"{}{}\")", name.substr(0, 40), name.size() > 40 ? "…" : "");
  require(name.size() <= 64 && name.find('\0') == std::string::npos, what + ": no graph igraph knows has this name");
  quiet_errors();
  OwnedGraph owned;
  check_igraph(igraph_famous(&owned.g, name.c_str()), what);
  owned.made = true;
  return graph_of(owned.g, what);
}

Graph sbm_graph(const std::vector<std::size_t>& block_sizes, double p_in, double p_out, std::uint64_t seed) {
  const std::string what = fmt::format("sbm_graph(p_in = {}, p_out = {})", p_in, p_out);
  require(p_in >= 0.0 && p_in <= 1.0 && p_out >= 0.0 && p_out <= 1.0, what + ": both probabilities must lie in [0, 1]");
  // igraph takes a (k, k) matrix of probabilities and walks its k² pairs of blocks: the blocks are limited as well
  // as the nodes (65,536 blocks would be a 32 GB matrix). The sum saturates, so that sizes like {SIZE_MAX, 2}
  // cannot wrap past the limit.
  require(!block_sizes.empty() && block_sizes.size() <= kMaxBlocks,
          fmt::format("{}: {} blocks (need 1 … {})", what, block_sizes.size(), kMaxBlocks));
  std::size_t n = 0;
  for (std::size_t b : block_sizes) n = saturating_add(n, b);
  require(n <= kMaxSbmNodes,
          fmt::format("{}: blocks of {} nodes in all (need at most {})", what,
                      n == std::numeric_limits<std::size_t>::max() ? std::string("more than 2^64") : std::to_string(n),
                      kMaxSbmNodes));
  quiet_errors();
  const auto k = static_cast<igraph_integer_t>(block_sizes.size());
  igraph_matrix_t pref;
  check_igraph(igraph_matrix_init(&pref, k, k), what);
  igraph_vector_int_t sizes;
  const igraph_error_t made_sizes = igraph_vector_int_init(&sizes, k);
  for (igraph_integer_t a = 0; a < k; ++a) {
    if (made_sizes == IGRAPH_SUCCESS)
      VECTOR(sizes)[a] = static_cast<igraph_integer_t>(block_sizes[static_cast<std::size_t>(a)]);
    for (igraph_integer_t b = 0; b < k; ++b) MATRIX(pref, a, b) = a == b ? p_in : p_out;
  }
  igraph_rng_seed(igraph_rng_default(), static_cast<igraph_uint_t>(seed));
  OwnedGraph owned;
  const igraph_error_t code = made_sizes == IGRAPH_SUCCESS ? igraph_sbm_game(&owned.g, static_cast<igraph_integer_t>(n),
                                                                             &pref, &sizes, false, false)
                                                           : made_sizes;
  owned.made = code == IGRAPH_SUCCESS;
  if (made_sizes == IGRAPH_SUCCESS) igraph_vector_int_destroy(&sizes);
  igraph_matrix_destroy(&pref);
  check_igraph(code, what);
  return graph_of(owned.g, what);
}

Hops igraph_hop_distances(const Graph& g) {
  check_graph(g);
  // igraph's (n, n) matrix of doubles and the chapter's (n, n) table of sizes, both held at once.
  checked_allocation("igraph_hop_distances: igraph's distances and the table, 2 × n × n nodes × 8 bytes",
                     {2, g.n, g.n, 8});
  quiet_errors();
  igraph_vector_int_t edges;
  check_igraph(igraph_vector_int_init(&edges, static_cast<igraph_integer_t>(2 * g.edges.size())),
               "igraph_hop_distances");
  for (std::size_t e = 0; e < g.edges.size(); ++e) {
    VECTOR(edges)[2 * e] = static_cast<igraph_integer_t>(g.edges[e].first);
    VECTOR(edges)[2 * e + 1] = static_cast<igraph_integer_t>(g.edges[e].second);
  }
  OwnedGraph owned;
  const igraph_error_t made = igraph_create(&owned.g, &edges, static_cast<igraph_integer_t>(g.n), IGRAPH_UNDIRECTED);
  igraph_vector_int_destroy(&edges);
  check_igraph(made, "igraph_hop_distances: igraph_create");
  owned.made = true;
  igraph_matrix_t res;
  check_igraph(igraph_matrix_init(&res, 0, 0), "igraph_hop_distances");
  const igraph_error_t code = igraph_distances(&owned.g, &res, igraph_vss_all(), igraph_vss_all(), IGRAPH_ALL);
  Hops hops(Hops::shape_type{g.n, g.n}, kUnreachable);  // (n, n)
  for (std::size_t i = 0; code == IGRAPH_SUCCESS && i < g.n; ++i)
    for (std::size_t j = 0; j < g.n; ++j) {
      const igraph_real_t dist = MATRIX(res, static_cast<igraph_integer_t>(i), static_cast<igraph_integer_t>(j));
      if (dist != IGRAPH_INFINITY) hops(i, j) = static_cast<std::size_t>(dist);
    }
  igraph_matrix_destroy(&res);
  check_igraph(code, "igraph_hop_distances: igraph_distances");
  return hops;
}

#else

bool have_igraph() { return false; }

Graph famous_graph(const std::string& name) {
  throw std::runtime_error("famous_graph(\"" + name + "\"): built without igraph (apt-get install libigraph-dev)");
}

Graph sbm_graph(const std::vector<std::size_t>&, double, double, std::uint64_t) {
  throw std::runtime_error("sbm_graph: built without igraph (apt-get install libigraph-dev)");
}

Hops igraph_hop_distances(const Graph&) {
  throw std::runtime_error("igraph_hop_distances: built without igraph (apt-get install libigraph-dev)");
}

#endif

}  // namespace attn::ch15
