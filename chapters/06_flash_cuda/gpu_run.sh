#!/usr/bin/env bash
# Chapter 06's GPU check: one script for `./course gpu-check` (from the source tree) and for the GPU pack
# (`./course gpu-pack` copies it to build/gpu-pack/run.sh, next to the binaries it runs).
#
# On a machine with an NVIDIA GPU it runs, writing each result into OUT_DIR as soon as it exists:
#   1. chapter 06's test programs (none of their GPU cases may be skipped)   tests-*.txt
#   2. compute-sanitizer memcheck and racecheck on the GPU cases, on the course's own kernels only (cuBLAS's
#      are not checked); a test that fails under a tool fails the step; a tool that cannot start is
#      reported, not counted as a failure                                  sanitizer-*.txt
#   3. the kernel ladder at n = 1024, 4096, 16384, d = 64, 128, causal and not, bh = 64
#                                                                           ladder.txt, ladder.csv
#   4. PyTorch's scaled_dot_product_attention on the same shapes, one summary table with TFLOP/s and
#      "% of SDPA", and the recording for the book (its first line: the sources' hash)
#                                                                           sdpa.csv, 06_flash_cuda.txt
# and status.txt (one line per step) and environment.txt; after every step, results.tar.gz holds all of
# them, so a caller that can bring back only a few files gets everything.
# Every step has a time limit and the whole run a deadline (DEADLINE below, 7 minutes): a lent GPU machine
# is gone after 10. It needs the NVIDIA driver, CUDA 13's runtime libraries (cudart, cuBLAS) and python3
# with torch; the pack brings every other library in lib/ (the C++ runtime in lib/fallback/, used only
# when the machine's own is missing or too old). It names no environment variable of any hosting service.
#
# --dry-run (or no GPU): the same steps up to the first kernel launch: the host-side tests run and the GPU
# cases must report skipped, the sanitizer commands are printed but not run, the ladder lists its shapes
# and writes an empty CSV, and the recording step runs without timings. Exit status 0 when every step that
# ran passed.
#
# usage: run.sh [--dry-run] [--bin DIR] [--hash HASH] [--repeats N] [--python EXE] OUT_DIR
# Sourced (`source run.sh`), it only defines its functions: cmake/test_gpu_run.sh tests them.
# Book page: book/06_flash_cuda.md ("Running it on a GPU machine").
set -uo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin="$here/bin" hash="" dry_run=0 repeats=10 out="" python=python3
N=(1024 4096 16384) D=(64 128) BH=64

# --- time -----------------------------------------------------------------------------------------------
# Each step's limit in seconds, at least twice what it is expected to take on an H100/H200 (estimates, no
# GPU run recorded yet: core tests ~2 s, solution tests ~10, memcheck ~30, racecheck ~45, the ladder ~40
# (its 21·10¹² FLOP per flash rung, 13 launches each, rung 3 at 10-20 TFLOP/s), SDPA ~20 with torch's
# start: about 2.5 minutes), and the deadline of the whole run. The limits add up to 400 s; the other
# 20 s are for what runs between the steps and for KILL_GRACE, so no step can push the run past it.
DEADLINE=420
KILL_GRACE=5 # after its limit a step gets SIGTERM, KILL_GRACE seconds later SIGKILL
declare -A LIMIT=([core_tests]=20 [solution_tests]=60 [memcheck]=60 [racecheck]=90 [ladder]=110 [sdpa]=60)
STEPS=(core_tests solution_tests memcheck racecheck ladder sdpa)
started=$SECONDS

# The seconds step $1 may take now: its own limit, or less when the deadline is nearer (at least 1).
step_limit() {
  local left=$((DEADLINE - (SECONDS - started) - KILL_GRACE)) own=${LIMIT[$1]}
  local limit=$((own < left ? own : left))
  echo $((limit > 0 ? limit : 1))
}

# Runs "$@" under step $1's limit; status 124 (or 137 after SIGKILL) when it had to be stopped.
run_limited() {
  local name=$1
  shift
  timeout --kill-after="$KILL_GRACE" "$(step_limit "$name")" "$@"
}

# --- results --------------------------------------------------------------------------------------------
status_line() { echo "$*" | tee -a "$out/status.txt"; }
step() { printf '\n==> %s (limit %s s; %s s of the run'"'"'s %s s used)\n' "$1" "$(step_limit "$2")" \
  $((SECONDS - started)) "$DEADLINE"; }

# OUT_DIR/results.tar.gz: every other file of OUT_DIR, written next to it and renamed, so a reader never
# sees half an archive. Called after every step.
archive_results() {
  local files=() f
  for f in "$out"/*; do
    [ -f "$f" ] && [ "${f##*/}" != results.tar.gz ] && files+=("${f##*/}")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  (cd "$out" && tar -czf .results.tar.gz.part "${files[@]}" && mv .results.tar.gz.part results.tar.gz)
}

# --- the libraries --------------------------------------------------------------------------------------
missing_libs() { ldd "$bin/ch06_flash_cuda" "$bin/ch06_flash_cuda_solution_test" 2>&1 | awk '/not found/ {print $1}' | sort -u; }

# Whether the machine's own C++ runtime (libstdc++, libgcc_s) serves the programs and the pack's libraries:
# no loader message about either (missing, unreadable, or without a symbol version they need).
host_cxx_runtime_serves() {
  local complaints # collected first: grep -q stopping early would fail the pipeline (pipefail, SIGPIPE)
  complaints=$(ldd "$bin"/* 2>&1 | grep -E 'libstdc\+\+|libgcc_s')
  ! grep -qE 'not found|error|too short|wrong ELF' <<<"$complaints"
}

# LD_LIBRARY_PATH for the programs: the pack's lib/ first, its lib/fallback/ only when the machine's C++
# runtime does not serve (the packed copy needs a newer glibc than the programs, see README.txt), then
# CUDA's libraries wherever this machine keeps them. Sets cxx_runtime to say which C++ runtime is used.
choose_libraries() {
  [ -d "$here/lib" ] && export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cxx_runtime="this machine's"
  if [ -d "$here/lib/fallback" ] && ! host_cxx_runtime_serves; then
    export LD_LIBRARY_PATH="$here/lib/fallback:$LD_LIBRARY_PATH"
    cxx_runtime="the pack's lib/fallback/ (this machine's libstdc++ or libgcc_s is missing or too old)"
  fi
  [ -n "$(missing_libs)" ] || return 0
  local dir
  for dir in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 \
    /usr/local/cuda-13*/targets/x86_64-linux/lib \
    $("${python_env[@]}" "$python" -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in os.listdir(p)]' \
      2>/dev/null); do
    [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
    [ -z "$(missing_libs)" ] && break
  done
}

# --- 1. the test programs -------------------------------------------------------------------------------
# doctest's summary: "[doctest] test cases: N | P passed | F failed | S skipped".
count_of() { sed -n "s/.*test cases: *[0-9]* *| *[0-9]* passed *| *[0-9]* failed *| *\([0-9]*\) skipped.*/\1/p" "$1" | tail -1; }
failed_of() { sed -n "s/.*test cases: *[0-9]* *| *[0-9]* passed *| *\([0-9]*\) failed.*/\1/p" "$1" | tail -1; }

run_tests() { # $1: the program, $2: its step name
  local t=$1 log="$out/tests-$1.txt" rc gpu_cases failed skipped limit
  step "$t" "$2"
  limit=$(step_limit "$2")
  run_limited "$2" "$bin/$t" --no-intro --no-version >"$log" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || echo "run.sh: $t did not finish in its $limit s" >>"$log"
  tail -n 12 "$log"
  gpu_cases=$("$bin/$t" --no-intro --no-version --list-test-cases | grep -c '^on the GPU')
  failed=$(failed_of "$log") skipped=$(count_of "$log")
  if [ "$rc" -ne 0 ] || [ "${failed:-1}" != 0 ]; then
    status_line "FAIL  $t: ${failed:-?} test cases failed (status $rc; see tests-$t.txt)"
    failures+=("$t")
  elif [ "$gpu" = 1 ] && [ "${skipped:-1}" != 0 ]; then
    status_line "FAIL  $t: $skipped test cases skipped although a GPU is present"
    failures+=("$t")
  elif [ "$gpu" = 0 ] && [ "$skipped" != "$gpu_cases" ]; then
    status_line "FAIL  $t: $skipped skipped, but it has $gpu_cases GPU cases and there is no GPU"
    failures+=("$t")
  elif [ "$gpu" = 0 ]; then
    status_line "ok    $t: host-side cases passed; its $gpu_cases GPU cases reported skipped (no GPU)"
  else
    status_line "ok    $t: every case passed, none skipped"
  fi
}

# --- 2. compute-sanitizer ---------------------------------------------------------------------------------
# Only the course's kernels are checked: they all live in namespace attn::ch06, and "ch06" is part of both
# their mangled (_ZN4attn4ch06...) and demangled (attn::ch06::...) names, whichever the filter matches.
# cuBLAS's kernels run unchecked: a report inside a vendor library is not the course's to fix, and would
# have failed the run. cmake/test_gpu_run.sh checks that every kernel in the test program matches.
KERNEL_FILTER=kns=ch06

find_sanitizer() {
  command -v compute-sanitizer || ls ${CUDA_HOME:+"$CUDA_HOME/bin/compute-sanitizer"} \
    /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
    /usr/local/cuda-13*/bin/compute-sanitizer 2>/dev/null | head -n 1
}

# The command line of tool $1 (memcheck or racecheck), one word per line. The test program keeps its
# intro lines ("[doctest] ..."): they show that it started under the tool (see sanitizer_verdict).
sanitizer_command() {
  printf '%s\n' "${sanitizer:-compute-sanitizer}" --tool "$1" --kernel-name "$KERNEL_FILTER" --error-exitcode 99 \
    "$bin/ch06_flash_cuda_solution_test" '-tc=on the GPU*'
}

# The status line for tool $1 that exited with $2, its output in file $3 ($4: the limit it ran under):
#   0         ok: the GPU cases passed and the tool found nothing
#   99        FAIL: the tool found errors (--error-exitcode)
#   124, 137  skip: stopped at the step's limit (not counted: the tool is slow, the tests ran in step 1)
#   other     FAIL when the test program started under the tool (its "[doctest]" lines are in the log):
#             a test that fails or crashes under a sanitizer is a failure; skip when it never started
#             (the tool could not run here: no driver support, an option it does not know, ...)
sanitizer_verdict() {
  local tool=$1 rc=$2 log=$3 limit=${4:-?} failed
  case $rc in
    0) echo "ok    compute-sanitizer $tool: no errors in the course's kernels" ;;
    99) echo "FAIL  compute-sanitizer $tool: errors found (see $(basename "$log"))" ;;
    124 | 137) echo "skip  compute-sanitizer $tool: did not finish in $limit s (not counted)" ;;
    *)
      if grep -q '^\[doctest\]' "$log"; then
        failed=$(failed_of "$log")
        echo "FAIL  compute-sanitizer $tool: the GPU cases failed under the tool (status $rc${failed:+, $failed test cases failed}; see $(basename "$log"))"
      else
        echo "skip  compute-sanitizer $tool: the tool itself could not run (status $rc; see $(basename "$log"))"
      fi
      ;;
  esac
}

run_sanitizer() { # $1: memcheck or racecheck
  local tool=$1 log="$out/sanitizer-$1.txt" rc limit line cmd
  step "compute-sanitizer $tool on the GPU cases, the course's kernels only" "$tool"
  mapfile -t cmd < <(sanitizer_command "$tool")
  if [ "$gpu" = 0 ]; then
    echo "dry run: would run (limit $(step_limit "$tool") s): $(printf '%q ' "${cmd[@]}")"
    status_line "skip  compute-sanitizer $tool: no GPU (dry run)"
    return
  elif [ -z "$sanitizer" ]; then
    status_line "skip  compute-sanitizer $tool: the tool is not installed on this machine"
    return
  fi
  limit=$(step_limit "$tool")
  printf '%q ' "${cmd[@]}" && echo
  run_limited "$tool" "${cmd[@]}" >"$log" 2>&1
  rc=$?
  tail -n 4 "$log"
  line=$(sanitizer_verdict "$tool" "$rc" "$log" "$limit")
  status_line "$line"
  [[ "$line" != FAIL* ]] || failures+=("$tool")
}

# --- 3. the ladder --------------------------------------------------------------------------------------
run_ladder() {
  local rc args=(--no-color --n "${N[@]}" --d "${D[@]}" --bh "$BH" --repeats "$repeats" --csv "$out/ladder.csv")
  step "the kernel ladder: n = ${N[*]}, d = ${D[*]}, bh = $BH, causal and not" ladder
  [ "$dry_run" = 1 ] && args+=(--dry-run)
  run_limited ladder "$bin/ch06_flash_cuda" "${args[@]}" 2>&1 | tee "$out/ladder.txt"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || echo "run.sh: the ladder did not finish in its time limit" | tee -a "$out/ladder.txt"
    status_line "FAIL  the ladder stopped (status $rc; see ladder.txt; ladder.csv keeps the rows measured before)"
    failures+=("ladder")
  else
    status_line "ok    the ladder: $(($(wc -l <"$out/ladder.csv") - 1)) timed rows in ladder.csv"
  fi
}

# --- 4. PyTorch's SDPA, the summary table and the recording ---------------------------------------------
# sdpa_compare.py stops timing new shapes 15 s before the step's limit and writes the recording with what
# it has; if it is stopped anyway (a hung CUDA call), the recording is written again without SDPA.
run_sdpa() {
  local rc limit args=("$out/ladder.csv" --n "${N[@]}" --d "${D[@]}" --bh "$BH" --repeats "$repeats"
    --csv "$out/sdpa.csv" --record "$out/06_flash_cuda.txt" --device-name "$device_name" --sources-hash "$hash"
    --status "$out/status.txt")
  step "PyTorch's scaled_dot_product_attention on the same shapes; the summary and the recording" sdpa
  limit=$(step_limit sdpa)
  [ "$dry_run" = 1 ] && args+=(--dry-run)
  run_limited sdpa "${python_env[@]}" "$python" "$here/sdpa_compare.py" "${args[@]}" --time-limit $((limit > 30 ? limit - 15 : limit / 2))
  rc=$?
  case $rc in
    0) status_line "ok    the recording: $out/06_flash_cuda.txt" ;;
    3) status_line "note  no SDPA column (PyTorch missing or without CUDA); the recording has the ladder only" ;;
    4) status_line "note  SDPA timed on some shapes only (its time limit; see sdpa.csv); the recording has them" ;;
    124 | 137)
      status_line "FAIL  sdpa_compare.py did not finish in $limit s; the recording is written without SDPA"
      failures+=("sdpa")
      "${python_env[@]}" "$python" "$here/sdpa_compare.py" "${args[@]}" --skip-sdpa "PyTorch stopped at the step's time limit" >/dev/null
      ;;
    *) status_line "FAIL  sdpa_compare.py stopped (status $rc)"; failures+=("sdpa") ;;
  esac
}

main() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry-run) dry_run=1; shift ;;
      --bin) bin=$2; shift 2 ;;
      --hash) hash=$2; shift 2 ;;
      --repeats) repeats=$2; shift 2 ;;
      --python) python=$2; shift 2 ;; # the Python that has torch, when it is not the first python3 on PATH
      -h | --help) sed -n 's/^# usage: //p' "${BASH_SOURCE[0]}"; exit 0 ;;
      -*) echo "run.sh: unknown option '$1'" >&2; sed -n 's/^# usage: //p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
      *) [ -z "$out" ] || { echo "run.sh: one output folder only" >&2; exit 2; }; out=$1; shift ;;
    esac
  done
  [ -n "$out" ] || { echo "run.sh: the output folder is missing" >&2; sed -n 's/^# usage: //p' "${BASH_SOURCE[0]}" >&2; exit 2; }
  mkdir -p "$out" || exit 2
  out=$(cd "$out" && pwd)
  [ -n "$hash" ] || hash=$(cat "$here/SOURCES_HASH" 2>/dev/null || echo unknown)
  failures=()
  : >"$out/status.txt"
  local total=0 s
  for s in "${STEPS[@]}"; do total=$((total + LIMIT[$s])); done
  echo "run.sh: time limits (s): $(for s in "${STEPS[@]}"; do printf '%s %s, ' "$s" "${LIMIT[$s]}"; done)in all $total;" \
    "the whole run stops by $DEADLINE s"

  # Python keeps the machine's own library path: the pack's libraries must not shadow the ones torch needs.
  python_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
  choose_libraries
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "sources: $hash"
    echo "host: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //')"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "C++ runtime: $cxx_runtime"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    ldd "$bin/ch06_flash_cuda"
  } >"$out/environment.txt" 2>&1
  if [ -n "$(missing_libs)" ]; then
    echo "run.sh: these libraries are not found: $(missing_libs | tr '\n' ' ')" >&2
    echo "  (the pack brings all but CUDA's; install CUDA 13's runtime and cuBLAS, or set CUDA_HOME)" >&2
    archive_results
    exit 1
  fi

  gpu=0
  if [ "$dry_run" = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    gpu=1
    device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  else
    device_name="(dry run: no GPU used)"
    [ "$dry_run" = 1 ] || echo "run.sh: no NVIDIA GPU found (nvidia-smi lists none): a dry run only"
    dry_run=1
    export CUDA_VISIBLE_DEVICES="" # a dry run on a GPU machine: the programs see no device either
  fi
  sanitizer=$(find_sanitizer)

  run_tests ch06_flash_cuda_core_test core_tests
  archive_results
  run_tests ch06_flash_cuda_solution_test solution_tests
  archive_results
  run_sanitizer memcheck
  archive_results
  run_sanitizer racecheck
  archive_results
  run_ladder
  archive_results
  run_sdpa

  echo
  status_line "note  run.sh done in $((SECONDS - started)) s (deadline $DEADLINE s); results in $out and results.tar.gz"
  archive_results
  if [ ${#failures[@]} -gt 0 ]; then
    echo "run.sh: failed: ${failures[*]}"
    exit 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
