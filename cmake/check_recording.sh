#!/usr/bin/env bash
# A recording in book/recorded/ must come from the sources as they are now. Its first line is
# "sources <sha256>", the hash ./course gpu-check computed over the files that produced it; this test
# recomputes it. Exit 77 (ctest: skipped) when nothing has been recorded yet.
# usage: check_recording.sh ROOT RECORDING DIR...
set -u
root=$1 recording=$2
shift 2
if [ ! -f "$root/$recording" ]; then
  echo "skipped: $recording has not been recorded yet (./course gpu-check on a GPU machine records it)"
  exit 77
fi
recorded=$(head -n 1 "$root/$recording" | sed -n 's/^sources //p')
now=$("$(dirname "$0")/sources_hash.sh" "$root" "$@")
if [ "$recorded" != "$now" ]; then
  echo "$recording was recorded from other sources (hash $recorded, now $now): run ./course gpu-check again"
  exit 1
fi
echo "$recording matches the sources (hash $now)"
