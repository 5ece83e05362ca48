#!/usr/bin/env bash
# Runs a chapter four ways (defaults, --no-color, --book DIR, bench) as on another CPU, one with a long model
# name whose OpenBLAS picked the generic 'Prescott' kernels; fails when a line printed or written for the book
# is wider than 100 columns, a run fails, or the program did not restart itself with a better kernel and the
# same arguments (attn/machine.hpp). Used by attn_add_chapter().
# usage: check_output_width.sh WIDTH_TOOL MACHINE_TOOL EXE [-- ARGS...]   (ARGS: the sanitizer build's shorter
# run, for every run but bench's; the run with the defaults alone is then left out)
set -u
tool=$1 machine=$2 exe=$3
shift 3
extra=()
if [ "${1:-}" = "--" ]; then
  shift
  extra=("$@")
fi
name=$(basename "$exe")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/book"

# This machine's /proc/cpuinfo with a long model name: the flags stay the real ones, so the kernel the
# course picks from them is one this CPU really runs.
sed 's/^model name[[:space:]]*:.*/model name\t: Intel(R) Xeon(R) Platinum 8592+ Processor with a long model name, as some machines report @ 1.90GHz/' \
  /proc/cpuinfo >"$dir/cpuinfo"
run_as_other_cpu() {
  env -u OPENBLAS_CORETYPE -u ATTN_BLAS_KERNEL_CHOSEN_BY_COURSE -u ATTN_BLAS_NO_REEXEC ATTN_FAKE_CPUINFO="$dir/cpuinfo" \
    ATTN_FAKE_OPENBLAS_KERNEL=Prescott ATTN_TRACE_BLAS_RESTART=1 "$@"
}
# The kernel the course should restart with here (none on a CPU without AVX2: then no restart is due).
kernel=$(run_as_other_cpu "$machine" --better-kernel)

status=0
fail() {
  echo "$name: $*"
  status=1
}
check_run() { # check_run LABEL ARGS...: run, then check the restart and the exit status
  local label=$1
  shift
  local out="$dir/$label.out" err="$dir/$label.err"
  run_as_other_cpu "$exe" "$@" >"$out" 2>"$err" || {
    fail "'$name $*' failed:"
    cat "$out" "$err"
    return
  }
  if grep -q "note: OpenBLAS runs its slower" "$err"; then fail "'$name $*' did not restart: $(cat "$err")"; fi
  if [ -n "$kernel" ]; then
    local args="" a
    for a in "$@"; do args+=" [$a]"; done
    grep -qxF "attn: restarted with OPENBLAS_CORETYPE=$kernel; arguments:$args" "$err" ||
      fail "'$name $*' was not restarted with OPENBLAS_CORETYPE=$kernel and the same arguments; stderr: $(head -c 400 "$err")"
  fi
  grep -v "^attn: restarted with" "$err" >"$err.shown" # the trace is the test's, not the reader's
  cat "$err.shown" >>"$out"
}

[ ${#extra[@]} -gt 0 ] || check_run defaults
check_run no-color --no-color "${extra[@]}"
check_run book --book "$dir/book" "${extra[@]}"
check_run bench bench --benchmark_list_tests=true
if grep -q $'\e\[' "$dir/no-color.out"; then fail "--no-color still printed colour escapes"; fi
ls "$dir"/book/*.txt >/dev/null 2>&1 || fail "--book wrote no output file"

"$tool" "$dir"/*.out "$dir"/book/*.txt || status=1
[ $status -eq 0 ] && echo "every line of $name's output fits in 100 columns, in every mode, restarted as due"
exit $status
