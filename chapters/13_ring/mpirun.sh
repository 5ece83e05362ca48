#!/usr/bin/env bash
# mpirun.sh NP PROGRAM [ARGS...]: runs PROGRAM on NP ranks of this machine with Open MPI's mpirun.
# --oversubscribe: more ranks than cores is allowed (a 4-rank ring on 2 cores). --allow-run-as-root only
# when the user is root (CI and containers), since Open MPI refuses root otherwise. --timeout: a ring that
# hangs is killed and reported, never left waiting. ATTN_MPI_TIMEOUT overrides the seconds (default 300).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NP PROGRAM [ARGS...]" >&2; exit 2; }
np=$1
shift
command -v mpirun >/dev/null || { echo "mpirun.sh: mpirun not found: install openmpi-bin (./course setup)" >&2; exit 2; }
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
exec mpirun "${root[@]}" --oversubscribe --timeout "${ATTN_MPI_TIMEOUT:-300}" -np "$np" "$@"
