#!/usr/bin/env bash
# The hash a recording in book/recorded/ carries on its first line: sha256 of the files under the given
# folders (relative to ROOT), in sorted order. usage: sources_hash.sh ROOT DIR...
set -eu
root=$1
shift
cd "$root" && find "$@" -type f | sort | xargs cat | sha256sum | cut -d' ' -f1
