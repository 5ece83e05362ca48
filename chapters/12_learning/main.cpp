// Chapter 12 — watch attention learn: a 2-layer attention-only transformer trained from scratch in C++.
//
// What it shows: the model (embedding, RoPE, causal multi-head attention, residual stream, unembedding)
// trained with cross-entropy and AdamW on the induction task, with every backward written by hand; the loss
// curve and its phase change; which heads became the previous-token head and the induction head, found by
// measurement; ablating each head (which can be pruned); and how often raw attention, attention rollout,
// gradient × input and integrated gradients point at the token the answer was copied from.
// What it leaves out: LayerNorm and MLPs (the task does not need them), the pronoun task, attention flow
// (max-flow), checkpoints on disk (training takes seconds, so the book trains at build time).
// Run it: ./course run 12     Benchmarks: build/default/bin/ch12_learning bench
// Your code: ./course run 12 --track exercise     Book page: book/12_learning.md
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "12_learning/learning.hpp"
#include "12_learning/model.hpp"
#include "12_learning/train.hpp"
#include "attn/chapter.hpp"
#include "attn/measure.hpp"
#include "attn/panels.hpp"
#include "attn/plot.hpp"
#include "attn/print.hpp"
#include "attn/svg.hpp"

namespace {

using attn::Matrix;
namespace ch12 = attn::ch12;

constexpr std::uint64_t kEvalSeed = 1212;  // held-out sequences: a seed training never uses
constexpr std::size_t kEvalCount = 200;

/// The chapter's model and schedule; the command line changes them.
struct Setup {
  ch12::Config config;
  ch12::TrainSettings train;
};

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

/// Mean cross-entropy and accuracy of \p model on held-out sequences, with some heads ablated.
std::pair<double, double> evaluate(const ch12::Model& model, std::size_t length, const ch12::HeadMask& keep) {
  attn::Rng rng(kEvalSeed);
  double loss = 0.0, acc = 0.0;
  for (std::size_t i = 0; i < kEvalCount; ++i) {
    const ch12::InductionSequence s = ch12::make_induction(length, model.config.vocab, rng);
    const Matrix logits = ch12::forward(model, s.tokens, keep).logits;  // (n, vocab)
    loss += attn::cross_entropy(logits, s.targets).loss / static_cast<double>(kEvalCount);
    acc += ch12::accuracy(logits, s.targets) / static_cast<double>(kEvalCount);
  }
  return {loss, acc};
}

// [ablation]
void ablation(const ch12::Model& model, std::size_t length) {
  attn::heading("Ablation: switch off one head at a time (C7: which heads can be pruned?)");
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

/// Index of the largest of v(0) … v(last): the top-ranked position among those a query at \p last can see.
std::size_t argmax_upto(const attn::Vector& v, std::size_t last) {
  std::size_t best = 0;
  for (std::size_t j = 1; j <= last; ++j)
    if (v(j) > v(best)) best = j;
  return best;
}

// [attribution]
void attribution(const ch12::Model& model, std::size_t length) {
  attn::heading("C16: do attention weights say where the answer came from?");
  const std::size_t sequences = 40, ig_steps = 16;
  const char* names[] = {"raw attention, last layer (mean of heads)", "attention rollout", "gradient × input",
                         "integrated gradients (16 steps, zero baseline)"};
  std::size_t hits[4] = {0, 0, 0, 0}, total = 0;
  attn::Rng rng(kEvalSeed + 2);
  for (std::size_t q = 0; q < sequences; ++q) {
    const ch12::InductionSequence s = ch12::make_induction(length, model.config.vocab, rng);
    const ch12::Trace tr = ch12::forward(model, s.tokens);
    std::vector<Matrix> means;
    for (std::size_t l = 0; l < model.config.layers; ++l) means.push_back(mean_over_heads(tr, l));
    const Matrix rollout = attn::attention_rollout(means);  // (n, n)
    for (std::size_t i = length - s.period; i + 1 < length; ++i) {
      const std::size_t source = i - s.period + 1;  // the answer tokens[i + 1] sits here, and nowhere else before i
      const std::size_t target = s.targets[i];
      const attn::Vector gxi = ch12::gradient_times_input(model, s.tokens, i, target);             // (n)
      const attn::Vector ig = ch12::integrated_gradients(model, s.tokens, i, target, ig_steps);    // (n)
      const attn::Vector last_attention = xt::row(means.back(), i), rolled = xt::row(rollout, i);  // (n) each
      hits[0] += argmax_upto(last_attention, i) == source ? 1 : 0;
      hits[1] += argmax_upto(rolled, i) == source ? 1 : 0;
      hits[2] += argmax_upto(gxi, i) == source ? 1 : 0;
      hits[3] += argmax_upto(ig, i) == source ? 1 : 0;
      ++total;
    }
  }
  attn::Table table({"explanation", "top-1 is the source token"});
  for (std::size_t m = 0; m < 4; ++m)
    table.add_row(
        {names[m], fmt::format("{:.1f} %  ({} of {})",
                               100.0 * static_cast<double>(hits[m]) / static_cast<double>(total), hits[m], total)});
  table.set_left(0);
  table.print();
  fmt::print(
      "Each prediction of the repeat copies one earlier token (the one after the current token's earlier\n"
      "copy): ground truth that real text never gives. The table counts how often each method ranks that\n"
      "position first among the positions 0 … i it can see. Attention flow (max-flow) is left out\n"
      "of this chapter.\n\n");
}
// [attribution]

// [bench]
/// The whole training run with the chapter's defaults (one thread): its wall time is the ≤ 90 s target, and
/// the counters record the steps and the held-out accuracy it reached.
void train_to_target(benchmark::State& state) {
  attn::set_blas_threads(1);
  Setup setup;
  setup.config.context = setup.train.length;
  double acc = 0.0;
  for (auto _ : state) {
    const ch12::TrainResult r = ch12::train_induction(setup.config, setup.train);
    state.PauseTiming();
    acc = ch12::induction_accuracy(r.model, setup.train.length, kEvalCount, kEvalSeed);
    state.ResumeTiming();
  }
  // The ceiling in the same run: one sgemm of the model's largest product, (batch·n, d)·(d, d), one thread.
  // Training runs far below it: its matrices are tiny, so overheads, not flops, set its pace.
  state.counters["sgemm_ceiling_GFLOPS"] =
      attn::sgemm_gflops(setup.train.batch * setup.train.length, setup.config.d_model, setup.config.d_model);
  state.counters["steps"] = static_cast<double>(setup.train.steps);
  state.counters["accuracy_pct"] = 100.0 * acc;
}

BENCHMARK(train_to_target)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
// [bench]

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch12_learning", "Chapter 12: watch attention learn");
  Setup setup;
  chapter.cli().add_option("--steps", setup.train.steps, "Optimiser steps")->check(CLI::Range(1, 1000000));
  chapter.cli().add_option("--batch", setup.train.batch, "Sequences per step")->check(CLI::Range(1, 4096));
  chapter.cli().add_option("--lr", setup.train.adamw.lr, "AdamW learning rate")->check(CLI::Range(1e-6, 1.0));
  chapter.cli().add_option("--seed", setup.train.seed, "Seed of the model and the data");
  chapter.cli()
      .add_option("--length", setup.train.length, "Tokens per sequence (the period is drawn from length/4 … length/2)")
      ->check(CLI::Range(8, 64));
  return chapter.run(argc, argv, [&] {
    attn::set_blas_threads(1);  // one thread: the loss curve is the same bit for bit on every run
    setup.config.context = setup.train.length;
    std::vector<double> acc_steps, acc_values;
    std::vector<Snapshot> snapshots;
    const ch12::TrainResult r = train_and_report(chapter, setup, acc_steps, acc_values, snapshots);
    const HeadScores scores = head_scores(r.model, setup.train.length, kEvalCount);
    const Circuit circuit = find_circuit(scores);
    heads_over_training(chapter, snapshots, setup.train.length);
    report_heads(scores, circuit);
    ablation(r.model, setup.train.length);
    attribution(r.model, setup.train.length);
  });
}
