#!/usr/bin/env bash
# The driver's own lines fit a terminal of 100 columns: its help, and what its build and test runs show
# (cmake/compact_progress.py, fed a build with nothing to do and a test run with long test names). A build
# with nothing to do prints nothing at all.
# usage: check_driver_width.sh WIDTH_TOOL ROOT
set -u
tool=$1 root=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
"$root/course" help >"$dir/help.txt" 2>&1 || { echo "./course help failed"; status=1; }

printf '%s\n' '[0/2] Re-checking globbed directories...' 'ninja: no work to do.' |
  python3 "$root/cmake/compact_progress.py" ninja >"$dir/nothing.txt"
[ ! -s "$dir/nothing.txt" ] || { echo "a build with nothing to do printed:"; cat "$dir/nothing.txt"; status=1; }

long=$(printf 'solution:ch07_sparse a test whose name is long enough to wrap%.0s' 1 2 3)
printf '%s\n' \
  '[41/170] Building CXX object CMakeFiles/ch05_flash_cpu_core.dir/chapters/05_flash_cpu/flash_fast_with_a_long_name.cpp.o' \
  '[113/170] Linking CXX static library libch03_multi_head_core_with_a_long_name_that_goes_on_and_on.a' |
  python3 "$root/cmake/compact_progress.py" ninja >"$dir/build.txt"
grep -q '^\[41/170\] compiling chapters/05_flash_cpu/' "$dir/build.txt" || { echo "no compile step shown"; status=1; }
printf '%s\n' "        Start  12: $long" \
  " 12/372 Test  #12: $long ..................................................   Passed    0.79 sec" \
  " 13/372 Test  #13: $long ..........***Failed    0.01 sec" |
  python3 "$root/cmake/compact_progress.py" ctest >"$dir/test.txt"
grep -q '^\[12/372\] ok ' "$dir/test.txt" && grep -q '^\[13/372\] FAILED ' "$dir/test.txt" && ! grep -q Start "$dir/test.txt" ||
  { echo "the test run is not shown as one short line per test:"; cat "$dir/test.txt"; status=1; }

"$tool" "$dir"/*.txt || status=1
[ $status -eq 0 ] && echo "the driver's help, build and test lines fit 100 columns"
exit $status
