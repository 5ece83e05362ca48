#!/usr/bin/env bash
# The ctest case "the GPU run script's decisions hold without a GPU", on chapters/06_flash_cuda/gpu_run.sh
# (sourced, it only defines its functions): 1. the sanitizers' kernel filter matches every kernel, mangled and
# demangled; 2. a sanitizer run is FAIL on errors or failing tests, skip only when the tool never started or ran
# out of time; 3. the step limits fit a deadline well under 10 minutes and stop a step; 4. the archive holds
# every result file; 5. sdpa_compare.py stops at its time limit and still records (a stand-in PyTorch), and
# --skip-sdpa records without it. usage: test_gpu_run.sh ROOT BUILD_DIR SCRATCH
set -uo pipefail
export LC_ALL=C
root=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# shellcheck source=../chapters/06_flash_cuda/gpu_run.sh
source "$root/chapters/06_flash_cuda/gpu_run.sh"
bin="$build/bin" out="$scratch/out"
mkdir -p "$out"

# --- 1. the kernel filter -----------------------------------------------------------------------------------
# nvcc gives every kernel a host stub named __device_stub_ + the kernel's mangled name.
filter=${KERNEL_FILTER#kns=}
mapfile -t kernels < <(nm -C "$bin/ch06_flash_cuda_solution_test" | sed -n 's/.* __device_stub_\(_Z[A-Za-z0-9_]*\)(.*/\1/p' |
  sort -u)
[ "${#kernels[@]}" -ge 5 ] || fail "only ${#kernels[@]} kernels found in the test program (expected the ladder's)"
unmatched=""
for k in "${kernels[@]}"; do
  demangled=$(c++filt "$k")
  [[ "$k" == *"$filter"* && "$demangled" == *"$filter"* ]] || unmatched+=" $demangled"
done
[ -z "$unmatched" ] || fail "kernels the sanitizers' filter ($KERNEL_FILTER) would skip:$unmatched"
[[ "$(sanitizer_command racecheck | tr '\n' ' ')" == *"--tool racecheck --kernel-name $KERNEL_FILTER "* ]] ||
  fail "the sanitizer command lacks the kernel filter: $(sanitizer_command racecheck | tr '\n' ' ')"
ok "the filter $KERNEL_FILTER matches all ${#kernels[@]} kernels of the test program, mangled and demangled"

# --- 2. the sanitizers' verdicts --------------------------------------------------------------------------------
started_log() { printf '[doctest] doctest version is "2.4.9"\n[doctest] run with "--help" for options\n%s\n' "$1"; }
verdict_is() { # $1: expected first word, $2: status, $3: the log's text, $4: what the case is
  printf '%s\n' "$3" >"$scratch/sanitizer.txt"
  local got
  got=$(sanitizer_verdict racecheck "$2" "$scratch/sanitizer.txt" 90)
  [[ "$got" == "$1 "* ]] || fail "$4: expected $1, got: $got"
}
verdict_is ok 0 "$(started_log '[doctest] test cases: 4 | 4 passed | 0 failed | 0 skipped')" "a clean run"
verdict_is FAIL 99 "$(started_log '========= ERROR SUMMARY: 2 errors')" "errors found by the tool"
verdict_is FAIL 1 "$(started_log '[doctest] test cases: 4 | 3 passed | 1 failed | 0 skipped')" \
  "a test that fails under the tool"
verdict_is FAIL 134 "$(started_log '========= Error: process didn'"'"'t terminate successfully')" \
  "a test program that crashes under the tool"
verdict_is skip 1 "========= Error: Target application terminated before first instrumented API call" \
  "a tool that cannot start the program"
verdict_is skip 124 "$(started_log '')" "a run stopped at its time limit"
started_log '[doctest] test cases: 4 | 3 passed | 1 failed | 0 skipped' >"$scratch/sanitizer.txt"
got=$(sanitizer_verdict racecheck 1 "$scratch/sanitizer.txt" 90)
[[ "$got" == *"1 test cases failed"* ]] || fail "the verdict does not count the failed cases: $got"
ok "sanitizer verdicts: errors, failing or crashing tests FAIL; a tool that cannot start or runs out of time skips"

# --- 3. time limits -----------------------------------------------------------------------------------------------
total=0
for s in "${STEPS[@]}"; do
  [ -n "${LIMIT[$s]:-}" ] || fail "step $s has no time limit"
  total=$((total + ${LIMIT[$s]:-0}))
done
[ "${#LIMIT[@]}" -eq "${#STEPS[@]}" ] || fail "LIMIT names steps that STEPS does not list"
[ "$total" -le $((DEADLINE - 4 * KILL_GRACE)) ] || fail "the step limits add up to $total s, over the deadline $DEADLINE s"
[ "$DEADLINE" -le 480 ] || fail "the deadline $DEADLINE s is not well under the 600 s a lent machine allows"
started=$((SECONDS - (DEADLINE - 30))) # 30 s before the deadline
[ "$(step_limit ladder)" -eq $((30 - KILL_GRACE)) ] || fail "near the deadline the ladder got $(step_limit ladder) s"
started=$((SECONDS - DEADLINE - 60)) # past it
[ "$(step_limit ladder)" -eq 1 ] || fail "past the deadline a step got $(step_limit ladder) s"
# shellcheck disable=SC2034 # read by the sourced script's step_limit
started=$SECONDS
LIMIT["core_tests"]=1
t0=$SECONDS
run_limited core_tests sleep 30
rc=$?
[ "$rc" -eq 124 ] && [ $((SECONDS - t0)) -le 10 ] || fail "a step past its limit was not stopped (status $rc)"
ok "limits: $total s in all, deadline $DEADLINE s; a step gets at most what is left and is stopped at its limit"

# --- 4. the archive ------------------------------------------------------------------------------------------------
for f in status.txt ladder.csv 06_flash_cuda.txt; do echo "$f" >"$out/$f"; done
archive_results
[ "$(tar -tzf "$out/results.tar.gz" | sort | tr '\n' ' ')" = "06_flash_cuda.txt ladder.csv status.txt " ] ||
  fail "the archive holds: $(tar -tzf "$out/results.tar.gz" | tr '\n' ' ')"
echo more >"$out/sdpa.csv" && archive_results
# The listing is read whole (no grep -q): grep -q stops at the match, and under pipefail tar's SIGPIPE would
# then fail the check now and then, on a loaded machine.
tar -tzf "$out/results.tar.gz" | grep -x sdpa.csv >/dev/null || fail "the archive is not renewed after a step"
ok "results.tar.gz holds every result file and is renewed after each step"

# --- 5. sdpa_compare.py's time limit, and the recording without PyTorch --------------------------------------------
fake="$scratch/fake_torch/torch"
mkdir -p "$fake/nn"
cat >"$fake/__init__.py" <<'EOF'
# A stand-in for PyTorch with the calls sdpa_compare.py makes: each SDPA call sleeps 0.1 s.
import time, types
__version__ = "fake"
bfloat16 = "bf16"
def randn(*shape, device=None, dtype=None):
    return None
class _Event:
    def __init__(self, enable_timing=False): self.t = 0.0
    def record(self): self.t = time.monotonic()
    def synchronize(self): pass
    def elapsed_time(self, end): return (end.t - self.t) * 1e3
cuda = types.SimpleNamespace(is_available=lambda: True, Event=_Event, synchronize=lambda: None)
from . import nn
EOF
cat >"$fake/nn/__init__.py" <<'EOF'
import time, types
def _sdpa(q, k, v, is_causal=False):
    time.sleep(0.1)
functional = types.SimpleNamespace(scaled_dot_product_attention=_sdpa)
EOF
printf 'rung,n,d,causal,bh,ms,tflops,pct_ceiling\n' >"$scratch/ladder.csv"
t0=$SECONDS
PYTHONPATH="$scratch/fake_torch" python3 "$root/chapters/06_flash_cuda/sdpa_compare.py" "$scratch/ladder.csv" \
  --n 1024 4096 16384 --d 64 128 --repeats 1 --csv "$scratch/sdpa.csv" --record "$scratch/rec.txt" \
  --sources-hash abc --time-limit 1 >"$scratch/sdpa.log" 2>&1
rc=$?
timed=$(($(wc -l <"$scratch/sdpa.csv") - 1))
# Each shape takes 5 calls (3 warm-up, 1 probe, 1 sample), 0.5 s: a 1 s limit lets 2 or 3 shapes start.
[ "$rc" -eq 4 ] || fail "sdpa_compare.py past its time limit exited with $rc, not 4 ($(tail -n 2 "$scratch/sdpa.log"))"
[ "$timed" -ge 1 ] && [ "$timed" -lt 12 ] || fail "sdpa_compare.py timed $timed of 12 shapes under a 1 s limit"
[ $((SECONDS - t0)) -le 8 ] || fail "sdpa_compare.py took $((SECONDS - t0)) s under a 1 s limit"
grep -q "SDPA on $timed of 12 shapes (time limit)" "$scratch/rec.txt" || fail "the recording does not say SDPA stopped"
[ "$(head -n 1 "$scratch/rec.txt")" = "sources abc" ] || fail "the recording's hash line"
python3 "$root/chapters/06_flash_cuda/sdpa_compare.py" "$scratch/ladder.csv" --n 1024 --d 64 \
  --record "$scratch/rec2.txt" --sources-hash abc --skip-sdpa "PyTorch stopped at the step's time limit" >/dev/null 2>&1 ||
  fail "sdpa_compare.py --skip-sdpa exited with $?"
grep -q "no SDPA column: PyTorch stopped at the step's time limit" "$scratch/rec2.txt" || fail "--skip-sdpa's recording"
ok "sdpa_compare.py timed $timed of 12 shapes under a 1 s limit and wrote the recording; --skip-sdpa writes it too"

[ "$fails" -eq 0 ] || { echo "$fails checks failed"; exit 1; }
