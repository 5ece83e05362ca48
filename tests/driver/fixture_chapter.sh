#!/usr/bin/env bash
# Adding a chapter is a folder and one manifest entry, and removing it is the reverse: on a scratch copy of the
# checkout, the fixture chapter (tests/fixture_chapter/) is added as the chapter after the last one, with no
# other edit; the build and the driver must take it in (./course chapters, run, its ctest cases, check, hint);
# then it is removed and they must forget it. Run by .ci/run; by hand: tests/driver/fixture_chapter.sh
# (a few minutes: the copy configures and builds the fixture's targets, the rest comes from ccache).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/course-fixture.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
copy_checkout "$SCRATCH"
last=$(python3 "$SCRATCH/driver/manifest.py" stems | tail -n 1)
NN=$(printf '%02d' $((10#${last:0:2} + 1)))
stem=${NN}_fixture
echo "the fixture chapter is chapter $NN ($stem) in $SCRATCH"

manifest_entry() { # manifest_entry add|remove: the fixture's entry in the copy's chapters/manifest.json
  python3 - "$SCRATCH/chapters/manifest.json" "$NN" "$1" <<'PY'
import json, sys
path, number, what = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    manifest = json.load(f)
manifest["chapters"] = [c for c in manifest["chapters"] if c["number"] != number]
if what == "add":
    manifest["chapters"].append({"number": number, "name": "fixture", "level": "advanced", "title": "a fixture"})
with open(path, "w", encoding="utf-8") as f:
    json.dump(manifest, f, ensure_ascii=False, indent=1)
PY
}

echo "=== the fixture chapter added: its folder and one manifest entry"
mkdir -p "$SCRATCH/chapters/$stem" "$SCRATCH/exercises/$stem" "$SCRATCH/solutions/$stem"
for pair in fixture.hpp:chapters/$stem/fixture.hpp main.cpp:chapters/$stem/main.cpp \
            bench.cpp:chapters/$stem/bench.cpp CMakeLists.txt:chapters/$stem/CMakeLists.txt \
            exercise.cpp:exercises/$stem/fixture.cpp HINTS.md:exercises/$stem/HINTS.md \
            solution.cpp:solutions/$stem/fixture.cpp test.cpp:tests/${stem}_test.cpp; do
  sed "s/@NN@/$NN/g" "$ROOT/tests/fixture_chapter/${pair%%:*}" >"$SCRATCH/${pair#*:}"
done
manifest_entry add
run "the manifest and the tree agree" 0 python3 driver/manifest.py check .
run "the driver lists it" 0 ./course chapters
expect "$stem"
run "the driver builds and runs it" 0 ./course run "$NN" -- --no-color
expect "Chapter $NN: a fixture" "q · k / √d_k = 5.0"
run "its test programs build" 0 cmake --build build/default --target "ch${stem}_solution_test" "ch${stem}_exercise_test" \
  attn_output_width attn_machine
run "ctest registers its solution cases, and they pass" 0 ctest --test-dir build/default -L "^ch$NN\$" -L '^solution$' \
  --output-on-failure
expect "scaled_score divides q · k by sqrt(d_k)" "starts its output with its title line"
run "its exercise cases fail against its skeleton" 8 ctest --test-dir build/default -L "^ch$NN\$" -L '^exercise$'
run "./course check finds its unsolved exercise" 1 ./course check "$NN"
expect "scaled_score"
run "./course hint gives its first hint" 0 ./course hint "$NN"
expect "Sum \`q(i) * k(i)\`"

echo "=== the fixture chapter removed: the folder and the entry gone"
rm -rf "$SCRATCH/chapters/$stem" "$SCRATCH/exercises/$stem" "$SCRATCH/solutions/$stem" "$SCRATCH/tests/${stem}_test.cpp"
manifest_entry remove
run "the manifest and the tree agree" 0 python3 driver/manifest.py check .
run "the driver no longer lists it" 0 ./course chapters
expect_not "$stem"
run "the driver refuses its number" 2 ./course run "$NN"
expect "there is no chapter $NN"
run "the build forgets it" 0 cmake build/default
run "ctest no longer lists its cases" 0 ctest --test-dir build/default -N -L "^ch$NN\$"
expect "Total Tests: 0"
finish "fixture chapter"
