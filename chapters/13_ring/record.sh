#!/usr/bin/env bash
# record.sh: re-takes book/recorded/ch13_ring_mpi.txt, the MPI runs the book page reads (ping-pong, the ring at
# P = 2 beside single-process flash, causal and not, with Open MPI's polling and binding varied; the same at
# P = 1, where the ring is one flash call like the reference; Ulysses beside the ring; the imbalance at P = 4;
# memory per rank at n = 131072). Run from the checkout after a build:
#   chapters/13_ring/record.sh        (about 5 minutes on 2 cores; the quieter the machine, the better)
# Each command is shown as a $ line with the load average before and after it, as in the recording.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/default/bin
[ -x "$bin/ch13_ring_mpi" ] || { echo "record.sh: build ch13_ring_mpi first (./course run 13)" >&2; exit 2; }
out=book/recorded/ch13_ring_mpi.txt
body=$(mktemp)
trap 'rm -f "$body"' EXIT
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
step() {
  echo "\$ $*"
  echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$@"
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
}
mpi=(chapters/13_ring/mpirun.sh)
{
  step "${mpi[@]}" 2 $bin/ch13_ring_mpi --pingpong
  step "${mpi[@]}" 2 $bin/ch13_ring_mpi --n 16384 --no-causal --repeats 5 --heads 0
  step "${mpi[@]}" 2 $bin/ch13_ring_mpi --n 16384 --repeats 5 --heads 4
  step env OMPI_MCA_mpi_yield_when_idle=1 "${mpi[@]}" 2 $bin/ch13_ring_mpi --n 16384 --repeats 5 --heads 0
  step env OMPI_MCA_hwloc_base_binding_policy=none "${mpi[@]}" 2 $bin/ch13_ring_mpi --n 16384 --repeats 5 --heads 0
  step "${mpi[@]}" 1 $bin/ch13_ring_mpi --n 16384 --repeats 5 --heads 0
  step "${mpi[@]}" 4 $bin/ch13_ring_mpi --n 8192 --repeats 3 --heads 4
  step "${mpi[@]}" 4 $bin/ch13_ring_mpi --n 131072 --memory --repeats 1
  step "${mpi[@]}" 1 $bin/ch13_ring_mpi --n 131072 --memory --repeats 1
} 2>&1 | tee "$body"
machine=$("$bin/attn_machine")
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- chapters solutions common 2>/dev/null || commit+=" plus uncommitted changes"
{
  echo "# Recorded $started by: chapters/13_ring/record.sh (the commands below, one after the other)"
  echo "# Sources: commit $commit; $(mpirun --version 2>/dev/null | head -1)"
  echo "# CPU: ${machine%%; *}"
  blas=${machine#*; }
  echo "# BLAS: ${blas%, * BLAS threads}; the program sets one BLAS thread per rank"
  echo "# Threads: $(nproc) available; the single-process reference runs on every core (P threads)"
  echo "# Load average (1, 5, 15 min; other jobs share this machine): before and after every command"
  cat "$body"
} >"$out"
echo "record.sh: recorded in $out" >&2
