#!/usr/bin/env bash
# Feeds a chapter executable bad values for every option its --help lists (so a new option or chapter is covered
# with no edit here), and checks that each is refused cleanly: exit status 2, the option named, no help text
# after the message, within 20 s. One ctest case per chapter (attn_add_chapter()). usage: cli_fuzz.sh EXE
set -u
exe=$(realpath "$1") name=$(basename "$1") # the runs start in a scratch directory
limit=20
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/not-ours" && touch "$scratch/not-ours/notes.txt" # a directory no chapter made
tried=0 failures=()

refused() { # refused OPTION ARG...: EXE ARG... must refuse, naming OPTION
  local option=$1 out status why=""
  shift
  tried=$((tried + 1))
  out=$(cd "$scratch" && timeout "$limit" "$exe" "$@" 2>&1)
  status=$?
  if [ "$status" -eq 124 ]; then why="still running after $limit s"
  elif [ "$status" -ne 2 ]; then why="exit status $status, not 2"
  elif ! grep -qF -- "$option" <<<"$out"; then why="the message does not name $option"
  elif grep -q "^Options:" <<<"$out"; then why="the whole help follows the message"
  fi
  [ -z "$why" ] || failures+=("$(printf '%q ' "$@" | head -c 120): $why; output: $(head -c 300 <<<"$out")")
}

bad_values() { # bad_values TYPE OPTION: one bad value per line for an option of that --help type
  case $1 in
  UINT*) printf '%s\n' "" "-1" "abc" "1.5" "1e3" "0x10" "18446744073709551616" "99999999999999999999999" ;;
  INT*) printf '%s\n' "" "abc" "1.5" "1e3" "99999999999999999999999" "-99999999999999999999999" ;;
  FLOAT*) printf '%s\n' "" "nan" "inf" "-inf" "abc" "1e999" "1,5" ;;
  DIR*) printf '%s\n' "" "/" "/proc/no-such-dir/x" "/dev/null" "$scratch/not-ours" ;;
  FILE*) printf '%s\n' "" "/" "/proc/no-such-dir/x.csv" "$scratch" ;;
  *) printf '%s\n' "" "$(printf 'x%.0s' $(seq 5000))" ;; # past the 4096-character limit
  esac
  # A sentence of a thousand known words (short enough for the length limit): a chapter must cap it.
  [ "$2" = "--sentence" ] && printf '猫 %.0s' $(seq 1000) && echo
  # Just outside a whole-number range the help states ("UINT:INT in [1 - 4096]"): below its start, past its end.
  if [[ $1 =~ in\ \[([0-9]+)\ -\ ([0-9]+)\] ]]; then
    [ "${BASH_REMATCH[1]}" -gt 0 ] && echo $((BASH_REMATCH[1] - 1))
    echo $((BASH_REMATCH[2] + 1))
  fi
}

help=$("$exe" --help 2>&1) || { echo "$name --help failed"; exit 1; }
# Option lines look like "  --n UINT:INT in [1 - 4096]  Tokens of ..." or "  --no-color   Plain ...".
options=0
while IFS= read -r line; do
  [[ $line =~ ^\ +(-[a-zA-Z],)?(--[a-z0-9][a-z0-9-]*)(\ ([A-Z]+[^ ]*(\ in\ \[[^]]*\])?))? ]] || continue
  option=${BASH_REMATCH[2]} type=${BASH_REMATCH[4]}
  [ "$option" = "--help" ] && continue
  options=$((options + 1))
  if [ -z "$type" ]; then refused "$option" "$option=maybe"; continue; fi # a flag takes no value
  while IFS= read -r value; do refused "$option" "$option=$value"; done < <(bad_values "$type" "$option")
done <<<"$help"
refused --no-such-option --no-such-option
refused --benchmark_filter bench "--benchmark_filter=(unclosed"

echo "$name: $options options, $tried bad command lines tried, $((tried - ${#failures[@]})) refused cleanly"
[ "${#failures[@]}" -eq 0 ] || { printf '  not clean: %s\n' "${failures[@]}"; exit 1; }
[ "$options" -gt 0 ] || { echo "$name: no option found in --help (has its format changed?)"; exit 1; }
