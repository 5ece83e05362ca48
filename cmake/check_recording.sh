#!/usr/bin/env bash
# A recording in book/recorded/ must come from the sources as they are now. Its first line is
# "sources <sha256>", the hash cmake/sources_hash.sh gave when ./course gpu-check or the GPU pack's run.sh
# recorded it; this test recomputes it, and refuses a dry run's recording (nothing was timed). Exit 77
# (ctest: skipped) when nothing has been recorded yet.
# usage: check_recording.sh ROOT RECORDING DIR...
set -u
root=$1 recording=$2
shift 2
if [ ! -f "$root/$recording" ]; then
  echo "skipped: $recording has not been recorded yet (./course gpu-check on a GPU machine records it)"
  exit 77
fi
if grep -q "DRY RUN" "$root/$recording"; then
  echo "$recording comes from a dry run (no kernel was timed): record it on a GPU machine"
  exit 1
fi
recorded=$(head -n 1 "$root/$recording" | sed -n 's/^sources //p')
now=$("$(dirname "$0")/sources_hash.sh" "$root" "$@")
if [ "$recorded" != "$now" ]; then
  echo "$recording was recorded from other sources (hash $recorded, now $now): run ./course gpu-check again"
  exit 1
fi
echo "$recording matches the sources (hash $now)"
