// Chapter 15 — Structured attention: graphs, trees, and what a prior buys.
//
// What it shows: attention written as message passing (message, aggregate, update) equal to chapter 02's
// attention on the complete graph, and to masked attention on a graph's edges, isolated nodes included;
// GAT's additive score and GATv2's, and GAT's static attention (every listener ranks the senders in one
// order) against GATv2; Zachary's karate club from igraph, classified from two labelled members per
// faction by one attention layer trained with chapter 12's cross-entropy and AdamW, without the graph,
// with the graph as a hard mask (GAT) and as a learned bias per hop distance (Graphormer), accuracy as
// mean ± sd over seeds, the club drawn coloured by prediction; the article's sentences with their
// dependency trees as subtree masks and tree distances; chapter 13's merge as the reduction of a decode
// step over P ranks along a binomial tree, ⌈log₂P⌉ rounds, equal to single-process attention.
// The same reduction over real processes with MPI_Allreduce and MPI_Op_create: ch15_structured_mpi
// (chapters/15_structured/structured_mpi.cpp), launched by `./course run 15` on 4 ranks.
// The stochastic-block-model sweep (igraph's generator): accuracy of the three structures against the ratio of
// in- to cross-community edges, plotted, with the ratio where the hard mask starts to beat no graph.
// Its benchmarks (bench.cpp, `./course bench 15`): the CSR graph-attention kernel (csr.cpp) against dense masked
// attention on the same random graphs, and the memory bandwidth STREAM's triad reaches (one of the run's
// ceilings), in one run.
// Nested MAX expressions (ListOps-style, generated with their trees) trained with the tree as a subtree mask, as
// a distance bias and not at all: accuracy on held-out expressions against training steps, plotted.
// What it leaves out: several layers, training GATv2 (its scores are compared on the same weights), and
// ListOps' other operators.
// Run it: ./course run 15      Your code: ./course run 15 --track exercise      Book page: book/15_structured.md
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "03_multi_head/heads.hpp"
#include "05_flash_cpu/flash_fast.hpp"
#include "13_ring/ring.hpp"
#include "15_structured/graph.hpp"
#include "15_structured/igraph_graphs.hpp"
#include "15_structured/node_model.hpp"
#include "15_structured/reduction.hpp"
#include "15_structured/structured.hpp"
#include "attn/chapter.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/stats.hpp"

namespace {

namespace ch15 = attn::ch15;
using attn::Matrix;
using attn::Vector;
using ch15::Structure;

/// What the reader can change.
struct Options {
  std::size_t seeds = 5;         ///< training runs per structure (model initialisation and labelled members)
  std::size_t steps = 150;       ///< AdamW steps per run
  std::uint64_t seed = 15;       ///< first seed
  std::size_t labelled = 2;      ///< labelled members per faction (the leader and random others)
  std::size_t sbm_runs = 5;      ///< graphs per point of the block-model sweep
  std::size_t tree_steps = 160;  ///< AdamW steps on the nested expressions
};

// [message_passing_equals_attention]
void print_message_passing(std::uint64_t seed) {
  attn::heading("A transformer layer is message passing on the complete graph");
  attn::Rng rng(seed);
  const std::size_t n = 7, d = 8;
  const Matrix Q = rng.normal(n, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n, d) each
  // A path 0 – 1 – 2 – 3 – 4 – 5 and node 6 alone: masked attention must give node 6 zeros, not NaN.
  const ch15::Graph path{n, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}};
  attn::Table t({"graph", "senders of node i", "max |message passing − chapter 02|", "node 6's output"});
  t.set_left(1);
  const Matrix complete = ch15::message_passing(Q, K, V, ch15::complete_lists(n));
  t.add_row({"complete", "all n",
             fmt::format("{:.1e}", attn::max_abs_diff(complete, attn::scaled_dot_product_attention(Q, K, V))),
             "a weighted mean"});
  const Matrix on_path = ch15::message_passing(Q, K, V, ch15::neighbour_lists(path, true));
  const Matrix masked = attn::scaled_dot_product_attention(Q, K, V, ch15::adjacency_mask(path, true));
  t.add_row({"path + self-loops", "neighbours and i", fmt::format("{:.1e}", attn::max_abs_diff(on_path, masked)),
             "itself only"});
  const Matrix no_loops = ch15::message_passing(Q, K, V, ch15::neighbour_lists(path, false));
  const double node6 = xt::amax(xt::abs(xt::row(no_loops, 6)))();
  t.add_row({"path, no self-loops", "neighbours only",
             fmt::format("{:.1e}", attn::max_abs_diff(no_loops, attn::scaled_dot_product_attention(
                                                                    Q, K, V, ch15::adjacency_mask(path, false)))),
             fmt::format("zeros (max |o| = {})", node6)});
  t.print();
  fmt::print(
      "Message: (q_i·k_j/√d_k, v_j) from every sender j; aggregate: softmax over the senders; update: the\n"
      "weighted mean. With every node a sender it is chapter 02's attention; with a graph's edges it is the\n"
      "same attention with the graph as its mask. A node that hears nobody keeps zeros.\n");
}
// [message_passing_equals_attention]

/// For every listener, its senders ranked by score (highest first).
std::vector<std::vector<std::size_t>> rankings(const Matrix& E, const ch15::Neighbours& in) {
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::vector<std::size_t> order = in[i];
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return E(i, x) > E(i, y); });
    out.push_back(order);
  }
  return out;
}

/// How many listeners rank their senders in an order that one global order of all nodes could explain:
/// each listener's order must agree with the order of the senders' a_r·h_j (GAT's "static" ranking).
std::size_t consistent_with(const std::vector<std::vector<std::size_t>>& ranked, const std::vector<float>& key) {
  std::size_t agree = 0;
  for (const auto& order : ranked) {
    bool ok = true;
    for (std::size_t e = 1; e < order.size(); ++e) ok = ok && key[order[e - 1]] >= key[order[e]];
    agree += ok;
  }
  return agree;
}

/// The sender part a_r·h_j of GAT's score for every node j.
std::vector<float> sender_scores(const Matrix& H, const Vector& a) {
  const std::size_t d = H.shape(1);
  std::vector<float> r(H.shape(0), 0.0f);
  for (std::size_t j = 0; j < H.shape(0); ++j)
    for (std::size_t c = 0; c < d; ++c) r[j] += a(d + c) * H(j, c);
  return r;
}

/// The number of distinct top choices among the listeners.
std::size_t distinct_tops(const std::vector<std::vector<std::size_t>>& ranked) {
  std::set<std::size_t> tops;
  for (const auto& order : ranked)
    if (!order.empty()) tops.insert(order.front());
  return tops.size();
}

void print_static_attention(std::uint64_t seed) {
  attn::heading("GAT's attention is static, GATv2's is not (random weights, complete graph, n = 12)");
  attn::Rng rng(seed + 1);
  const std::size_t n = 12, d = 6;
  const Matrix H = rng.normal(n, d);                        // (n, d)
  const Vector a = xt::flatten(rng.normal(1, 2 * d));       // (2·d)
  const Matrix L = rng.normal(n, d), R = rng.normal(n, d);  // (n, d) each
  const Vector a2 = xt::flatten(rng.normal(1, d));          // (d)
  const ch15::Neighbours all = ch15::complete_lists(n);
  const auto gat = rankings(ch15::gat_scores(H, a), all);
  const auto v2 = rankings(ch15::gatv2_scores(L, R, a2), all);
  attn::Table t({"score", "listeners whose ranking is listener 0's", "distinct top senders"});
  const auto same_as_first = [](const auto& ranked) {
    std::size_t k = 0;
    for (const auto& order : ranked) k += order == ranked[0];
    return k;
  };
  t.add_row({"GAT    LeakyReLU(a_l·h_i + a_r·h_j)", fmt::format("{} of {}", same_as_first(gat), n),
             fmt::format("{}", distinct_tops(gat))});
  t.add_row({"GATv2  aᵀ LeakyReLU(l_i + r_j)", fmt::format("{} of {}", same_as_first(v2), n),
             fmt::format("{}", distinct_tops(v2))});
  t.print();
  fmt::print(
      "LeakyReLU is monotone, so in GAT the listener's term a_l·h_i cannot change which sender wins: the\n"
      "order of a_r·h_j decides for everyone. GATv2 applies the nonlinearity before a mixes the\n"
      "coordinates, so the ranking depends on the listener.\n");
}

struct Summary {
  double mean = 0.0, sd = 0.0;
};
/// Mean and sample standard deviation of the accuracies.
Summary summarise(const std::vector<double>& xs) {
  Summary s;
  for (double x : xs) s.mean += x / static_cast<double>(xs.size());
  for (double x : xs) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = xs.size() > 1 ? std::sqrt(s.sd / static_cast<double>(xs.size() - 1)) : 0.0;
  return s;
}

/// The labelled members of one run: each faction's leader (0 and 33) and labelled - 1 others drawn at random.
std::vector<std::size_t> draw_labelled(std::size_t per_faction, std::uint64_t seed) {
  const auto& faction = ch15::karate_factions();
  std::vector<std::size_t> chosen{0, 33};
  attn::Rng rng(seed);
  for (std::size_t f = 0; f < 2; ++f) {
    std::vector<std::size_t> pool;
    for (std::size_t i = 1; i < 33; ++i)
      if (faction[i] == f) pool.push_back(i);
    std::shuffle(pool.begin(), pool.end(), rng.engine());
    for (std::size_t k = 0; k + 1 < per_faction && k < pool.size(); ++k) chosen.push_back(pool[k]);
  }
  return chosen;
}

// [karate_dot]
/// The club as a Graphviz file laid out by neato: members coloured by predicted faction, a double ring on the
/// labelled ones, a red outline where the prediction is wrong.
void write_karate_dot(const std::string& path, const ch15::Graph& g, const std::vector<std::size_t>& predicted,
                      const std::vector<std::size_t>& labelled) {
  std::ofstream out(path);
  out << "graph karate {\n  layout=neato; overlap=false; splines=true; start=1;\n"
         "  node [shape=circle, style=filled, fontname=\"Helvetica\", fontsize=10, width=0.35, fixedsize=true];\n"
         "  edge [color=\"#9a9a9a\"];\n";
  const auto& truth = ch15::karate_factions();
  for (std::size_t i = 0; i < g.n; ++i) {
    const bool is_labelled = std::find(labelled.begin(), labelled.end(), i) != labelled.end();
    out << fmt::format("  {} [fillcolor=\"{}\", color=\"{}\", penwidth={}{}];\n", i,
                       predicted[i] == 0 ? "#8ecae6" : "#ffb703", predicted[i] == truth[i] ? "#333333" : "#d00000",
                       predicted[i] == truth[i] ? 1 : 3, is_labelled ? ", peripheries=2" : "");
  }
  for (const auto& [u, v] : g.edges) out << fmt::format("  {} -- {};\n", u, v);
  out << "}\n";
  if (!out) throw std::runtime_error("could not write " + path);
}
// [karate_dot]

void print_karate(const attn::Chapter& chapter, const Options& o) {
  attn::heading("Zachary's karate club (igraph): which faction does each member join?");
  if (!ch15::have_igraph()) {
    fmt::print("SKIPPED: this build has no igraph (apt-get install libigraph-dev, or ./course setup).\n");
    return;
  }
  const ch15::Graph club = ch15::famous_graph("Zachary");
  const ch15::Hops hops = ch15::igraph_hop_distances(club);
  const bool same = hops == ch15::hop_distances(club);
  std::size_t diameter = 0;
  for (std::size_t h : hops) diameter = std::max(diameter, h);
  fmt::print("{} members, {} friendships, diameter {} hops; igraph's distances {} the chapter's BFS.\n", club.n,
             club.edges.size(), diameter, same ? "equal" : "DIFFER FROM");
  fmt::print(
      "Features: one-hot (a member is only its id). Labelled: {} per faction (the leaders, 0 and 33, and\n"
      "random others), the rest are scored. One attention layer (GAT score, d = 8) + linear read-out,\n"
      "{} full-batch AdamW steps (chapter 12), {} runs each.\n",
      o.labelled, o.steps, o.seeds);

  ch15::NodeTask task{xt::eye<float>(club.n), ch15::adjacency_mask(club, true), hops, Structure::mask, 0.2f};
  ch15::NodeTraining training;
  training.steps = o.steps;
  attn::Table t({"structure", "accuracy (mean ± sd)", "worst run", "best run"});
  ch15::NodeResult shown;
  std::vector<std::size_t> shown_labelled;
  std::vector<double> bias_b;
  for (Structure s : {Structure::none, Structure::mask, Structure::bias}) {
    task.structure = s;
    std::vector<double> acc;
    for (std::size_t run = 0; run < o.seeds; ++run) {
      const std::vector<std::size_t> labelled = draw_labelled(o.labelled, o.seed + 100 * run);
      const ch15::NodeResult r = ch15::train_nodes(task, ch15::karate_factions(), labelled, 2, training, o.seed + run);
      acc.push_back(r.accuracy);
      if (run == 0 && s == Structure::mask) {
        shown = r;
        shown_labelled = labelled;
      }
      if (run == 0 && s == Structure::bias) bias_b.assign(r.model.b.begin(), r.model.b.end());
    }
    const Summary sum = summarise(acc);
    t.add_row({ch15::structure_name(s), fmt::format("{:.1f}% ± {:.1f}", 100 * sum.mean, 100 * sum.sd),
               fmt::format("{:.1f}%", 100 * *std::min_element(acc.begin(), acc.end())),
               fmt::format("{:.1f}%", 100 * *std::max_element(acc.begin(), acc.end()))});
  }
  t.print();
  fmt::print("Learned hop biases (first run): ");
  for (std::size_t k = 0; k < bias_b.size(); ++k)
    fmt::print("{}{} hop{}: {:+.2f}", k ? ", " : "",
               k + 1 == bias_b.size() ? fmt::format("≥{}", k) : fmt::format("{}", k), k == 1 ? "" : "s", bias_b[k]);
  fmt::print(".\n");

  // GAT's static attention on the trained model: every member ranks its friends by a_r·h_j alone.
  const auto ranked = rankings(shown.trace.E, ch15::neighbour_lists(club, true));
  const std::size_t agree = consistent_with(ranked, sender_scores(shown.trace.H, xt::flatten(shown.model.a)));
  fmt::print(
      "Trained GAT (first run): {} of {} members rank their friends in the order of one number per friend\n"
      "(a_r·h_j): attention that is static, whatever the listener.\n",
      agree, club.n);
  if (const auto svg = chapter.figure_path("ch15_karate.svg")) {
    const std::string dot = svg->substr(0, svg->size() - 4) + ".dot";
    write_karate_dot(dot, club, shown.predicted, shown_labelled);
    attn::ch03::render_dot_svg(dot, *svg);
    chapter.announce_figure(*svg);
  }
}

// [sbm_sweep]
/// One graph of the sweep: two communities of \p block nodes, features that carry the class weakly (each of 4
/// coordinates is ±signal plus unit noise), 4 labelled nodes per community.
struct SbmRun {
  ch15::NodeTask task;
  std::vector<std::size_t> labels, labelled;
};
SbmRun make_sbm_run(std::size_t block, double p_in, double p_out, std::uint64_t seed) {
  const ch15::Graph g = ch15::sbm_graph({block, block}, p_in, p_out, seed);
  attn::Rng rng(seed);
  SbmRun run;
  Matrix X = rng.normal(2 * block, 4);  // (n, 4): noise, then the class's signal added
  for (std::size_t i = 0; i < 2 * block; ++i) {
    run.labels.push_back(i < block ? 0 : 1);
    for (std::size_t c = 0; c < 4; ++c) X(i, c) += i < block ? 0.25f : -0.25f;
  }
  for (std::size_t community = 0; community < 2; ++community) {
    std::vector<std::size_t> members(block);
    for (std::size_t k = 0; k < block; ++k) members[k] = community * block + k;
    std::shuffle(members.begin(), members.end(), rng.engine());
    run.labelled.insert(run.labelled.end(), members.begin(), members.begin() + 4);
  }
  run.task = ch15::NodeTask{X, ch15::adjacency_mask(g, true), ch15::hop_distances(g), Structure::none, 0.2f, true};
  return run;
}
// [sbm_sweep]

void print_sbm_sweep(const attn::Chapter& chapter, const Options& o) {
  attn::heading("When does the prior help? Two communities of 20 from igraph's stochastic block model");
  if (!ch15::have_igraph()) {
    fmt::print("SKIPPED: this build has no igraph (apt-get install libigraph-dev, or ./course setup).\n");
    return;
  }
  const std::size_t block = 20;
  // p_in + p_out = degree / block: a node's expected degree, (block − 1)·p_in + block·p_out = degree − p_in, stays
  // just under 5 whatever the ratio (p_in ≤ 0.25).
  const double degree = 5.0;
  const std::vector<double> ratios{0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0};
  const std::array<Structure, 3> structures{Structure::none, Structure::mask, Structure::bias};
  fmt::print(
      "Features carry the class weakly (4 coordinates, ±0.25 plus unit noise); 4 labelled nodes per\n"
      "community; the layer has a residual (a node keeps its own features). The ratio p_in / p_out sweeps\n"
      "from more edges across the communities than inside (0.25) to almost none across (16); the\n"
      "expected degree, {} − p_in, stays just under it. Accuracy on the 32 unlabelled nodes, mean of\n"
      "{} graphs per point.\n",
      degree, o.sbm_runs);
  ch15::NodeTraining training;
  training.steps = o.steps;
  attn::Table t({"p_in / p_out", "p_in", "p_out", "no graph", "hard mask (GAT)", "hop bias"});
  std::vector<attn::Series> series;
  for (Structure s : structures) series.push_back({ch15::structure_name(s), {}, {}, true});
  std::vector<bool> mask_ahead;  // (ratios) the hard mask beats no graph at this ratio
  for (std::size_t k = 0; k < ratios.size(); ++k) {
    const double p_out = degree / (static_cast<double>(block) * (1.0 + ratios[k])), p_in = ratios[k] * p_out;
    std::array<double, 3> mean{};
    for (std::size_t run = 0; run < o.sbm_runs; ++run) {
      SbmRun r = make_sbm_run(block, p_in, p_out, o.seed + 1000 * k + run);
      for (std::size_t si = 0; si < structures.size(); ++si) {
        r.task.structure = structures[si];
        const double acc = ch15::train_nodes(r.task, r.labels, r.labelled, 2, training, o.seed + run).accuracy;
        mean[si] += acc / static_cast<double>(o.sbm_runs);
      }
    }
    std::vector<std::string> row{fmt::format("{}", ratios[k]), fmt::format("{:.3f}", p_in),
                                 fmt::format("{:.3f}", p_out)};
    for (std::size_t si = 0; si < structures.size(); ++si) {
      row.push_back(fmt::format("{:.1f}%", 100 * mean[si]));
      series[si].x.push_back(ratios[k]);
      series[si].y.push_back(100 * mean[si]);
    }
    t.add_row(row);
    mask_ahead.push_back(mean[1] > mean[0]);
  }
  t.print();
  // The crossover: the smallest ratio from which the mask stays ahead at every larger ratio of the sweep.
  std::size_t from = ratios.size();
  while (from > 0 && mask_ahead[from - 1]) --from;
  if (from < ratios.size())
    fmt::print("Crossover: the hard mask beats no graph at every ratio from p_in / p_out = {} up.\n", ratios[from]);
  else
    fmt::print("No crossover: at the sweep's largest ratio the hard mask does not beat no graph.\n");
  if (const auto svg = chapter.figure_path("ch15_sbm.svg")) {
    attn::write_svg_plot(*svg, {"Accuracy against the ratio of in- to cross-community edges (mean degree just under 5)",
                                "p_in / p_out", "accuracy on unlabelled nodes (%)", true, false, series});
    chapter.announce_figure(*svg);
  }
}

void print_trees() {
  attn::heading("Trees: the article's sentences with their dependency trees (Universal Dependencies)");
  const auto& sentences = ch15::parsed_sentences();
  const ch15::ParsedSentence& en = sentences[1];
  attn::Table t({"token", "head", "relation", "subtree (what the token may see)"});
  t.set_left(1).set_left(2).set_left(3);
  const attn::Mask mask = ch15::subtree_mask(en.parent);
  for (std::size_t i = 0; i < en.tokens.size(); ++i) {
    std::vector<std::string> seen;
    for (std::size_t j = 0; j < en.tokens.size(); ++j)
      if (mask(i, j)) seen.push_back(en.tokens[j]);
    t.add_row(
        {fmt::format("{} {}", i, en.tokens[i]),
         en.parent[i] < 0 ? "—" : fmt::format("{} {}", en.parent[i], en.tokens[static_cast<std::size_t>(en.parent[i])]),
         en.relation[i], fmt::format("{}", fmt::join(seen, " "))});
  }
  t.print();

  fmt::print("\nTree distance from the pronoun, with a hop bias b = (0, −1, −2, −3, −4) (what a prior would add):\n");
  const Vector b = {0.0f, -1.0f, -2.0f, -3.0f, -4.0f};
  attn::Table d({"sentence", "pronoun", "antecedent: hops", "other candidate: hops", "prior prefers"});
  d.set_left(1);
  for (const ch15::ParsedSentence& s : sentences) {
    const ch15::Hops hops = ch15::hop_distances(ch15::tree_graph(s.parent));
    const Matrix bias = ch15::hop_bias(hops, b);
    // The other candidate: the last subject, object or oblique that is neither the antecedent nor the pronoun
    // (a noun, or in the book sentences the pronoun I / 我, which the tree cannot rule out either).
    std::size_t other = s.tokens.size();
    for (std::size_t j = 0; j < s.tokens.size(); ++j)
      if (j != s.antecedent && j != s.pronoun &&
          (s.relation[j] == "nsubj" || s.relation[j] == "obj" || s.relation[j] == "obl"))
        other = j;
    const float to_antecedent = bias(s.pronoun, s.antecedent);
    const std::string other_cell =
        other < s.tokens.size() ? fmt::format("{} {}", s.tokens[other], hops(s.pronoun, other)) : "—";
    const std::string prefers = other == s.tokens.size()                 ? "—"
                                : to_antecedent > bias(s.pronoun, other) ? "antecedent"
                                : to_antecedent < bias(s.pronoun, other) ? "the other"
                                                                         : "neither (tie)";
    d.add_row({s.name, s.tokens[s.pronoun], fmt::format("{} {}", s.tokens[s.antecedent], hops(s.pronoun, s.antecedent)),
               other_cell, prefers});
  }
  d.print();
  fmt::print(
      "The pronoun sits in the second clause; its antecedent and the other candidate both hang from the\n"
      "first clause's predicate, so a syntactic tree puts them at the same distance: coreference across\n"
      "clauses is not in the tree, it has to be learned from the content (chapter 12's pronoun task).\n");
}

// [tree_batch]
/// \p count expressions as one forest: features one-hot by token (n, 11); the scores of one expression never
/// reach another (a block mask, or for the bias the "unreachable" entry of the table). The structure decides
/// what a token sees inside its expression: all of it (none), its subtree (mask), or all of it with a learned
/// bias per tree distance (bias).
struct TreeBatch {
  ch15::NodeTask task;
  std::vector<std::size_t> targets;  // (n) the max below each operator, kIgnore at digits
};
TreeBatch make_tree_batch(std::size_t count, Structure structure, attn::Rng& rng) {
  std::vector<ch15::MaxExpression> expressions;
  std::size_t n = 0;
  for (std::size_t k = 0; k < count; ++k) {
    expressions.push_back(ch15::make_max_expression(rng, 3));
    n += expressions.back().tokens.size();
  }
  TreeBatch b{{xt::zeros<float>({n, ch15::kMaxToken + 1}), attn::Mask(attn::Mask::shape_type{n, n}, false),
               ch15::Hops(ch15::Hops::shape_type{n, n}, ch15::kUnreachable), structure, 0.2f, false},
              {}};
  std::size_t at = 0;
  for (const ch15::MaxExpression& e : expressions) {
    const std::size_t len = e.tokens.size();
    const attn::Mask subtree = ch15::subtree_mask(e.parent);
    const ch15::Hops hops = ch15::hop_distances(ch15::tree_graph(e.parent));
    for (std::size_t i = 0; i < len; ++i) {
      b.task.X(at + i, e.tokens[i]) = 1.0f;
      b.targets.push_back(e.target[i]);
      for (std::size_t j = 0; j < len; ++j) {
        b.task.allowed(at + i, at + j) = structure == Structure::mask ? subtree(i, j) : true;
        b.task.hops(at + i, at + j) = hops(i, j);
      }
    }
    at += len;
  }
  // Without the tree the block mask keeps expressions apart; the bias does it with its last entry.
  if (structure == Structure::none) b.task.structure = Structure::mask;
  return b;
}
// [tree_batch]

/// The expression below token \p at with its brackets drawn: [MAX 3 [MAX 1 7] 2].
std::string bracketed(const ch15::MaxExpression& e, std::size_t at) {
  if (e.tokens[at] != ch15::kMaxToken) return fmt::format("{}", e.tokens[at]);
  std::string out = "[MAX";
  for (std::size_t j = at + 1; j < e.tokens.size(); ++j)
    if (e.parent[j] == static_cast<long>(at)) out += " " + bracketed(e, j);
  return out + "]";
}

void print_tree_task(const attn::Chapter& chapter, const Options& o) {
  attn::heading("A task where the tree matters: nested MAX expressions (ListOps-style), max below each operator");
  attn::Rng sample_rng(o.seed + 7);
  const ch15::MaxExpression sample = ch15::make_max_expression(sample_rng, 3);
  fmt::print("{}", attn::wrapped("One expression, with its brackets drawn (the model sees only the tokens in "
                                 "this order and the tree): " +
                                     bracketed(sample, 0),
                                 100, ""));
  fmt::print(
      "Each operator must output the largest digit of its own subtree, not of the whole expression.\n"
      "One attention layer (GAT score, d = 16), batches of 8 fresh expressions, {} AdamW steps; accuracy\n"
      "on the operators of 32 unseen expressions:\n",
      o.tree_steps);
  ch15::NodeTraining s;
  s.d = 16;
  s.B = 8;  // distances 0 … 6 occur inside a depth-3 tree; entry 7 is "another expression"
  s.adamw.lr = 0.02f;
  const std::vector<std::size_t> checkpoints{0, o.tree_steps / 4, o.tree_steps / 2, o.tree_steps};
  std::vector<std::string> header{"structure"};
  for (std::size_t c : checkpoints) header.push_back(fmt::format("step {}", c));
  attn::Table t(header);
  std::vector<attn::Series> series;
  for (Structure structure : {Structure::none, Structure::mask, Structure::bias}) {
    const std::string name = structure == Structure::none   ? "whole expression"
                             : structure == Structure::mask ? "subtree mask"
                                                            : "tree-distance bias";
    attn::Rng data(o.seed + 11), held_out(o.seed + 12);
    const TreeBatch test = make_tree_batch(32, structure, held_out);
    ch15::NodeModel model = ch15::init_node_model(ch15::kMaxToken + 1, s.d, s.B, 10, o.seed);
    ch15::NodeModel m = ch15::zeros_like(model), v = ch15::zeros_like(model);
    attn::Series line{name, {}, {}, true};
    std::vector<std::string> row{name};
    for (std::size_t step = 0; step <= o.tree_steps; ++step) {
      if (step > 0) {
        const TreeBatch batch = make_tree_batch(8, structure, data);
        ch15::node_step(model, m, v, step, batch.task, batch.targets, s.adamw);
      }
      if (step % std::max<std::size_t>(1, o.tree_steps / 8) != 0 &&
          std::find(checkpoints.begin(), checkpoints.end(), step) == checkpoints.end())
        continue;
      const double acc =
          ch15::accuracy_on(ch15::predictions(ch15::node_forward(model, test.task).logits), test.targets);
      line.x.push_back(static_cast<double>(step));
      line.y.push_back(100 * acc);
      if (std::find(checkpoints.begin(), checkpoints.end(), step) != checkpoints.end())
        row.push_back(fmt::format("{:.1f}%", 100 * acc));
    }
    t.add_row(row);
    series.push_back(line);
  }
  t.print();
  fmt::print(
      "GAT's static ranking is what MAX needs: one order of the digits for every listener. Given the\n"
      "subtree, the largest digit in it wins; over the whole expression every operator sees the global\n"
      "maximum, right only at the root and where the subtree holds it. The distance bias cannot tell a\n"
      "token below from one beside at the same distance.\n");
  if (const auto svg = chapter.figure_path("ch15_listops.svg")) {
    attn::write_svg_plot(*svg, {"Nested MAX expressions: accuracy on held-out operators during training", "AdamW step",
                                "accuracy (%)", false, false, series});
    chapter.announce_figure(*svg);
  }
}

// [decode_reduction]
void print_reduction(std::uint64_t seed) {
  attn::heading("The other tree: one decode step's keys on P ranks, merged along a binomial tree");
  attn::Rng rng(seed + 2);
  const std::size_t n = 1000, d = 16, n_q = 2;
  const Matrix Q = rng.normal(n_q, d), K = rng.normal(n, d), V = rng.normal(n, d);  // (n_q, d), (n, d), (n, d)
  const Matrix reference = attn::scaled_dot_product_attention(Q, K, V);             // (n_q, d)
  attn::Table t({"P", "rounds (tree)", "⌈log₂P⌉", "steps (ring)", "max |ΔO| vs one process"});
  for (std::size_t P : {1ul, 2ul, 3ul, 4ul, 5ul, 8ul}) {
    std::vector<std::vector<float>> parts;  // P × (n_q, d + 1): per rank its packed [lse, O] rows
    for (std::size_t r = 0; r < P; ++r) {
      const attn::ch13::Chunk keys = attn::ch13::even_chunk(r, P, n);
      const Matrix K_r = xt::view(K, xt::range(keys.begin, keys.end), xt::all());  // (n/P, d)
      const Matrix V_r = xt::view(V, xt::range(keys.begin, keys.end), xt::all());  // (n/P, d)
      const attn::FlashOutput part = attn::ch05::flash_attention_fast(Q, K_r, V_r, false);
      std::vector<float> packed;
      for (std::size_t i = 0; i < n_q; ++i) {
        packed.push_back(part.lse(i));
        for (std::size_t c = 0; c < d; ++c) packed.push_back(part.O(i, c));
      }
      parts.push_back(packed);
    }
    const std::size_t rounds = ch15::tree_reduce(parts, n_q, d);
    Matrix O = Matrix::from_shape({n_q, d});  // (n_q, d)
    for (std::size_t i = 0; i < n_q; ++i)
      for (std::size_t c = 0; c < d; ++c) O(i, c) = parts[0][i * (d + 1) + 1 + c];
    t.add_row({fmt::format("{}", P), fmt::format("{}", rounds), fmt::format("{}", ch15::ceil_log2(P)),
               fmt::format("{}", P - 1), fmt::format("{:.1e}", attn::max_abs_diff(O, reference))});
  }
  t.print();
  fmt::print(
      "Each rank sends one packed result, n_q·(d + 1) floats, once: the merge is associative and\n"
      "commutative, so any tree gives the same answer to rounding. ch15_structured_mpi does it with\n"
      "MPI_Allreduce and the merge registered by MPI_Op_create.\n");
}
// [decode_reduction]

void tell_the_story(const attn::Chapter& chapter, const Options& o) {
  print_message_passing(o.seed);
  print_static_attention(o.seed);
  print_karate(chapter, o);
  print_sbm_sweep(chapter, o);
  print_trees();
  print_tree_task(chapter, o);
  print_reduction(o.seed);
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch15_structured", "Chapter 15: structured attention — graphs, trees, and what a prior buys");
  Options o;
  chapter.cli()
      .add_option("--seeds", o.seeds, "Training runs per structure on the karate club")
      ->check(CLI::Range(1, 100));
  chapter.cli().add_option("--steps", o.steps, "AdamW steps per run")->check(CLI::Range(1, 5000));
  chapter.cli().add_option("--seed", o.seed, "First seed of the random examples and runs");
  chapter.cli()
      .add_option("--labelled", o.labelled, "Labelled members per faction (the leader and random others)")
      ->check(CLI::Range(1, 16));
  chapter.cli()
      .add_option("--sbm-runs", o.sbm_runs, "Graphs per point of the stochastic-block-model sweep")
      ->check(CLI::Range(1, 100));
  chapter.cli()
      .add_option("--tree-steps", o.tree_steps, "AdamW steps on the nested MAX expressions")
      ->check(CLI::Range(4, 5000));
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, o); });
}
