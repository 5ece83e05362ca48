#!/usr/bin/env bash
# Feeds a chapter executable a table of bad values for every option its --help lists, and checks that each
# one is refused cleanly: exit status 2, the option's name in the message, no help text dumped after it,
# within a time limit. The options are read from --help, so a new option or a new chapter is covered
# without editing anything here. Used by attn_add_chapter() (one ctest case per chapter).
# usage: cli_fuzz.sh EXE
set -u
exe=$(realpath "$1") # the runs start in a scratch directory
name=$(basename "$exe")
limit=20 # seconds per run: a value that makes the chapter compute for longer is a failure too
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/not-ours" && touch "$scratch/not-ours/notes.txt" # a directory no chapter made
long_text=$(printf 'x%.0s' $(seq 5000))                             # past the 4096-character limit

tried=0 clean=0 failures=()

# expect_refusal OPTION ARG...: runs EXE ARG... and checks the refusal names OPTION.
expect_refusal() {
  local option=$1
  shift
  tried=$((tried + 1))
  local out status
  out=$(cd "$scratch" && timeout "$limit" "$exe" "$@" 2>&1)
  status=$?
  local why=""
  if [ "$status" -eq 124 ]; then
    why="still running after $limit s"
  elif [ "$status" -ne 2 ]; then
    why="exit status $status, not 2"
  elif ! grep -qF -- "$option" <<<"$out"; then
    why="the message does not name $option"
  elif grep -q "^Options:" <<<"$out"; then
    why="the whole help follows the message"
  fi
  if [ -n "$why" ]; then
    local command
    command=$(printf '%q ' "$@")
    failures+=("${command:0:120}: $why; output: $(head -c 300 <<<"$out")")
  else
    clean=$((clean + 1))
  fi
}

# bad_values TYPE: one bad value per line for an option of that --help type.
bad_values() {
  case $1 in
  UINT*) printf '%s\n' "" "-1" "abc" "1.5" "1e3" "0x10" "18446744073709551616" "99999999999999999999999" ;;
  INT*) printf '%s\n' "" "abc" "1.5" "1e3" "99999999999999999999999" "-99999999999999999999999" ;;
  FLOAT*) printf '%s\n' "" "nan" "inf" "-inf" "abc" "1e999" "1,5" ;;
  DIR*) printf '%s\n' "" "/" "/proc/no-such-dir/x" "/dev/null" "$scratch/not-ours" ;;
  FILE*) printf '%s\n' "" "/" "/proc/no-such-dir/x.csv" "$scratch" ;;
  *) printf '%s\n' "" "$long_text" ;;
  esac
  # A sentence of a thousand known words (short enough for the length limit): a chapter must cap it.
  [ "$2" = "--sentence" ] && printf '猫 %.0s' $(seq 1000) && echo
  # Just outside a range the help states ("UINT:INT in [1 - 4096]"): below its start and past its end.
  if [[ $1 =~ in\ \[(-?[0-9.e+]+)\ -\ (-?[0-9.e+]+)\] ]]; then
    local lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
    if [[ $lo =~ ^[0-9]+$ && $hi =~ ^[0-9]+$ ]]; then
      [ "$lo" -gt 0 ] && echo $((lo - 1))
      echo $((hi + 1))
    fi
  fi
}

help=$("$exe" --help 2>&1) || {
  echo "$name --help failed"
  exit 1
}
# Option lines look like "  --n UINT:INT in [1 - 4096]  Tokens of ..." or "  --no-color   Plain ...".
options=0
while IFS= read -r line; do
  [[ $line =~ ^\ +(-[a-zA-Z],)?(--[a-z0-9][a-z0-9-]*)(\ ([A-Z]+[^ ]*(\ in\ \[[^]]*\])?))? ]] || continue
  option=${BASH_REMATCH[2]} type=${BASH_REMATCH[4]}
  [ "$option" = "--help" ] && continue
  options=$((options + 1))
  if [ -z "$type" ]; then # a flag: it takes no value
    expect_refusal "$option" "$option=maybe"
    continue
  fi
  while IFS= read -r value; do
    expect_refusal "$option" "$option=$value"
  done < <(bad_values "$type" "$option")
done <<<"$help"
# An option that does not exist, and the benchmarks' filter.
expect_refusal "--no-such-option" --no-such-option
expect_refusal "--benchmark_filter" bench "--benchmark_filter=(unclosed"

echo "$name: $options options, $tried bad command lines tried, $clean refused cleanly (status 2, option named)"
if [ "${#failures[@]}" -gt 0 ]; then
  printf '  not clean: %s\n' "${failures[@]}"
  exit 1
fi
[ "$options" -gt 0 ] || {
  echo "$name: no option found in --help (has its format changed?)"
  exit 1
}
