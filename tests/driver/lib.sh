# Sourced by check_driver.sh and fixture_chapter.sh: a scratch copy of the checkout, and the checks' helpers.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
failures=0
ok() { echo "  ok: $*"; }
fail() {
  echo "  FAILED: $*"
  failures=$((failures + 1))
}
show_output() { # the output of the last run, once per run, when something about it failed
  [ -n "$SHOWN" ] && return
  SHOWN=1
  printf '%s\n' "$OUT" | tail -n 40 | sed 's/^/    | /'
}

# copy_checkout DIR: the checkout's tracked and new (not ignored) files into DIR, as they are in the working
# tree; a file is copied only when it differs, so a build kept in DIR sees exactly the files that changed.
copy_checkout() {
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard) | while IFS= read -r -d '' f; do
    [ -e "$ROOT/$f" ] || continue
    cmp -s "$ROOT/$f" "$1/$f" 2>/dev/null && continue
    mkdir -p "$1/$(dirname "$f")"
    cp -p "$ROOT/$f" "$1/$f" && touch "$1/$f"
  done
}

# run NAME EXPECTED_STATUS COMMAND...: runs COMMAND in the copy ($SCRATCH); its output lands in $OUT
run() {
  local name=$1 expected=$2 rc
  shift 2
  echo "--- $name: $*"
  SHOWN=""
  OUT=$( (cd "$SCRATCH" && "$@") 2>&1)
  rc=$?
  if [ "$rc" = "$expected" ]; then ok "status $rc"; else
    fail "status $rc, expected $expected"
    show_output
  fi
}

expect() { # expect TEXT...: every TEXT appears (as a fixed string) in $OUT
  local t
  for t in "$@"; do
    if grep -q -F -- "$t" <<<"$OUT"; then ok "shows: $t"; else
      fail "does not show: $t"
      show_output
    fi
  done
}

expect_not() { # expect_not TEXT...: no TEXT appears in $OUT
  local t
  for t in "$@"; do
    if grep -q -F -- "$t" <<<"$OUT"; then fail "shows: $t" && show_output; else ok "does not show: $t"; fi
  done
}

finish() { # finish NAME: the summary line, and the status
  echo
  if [ "$failures" -eq 0 ]; then echo "$1: every check passed"; else echo "$1: $failures failed"; fi
  [ "$failures" -eq 0 ]
}
