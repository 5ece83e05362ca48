#!/usr/bin/env bash
# Runs a chapter as a reader does (its defaults, no colour) and as the book does (--book DIR), then fails
# when any line of either output is wider than 100 display columns (used by attn_add_chapter()).
# usage: check_output_width.sh WIDTH_TOOL EXE
set -u
tool=$1 exe=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/book"
"$exe" --no-color >"$dir/terminal.txt" 2>&1 || { echo "$exe failed:"; cat "$dir/terminal.txt"; exit 1; }
"$exe" --book "$dir/book" >"$dir/book.log" 2>&1 || { echo "$exe --book failed:"; cat "$dir/book.log"; exit 1; }
"$tool" "$dir/terminal.txt" "$dir"/book/*.txt && echo "every line of $(basename "$exe")'s output fits in 100 columns"
