#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD SECONDS: each fuzzer of BUILD (a build of tests/fuzz) first replays its regression inputs
# (tests/fuzz/regressions/NAME/: every crash found so far, which must stay fixed), then runs SECONDS seconds from its
# seed corpus (tests/fuzz/corpus/NAME/, plus the real model's files where ./course setup unpacked them), one
# fuzzer at a time. New interesting inputs go to BUILD/corpus/NAME (never into the checkout); a crash stops the
# script with status 1, its input in BUILD/crashes/NAME/. CI: tests/fuzz/run.sh build/fuzz 8 (seven fuzzers, ~1 min).
set -euo pipefail
build=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=$root/build/models/all-MiniLM-L6-v2
status=0
for exe in "$build"/fuzz_*; do
  [ -x "$exe" ] || continue
  name=$(basename "$exe")
  name=${name#fuzz_}
  seeds=("$here/corpus/$name")
  mkdir -p "$build/corpus/$name" "$build/crashes/$name" "$build/model_seeds/$name"
  case $name in  # the model's own files, where they are (too large to commit): libFuzzer reads folders of seeds
    safetensors) file=model.safetensors ;;
    vocab) file=vocab.txt ;;
    config) file=config.json ;;
    *) file= ;;
  esac
  if [ -n "$file" ] && [ -f "$model/$file" ]; then
    ln -sf "$model/$file" "$build/model_seeds/$name/$file"
    seeds+=("$build/model_seeds/$name")
  fi
  if [ -d "$here/regressions/$name" ] && [ -n "$(ls -A "$here/regressions/$name")" ]; then
    echo "fuzz_$name: replaying $(ls "$here/regressions/$name" | wc -l) regression inputs"
    "$exe" -runs=0 "$here/regressions/$name"/* >"$build/crashes/$name/replay.log" 2>&1 ||
      { echo "fuzz_$name: a regression input fails again (see $build/crashes/$name/replay.log)"; status=1; }
  fi
  echo "fuzz_$name: ${seconds} s"
  # -rss_limit_mb: a reader that allocates more than 2 GB for an input of a few KB has a bug; -timeout: a hang.
  if ! "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$build/crashes/$name/" "$build/corpus/$name" "${seeds[@]}" >"$build/crashes/$name/run.log" 2>&1; then
    echo "fuzz_$name: FAILED, see $build/crashes/$name/run.log and the input beside it"
    tail -30 "$build/crashes/$name/run.log"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$build/crashes/$name/run.log" | tr '\n' ' ' || true
  echo
done
exit $status
