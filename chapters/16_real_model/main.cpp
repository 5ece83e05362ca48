// Chapter 16 — A real model: all-MiniLM-L6-v2 through the course's own attention.
//
// What it shows: a pretrained sentence encoder (6 layers × 12 heads, d = 384) read from its safetensors file
// and its vocabulary in C++, its text cut into WordPiece tokens, and its forward pass computed with chapter
// 03's heads and chapter 05's flash kernel, equal to sentence-transformers' recorded embeddings; what its 72
// heads look at ([CLS], [SEP], the previous, next or same token, and how spread out) over a fixed sentence
// set, drawn as a head map; which heads look from "it" to its antecedent in the article's English sentences;
// how many heads it needs (heads pruned in order of their contribution, cosine and nearest-neighbour
// agreement with the full model); chapter 12's explanations (attention, rollout, flow, and gradient × input
// and integrated gradients through the model's backward, embedding_backward.hpp) compared by deleting their top words.
// What it leaves out: padding masks (a batch is packed, with no padding) and training. Its speed beside
// sentence-transformers is measured by `./course bench 16 --vs-torch` (book: measure_16_real_model).
// Run it: ./course run 16 (after ./course setup has unpacked the model)      Book page: book/16_real_model.md
// Your code: ./course run 16 --track exercise
#include <malloc.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "02_qkv_trace/qkv_trace.hpp"
#include "07_sparse/sparse.hpp"
#include "08_linear/features.hpp"
#include "08_linear/linear.hpp"
#include "12_learning/flow.hpp"
#include "12_learning/learning.hpp"
#include "16_real_model/embedding_backward.hpp"
#include "16_real_model/fast_minilm.hpp"
#include "16_real_model/minilm.hpp"
#include "16_real_model/real_model.hpp"
#include "attn/chapter.hpp"
#include "attn/checks.hpp"
#include "attn/format.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"
#include "attn/svg.hpp"

namespace {

namespace ch16 = attn::ch16;
using attn::Matrix;
using attn::Tensor3;
using attn::Vector;

std::string layer_head_label(std::size_t layer, std::size_t head) {
  return fmt::format("L{}.H{}", layer + 1, head + 1);
}

double embedding_cosine(const Vector& a, const Vector& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    ab += static_cast<double>(a(j)) * b(j);
    aa += static_cast<double>(a(j)) * a(j);
    bb += static_cast<double>(b(j)) * b(j);
  }
  return ab / std::sqrt(aa * bb);
}

// --- 1. the model ---------------------------------------------------------------------------------------------

void print_model(const ch16::MiniLM& m) {
  attn::heading("all-MiniLM-L6-v2, read from its safetensors file");
  std::size_t parameters = m.word.size() + m.position.size() + m.token_type.size() + 2 * m.config.d;
  for (const ch16::EncoderLayerWeights& W : m.layers)
    parameters += W.W_Q.size() * 4 + W.W_1.size() + W.W_2.size() + 4 * W.b_Q.size() + W.b_1.size() + W.b_2.size() +
                  4 * W.ln1_gamma.size();
  fmt::print(
      "{} layers × {} heads, d = {}, d_k = {}, feed-forward {}, {} WordPieces, at most {} tokens.\n"
      "{} weight tensors, {:.1f} M parameters (the pooler, unused by sentence embeddings, is not read),\n"
      "each read from model.safetensors with read_tensor(), against the shape config.json implies.\n",
      m.config.layers, m.config.heads, m.config.d, m.config.d / m.config.heads, m.config.d_ff, m.config.vocab,
      m.config.max_tokens, 5 + 16 * m.layers.size(), static_cast<double>(parameters) / 1e6);
}

// --- 2. tokens ------------------------------------------------------------------------------------------------

void print_tokens(const ch16::MiniLM& m, const std::vector<std::string>& texts) {
  attn::heading("Text to tokens: basic tokenization, then WordPiece");
  for (const std::string& text : texts) {
    std::vector<std::string> pieces;
    for (int id : ch16::tokenize(text, m.vocab, m.config.max_tokens))
      pieces.push_back(m.vocab.token_of[static_cast<std::size_t>(id)]);
    fmt::print("{}\n  {}\n", text, attn::wrapped(attn::joined(pieces, " "), 96, "  ").substr(2));
  }
}

// --- 3. the same numbers as the reference -----------------------------------------------------------------------

void print_against_reference(const ch16::MiniLM& m) {
  attn::heading("The course's forward against sentence-transformers (recorded, float32)");
  attn::Table t({"text", "tokens", "ids equal", "max |Δ| of the embedding", "cosine"});
  double worst = 0.0;
  for (const ch16::ReferenceText& r : ch16::read_reference(ATTN_CH16_REFERENCE)) {
    const std::vector<int> ids = ch16::tokenize(r.text, m.vocab, m.config.max_tokens);
    const Vector e = ch16::sentence_embedding(m, r.text);
    double diff = 0.0;
    Vector ref = xt::zeros<float>({e.size()});
    for (std::size_t j = 0; j < e.size() && j < r.embedding.size(); ++j) {
      diff = std::max(diff, std::fabs(e(j) - r.embedding[j]));
      ref(j) = static_cast<float>(r.embedding[j]);
    }
    worst = std::max(worst, diff);
    const std::string shown = attn::display_width(r.text) > 36 ? r.text.substr(0, 33) + "…" : r.text;
    t.add_row({shown, fmt::format("{}", ids.size()), ids == r.ids ? "yes" : "NO", attn::sci(diff, 1),
               attn::fixed(embedding_cosine(e, ref), 7)});
  }
  t.print();
  fmt::print(
      "Largest difference {}: float32 rounding (the tests allow 1e-6). The weights are PyTorch's\n"
      "(out, in) Linear layout, applied as x·Wᵀ + b; GELU is the erf form; one sentence needs no mask.\n",
      attn::sci(worst, 2));
}

// --- 4. what the heads do -----------------------------------------------------------------------------------

struct HeadMap {
  Matrix shares;  // (layers·heads, 6): [CLS], [SEP], previous, next, self, entropy / ln n
  std::size_t sentences = 0, tokens = 0;
};

HeadMap measure_heads(const ch16::MiniLM& m, const std::vector<std::string>& sentences) {
  const std::size_t L = m.layers.size(), h = m.config.heads;
  HeadMap map{xt::zeros<float>({L * h, std::size_t{6}}), 0, 0};
  for (const std::string& s : sentences) {
    const std::vector<int> ids = ch16::tokenize(s, m.vocab, m.config.max_tokens);
    std::vector<Matrix> inputs;
    ch16::encode(m, ids, {}, &inputs);
    const double n = static_cast<double>(ids.size());
    for (std::size_t l = 0; l < L; ++l) {
      const Tensor3 A = ch16::attention_maps(inputs[l], m.layers[l]);  // (h, n, n)
      for (std::size_t i = 0; i < h; ++i) {
        const ch16::HeadShares sh = ch16::head_shares(xt::view(A, i, xt::all(), xt::all()));
        const double row[6] = {sh.cls, sh.sep, sh.previous, sh.next, sh.self, sh.entropy / std::log(n)};
        for (std::size_t c = 0; c < 6; ++c) map.shares(l * h + i, c) += static_cast<float>(row[c] * n);
      }
    }
    map.tokens += ids.size();
    ++map.sentences;
  }
  map.shares /= static_cast<float>(map.tokens);  // token-weighted means
  return map;
}

void print_heads(const attn::Chapter& chapter, const ch16::MiniLM& m, const std::vector<std::string>& sentences) {
  const HeadMap map = measure_heads(m, sentences);
  const std::size_t h = m.config.heads;
  attn::heading(fmt::format("What the 72 heads look at ({} sentences, {} tokens)", map.sentences, map.tokens));
  const std::vector<std::string> kinds{"[CLS]", "[SEP]", "previous", "next", "self", "entropy/ln n"};
  attn::Table t({"looks at", "mean over heads", "top heads (share)"});
  for (std::size_t c = 0; c < kinds.size(); ++c) {
    std::vector<std::size_t> order(map.shares.shape(0));
    std::iota(order.begin(), order.end(), 0);
    // Entropy: the most focused heads (lowest) are the interesting ones; shares: the highest.
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return c == 5 ? map.shares(a, c) < map.shares(b, c) : map.shares(a, c) > map.shares(b, c);
    });
    std::vector<std::string> top;
    for (std::size_t k = 0; k < 4; ++k)
      top.push_back(
          fmt::format("{} {}", layer_head_label(order[k] / h, order[k] % h), attn::fixed(map.shares(order[k], c))));
    const double mean = xt::mean(xt::view(map.shares, xt::all(), c))();
    t.add_row({kinds[c], attn::fixed(mean), attn::joined(top, ", ")});
  }
  t.print();
  std::size_t special = 0, positional = 0;
  for (std::size_t r = 0; r < map.shares.shape(0); ++r) {
    special += map.shares(r, 0) + map.shares(r, 1) > 0.5f;
    positional += std::max({map.shares(r, 2), map.shares(r, 3), map.shares(r, 4)}) > 0.5f;
  }
  fmt::print(
      "{} of the 72 heads put more than half their attention on [CLS] or [SEP] (a resting place when the\n"
      "head has nothing to do); {} put more than half on one fixed neighbour (previous, next or self):\n"
      "positional heads. The rest spread their weight by content. (entropy/ln n: 0 = one token,\n"
      "1 = uniform)\n",
      special, positional);
  // Three maps of layer × head, each small enough for the page: one row per layer, one column per head.
  const std::size_t L = m.layers.size();
  std::vector<std::string> layers, heads;  // counted from 1, as the tables name them (L1.H3)
  for (std::size_t l = 1; l <= L; ++l) layers.push_back(fmt::format("L{}", l));
  for (std::size_t i = 1; i <= h; ++i) heads.push_back(fmt::format("H{}", i));
  const auto figure = [&](const char* name, const char* title, const auto& value) {
    if (const auto path = chapter.figure_path(name)) {
      Matrix map_lh = xt::zeros<float>({L, h});  // (layers, heads)
      for (std::size_t r = 0; r < L * h; ++r) map_lh(r / h, r % h) = value(r);
      attn::write_svg_heatmap(*path, map_lh, layers, heads, title);
      chapter.announce_figure(*path);
    }
  };
  figure("ch16_heads_cls.svg", "share of attention on [CLS]", [&](std::size_t r) { return map.shares(r, 0); });
  figure("ch16_heads_neighbours.svg", "share on the previous, next or same token",
         [&](std::size_t r) { return map.shares(r, 2) + map.shares(r, 3) + map.shares(r, 4); });
  figure("ch16_heads_entropy.svg", "entropy / ln n (0: one token, 1: uniform)",
         [&](std::size_t r) { return map.shares(r, 5); });
}

// --- 5. from "it" to its antecedent ------------------------------------------------------------------------------

// [antecedent]
void print_antecedent(const ch16::MiniLM& m, const std::string& text, const std::string& pronoun,
                      const std::string& antecedent, const std::string& distractor) {
  const std::vector<int> ids = ch16::tokenize(text, m.vocab, m.config.max_tokens);
  const auto at = [&](const std::string& word) {
    const auto it = std::find(ids.begin(), ids.end(), m.vocab.find(word));
    return static_cast<std::size_t>(it - ids.begin());
  };
  const std::size_t p = at(pronoun), a = at(antecedent), x = at(distractor);
  std::vector<Matrix> inputs;
  ch16::encode(m, ids, {}, &inputs);
  struct Row {
    std::size_t layer, head;
    float to_antecedent, to_distractor;
    bool top;  // the antecedent is the word (not [CLS], [SEP], punctuation or the pronoun) it weighs most
  };
  std::vector<Row> rows;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const Tensor3 A = ch16::attention_maps(inputs[l], m.layers[l]);  // (h, n, n)
    for (std::size_t i = 0; i < m.config.heads; ++i) {
      std::size_t best = 0;
      float best_w = -1.0f;
      for (std::size_t j = 1; j + 1 < ids.size(); ++j) {
        const std::string& tok = m.vocab.token_of[static_cast<std::size_t>(ids[j])];
        const bool punctuation = tok.size() == 1 && std::ispunct(static_cast<unsigned char>(tok[0]));
        if (j != p && !punctuation && A(i, p, j) > best_w) best_w = A(i, p, j), best = j;
      }
      rows.push_back({l, i, A(i, p, a), A(i, p, x), best == a});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& r, const Row& s) { return r.to_antecedent > s.to_antecedent; });
  const auto tops = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.top; });
  fmt::print("\"{}\"\n  from \"{}\": {} of 72 heads weigh \"{}\" most among the words; the strongest:\n", text, pronoun,
             tops, antecedent);
  attn::Table t({"head", fmt::format("→ {}", antecedent), fmt::format("→ {}", distractor), "antecedent first"});
  for (std::size_t k = 0; k < 5; ++k)
    t.add_row({layer_head_label(rows[k].layer, rows[k].head), attn::fixed(rows[k].to_antecedent),
               attn::fixed(rows[k].to_distractor), rows[k].top ? "yes" : "no"});
  t.print();
}
// [antecedent]

// --- 6. how many heads are needed ---------------------------------------------------------------------------------

struct PruneResult {
  std::vector<double> kept, cosine, agreement;
};

// For each sentence, the index of its nearest other sentence by cosine.
std::vector<std::size_t> nearest(const std::vector<Vector>& e) {
  std::vector<std::size_t> out(e.size(), 0);
  for (std::size_t i = 0; i < e.size(); ++i) {
    double best = -2.0;
    for (std::size_t j = 0; j < e.size(); ++j)
      if (j != i && embedding_cosine(e[i], e[j]) > best) best = embedding_cosine(e[i], e[j]), out[i] = j;
  }
  return out;
}

// How close a variant of the model stays to the full model on the same sentences: mean cosine of the
// embeddings, and the share of sentences whose nearest neighbour in the set is unchanged.
struct Agreement {
  double cosine = 0, neighbours = 0;
};

Agreement agreement(const std::vector<Vector>& full, const std::vector<Vector>& variant) {
  const std::vector<std::size_t> a = nearest(full), b = nearest(variant);
  Agreement r;
  const double share = 1.0 / static_cast<double>(full.size());
  for (std::size_t s = 0; s < full.size(); ++s) {
    r.cosine += embedding_cosine(full[s], variant[s]) * share;
    r.neighbours += a[s] == b[s] ? share : 0.0;
  }
  return r;
}

// [pruning]
PruneResult prune_curve(const ch16::MiniLM& m, const std::vector<std::string>& sentences) {
  const std::size_t L = m.layers.size(), h = m.config.heads;
  // The importance of a head: its mean contribution to its layer's output over the sentences.
  std::vector<double> importance(L * h, 0.0);
  std::vector<Vector> full;
  for (const std::string& s : sentences) {
    const std::vector<int> ids = ch16::tokenize(s, m.vocab, m.config.max_tokens);
    std::vector<Matrix> inputs;
    full.push_back(ch16::mean_pool_normalized(ch16::encode(m, ids, {}, &inputs)));
    for (std::size_t l = 0; l < L; ++l) {
      const std::vector<double> c = ch16::head_contributions(inputs[l], m.layers[l]);
      for (std::size_t i = 0; i < h; ++i) importance[l * h + i] += c[i];
    }
  }
  std::vector<std::size_t> order(L * h);  // least important first: the order heads are removed in
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return importance[a] < importance[b]; });
  PruneResult r;
  // Finer near the full model, where the question is how many can go before anything changes.
  for (const std::size_t kept : {72, 66, 60, 48, 36, 24, 0}) {
    const std::size_t removed = L * h - std::min(kept, L * h);
    ch16::HeadMask keep(L, std::vector<bool>(h, true));
    for (std::size_t k = 0; k < removed; ++k) keep[order[k] / h][order[k] % h] = false;
    std::vector<Vector> pruned;
    for (const std::string& s : sentences) pruned.push_back(ch16::sentence_embedding(m, s, keep));
    const Agreement a = agreement(full, pruned);
    r.kept.push_back(static_cast<double>(L * h - removed));
    r.cosine.push_back(a.cosine);
    r.agreement.push_back(a.neighbours);
  }
  return r;
}
// [pruning]

void print_pruning(const attn::Chapter& chapter, const ch16::MiniLM& m, const std::vector<std::string>& sentences) {
  attn::heading(fmt::format("How many heads are needed? ({} sentences)", sentences.size()));
  const PruneResult r = prune_curve(m, sentences);
  attn::Table t({"heads kept", "mean cosine to the full model", "nearest neighbour unchanged"});
  double smallest = 72;
  for (std::size_t k = 0; k < r.kept.size(); ++k) {
    t.add_row(
        {fmt::format("{:.0f}", r.kept[k]), attn::fixed(r.cosine[k], 4), attn::fixed(100 * r.agreement[k], 1) + "%"});
    if (r.agreement[k] >= 0.95) smallest = std::min(smallest, r.kept[k]);
  }
  t.print();
  fmt::print(
      "Heads are removed least-contributing first (mean norm of what each adds to its layer). The fewest\n"
      "heads on this grid that keep ≥ 95% of nearest neighbours: {:.0f} of 72. The order is fixed once, not\n"
      "re-ranked after each removal, and nothing is retrained.\n",
      smallest);
  if (const auto path = chapter.figure_path("ch16_pruning.svg")) {
    attn::PlotSpec plot{
        "all-MiniLM-L6-v2 with heads pruned", "heads kept", "agreement with the full model", false, false, {}};
    plot.series.push_back({"mean cosine", r.kept, r.cosine, true});
    plot.series.push_back({"nearest neighbour unchanged", r.kept, r.agreement, true});
    attn::write_svg_plot(*path, plot);
    chapter.announce_figure(*path);
  }
}

// --- 7. chapter 09's shortcut on a real model -------------------------------------------------------------------

// [shortcuts]
/// Each chapter's shortcut swapped into all six layers, against the exact model on the same sentences.
void print_shortcuts(const ch16::MiniLM& m, const std::vector<std::string>& sentences) {
  attn::heading(fmt::format("Each chapter's shortcut on the real model ({} sentences)", sentences.size()));
  std::vector<Vector> full;
  for (const std::string& s : sentences) full.push_back(ch16::sentence_embedding(m, s));
  attn::Table t({"attention in every layer", "mean cosine to the full model", "nearest neighbour unchanged"});
  const auto row = [&](const std::string& name, const auto& embed_one) {
    std::vector<Vector> e;
    for (const std::string& s : sentences) e.push_back(embed_one(s));
    const Agreement a = agreement(full, e);
    t.add_row({name, attn::fixed(a.cosine, 4), attn::fixed(100 * a.neighbours, 1) + "%"});
  };
  for (const std::size_t w : {2, 4})  // chapter 07: each token sees w neighbours on each side
    row(fmt::format("sliding window, w = {} (chapter 07)", w), [&](const std::string& s) {
      return ch16::sentence_embedding_with(m, s, [w](const Matrix& Q, const Matrix& K, const Matrix& V) {
        return attn::sliding_window_attention(Q, K, V, w);
      });
    });
  // Longformer's fix (chapter 07): the window plus global tokens; here [CLS] and [SEP], where heads rest.
  row("window w = 2 + global [CLS], [SEP] (07)", [&](const std::string& s) {
    return ch16::sentence_embedding_with(m, s, [](const Matrix& Q, const Matrix& K, const Matrix& V) {
      const std::size_t n = Q.shape(0);
      return attn::scaled_dot_product_attention(Q, K, V, attn::longformer_mask(n, 2, {0, n - 1}));
    });
  });
  for (const std::size_t features : {64, 256}) {  // chapter 08: Performer's positive random features
    attn::Rng rng(16);
    const Matrix Omega = attn::ch08::orthogonal_features(features, m.config.d / m.config.heads, rng);  // (m, d_k)
    row(fmt::format("Performer, {} features (chapter 08)", features), [&](const std::string& s) {
      return ch16::sentence_embedding_with(m, s, [&](const Matrix& Q, const Matrix& K, const Matrix& V) {
        return attn::linear_attention(attn::positive_random_features(Q, Omega),
                                      attn::positive_random_features(K, Omega), V);
      });
    });
  }
  for (const std::size_t g : {6, 1}) {  // chapter 09: K/V heads mean-pooled in groups, nothing retrained
    ch16::MiniLM grouped = m;
    for (std::size_t l = 0; l < m.layers.size(); ++l) grouped.layers[l] = ch16::pool_kv_heads(m.layers[l], g);
    row(fmt::format("GQA, g = {} K/V heads (chapter 09)", g),
        [&](const std::string& s) { return ch16::sentence_embedding(grouped, s); });
  }
  t.print();
  fmt::print(
      "None of the shortcuts is retrained here: each shows what a model trained with exact attention\n"
      "loses when its attention is replaced. GQA is the GQA paper's conversion without its uptraining.\n");
}
// [shortcuts]

// --- 8. chapter 12's explanations, compared by deletion -----------------------------------------------------

/// Each layer's attention averaged over its heads, (n, n) per layer: what rollout and flow take.
std::vector<Matrix> head_averaged_maps(const ch16::MiniLM& m, const std::vector<Matrix>& inputs) {
  std::vector<Matrix> maps;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const Tensor3 A = ch16::attention_maps(inputs[l], m.layers[l]);  // (h, n, n)
    maps.push_back(xt::mean(A, {0}));                                // (n, n)
  }
  return maps;
}

// [deletion]
/// Integrated gradients' points on the path: each is a forward and a backward of the whole model, and 8 keep the
/// default run short while the relevances sum to f(X0) − f(B) within a few percent (printed below the table).
constexpr std::size_t kIntegratedGradientSteps = 8;

/// f of embedding_backward.hpp from the encoder's output \p H (n, d): the mean of its rows along \p u (d).
double projection(const Matrix& H, const Vector& u) { return static_cast<double>(xt::sum(xt::mean(H, {0}) * u)()); }

/// Integrated gradients' baseline: the sentence with every word between [CLS] and [SEP] turned into [MASK]
/// (BERT's "no word here"), embedded with the same positions. (n, d).
Matrix masked_baseline(const ch16::MiniLM& m, std::vector<int> ids) {
  const int mask = m.vocab.find("[MASK]");
  for (std::size_t j = 1; j + 1 < ids.size(); ++j) ids[j] = mask >= 0 ? mask : m.vocab.pad;
  return ch16::embed(ids, m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta, m.config.ln_eps);
}

/// No ground truth says which tokens matter to a sentence embedding, so the explanations are compared by what
/// deleting their top tokens does: the method whose top-ranked words move the embedding most ranks best.
void print_deletion(const ch16::MiniLM& m, const std::vector<std::string>& sentences) {
  attn::heading(fmt::format("Chapter 12's explanations compared by deletion ({} sentences)", sentences.size()));
  const bool with_flow = attn::ch12::attention_flow_available();
  std::vector<std::string> methods{"raw attention, last layer", "attention rollout", "gradient × input",
                                   fmt::format("integrated gradients, {} steps", kIntegratedGradientSteps),
                                   "random words"};
  if (with_flow) methods.insert(methods.begin() + 2, "attention flow");
  std::vector<std::array<double, 2>> drop(methods.size(), {0.0, 0.0});  // mean 1 − cosine, deleting 1 or 2
  double completeness_gap = 0.0, completeness_size = 0.0;  // IG: |Σ relevance − (f(X0) − f(B))| and |f(X0) − f(B)|
  attn::Rng rng(12);
  for (const std::string& s : sentences) {
    const std::vector<int> ids = ch16::tokenize(s, m.vocab, m.config.max_tokens);
    const std::size_t n = ids.size();
    if (n < 5) continue;  // [CLS], [SEP] and at least three words to choose from
    std::vector<Matrix> inputs;
    const Matrix out = ch16::encode(m, ids, {}, &inputs);  // (n, d)
    const Vector full = ch16::mean_pool_normalized(out);
    const Matrix& X0 = inputs.front();  // (n, d) the embedded input that enters layer 1
    const std::vector<Matrix> maps = head_averaged_maps(m, inputs);
    // Relevance of input token j to the embedding, a mean over all positions since the embedding is a mean.
    std::vector<Vector> relevance{xt::mean(maps.back(), {0}), xt::mean(attn::attention_rollout(maps), {0})};
    if (with_flow) {
      Vector flow = xt::zeros<float>({n});
      for (std::size_t i = 0; i < n; ++i) flow += attn::ch12::attention_flow(maps, i) / static_cast<float>(n);
      relevance.push_back(flow);
    }
    // The gradient methods explain f = the mean-pooled output along the full embedding (embedding_backward.hpp says
    // why).
    relevance.push_back(ch16::gradient_times_input(m.layers, X0, full));
    const Matrix baseline = masked_baseline(m, ids);  // (n, d)
    relevance.push_back(ch16::integrated_gradients(m.layers, X0, baseline, full, kIntegratedGradientSteps));
    Matrix out_B = baseline;  // (n, d): the baseline through the six layers
    for (const ch16::EncoderLayerWeights& W : m.layers) out_B = ch16::encoder_layer(out_B, W);
    const double delta_f = projection(out, full) - projection(out_B, full);  // f(X0) − f(B)
    completeness_gap += std::abs(xt::sum(relevance.back())() - delta_f);
    completeness_size += std::abs(delta_f);
    relevance.push_back(xt::view(rng.uniform(1, n), 0, xt::all()));
    for (std::size_t k = 0; k < relevance.size(); ++k) {
      std::vector<std::size_t> words(n - 2);  // [CLS] and [SEP] are never deleted
      std::iota(words.begin(), words.end(), 1);
      std::stable_sort(words.begin(), words.end(),
                       [&](std::size_t a, std::size_t b) { return relevance[k](a) > relevance[k](b); });
      for (std::size_t deleted = 1; deleted <= 2; ++deleted) {
        std::vector<int> kept;
        for (std::size_t j = 0; j < n; ++j)
          if (std::find(words.begin(), words.begin() + static_cast<long>(deleted), j) ==
              words.begin() + static_cast<long>(deleted))
            kept.push_back(ids[j]);
        const Vector e = ch16::mean_pool_normalized(ch16::encode(m, kept));
        drop[k][deleted - 1] += (1.0 - embedding_cosine(full, e)) / static_cast<double>(sentences.size());
      }
    }
  }
  attn::Table t({"ranked by", "1 − cosine, top word deleted", "top two words deleted"});
  for (std::size_t k = 0; k < methods.size(); ++k)
    t.add_row({methods[k], attn::fixed(drop[k][0], 4), attn::fixed(drop[k][1], 4)});
  t.print();
  fmt::print(
      "Larger = the method found words the embedding depends on.{} The gradient methods explain\n"
      "f = mean-pooled output · full embedding. Integrated gradients start from the sentence with every\n"
      "word [MASK]ed (B); their relevances sum to f(X0) − f(B) within {}% of |f(X0) − f(B)| on average\n"
      "({} midpoints).\n",
      with_flow ? "" : " (Flow needs Boost.Graph.)", attn::fixed(100.0 * completeness_gap / completeness_size, 2),
      kIntegratedGradientSteps);
}
// [deletion]

// --- for ./course bench 16 --vs-torch: the fast forward's embeddings, to check the engines race the same model ---

/// Writes the fast forward's embedding of every sentence of \p sentences_path (one at a time, as at batch 1) to
/// \p out_path, one line of d numbers per sentence.
void write_embeddings(const std::string& dir, const std::string& sentences_path, const std::string& out_path) {
  const attn::SingleThreadedBlas one_thread;
  const ch16::MiniLM m = ch16::load_minilm(dir);
  const ch16::FastMiniLM fast(m);
  ch16::ForwardScratch scratch;
  std::ofstream out(out_path);
  for (const std::string& s : ch16::read_sentences(sentences_path)) {
    const Vector e = fast.embed_sentences({s}, scratch).front();
    for (std::size_t j = 0; j < e.size(); ++j) out << fmt::format("{}{:.9g}", j == 0 ? "" : " ", e(j));
    out << '\n';
  }
  if (!out) throw std::runtime_error(fmt::format("--write-embeddings {}: cannot write it", out_path));
}

// --- the measurements page's breakdown, drawn from the recording ---------------------------------------------------

/// The measurements page's picture of where one forward's time goes: the share of each ForwardStep in the recorded
/// BM_forward_steps (book/recorded/ch16_bench.json, `./course bench 16 --record`), one column for a 12-token
/// sentence alone and one for 32 sentences packed. Drawn from the recording, not from this run: the page's numbers
/// are the recording's, and the picture must show the same ones.
void draw_breakdown(const attn::Chapter& chapter) {
  const auto path = chapter.figure_path("ch16_breakdown.svg");
  if (!path) return;
  std::ifstream in(ATTN_CH16_RECORDED_BENCH);
  const nlohmann::json run = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const std::array<const char*, 2> names{"BM_forward_steps/batch:1/real_time", "BM_forward_steps/batch:32/real_time"};
  const std::size_t steps = static_cast<std::size_t>(ch16::ForwardStep::count);
  Matrix share = xt::zeros<float>({steps, names.size()});  // (steps, 2): each step's share of the forward
  std::size_t found = 0;
  if (run.is_object() && run.contains("benchmarks") && run["benchmarks"].is_array())
    for (const auto& b : run["benchmarks"])
      for (std::size_t c = 0; c < names.size(); ++c)
        if (b.value("name", "") == names[c] && b.contains("steps_total_us")) {
          ++found;
          for (std::size_t i = 0; i < steps; ++i)
            share(i, c) = static_cast<float>(
                b.value(std::string(ch16::step_name(static_cast<ch16::ForwardStep>(i))) + "_us", 0.0) /
                b["steps_total_us"].get<double>());
        }
  if (found != names.size()) {  // a recording from before the breakdown existed
    std::ofstream(*path) << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"480\" height=\"40\"><text x=\"10\" "
                            "y=\"25\">No breakdown recorded: ./course bench 16 --record</text></svg>\n";
    return;
  }
  std::vector<std::string> rows;
  for (std::size_t i = 0; i < steps; ++i) rows.emplace_back(ch16::step_name(static_cast<ch16::ForwardStep>(i)));
  attn::write_svg_heatmap(*path, share, rows, {"12 tokens, alone", "32 sentences, packed"},
                          "share of the forward's time by step (recorded)");
  chapter.announce_figure(*path);
}

void tell_the_story(const attn::Chapter& chapter, const std::string& dir, std::size_t head_sentences,
                    std::size_t prune_sentences) {
  draw_breakdown(chapter);
  if (const std::string why = ch16::model_missing_reason(dir); !why.empty()) {
    fmt::print("This chapter needs the model, and it is not here:\n{}", attn::wrapped(why, 96));
    // The book's pages include the figures: without the model they say so instead of breaking the build.
    for (const char* name :
         {"ch16_heads_cls.svg", "ch16_heads_neighbours.svg", "ch16_heads_entropy.svg", "ch16_pruning.svg"})
      if (const auto path = chapter.figure_path(name))
        std::ofstream(*path) << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"480\" height=\"40\"><text x=\"10\" "
                                "y=\"25\">No model here: ./course setup fetches it.</text></svg>\n";
    return;
  }
  // One sentence's matrices are small ((n ≈ 12, 384)): OpenBLAS's threads would cost more than they save.
  const attn::SingleThreadedBlas one_thread;
  const ch16::MiniLM m = ch16::load_minilm(dir);
  print_model(m);
  print_tokens(m, {"I finished that book; it was great.", "The cat sat on the mat; it was tired.",
                   "Café déjà vu: naïve résumé!"});
  print_against_reference(m);
  const std::vector<std::string> sentences = ch16::read_sentences(ATTN_CH16_SENTENCES);
  const auto first = [&](std::size_t k) {
    return std::vector<std::string>(sentences.begin(),
                                    sentences.begin() + static_cast<long>(std::min(k, sentences.size())));
  };
  print_heads(chapter, m, first(head_sentences));
  attn::heading("From \"it\" to its antecedent: the article's sentences in English");
  print_antecedent(m, "I finished that book; it was great.", "it", "book", "i");
  print_antecedent(m, "The cat sat on the mat; it was tired.", "it", "cat", "mat");
  print_pruning(chapter, m, first(prune_sentences));
  print_shortcuts(m, first(prune_sentences));
  print_deletion(m, first(prune_sentences));
}

}  // namespace

int main(int argc, char** argv) {
  // A packed batch allocates and frees matrices of a few MB per product (its (T, 1536) activations): glibc would
  // hand each back to the system and fault its pages in again for the next one, a tenth of the forward's time.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  attn::Chapter chapter("ch16_real_model",
                        "Chapter 16: a real model, all-MiniLM-L6-v2, through the course's attention");
  std::string dir = ch16::default_model_dir();
  // Small defaults keep the run near a second; --sentences 199 --prune-sentences 199 measures the whole set.
  std::size_t head_sentences = 32, prune_sentences = 10;
  chapter.cli().add_option("--model-dir", dir, "Folder with config.json, vocab.txt and model.safetensors");
  chapter.cli()
      .add_option("--sentences", head_sentences, "Sentences of the set the head statistics average over")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
  chapter.cli()
      .add_option("--prune-sentences", prune_sentences,
                  "Sentences the pruning curve and the shortcuts are measured on (≥ 3)")
      ->check(CLI::Range(std::size_t{3}, std::size_t{100000}));
  std::string embeddings_out, sentences_file = ATTN_CH16_SENTENCES;
  CLI::Option* write_embeddings_option = chapter.cli().add_option(
      "--write-embeddings", embeddings_out,
      "Only write the fast forward's embeddings of --sentences-file to this file (one line each)");
  // The story reads its own sentences: a --sentences-file without --write-embeddings would be ignored without a
  // word, so the command line refuses it, naming both options (status 2).
  chapter.cli()
      .add_option("--sentences-file", sentences_file, "The sentences --write-embeddings embeds (only with it)")
      ->needs(write_embeddings_option);
  return chapter.run(argc, argv, [&] {
    if (!embeddings_out.empty()) return write_embeddings(dir, sentences_file, embeddings_out);
    tell_the_story(chapter, dir, head_sentences, prune_sentences);
  });
}
