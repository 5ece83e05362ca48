// Chapter 06 — FlashAttention in CUDA: chapter 05's algorithm as a ladder of GPU kernels.
//
// What it shows: how chapter 05's loops map onto a GPU's grid, blocks, warps and threads; the launch
// plans (shared memory per block, the grid, whether they fit an A100, an H100/H200 and this device); the
// K/V tiles a causal query tile visits; the roofline arithmetic at n = 4096, d = 128. With a GPU it then
// runs the four rungs (naive, cuBLAS, fused fp32 flash, tensor-core bf16 flash) on the same inputs, checks
// each against the CPU, and prints a table of times (CUDA events, warm-up, median), TFLOP/s and % of the
// ceiling this GPU reaches in the same run. Without a GPU it says so and runs the host-side parts only.
// What it leaves out: the backward pass, FlashAttention-3's asynchronous pipelines, fp8.
// Run it: ./course run 06   (GPU: build/default/bin/ch06_flash_cuda --n 1024 4096 --d 64 128; the full
// check with PyTorch's SDPA: ./course gpu-check, or ./course gpu-pack for a bare GPU machine; --dry-run
// stops before the first kernel launch)      Book page: book/06_flash_cuda.md
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "02_qkv_trace/qkv_trace.hpp"
#include "05_flash_cpu/flash_cpu.hpp"
#include "06_flash_cuda/flash_cuda.hpp"
#include "06_flash_cuda/ladder.hpp"
#include "06_flash_cuda/rungs.hpp"
#include "06_flash_cuda/tiles.hpp"
#include "attn/chapter.hpp"
#include "attn/format.hpp"
#include "attn/measure.hpp"
#include "attn/print.hpp"
#include "attn/rng.hpp"

namespace {

namespace ch06 = attn::ch06;
using attn::Matrix;

// Defaults small enough for a second of GPU time; ./course gpu-check asks for the full ladder.
struct Options {
  std::vector<int> n{1024};
  std::vector<int> d{128};
  int bh = 16;
  int repeats = 10;
  std::string csv;
  bool dry_run = false;
};

// The timing table's CSV: its header, then one line per timed rung, flushed as soon as it is measured so
// a run that stops later keeps what it measured.
constexpr const char* kCsvHeader = "rung,n,d,causal,bh,ms,tflops,pct_ceiling\n";

// Per-block limits of the GPUs the build targets (cudaDevAttrMaxSharedMemoryPerBlockOptin), and CUDA's
// default without opting in.
struct NamedLimits {
  std::string name;
  attn::DeviceLimits limits;
};
std::vector<NamedLimits> known_limits(const ch06::DeviceInfo& device) {
  std::vector<NamedLimits> l{{"48K", {48 * 1024, 1024}}, {"163K", {163 * 1024, 1024}}, {"227K", {227 * 1024, 1024}}};
  if (device.present) l.push_back({"this GPU", {device.smem_per_block_optin, device.max_threads_per_block}});
  return l;
}

void show_device(const ch06::DeviceInfo& device) {
  attn::heading("The device");
  if (!device.present) {
    fmt::print(
        "No CUDA device used: {}.\n"
        "This run does the host-side parts only (launch planning, causal tiles, the roofline). The kernels\n"
        "run where a GPU exists: ./course gpu-check on a machine with an NVIDIA GPU (sm_80 or newer).\n",
        device.why_not);
    return;
  }
  fmt::print("CUDA device 0: {} (sm_{}{}), {} SMs, {} of memory, {} free\n", device.name, device.sm_major,
             device.sm_minor, device.sm_count, attn::human_bytes(static_cast<double>(device.total_bytes)),
             attn::human_bytes(static_cast<double>(device.free_bytes)));
  fmt::print("shared memory per block: {} by default, {} after opting in; at most {} threads per block\n",
             attn::human_bytes(static_cast<double>(device.smem_per_block)),
             attn::human_bytes(static_cast<double>(device.smem_per_block_optin)), device.max_threads_per_block);
}

void show_mapping() {
  attn::heading("Chapter 05's loops on a GPU");
  attn::Table t({"chapter 05 (CPU)", "chapter 06 (GPU)"});
  t.set_left(1);
  t.add_row({"for each (batch, head)", "grid.y, grid.z: one block per head and batch entry"});
  t.add_row({"for each query tile Q_i (B_r rows)", "grid.x: one thread block per tile, blocks run in parallel"});
  t.add_row({"  load Q_i", "the block copies Q_i into shared memory once"});
  t.add_row({"  for each K/V tile j", "a loop inside the block, K_j and V_j staged in shared memory"});
  t.add_row({"    S_ij = Q_i K_jᵀ / √d", "threads (rung 3) or warps on tensor cores (rung 4)"});
  t.add_row({"    online softmax: m, ℓ, O", "registers of the threads that own the row"});
  t.add_row({"  O_i / ℓ, lse = m + log ℓ", "written once to global memory (HBM)"});
  t.print();
}

void show_plans(const ch06::DeviceInfo& device, int batch, int heads, int n, int d) {
  attn::heading(fmt::format("Launch plans at batch = {}, heads = {}, n = {}, d = {}", batch, heads, n, d));
  const auto limits = known_limits(device);
  std::vector<std::string> headers{"rung", "B_r×B_c", "threads", "smem formula", "smem kernel", "grid"};
  for (const auto& l : limits) headers.push_back(l.name);
  attn::Table t(headers);
  for (const ch06::KernelPlan& p : ch06::kernel_plans(static_cast<std::size_t>(d))) {
    const std::size_t formula = attn::flash_smem_bytes(p.B_r, p.B_c, static_cast<std::size_t>(d), p.element_bytes);
    const attn::LaunchShape s =
        attn::flash_launch_shape(static_cast<std::size_t>(batch), static_cast<std::size_t>(heads),
                                 static_cast<std::size_t>(n), p.B_r, p.threads);
    std::vector<std::string> row{p.rung,
                                 fmt::format("{}×{}", p.B_r, p.B_c),
                                 std::to_string(p.threads),
                                 attn::human_bytes(static_cast<double>(formula)),
                                 attn::human_bytes(static_cast<double>(p.smem_bytes)),
                                 fmt::format("({}, {}, {})", s.grid.x, s.grid.y, s.grid.z)};
    for (const auto& l : limits) row.push_back(attn::plan_fits(p.smem_bytes, p.threads, l.limits) ? "yes" : "no");
    t.add_row(row);
  }
  t.print();
  fmt::print(
      "48K, 163K, 227K: does the kernel's shared memory fit a block's limit: the 48 KiB default, or what a\n"
      "kernel may opt in to on an A100 (163 KiB) and on an H100/H200 (227 KiB)?\n"
      "The formula counts Q_i, K_j, V_j and an fp32 S_ij; the kernels pad rows against bank conflicts, and\n"
      "rung 4 keeps S in registers instead. Both need more than the 48 KiB default: they opt in.\n");
}

void show_causal_tiles(int n, std::size_t B) {
  attn::heading(fmt::format("Causal attention: the K/V tiles each query tile visits (n = {}, B_r = B_c = {})", n, B));
  const auto nn = static_cast<std::size_t>(n);
  const std::size_t tiles = (nn + B - 1) / B;
  std::size_t visited = 0;
  for (std::size_t i = 0; i < tiles; ++i) visited += attn::causal_kv_tiles(i, B, B, nn, nn);
  fmt::print(
      "visited {} of {} tile pairs ({:.1f}%): the blocks below the diagonal do the work, the ones above\n"
      "are never loaded. Rung 1 and 2 compute every pair and mask afterwards.\n",
      visited, tiles * tiles, 100.0 * static_cast<double>(visited) / static_cast<double>(tiles * tiles));
  const std::size_t small = 8;  // the picture: 8 query tiles of a 512-token sequence
  fmt::print("\nn = {}, B = 64 (█ visited, · skipped; rows: query tiles, columns: K/V tiles)\n", small * 64);
  for (std::size_t i = 0; i < small; ++i) {
    const std::size_t v = attn::causal_kv_tiles(i, 64, 64, small * 64, small * 64);
    std::string line = fmt::format("  Q_{} ", i);
    for (std::size_t j = 0; j < small; ++j) line += j < v ? "█" : "·";
    fmt::print("{}  {} tiles\n", line, v);
  }
}

// [bank_passes]
// Shared-memory passes of rung 4's V_jᵀ store over one 64-key tile: for each warp-wide store instruction,
// the largest number of different 4-byte words any one bank must take (1 = conflict-free), summed. The
// first version gave consecutive lanes consecutive 8-column chunks of one key and stored 2-byte entries;
// the kernel's (tiles::tc_vt_item) gives them consecutive key pairs and stores 4-byte words.
struct StorePasses {
  int instructions = 0, passes = 0, worst = 0;
};
/// Counts the passes of \p stores stores per item over \p items items, one warp (32 items) at a time;
/// word(idx, e) is the 4-byte word item idx writes at its store e.
template <class Word>
StorePasses count_passes(int items, int stores, Word word) {
  StorePasses r;
  for (int first = 0; first < items; first += 32)  // one warp's 32 items
    for (int e = 0; e < stores; ++e) {
      std::vector<std::set<int>> words(32);  // per bank, the different words its lanes write
      for (int idx = first; idx < first + 32; ++idx) {
        const int w = word(idx, e);
        words[static_cast<std::size_t>(w % 32)].insert(w);
      }
      int pass = 0;
      for (const auto& w : words) pass = std::max(pass, static_cast<int>(w.size()));
      r.instructions += 1;
      r.passes += pass;
      r.worst = std::max(r.worst, pass);
    }
  return r;
}
StorePasses first_version_passes(int D) {
  namespace tiles = ch06::tiles;
  // 8 stores of 2 bytes each: item idx holds 8 columns of one key
  return count_passes(tiles::kTcBc * D / 8, 8, [D](int idx, int e) {
    const int row = idx / (D / 8), c = idx % (D / 8) * 8 + e;
    return (c * tiles::kTcVtStride + row) / 2;
  });
}
StorePasses kernel_passes(int D) {
  namespace tiles = ch06::tiles;
  // 8 stores of a 4-byte word (two keys' entries)
  return count_passes(tiles::kTcBc / 2 * D / 8, 8, [](int idx, int e) {
    const tiles::VtItem it = tiles::tc_vt_item(idx, 8);
    return tiles::tc_vt_word(it.c + e, it.pair);
  });
}

void show_vt_store_banks() {
  attn::heading("Rung 4: storing V_j transposed into shared memory (32 banks of 4 bytes), per 64-key tile");
  attn::Table t({"D", "store mapping", "warp stores", "passes", "worst conflict"});
  t.set_left(1);
  for (const int D : {64, 128}) {
    const StorePasses a = first_version_passes(D), b = kernel_passes(D);
    t.add_row({std::to_string(D), "lanes along one key's columns, 2 bytes", std::to_string(a.instructions),
               std::to_string(a.passes), fmt::format("{}-way", a.worst)});
    t.add_row({std::to_string(D), "lanes along key pairs, 4-byte words", std::to_string(b.instructions),
               std::to_string(b.passes), fmt::format("{}-way", b.worst)});
  }
  t.print();
}
// [bank_passes]

void show_roofline() {
  const ch06::Shape shape{1, 4096, 4096, 128, false};
  attn::heading("The roofline at n = 4096, d = 128 (one head, non-causal)");
  attn::Table t({"algorithm", "inputs", "FLOPs", "HBM bytes", "FLOP/byte"});
  for (std::size_t e : {4, 2}) {
    for (const ch06::RooflineRow& r : ch06::roofline(shape, e))
      t.add_row({r.what, e == 4 ? "fp32" : "bf16", fmt::format("{:.3g}", r.flops), attn::human_bytes(r.bytes, false),
                 fmt::format("{:.0f}", r.intensity)});
  }
  t.print();
  fmt::print("\nWhich bound applies (spec-sheet peaks; ridge = peak FLOP/s ÷ bandwidth):\n");
  const auto fp32 = ch06::roofline(shape, 4), bf16 = ch06::roofline(shape, 2);
  fmt::print(
      "An algorithm is compute-bound on a GPU when its FLOP/byte (standard {:.0f} in fp32, {:.0f} in bf16;\n"
      "flash {:.0f} and {:.0f}) is above the GPU's ridge; bf16 runs on the tensor cores (TC).\n",
      fp32[0].intensity, bf16[0].intensity, fp32[1].intensity, bf16[1].intensity);
  attn::Table b({"GPU", "ridge fp32", "ridge bf16", "std fp32", "std bf16 TC", "flash fp32", "flash bf16 TC"});
  for (const ch06::SpecSheet& s : ch06::spec_sheets()) {
    const double ridge32 = s.fp32_tflops * 1e12 / (s.hbm_gbs * 1e9), ridge16 = s.bf16_tflops * 1e12 / (s.hbm_gbs * 1e9);
    auto bound = [](double intensity, double ridge) { return std::string(intensity < ridge ? "memory" : "compute"); };
    b.add_row({s.gpu, fmt::format("{:.0f}", ridge32), fmt::format("{:.0f}", ridge16), bound(fp32[0].intensity, ridge32),
               bound(bf16[0].intensity, ridge16), bound(fp32[1].intensity, ridge32),
               bound(bf16[1].intensity, ridge16)});
  }
  b.print();
}

#if ATTN_HAVE_CUDA
using ch06::ladder;

std::vector<float> random_values(attn::Rng& rng, std::size_t count) {
  const Matrix m = rng.normal(1, count);  // (1, count)
  return std::vector<float>(m.begin(), m.end());
}

Matrix head_of(const std::vector<float>& x, int h, int rows, int d) {
  Matrix m = xt::zeros<float>({static_cast<std::size_t>(rows), static_cast<std::size_t>(d)});  // (rows, d)
  const auto begin = x.begin() + static_cast<std::ptrdiff_t>(h) * rows * d;
  std::copy(begin, begin + static_cast<std::ptrdiff_t>(rows) * d, m.begin());
  return m;
}

// The CPU side of every comparison is chapter 05's tiled FlashAttention: the same algorithm, the same
// log-sum-exp, on the CPU. B_r = B_c = 64, like the GPU rungs' tiles.
attn::FlashOutput cpu_reference(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal) {
  return attn::flash_attention(Q, K, V, causal, 64, 64);
}

// [validate]
// Every rung on the same small, ragged problem, against the CPU: fp32 rungs by relative error, the bf16
// rung by FlashAttention's rule (at most twice the error of a bf16 reference computation). A rung that
// fails, or cannot even run, is reported and the run goes on to the timings (see check_then_time).
std::vector<ch06::RungCheck> validate(const std::vector<ch06::Rung>& rungs, int d) {
  attn::heading(fmt::format("Each rung against the CPU (bh = 4, n = 300, d = {}, both masks)", d));
  attn::Table t({"rung", "causal", "max |O - O_cpu| / max |O_cpu|", "max |lse - lse_cpu|", "limit", "ok"});
  attn::Rng rng(6);
  std::vector<ch06::RungCheck> checks;
  for (const bool causal : {false, true}) {
    const ch06::Shape shape{4, 300, 300, d, causal};
    const std::size_t count = static_cast<std::size_t>(shape.bh) * 300 * static_cast<std::size_t>(d);
    const std::vector<float> Q = random_values(rng, count), K = random_values(rng, count),
                             V = random_values(rng, count);
    std::vector<attn::FlashOutput> ref;
    double ref_scale = 0.0, bf16_ref_err = 0.0;
    for (int h = 0; h < shape.bh; ++h) {
      ref.push_back(cpu_reference(head_of(Q, h, 300, d), head_of(K, h, 300, d), head_of(V, h, 300, d), causal));
      ref_scale = std::max(ref_scale, static_cast<double>(xt::amax(xt::abs(ref.back().O))()));
      const auto offset = static_cast<std::size_t>(h) * 300 * static_cast<std::size_t>(d);
      const std::vector<float> bf =
          ch06::bf16_reference_attention(Q.data() + offset, K.data() + offset, V.data() + offset, 300, 300, d, causal);
      for (std::size_t k = 0; k < bf.size(); ++k)
        bf16_ref_err = std::max(bf16_ref_err, std::fabs(static_cast<double>(bf[k]) - ref.back().O.data()[k]));
    }
    ch06::GpuWorkspace workspace(shape, /*with_scores=*/true);
    workspace.upload(Q, K, V);
    for (const ch06::Rung& rung : rungs) {
      ch06::RungCheck check{rung.name, d, causal, false, ""};
      std::vector<float> O, lse;
      try {
        workspace.poison_outputs();
        rung.launch(shape, workspace.tensors());
        O = workspace.download_O();
        lse = workspace.download_lse();
      } catch (const std::exception& e) {
        check.error = e.what();
        checks.push_back(check);
        t.add_row({rung.name, causal ? "yes" : "no", "could not run", "-", "-", "NO"});
        continue;
      }
      double o_err = 0.0, lse_err = 0.0;  // NaN (a row left poisoned) makes the error NaN: a failure
      for (int h = 0; h < shape.bh; ++h)
        for (std::size_t k = 0; k < ref[0].O.size(); ++k) {
          const double diff = std::fabs(O[static_cast<std::size_t>(h) * ref[0].O.size() + k] - ref[h].O.data()[k]);
          o_err = std::isnan(diff) ? diff : std::max(o_err, diff);
        }
      for (int h = 0; h < shape.bh; ++h)
        for (std::size_t i = 0; i < 300; ++i) {
          const double diff = std::fabs(lse[static_cast<std::size_t>(h) * 300 + i] - ref[h].lse(i));
          lse_err = std::isnan(diff) ? diff : std::max(lse_err, diff);
        }
      // fp32 rungs: float sums of length d and n on both sides (the CPU reference is fp32 too), 1e-5 level.
      // bf16: twice the bf16 reference's own error; its lse: inputs rounded to 8 bits move s by ~|s|/256.
      const double limit = rung.tensor_cores ? 2.0 * bf16_ref_err : 2e-5 * ref_scale;
      check.ok = o_err <= limit && lse_err <= (rung.tensor_cores ? 0.1 : 1e-4);
      checks.push_back(check);
      t.add_row({rung.name, causal ? "yes" : "no", fmt::format("{:.2e}", o_err / ref_scale),
                 fmt::format("{:.2e}", lse_err), fmt::format("{:.2e}", limit / ref_scale), check.ok ? "yes" : "NO"});
    }
  }
  t.print();
  return checks;
}
// [validate]

// [time_ladder]
// A rung whose check could not even run is not timed (it would stop the run at its first launch); one whose
// output differed from the CPU's is timed, and named again when the run ends.
void time_ladder(const std::vector<ch06::Rung>& rungs, const Options& o, const ch06::DeviceInfo& device,
                 const std::vector<ch06::RungCheck>& checks) {
  const auto could_not_run = [&](const ch06::Rung& rung) {
    return std::any_of(checks.begin(), checks.end(),
                       [&](const ch06::RungCheck& c) { return c.rung == rung.name && !c.error.empty(); });
  };
  attn::heading("Measuring this GPU's ceilings (cuBLAS SGEMM without TF32, cuBLAS bf16 GEMM, copy bandwidth)");
  const ch06::Ceilings c = ch06::measure_ceilings();
  fmt::print("fp32: {:.1f} TFLOP/s   bf16 tensor cores: {:.1f} TFLOP/s   copy: {:.0f} GB/s\n", c.fp32_tflops,
             c.bf16_tflops, c.copy_gbs);
  attn::heading(fmt::format("The ladder: bh = {}, median of {} runs after a warm-up (CUDA events)", o.bh, o.repeats));
  attn::Table t({"rung", "n", "d", "causal", "time (ms)", "TFLOP/s", "% of ceiling", "× rung 1"});
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    if (!csv) throw std::runtime_error("cannot write " + o.csv);
    csv << kCsvHeader << std::flush;
  }
  std::uint64_t seed = 66;
  for (const int n : o.n)
    for (const int d : o.d)
      for (const bool causal : {false, true}) {
        const ch06::Shape shape{o.bh, n, n, d, causal};
        const double s_bytes = 4.0 * o.bh * static_cast<double>(n) * n;
        // Rungs 1 and 2 need S in HBM: at n = 16384 and bh = 64 that is 69 GB, the point of the chapter. They
        // skip such shapes (over 16 GiB or half the free memory) instead of taking minutes to prove it.
        const bool room_for_S = s_bytes <= std::min(16.0 * (1ull << 30), 0.5 * static_cast<double>(device.free_bytes));
        ch06::GpuWorkspace workspace(shape, room_for_S);
        workspace.fill_normal(seed);  // drawn on the GPU: no host time, no transfer
        seed += 3;
        double naive_ms = 0.0;
        for (const ch06::Rung& rung : rungs) {
          if (could_not_run(rung)) {
            t.add_row({rung.name, std::to_string(n), std::to_string(d), causal ? "yes" : "no",
                       "not timed: its check could not run", "-", "-", "-"});
            continue;
          }
          if (rung.materialises_S && !room_for_S) {
            t.add_row({rung.name, std::to_string(n), std::to_string(d), causal ? "yes" : "no",
                       fmt::format("S needs {}", attn::human_bytes(s_bytes)), "-", "-", "-"});
            continue;
          }
          const double ms = workspace.median_ms([&] { rung.launch(shape, workspace.tensors()); }, o.repeats, 2);
          const double tflops = ch06::attention_flops(shape) / (ms * 1e-3) / 1e12;
          const double ceiling = rung.tensor_cores ? c.bf16_tflops : c.fp32_tflops;
          if (rung.name[0] == '1') naive_ms = ms;
          t.add_row({rung.name, std::to_string(n), std::to_string(d), causal ? "yes" : "no", fmt::format("{:.3f}", ms),
                     fmt::format("{:.1f}", tflops), fmt::format("{:.0f}%", 100.0 * tflops / ceiling),
                     naive_ms > 0.0 ? fmt::format("{:.1f}×", naive_ms / ms) : "-"});
          if (csv)
            csv << rung.name << ',' << n << ',' << d << ',' << (causal ? 1 : 0) << ',' << o.bh << ',' << ms << ','
                << tflops << ',' << 100.0 * tflops / ceiling << std::endl;
        }
      }
  t.print();
}
// [time_ladder]
#endif

// --dry-run: everything up to the first kernel launch. The CSV gets its header and no rows, so the scripts
// after the ladder (./course gpu-check, the GPU pack's run.sh) can be exercised on a machine without a GPU.
void dry_run(const Options& o) {
  attn::heading("Dry run");
  fmt::print("dry run: would time n = {}, d = {}, bh = {}, causal and not, {} samples each; no kernel launched\n",
             fmt::join(o.n, " "), fmt::join(o.d, " "), o.bh, o.repeats);
  if (o.csv.empty()) return;
  std::ofstream csv(o.csv);
  if (!(csv << kCsvHeader)) throw std::runtime_error("cannot write " + o.csv);
}

void tell_the_story(const attn::Chapter& chapter, const Options& o) {
  // The book's run never asks for a GPU, so the page reads the same on every machine that builds it.
  ch06::DeviceInfo device;
  if (chapter.book_mode()) {
    device.why_not = "the book's output is made without a GPU, the same on every machine";
  } else {
    device = ch06::query_device();
  }
  show_device(device);
  show_mapping();
  show_plans(device, 4, 16, 4096, 128);
  show_causal_tiles(4096, 64);
  show_vt_store_banks();
  show_roofline();
  if (o.dry_run) {
    dry_run(o);
    return;
  }
#if ATTN_HAVE_CUDA
  if (!device.present) return;
  const auto rungs = ladder();
  const auto check_every_rung = [&] {
    std::vector<ch06::RungCheck> checks;
    for (const int d : o.d)
      for (ch06::RungCheck& c : validate(rungs, d)) checks.push_back(std::move(c));
    return checks;
  };
  if (chapter.book_mode()) {
    ch06::check_then_time(check_every_rung, [](const std::vector<ch06::RungCheck>&) {
      fmt::print("\n(Timings are left out of the book's captured output; recorded runs are in book/recorded/.)\n");
    });
    return;
  }
  ch06::check_then_time(check_every_rung,
                        [&](const std::vector<ch06::RungCheck>& checks) { time_ladder(rungs, o, device, checks); });
#else
  (void)chapter;
  (void)o;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  attn::Chapter chapter("ch06_flash_cuda", "Chapter 06: FlashAttention in CUDA, a kernel ladder");
  Options o;
  chapter.cli().add_option("--n", o.n, "Sequence lengths of the timed runs (GPU only)")->check(CLI::Range(1, 65536));
  chapter.cli()
      .add_option("--d", o.d, "Head sizes d of the checks and timed runs (GPU only)")
      ->check(CLI::Range(1, 128));
  chapter.cli().add_option("--bh", o.bh, "batch · heads of the timed runs (GPU only)")->check(CLI::Range(1, 65535));
  chapter.cli()
      .add_option("--repeats", o.repeats, "Timed runs per rung; the median is shown")
      ->check(CLI::Range(1, 1000));
  chapter.add_output_file("--csv", o.csv, "Also write the timings as CSV to this file (./course gpu-check uses it)");
  chapter.cli().add_flag("--dry-run", o.dry_run,
                         "Do the host-side parts, list the shapes the ladder would time, launch no kernel");
  return chapter.run(argc, argv, [&] { tell_the_story(chapter, o); });
}
