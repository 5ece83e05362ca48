#!/usr/bin/env bash
# Runs a chapter executable and checks its exit status and output (used by attn_cli_test()).
# usage: run_cli_test.sh STATUS REGEX EXE [ARGS...]
set -u
expected=$1 regex=$2
shift 2
out=$("$@" 2>&1)
status=$?
if [ "$status" -ne "$expected" ]; then
  printf 'expected exit status %s, got %s; output:\n%s\n' "$expected" "$status" "$out"
  exit 1
fi
# The programs wrap their messages at 100 columns, where a path's length decides the breaks (a clone in
# /home/reader/course breaks a sentence elsewhere than one in /work/main): REGEX is matched against the output with
# each line break and the indentation after it read as one space, so a wrapped sentence is still one sentence.
flowed=$(sed -E 's/^ +//' <<<"$out" | tr '\n' ' ')
if [ -n "$regex" ] && ! grep -qE -- "$regex" <<<"$out" && ! grep -qE -- "$regex" <<<"$flowed"; then
  printf 'output does not match /%s/:\n%s\n' "$regex" "$out"
  exit 1
fi
echo "exit status $status as expected${regex:+, output matches /$regex/}"
