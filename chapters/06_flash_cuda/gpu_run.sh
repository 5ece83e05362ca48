#!/usr/bin/env bash
# Chapter 06's GPU check: one script for `./course gpu-check` (from the source tree) and for the GPU pack
# (`./course gpu-pack` copies it to build/gpu-pack/run.sh, next to the binaries it runs).
#
# On a machine with an NVIDIA GPU it runs, writing each result into OUT_DIR as soon as it exists:
#   1. chapter 06's test programs (none of their GPU cases may be skipped)   tests-*.txt
#   2. compute-sanitizer memcheck and racecheck on the GPU cases, where the tool can run at all
#      (a tool that cannot start is reported, not counted as a failure)    sanitizer-*.txt
#   3. the kernel ladder at n = 1024, 4096, 16384, d = 64, 128, causal and not, bh = 64
#                                                                           ladder.txt, ladder.csv
#   4. PyTorch's scaled_dot_product_attention on the same shapes, one summary table with TFLOP/s and
#      "% of SDPA", and the recording for the book (its first line: the sources' hash)
#                                                                           sdpa.csv, 06_flash_cuda.txt
# It needs the NVIDIA driver, CUDA 13's runtime libraries (cudart, cuBLAS) and python3 with torch; the
# pack brings every other library in lib/. It names no environment variable of any hosting service.
#
# --dry-run (or no GPU): the same steps up to the first kernel launch: the host-side tests run and the GPU
# cases must report skipped, the sanitizers are skipped, the ladder lists its shapes and writes an empty
# CSV, and the recording step runs without timings. Exit status 0 when every step that ran passed.
#
# usage: run.sh [--dry-run] [--bin DIR] [--hash HASH] [--repeats N] [--python EXE] OUT_DIR
# Book page: book/06_flash_cuda.md ("Running it on a GPU machine").
set -uo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin="$here/bin" hash="" dry_run=0 repeats=10 out="" python=python3
N=(1024 4096 16384) D=(64 128) BH=64
SANITIZER_TIMEOUT=100 # seconds per tool; small shapes: both normally finish in well under a minute
TEST_TIMEOUT=180      # seconds per test program (a hung kernel must not hold the machine)
LADDER_TIMEOUT=300    # seconds for the whole ladder (expected: one to two minutes on an H100/H200)

usage() { sed -n 's/^# usage: //p' "${BASH_SOURCE[0]}" >&2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --bin) bin=$2; shift 2 ;;
    --hash) hash=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --python) python=$2; shift 2 ;; # the Python that has torch, when it is not the first python3 on PATH
    -h | --help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option '$1'" >&2; usage; exit 2 ;;
    *) [ -z "$out" ] || { echo "run.sh: one output folder only" >&2; exit 2; }; out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "run.sh: the output folder is missing" >&2; usage; exit 2; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
[ -n "$hash" ] || hash=$(cat "$here/SOURCES_HASH" 2>/dev/null || echo unknown)
started=$SECONDS
failures=()
status_line() { echo "$*" | tee -a "$out/status.txt"; }
: >"$out/status.txt"
step() { printf '\n==> %s\n' "$*"; }

# --- the libraries: the pack's own first, then CUDA's wherever this machine keeps them ----------------
# Python keeps the machine's own library path: the pack's libstdc++ must not shadow a newer one torch needs.
python_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
[ -d "$here/lib" ] && export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing_libs() { ldd "$bin/ch06_flash_cuda" "$bin/ch06_flash_cuda_solution_test" 2>&1 | awk '/not found/ {print $1}' | sort -u; }
if [ -n "$(missing_libs)" ]; then
  for dir in ${CUDA_HOME:+"$CUDA_HOME/lib64"} /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13*/lib64 \
    /usr/local/cuda-13*/targets/x86_64-linux/lib \
    $("${python_env[@]}" "$python" -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in os.listdir(p)]' \
      2>/dev/null); do
    [ -d "$dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir"
    [ -z "$(missing_libs)" ] && break
  done
fi
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "sources: $hash"
  echo "host: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //')"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ldd "$bin/ch06_flash_cuda"
} >"$out/environment.txt" 2>&1
if [ -n "$(missing_libs)" ]; then
  echo "run.sh: these libraries are not found: $(missing_libs | tr '\n' ' ')" >&2
  echo "  (the pack brings all but CUDA's; install CUDA 13's runtime and cuBLAS, or set CUDA_HOME)" >&2
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

# --- 1. the test programs --------------------------------------------------------------------------
# doctest's summary: "[doctest] test cases: N | P passed | F failed | S skipped".
count_of() { sed -n "s/.*test cases: *[0-9]* *| *[0-9]* passed *| *[0-9]* failed *| *\([0-9]*\) skipped.*/\1/p" "$1" | tail -1; }
failed_of() { sed -n "s/.*test cases: *[0-9]* *| *[0-9]* passed *| *\([0-9]*\) failed.*/\1/p" "$1" | tail -1; }
for t in ch06_flash_cuda_core_test ch06_flash_cuda_solution_test; do
  step "$t"
  log="$out/tests-$t.txt"
  timeout "$TEST_TIMEOUT" "$bin/$t" --no-intro --no-version >"$log" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || echo "run.sh: $t did not finish in $TEST_TIMEOUT s" >>"$log"
  cat "$log" | tail -n 12
  gpu_cases=$("$bin/$t" --no-intro --no-version --list-test-cases | grep -c '^on the GPU')
  failed=$(failed_of "$log") skipped=$(count_of "$log")
  if [ "$rc" -ne 0 ] || [ "${failed:-1}" != 0 ]; then
    status_line "FAIL  $t: ${failed:-?} test cases failed (see tests-$t.txt)"
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
done

# --- 2. compute-sanitizer -----------------------------------------------------------------------------
step "compute-sanitizer memcheck and racecheck on the GPU cases"
sanitizer=$(command -v compute-sanitizer || ls ${CUDA_HOME:+"$CUDA_HOME/bin/compute-sanitizer"} \
  /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
  /usr/local/cuda-13*/bin/compute-sanitizer 2>/dev/null | head -n 1)
for tool in memcheck racecheck; do
  log="$out/sanitizer-$tool.txt"
  if [ "$gpu" = 0 ]; then
    status_line "skip  compute-sanitizer $tool: no GPU (dry run)"
  elif [ -z "$sanitizer" ]; then
    status_line "skip  compute-sanitizer $tool: the tool is not installed on this machine"
  else
    timeout "$SANITIZER_TIMEOUT" "$sanitizer" --tool "$tool" --error-exitcode 99 \
      "$bin/ch06_flash_cuda_solution_test" --no-intro -tc='on the GPU*' >"$log" 2>&1
    rc=$?
    tail -n 4 "$log"
    case $rc in
      0) status_line "ok    compute-sanitizer $tool: no errors" ;;
      99) status_line "FAIL  compute-sanitizer $tool: errors found (see sanitizer-$tool.txt)"; failures+=("$tool") ;;
      124) status_line "skip  compute-sanitizer $tool: did not finish in $SANITIZER_TIMEOUT s (not counted)" ;;
      *) status_line "skip  compute-sanitizer $tool: the tool itself could not run (status $rc; see sanitizer-$tool.txt)" ;;
    esac
  fi
done

# --- 3. the ladder ------------------------------------------------------------------------------------
step "the kernel ladder: n = ${N[*]}, d = ${D[*]}, bh = $BH, causal and not"
ladder_args=(--no-color --n "${N[@]}" --d "${D[@]}" --bh "$BH" --repeats "$repeats" --csv "$out/ladder.csv")
[ "$dry_run" = 1 ] && ladder_args+=(--dry-run)
timeout "$LADDER_TIMEOUT" "$bin/ch06_flash_cuda" "${ladder_args[@]}" 2>&1 | tee "$out/ladder.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  [ "$rc" -ne 124 ] || echo "run.sh: the ladder did not finish in $LADDER_TIMEOUT s" | tee -a "$out/ladder.txt"
  status_line "FAIL  the ladder stopped (status $rc; see ladder.txt; ladder.csv keeps the rows measured before)"
  failures+=("ladder")
else
  status_line "ok    the ladder: $(($(wc -l <"$out/ladder.csv") - 1)) timed rows in ladder.csv"
fi

# --- 4. PyTorch's SDPA, the summary table and the recording ------------------------------------------
step "PyTorch's scaled_dot_product_attention on the same shapes; the summary and the recording"
sdpa_args=("$out/ladder.csv" --n "${N[@]}" --d "${D[@]}" --bh "$BH" --repeats "$repeats" --csv "$out/sdpa.csv"
  --record "$out/06_flash_cuda.txt" --device-name "$device_name" --sources-hash "$hash" --status "$out/status.txt")
[ "$dry_run" = 1 ] && sdpa_args+=(--dry-run)
"${python_env[@]}" "$python" "$here/sdpa_compare.py" "${sdpa_args[@]}"
case $? in
  0) status_line "ok    the recording: $out/06_flash_cuda.txt" ;;
  3) status_line "note  no SDPA column (PyTorch missing or without CUDA); the recording has the ladder only" ;;
  *) status_line "FAIL  sdpa_compare.py stopped"; failures+=("sdpa") ;;
esac

echo
echo "run.sh: done in $((SECONDS - started)) s; results in $out"
if [ ${#failures[@]} -gt 0 ]; then
  echo "run.sh: failed: ${failures[*]}"
  exit 1
fi
