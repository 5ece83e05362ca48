#!/usr/bin/env bash
# The hash a recording in book/recorded/ carries on its first line: sha256 over the list "sha256  path" of
# the files git tracks under the given folders (relative to ROOT), in byte order (LC_ALL=C), so the same
# commit gives the same hash on every machine: untracked files and the locale's collation play no part.
# The files' contents are read from the working tree (an edit not yet committed changes the hash).
# Outside a git checkout it falls back to every file under the folders, and says so on stderr.
# usage: sources_hash.sh ROOT DIR...
set -euo pipefail
export LC_ALL=C
root=$1
shift
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z -- "$@" | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
else
  echo "sources_hash.sh: $root is not a git checkout: hashing every file under $*" >&2
  find "$@" -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
fi
