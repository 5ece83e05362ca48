#!/usr/bin/env bash
# mpirun.sh NP PROGRAM [ARGS...]: runs PROGRAM on NP ranks of this machine with Open MPI's mpirun.
# --oversubscribe: more ranks than cores is allowed (a 4-rank ring on 2 cores). --allow-run-as-root only
# when the user is root (CI and containers), since Open MPI refuses root otherwise. --timeout: a ring that
# hangs is killed and reported, never left waiting. ATTN_MPI_TIMEOUT overrides the seconds (default 300).
# A bad NP (not a whole number from 1 to 1024: mpirun takes 0 as "every slot") or a PROGRAM that cannot be run
# exits 2 with a message, before mpirun starts.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NP PROGRAM [ARGS...]" >&2; exit 2; }
np=$1
shift
if ! [[ $np =~ ^[0-9]{1,4}$ ]] || [ "$((10#$np))" -lt 1 ] || [ "$((10#$np))" -gt 1024 ]; then
  echo "mpirun.sh: NP '$np' is not a number of ranks from 1 to 1024" >&2
  exit 2
fi
np=$((10#$np))
[ -f "$1" ] && [ -x "$1" ] || command -v -- "$1" >/dev/null 2>&1 || {
  echo "mpirun.sh: PROGRAM '$1' is not a program this shell can run" >&2
  exit 2
}
command -v mpirun >/dev/null || { echo "mpirun.sh: mpirun not found: install openmpi-bin (./course setup)" >&2; exit 2; }
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
exec mpirun "${root[@]}" --oversubscribe --timeout "${ATTN_MPI_TIMEOUT:-300}" -np "$np" "$@"
