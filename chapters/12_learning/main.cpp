// Chapter 12 — watch attention learn: a 2-layer attention-only transformer trained from scratch in C++.
//
// What it shows: the model (embedding, RoPE, causal multi-head attention, residual stream, unembedding)
// trained with cross-entropy and AdamW on the induction task, with every backward written by hand; the loss
// curve and its phase change; which heads became the previous-token head and the induction head, found by
// measurement; ablating each head (which can be pruned); the article's pronoun task (它 → its antecedent) learned
// by the same model, and which heads carry the answer; and, on both tasks, how often raw attention, attention
// rollout, attention flow (max-flow, Boost.Graph), gradient × input and integrated gradients point at the token
// the answer was copied from.
// What it leaves out: LayerNorm and MLPs (the tasks do not need them), checkpoints on disk (both models train
// in seconds, so the book trains them at build time).
// Run it: ./course run 12     Benchmarks (bench.cpp): build/default/bin/ch12_learning bench
// Your code: ./course run 12 --track exercise     Book page: book/12_learning.md
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "12_learning/flow.hpp"
#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "12_learning/model_backward.hpp"
#include "12_learning/pronoun.hpp"
#include "12_learning/setup.hpp"
#include "12_learning/train.hpp"
#include "attn/chapter.hpp"
#include "attn/panels.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Matrix;
namespace ch12 = attn::ch12;

using ch12::kEvalCount;
using ch12::kEvalSeed;
using ch12::Setup;

/// Head-averaged attention of layer \p l: (n, n).
Matrix mean_over_heads(const ch12::Trace& tr, std::size_t l) {
  Matrix mean = xt::zeros<float>(tr.attention[l][0].shape());  // (n, n)
  for (const Matrix& A : tr.attention[l]) mean += A;
  return mean / static_cast<float>(tr.attention[l].size());
}

/// Per-head previous-token and induction scores, averaged over held-out sequences: [layer][head].
struct HeadScores {
  std::vector<std::vector<double>> previous, induction;
};

HeadScores head_scores(const ch12::Model& model, std::size_t length, std::size_t count) {
  const ch12::Config& c = model.config;
  HeadScores s{std::vector<std::vector<double>>(c.layers, std::vector<double>(c.heads, 0.0)), {}};
  s.induction = s.previous;
  attn::Rng rng(kEvalSeed);
  for (std::size_t i = 0; i < count; ++i) {
    const std::vector<std::size_t> tokens = ch12::make_induction(length, c.vocab, rng).tokens;
    const ch12::Trace tr = ch12::forward(model, tokens);
    for (std::size_t l = 0; l < c.layers; ++l)
      for (std::size_t h = 0; h < c.heads; ++h) {
        s.previous[l][h] += ch12::previous_token_score(tr.attention[l][h]) / static_cast<double>(count);
        s.induction[l][h] += attn::induction_score(tr.attention[l][h], tokens) / static_cast<double>(count);
      }
  }
  return s;
}

std::string head_name(std::size_t l, std::size_t h) { return fmt::format("L{}H{}", l + 1, h); }

/// The model at one step of training.
struct Snapshot {
  std::size_t step;
  ch12::Model model;
};

// [train_story]
ch12::TrainResult train_and_report(const attn::Chapter& chapter, const Setup& setup, std::vector<double>& acc_steps,
                                   std::vector<double>& acc_values, std::vector<Snapshot>& snapshots) {
  attn::heading("Training a 2-layer attention-only transformer on the induction task");
  const ch12::Config& c = setup.config;
  const ch12::TrainSettings& s = setup.train;
  fmt::print(
      "vocabulary {}, d_model {}, {} layers × {} heads (d_k = {}), RoPE, no LayerNorm, no MLP.\n"
      "Sequences of n = {} tokens whose last {} … {} (the period) repeat the ones before.\n"
      "Batch {}, AdamW lr {}, {} steps, seed {}, one thread.\n",
      c.vocab, c.d_model, c.layers, c.heads, c.d_model / c.heads, s.length, std::max<std::size_t>(2, s.length / 4),
      s.length / 2, s.batch, s.adamw.lr, s.steps, s.seed);
  const auto start = std::chrono::steady_clock::now();
  const std::size_t every = std::max<std::size_t>(1, s.steps / 20);
  const std::vector<std::size_t> snapshot_at{1, s.steps / 8, s.steps / 4, s.steps / 2, s.steps};
  ch12::TrainResult r = ch12::train_induction(c, s, [&](std::size_t t, const ch12::Model& model) {
    if (std::find(snapshot_at.begin(), snapshot_at.end(), t) != snapshot_at.end() &&
        (snapshots.empty() || snapshots.back().step != t))
      snapshots.push_back({t, model});
    if (t % every == 0 || t == 1) {
      acc_steps.push_back(static_cast<double>(t));
      acc_values.push_back(ch12::induction_accuracy(model, s.length, 50, kEvalSeed));
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  attn::Table table({"step", "loss (predictable part)", "accuracy, 50 held-out sequences"});
  for (std::size_t i = 0; i < acc_steps.size(); ++i) {
    const std::size_t t = static_cast<std::size_t>(acc_steps[i]);
    table.add_row(
        {std::to_string(t), fmt::format("{:.3f}", r.loss[t - 1]), fmt::format("{:.1f} %", 100.0 * acc_values[i])});
  }
  table.print();
  const double final_accuracy = ch12::induction_accuracy(r.model, s.length, kEvalCount, kEvalSeed);
  fmt::print("accuracy on the predictable part of {} held-out sequences: {:.2f} % (chance: 1 in {})\n", kEvalCount,
             100.0 * final_accuracy, c.vocab);
  if (!chapter.book_mode()) fmt::print("trained in {:.2f} s\n", seconds);
  // The phase change: held-out accuracy sits near chance, then climbs within a few hundred steps.
  std::size_t before = 0, after = 0;
  for (std::size_t i = 0; i < acc_values.size() && after == 0; ++i) {
    if (acc_values[i] >= 0.5)
      after = static_cast<std::size_t>(acc_steps[i]);
    else
      before = static_cast<std::size_t>(acc_steps[i]);
  }
  if (after > 0)
    fmt::print("The phase change (the induction bump): held-out accuracy crosses 50 % between steps {} and {}.\n",
               before, after);
  fmt::print("\n");
  if (const auto path = chapter.figure_path("ch12_loss.svg")) {
    attn::PlotSpec spec{
        "Induction task: training loss", "step", "cross-entropy on the predictable part", false, false, {}};
    std::vector<double> x(r.loss.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i + 1);
    spec.series.push_back({"loss", x, r.loss, true});
    if (after > 0)  // the phase change, marked where held-out accuracy first reached 50 %
      spec.series.push_back({"accuracy first ≥ 50 %", {static_cast<double>(after)}, {r.loss[after - 1]}, false});
    attn::write_svg_plot(*path, spec);
    chapter.announce_figure(*path);
  }
  return r;
}
// [train_story]

/// The two heads of the circuit, found by measurement: the layer-1 head with the highest previous-token
/// score and the layer-2 head with the highest induction score.
struct Circuit {
  std::size_t previous_head = 0, induction_head = 0;
};

Circuit find_circuit(const HeadScores& s) {
  Circuit c;
  for (std::size_t h = 0; h < s.previous[0].size(); ++h) {
    if (s.previous[0][h] > s.previous[0][c.previous_head]) c.previous_head = h;
    if (s.induction.back()[h] > s.induction.back()[c.induction_head]) c.induction_head = h;
  }
  return c;
}

void report_heads(const HeadScores& scores, const Circuit& circuit) {
  attn::heading("Which head does what: previous-token and induction scores, measured");
  attn::Table table({"head", "previous-token score", "induction score", "role"});
  const std::size_t layers = scores.previous.size();
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t h = 0; h < scores.previous[l].size(); ++h) {
      std::string role;
      if (l == 0 && h == circuit.previous_head) role = "previous-token head";
      if (l + 1 == layers && h == circuit.induction_head) role = "induction head";
      table.add_row({head_name(l, h), fmt::format("{:.3f}", scores.previous[l][h]),
                     fmt::format("{:.3f}", scores.induction[l][h]), role});
    }
  table.print();
  fmt::print(
      "Scores are mean attention over {} held-out sequences: previous-token = weight on key i − 1,\n"
      "induction = weight on the key just after the earlier copy of token i. The circuit: {} (the\n"
      "strongest previous-token head) puts each token's predecessor into its residual stream; {} (the\n"
      "strongest induction head) finds the key whose predecessor is the current token and copies it.\n\n",
      kEvalCount, head_name(0, circuit.previous_head), head_name(layers - 1, circuit.induction_head));
}

// [heads_over_training]
void heads_over_training(const attn::Chapter& chapter, const std::vector<Snapshot>& snapshots, std::size_t length) {
  attn::heading("The heads during training");
  attn::Table table({"step"});
  const ch12::Config& c = snapshots.front().model.config;
  std::vector<std::string> headers{"step"};
  for (std::size_t l = 0; l < c.layers; ++l)
    for (std::size_t h = 0; h < c.heads; ++h) headers.push_back(head_name(l, h) + " prev / ind");
  table = attn::Table(headers);
  attn::Rng rng(kEvalSeed + 1);
  const std::vector<std::size_t> tokens = ch12::make_induction(length, c.vocab, rng).tokens;
  std::vector<attn::Panel> panels;
  for (const Snapshot& snap : snapshots) {
    const HeadScores s = head_scores(snap.model, length, 20);
    std::vector<std::string> row{std::to_string(snap.step)};
    const ch12::Trace tr = ch12::forward(snap.model, tokens);
    for (std::size_t l = 0; l < c.layers; ++l)
      for (std::size_t h = 0; h < c.heads; ++h) {
        row.push_back(fmt::format("{:.2f} / {:.2f}", s.previous[l][h], s.induction[l][h]));
        panels.push_back({fmt::format("step {} {}", snap.step, head_name(l, h)), tr.attention[l][h]});
      }
    table.add_row(row);
  }
  table.print();
  fmt::print("Attention of every head (rows: queries, columns: keys; n = {}) at the steps above:\n", length);
  attn::print_panels(panels, c.layers * c.heads);
  fmt::print("\n");
  if (const auto path = chapter.figure_path("ch12_heads.svg")) {
    attn::write_svg_panels(*path, panels, c.layers * c.heads, "Every head's attention during training", 6);
    chapter.announce_figure(*path);
  }
}
// [heads_over_training]

/// Mean cross-entropy and accuracy of \p model on held-out sequences from \p draw, with some heads ablated.
template <class Draw>
std::pair<double, double> evaluate_on(const ch12::Model& model, Draw&& draw, const ch12::HeadMask& keep) {
  attn::Rng rng(kEvalSeed);
  double loss = 0.0, acc = 0.0;
  for (std::size_t i = 0; i < kEvalCount; ++i) {
    const auto s = draw(rng);
    const Matrix logits = ch12::forward(model, s.tokens, keep).logits;  // (n, vocab)
    loss += attn::cross_entropy(logits, s.targets).loss / static_cast<double>(kEvalCount);
    acc += ch12::accuracy(logits, s.targets) / static_cast<double>(kEvalCount);
  }
  return {loss, acc};
}

/// evaluate_on() the induction task.
std::pair<double, double> evaluate(const ch12::Model& model, std::size_t length, const ch12::HeadMask& keep) {
  return evaluate_on(
      model, [&](attn::Rng& rng) { return ch12::make_induction(length, model.config.vocab, rng); }, keep);
}

/// evaluate_on() the pronoun task.
std::pair<double, double> evaluate_pronoun(const ch12::Model& model, const ch12::HeadMask& keep) {
  return evaluate_on(
      model, [](attn::Rng& rng) { return ch12::make_pronoun(rng); }, keep);
}

// [ablation]
void ablation(const ch12::Model& model, std::size_t length) {
  attn::heading("Ablation: switch off one head at a time (which heads can be pruned?)");
  const ch12::Config& c = model.config;
  const auto [base_loss, base_acc] = evaluate(model, length, ch12::HeadMask());
  attn::Table table({"head switched off", "loss", "loss increase", "accuracy"});
  table.add_row({"none", fmt::format("{:.3f}", base_loss), "", fmt::format("{:.1f} %", 100.0 * base_acc)});
  std::vector<double> increases;  // (layers·heads) loss increase per ablated head
  for (std::size_t l = 0; l < c.layers; ++l)
    for (std::size_t h = 0; h < c.heads; ++h) {
      ch12::HeadMask keep(c.layers, std::vector<bool>(c.heads, true));
      keep[l][h] = false;
      const auto [loss, acc] = evaluate(model, length, keep);
      increases.push_back(loss - base_loss);
      table.add_row({head_name(l, h), fmt::format("{:.3f}", loss), fmt::format("{:+.3f}", loss - base_loss),
                     fmt::format("{:.1f} %", 100.0 * acc)});
    }
  table.print();
  // A head counts as prunable here when removing it costs less than 0.05 nats: under 5 % more perplexity.
  std::string prunable;
  const std::size_t worst =
      static_cast<std::size_t>(std::distance(increases.begin(), std::max_element(increases.begin(), increases.end())));
  const std::string costliest = head_name(worst / c.heads, worst % c.heads);
  for (std::size_t i = 0; i < increases.size(); ++i)
    if (increases[i] < 0.05) prunable += (prunable.empty() ? "" : ", ") + head_name(i / c.heads, i % c.heads);
  fmt::print(
      "Prunable (loss up by less than 0.05 nats): {}. The largest increase comes from switching off {}.\n"
      "On one narrow task most heads are busy; Michel et al. (2019) found many prunable heads in\n"
      "large models trained on broad data. Which heads are needed changes with the seed and schedule:\n"
      "--seed 3 --lr 0.01 --steps 500 trains a model with a prunable layer-1 head.\n\n",
      prunable.empty() ? "none" : prunable, costliest);
}
// [ablation]

ch12::TrainResult pronoun_story(const attn::Chapter& chapter, const ch12::TrainSettings& s) {
  attn::heading("The article's pronoun task: what does 它 refer to?");
  attn::Rng examples(kEvalSeed + 4);
  fmt::print("Sentences from chapter 01's words (and a few more of the same kinds); the answer follows 它 是:\n");
  for (int e = 0; e < 4; ++e) {
    const ch12::PronounSequence x = ch12::make_pronoun(examples);
    fmt::print("  {}  →  {}\n", ch12::pronoun_words(x.tokens), ch12::pronoun_words({x.tokens[x.antecedent]}));
  }
  const ch12::Config c = ch12::pronoun_config();
  fmt::print("The same model (vocabulary {}, context {}); batch {}, AdamW lr {}, {} steps, seed {}, 1 thread.\n",
             c.vocab, c.context, s.batch, s.adamw.lr, s.steps, s.seed);
  const auto start = std::chrono::steady_clock::now();
  ch12::TrainResult r = ch12::train_pronoun(c, s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::size_t last = r.loss.size() - 1;
  fmt::print("loss: {:.3f} at step 1, {:.3f} at step {}, {:.3f} at step {}\n", r.loss[0], r.loss[last / 2],
             last / 2 + 1, r.loss[last], last + 1);
  const auto [base_loss, base_acc] = evaluate_pronoun(r.model, ch12::HeadMask());
  fmt::print("accuracy on {} held-out sentences: {:.1f} % (chance: 1 in 8 animals and things, 1 in {} words)\n",
             kEvalCount, 100.0 * base_acc, c.vocab);
  if (!chapter.book_mode()) fmt::print("trained in {:.2f} s\n", seconds);
  // Which heads carry the answer: where 是 (the last position) and 它 look, and what removing each head costs.
  attn::Table table(
      {"head", "是 → antecedent", "是 → 它", "它 → antecedent", "loss without it", "accuracy without it"});
  // [layer][head]: mean attention of 是 on the antecedent and on 它, and of 它 on the antecedent.
  std::vector<std::vector<std::array<double, 3>>> looks(c.layers, std::vector<std::array<double, 3>>(c.heads));
  // [pronoun_story]
  attn::Rng rng(kEvalSeed);
  for (std::size_t q = 0; q < kEvalCount; ++q) {
    const ch12::PronounSequence x = ch12::make_pronoun(rng);
    const ch12::Trace tr = ch12::forward(r.model, x.tokens);
    const std::size_t n = x.tokens.size(), it = n - 2;
    const std::size_t query[3] = {n - 1, n - 1, it}, key[3] = {x.antecedent, it, x.antecedent};
    for (std::size_t l = 0; l < c.layers; ++l)
      for (std::size_t h = 0; h < c.heads; ++h)
        for (std::size_t k = 0; k < 3; ++k)
          looks[l][h][k] += static_cast<double>(tr.attention[l][h](query[k], key[k])) / static_cast<double>(kEvalCount);
  }
  // [pronoun_story]
  for (std::size_t l = 0; l < c.layers; ++l)
    for (std::size_t h = 0; h < c.heads; ++h) {
      ch12::HeadMask keep(c.layers, std::vector<bool>(c.heads, true));
      keep[l][h] = false;
      const auto [loss, acc] = evaluate_pronoun(r.model, keep);
      table.add_row({head_name(l, h), fmt::format("{:.3f}", looks[l][h][0]), fmt::format("{:.3f}", looks[l][h][1]),
                     fmt::format("{:.3f}", looks[l][h][2]), fmt::format("{:.3f} ({:+.3f})", loss, loss - base_loss),
                     fmt::format("{:.1f} %", 100.0 * acc)});
    }
  table.print();
  fmt::print(
      "Each arrow is a mean attention weight over the held-out sentences, from a query to a key: 是 (the\n"
      "last position, which predicts the answer) and 它 on the antecedent, 是 on 它. All heads on, the\n"
      "loss is {:.3f}.\n\n",
      base_loss);
  return r;
}

/// Index of the largest of v(0) … v(last): the top-ranked position among those a query at \p last can see.
std::size_t argmax_upto(const attn::Vector& v, std::size_t last) {
  std::size_t best = 0;
  for (std::size_t j = 1; j <= last; ++j)
    if (v(j) > v(best)) best = j;
  return best;
}

/// One prediction with a known source: the model's input, the row that predicts, its answer, and the earlier
/// position the answer was copied from.
struct KnownSource {
  std::vector<std::size_t> tokens;
  std::size_t row, target, source;
};

/// The explanations compared, in the table's order.
const std::vector<std::string>& method_names() {
  static const std::vector<std::string> names{"raw attention, last layer (mean of heads)", "attention rollout",
                                              "attention flow (max-flow)", "gradient × input",
                                              "integrated gradients (16 steps, zero baseline)"};
  return names;
}

/// For each method, how many of \p cases it explains with the source ranked first (flow: 0 when unavailable).
// [attribution]
std::vector<std::size_t> top1_hits(const ch12::Model& model, const std::vector<KnownSource>& cases) {
  const std::size_t ig_steps = 16;
  std::vector<std::size_t> hits(method_names().size(), 0);
  for (const KnownSource& c : cases) {
    const std::size_t i = c.row;
    const ch12::Trace tr = ch12::forward(model, c.tokens);
    std::vector<Matrix> means;  // (layers) × (n, n)
    for (std::size_t l = 0; l < model.config.layers; ++l) means.push_back(mean_over_heads(tr, l));
    const attn::Vector last_attention = xt::row(means.back(), i);                                // (n)
    const attn::Vector rolled = xt::row(attn::attention_rollout(means), i);                      // (n)
    const attn::Vector gxi = ch12::gradient_times_input(model, c.tokens, i, c.target);           // (n)
    const attn::Vector ig = ch12::integrated_gradients(model, c.tokens, i, c.target, ig_steps);  // (n)
    hits[0] += argmax_upto(last_attention, i) == c.source ? 1 : 0;
    hits[1] += argmax_upto(rolled, i) == c.source ? 1 : 0;
    if (ch12::attention_flow_available()) hits[2] += argmax_upto(ch12::attention_flow(means, i), i) == c.source ? 1 : 0;
    hits[3] += argmax_upto(gxi, i) == c.source ? 1 : 0;
    hits[4] += argmax_upto(ig, i) == c.source ? 1 : 0;
  }
  return hits;
}
// [attribution]

/// The induction task's predictions: each position of the repeat copies the token after its earlier twin.
std::vector<KnownSource> induction_cases(const ch12::Model& model, std::size_t length, std::size_t sequences) {
  std::vector<KnownSource> cases;
  attn::Rng rng(kEvalSeed + 2);
  for (std::size_t q = 0; q < sequences; ++q) {
    const ch12::InductionSequence s = ch12::make_induction(length, model.config.vocab, rng);
    for (std::size_t i = length - s.period; i + 1 < length; ++i)  // the answer sits there, and nowhere else before i
      cases.push_back({s.tokens, i, s.targets[i], i - s.period + 1});
  }
  return cases;
}

/// The pronoun task's predictions: after 它 是 comes the antecedent, the sentence's only animal or thing.
std::vector<KnownSource> pronoun_cases(std::size_t sentences) {
  std::vector<KnownSource> cases;
  attn::Rng rng(kEvalSeed + 3);
  for (std::size_t q = 0; q < sentences; ++q) {
    const ch12::PronounSequence s = ch12::make_pronoun(rng);
    cases.push_back({s.tokens, s.tokens.size() - 1, s.targets.back(), s.antecedent});
  }
  return cases;
}

void attribution(const ch12::Model& induction_model, std::size_t length, const ch12::Model& pronoun_model) {
  attn::heading("Do attention weights say where the answer came from?");
  const std::vector<KnownSource> induction = induction_cases(induction_model, length, 40), pronoun = pronoun_cases(100);
  const std::vector<std::size_t> a = top1_hits(induction_model, induction), b = top1_hits(pronoun_model, pronoun);
  auto cell = [](std::size_t hits, std::size_t total) {
    return fmt::format("{:.1f} % ({}/{})", 100.0 * static_cast<double>(hits) / static_cast<double>(total), hits, total);
  };
  attn::Table table({"explanation: top-1 is the source", "induction task", "pronoun task"});
  for (std::size_t m = 0; m < method_names().size(); ++m) {
    if (m == 2 && !ch12::attention_flow_available()) {
      table.add_row({method_names()[m], "skipped: no Boost.Graph", "skipped: no Boost.Graph"});
      continue;
    }
    table.add_row({method_names()[m], cell(a[m], induction.size()), cell(b[m], pronoun.size())});
  }
  table.set_left(0);
  table.print();
  fmt::print(
      "Each prediction copies one earlier token, and the task says which: in the induction repeat the token\n"
      "after the current token's earlier copy, in the pronoun task the antecedent. Real text never gives\n"
      "this ground truth. The table counts how often each method ranks that position first among the\n"
      "positions 0 … i the predicting position i can see (the pronoun task's source is the antecedent).\n\n");
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch12_learning", "Chapter 12: watch attention learn");
  Setup setup;
  chapter.cli().add_option("--steps", setup.train.steps, "Optimiser steps")->check(CLI::Range(1, 1000000));
  chapter.cli().add_option("--batch", setup.train.batch, "Sequences per step")->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--lr", setup.train.adamw.lr, "AdamW learning rate")->check(CLI::Range(1e-6, 1.0));
  chapter.cli().add_option("--seed", setup.train.seed, "Seed of the model and the data");
  chapter.cli()
      .add_option("--pronoun-steps", setup.pronoun.steps, "Optimiser steps on the pronoun task")
      ->check(CLI::Range(1, 1000000));
  chapter.cli()
      .add_option("--length", setup.train.length, "Tokens per sequence (the period is drawn from length/4 … length/2)")
      ->check(CLI::Range(8, 64));
  std::string checkpoint;
  chapter.cli()
      .add_option("--save-checkpoint", checkpoint,
                  "Folder for the trained induction model as .npy files (numpy.load reads them): a new or empty "
                  "one, or one an earlier run wrote")
      ->type_name("DIR")
      ->check(
          [](const std::string& dir) -> std::string {
            try {  // at parse time: a folder it may not write is refused with status 2 before any training
              ch12::prepare_checkpoint_dir(dir);
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
            return "";
          },
          "", "a folder for the checkpoint");
  return chapter.run(argc, argv, [&] {
    const attn::BlasThreads one_thread(1);  // one thread: the loss curve is the same bit for bit on every run
    setup.config.context = setup.train.length;
    std::vector<double> acc_steps, acc_values;
    std::vector<Snapshot> snapshots;
    const ch12::TrainResult r = train_and_report(chapter, setup, acc_steps, acc_values, snapshots);
    if (!checkpoint.empty()) {
      ch12::save_checkpoint(r.model, checkpoint);
      fmt::print("checkpoint: the trained model written to {} (ch12::load_checkpoint reads it back)\n", checkpoint);
    }
    const HeadScores scores = head_scores(r.model, setup.train.length, kEvalCount);
    const Circuit circuit = find_circuit(scores);
    heads_over_training(chapter, snapshots, setup.train.length);
    report_heads(scores, circuit);
    ablation(r.model, setup.train.length);
    const ch12::TrainResult pronoun = pronoun_story(chapter, setup.pronoun);
    attribution(r.model, setup.train.length, pronoun.model);
  });
}
