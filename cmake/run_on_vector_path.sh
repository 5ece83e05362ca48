#!/usr/bin/env bash
# Runs a test program with ATTN_VECTOR_ISA=PATH, the vector path it forces (attn/vector.hpp), when this CPU can run
# that path and it is not the one the program takes anyway (the plain run of the same tests covers that); otherwise
# says why it skips, in the line ctest reads as a skip (attn_discover_tests' "skipped: "). The program's paths must be
# absolute (it runs in a scratch folder).
# usage: run_on_vector_path.sh PATH LAUNCHER ATTN_MACHINE PROGRAM [ARGS...]; LAUNCHER runs the build's programs (a
# cross build's emulator, qemu-aarch64) or is "" (they run as they are).
set -u
path=$1 launcher=$2 machine=$3
shift 3
paths=$($launcher "$machine" --vector-paths) || exit 1
if ! grep -qx -- "$path" <<<"$paths"; then
  echo "skipped: this CPU cannot run the $path path (it runs: $(echo $paths))"
  exit 0
fi
if [ "$(head -1 <<<"$paths")" = "$path" ]; then
  echo "skipped: $path is this CPU's widest path, which the plain run of these tests takes"
  exit 0
fi
# In a scratch folder of its own: ctest runs the plain run and the other paths' runs of one program side by side, and
# a test that writes a file in the working folder (common's heat map) read another run's half-written or removed file.
scratch=$(mktemp -d) || exit 1
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" || exit 1
ATTN_VECTOR_ISA=$path $launcher "$@"
