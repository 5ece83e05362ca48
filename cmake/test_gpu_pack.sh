#!/usr/bin/env bash
# The ctest case "the GPU pack runs in a clean environment": makes the pack (cmake/gpu_pack.sh) and runs its
# run.sh --dry-run as a bare GPU machine would (env -i, PATH=/usr/bin:/bin, LD_LIBRARY_PATH the pack's lib/):
# every library resolves into the pack or is glibc's, CUDA's or the C++ runtime, README.txt states what the
# files need (read with objdump, not gpu_pack.sh's readelf), and, where unshare -m can hide Debian's copies of
# the packed libraries, run.sh loads lib/fallback/. Host-side tests pass, GPU cases skip, the recording's
# first line is the sources' hash. usage: test_gpu_pack.sh ROOT BUILD_DIR SCRATCH
set -uo pipefail
export LC_ALL=C
root=$1 build=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
pack="$scratch/pack" out="$scratch/out"
fail() { echo "FAIL: $*"; exit 1; }

"$root/cmake/gpu_pack.sh" "$root" "$build" "$pack" >"$scratch/pack.log" 2>&1 || { cat "$scratch/pack.log"; fail "gpu_pack.sh"; }
grep 'KiB' "$scratch/pack.log"
clean=(env -i PATH=/usr/bin:/bin HOME="$scratch" LD_LIBRARY_PATH="$pack/lib")

# 1. Where each library comes from, in the clean environment: the C++ runtime is this machine's (new enough).
system='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so'
cuda='^(libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libnvJitLink)\.so'
cxx_runtime='^(libstdc\+\+|libgcc_s)\.so'
"${clean[@]}" ldd "$pack"/bin/* >"$scratch/ldd.txt" 2>&1
! grep -q "not found" "$scratch/ldd.txt" || { grep "not found" "$scratch/ldd.txt"; fail "libraries not found"; }
outside=$(awk '$2 == "=>" {print $1, $3}' "$scratch/ldd.txt" | sort -u | while read -r name path; do
  [[ "$path" == "$pack/lib/"* || "$name" =~ $system || "$name" =~ $cuda || "$name" =~ $cxx_runtime ]] || echo "$name => $path"
done)
[ -z "$outside" ] || fail "resolved outside the pack: $outside"
echo "ok: every library resolves into the pack, or is glibc's, CUDA's or the C++ runtime ($(ls "$pack"/lib/*.so* | wc -l) packed)"

# The README's requirements, checked with another tool than gpu_pack.sh's readelf: the newest GLIBC_ and
# GLIBCXX_ versions among the undefined symbols objdump lists for the programs and lib/, and for lib/fallback/.
newest_undefined() { objdump -T "${@:2}" | awk '/\*UND\*/' | grep -o "$1_[0-9.]*" | sed "s/$1_//" | sort -uV | tail -n 1; }
glibc=$(newest_undefined GLIBC "$pack"/bin/* "$pack"/lib/*.so*)
glibcxx=$(newest_undefined GLIBCXX "$pack"/bin/* "$pack"/lib/*.so*)
fallback_glibc=$(newest_undefined GLIBC "$pack"/lib/fallback/*)
grep -q "glibc $glibc or newer, and a C++ runtime whose libstdc++ has GLIBCXX_$glibcxx " "$pack/README.txt" ||
  fail "README.txt does not state glibc $glibc and GLIBCXX_$glibcxx: $(grep -A1 'Needs' "$pack/README.txt")"
grep -q "those need glibc $fallback_glibc\." "$pack/README.txt" || fail "README.txt does not state lib/fallback/'s glibc $fallback_glibc"
[ -e "$pack/lib/fallback/libstdc++.so.6" ] && [ -e "$pack/lib/fallback/libgcc_s.so.1" ] &&
  ! ls "$pack"/lib/libstdc++* "$pack"/lib/libgcc_s* >/dev/null 2>&1 || fail "libstdc++ and libgcc_s belong in lib/fallback/ only"
echo "ok: the pack needs glibc $glibc and GLIBCXX_$glibcxx (lib/fallback/: glibc $fallback_glibc), as README.txt says"

# 2. run.sh where this machine's C++ runtime serves: it must not load lib/fallback/.
"${clean[@]}" "$pack/run.sh" --dry-run "$out" >"$scratch/run-host-cxx.log" 2>&1 || { tail -n 30 "$scratch/run-host-cxx.log"; fail "run.sh --dry-run"; }
grep -q "^C++ runtime: this machine's" "$out/environment.txt" || fail "run.sh loaded lib/fallback/ although this machine's C++ runtime serves"
echo "ok: with this machine's C++ runtime, run.sh leaves lib/fallback/ alone"

# 3. run.sh, with Debian's copies of the packed libraries (the C++ runtime among them) hidden when a mount
# namespace is possible: run.sh must then load lib/fallback/.
rm -rf "$out"
hide=""
for lib in "$pack"/lib/*.so* "$pack"/lib/fallback/*; do
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu; do
    [ -e "$dir/$(basename "$lib")" ] && hide+=" $(readlink -f "$dir/$(basename "$lib")")"
  done
done
hide=$(tr ' ' '\n' <<<"$hide" | sort -u | tr '\n' ' ')
if unshare -m --propagation private true 2>/dev/null; then
  echo "hiding Debian's copies:$hide"
  unshare -m --propagation private bash -c 'for f in $1; do mount --bind /dev/null "$f" || exit 1; done; shift
    exec "$@"' hide "$hide" "${clean[@]}" "$pack/run.sh" --dry-run "$out" >"$scratch/run.log" 2>&1
else
  echo "note: no mount namespace here (unshare -m refused): check 1 (ldd) alone shows where libraries come from"
  "${clean[@]}" "$pack/run.sh" --dry-run "$out" >"$scratch/run.log" 2>&1
fi
rc=$?
[ -z "$hide" ] || grep -q "^C++ runtime: the pack's lib/fallback/" "$out/environment.txt" ||
  fail "this machine's C++ runtime was hidden, but run.sh did not load lib/fallback/"
cat "$out/status.txt" 2>/dev/null
[ "$rc" -eq 0 ] || { tail -n 30 "$scratch/run.log"; fail "run.sh --dry-run exited with $rc"; }
grep -q "^ok    ch06_flash_cuda_solution_test: host-side cases passed; its [1-9][0-9]* GPU cases reported skipped" \
  "$out/status.txt" || fail "the solution tests did not pass with their GPU cases skipped"
grep -q "^ok    ch06_flash_cuda_core_test: host-side cases passed" "$out/status.txt" || fail "the core tests"
grep -q "skipped" "$out/tests-ch06_flash_cuda_solution_test.txt" || fail "no skipped cases in the test output"
[ "$(head -n 1 "$out/06_flash_cuda.txt")" = "sources $(cat "$pack/SOURCES_HASH")" ] || fail "the recording's hash line"
# What a GPU run would do, as the dry run prints it: each sanitizer limited to the course's kernels, a time
# limit on every step and a deadline on the whole run; and the one archive of every result file.
for tool in memcheck racecheck; do
  grep -q "^dry run: would run (limit [0-9]* s): .*compute-sanitizer --tool $tool --kernel-name kns=ch06 " \
    "$scratch/run.log" || fail "the dry run does not show $tool limited to the course's kernels"
done
[ "$(grep -c '^==> .* (limit [0-9]* s; ' "$scratch/run.log")" -eq 6 ] || fail "not every one of the 6 steps shows its limit"
grep -q "the whole run stops by [0-9]* s" "$scratch/run.log" || fail "the dry run does not show the run's deadline"
results=$(cd "$out" && for f in *; do [ "$f" = results.tar.gz ] || echo "$f"; done | tr '\n' ' ')
[ "$(tar -tzf "$out/results.tar.gz" | sort | tr '\n' ' ')" = "$results" ] ||
  fail "results.tar.gz does not hold every result file: $(tar -tzf "$out/results.tar.gz" | tr '\n' ' ')"
echo "ok: run.sh passed in a clean environment; the recording step wrote $out/06_flash_cuda.txt; results.tar.gz" \
  "holds all $(tar -tzf "$out/results.tar.gz" | wc -l) result files; the sanitizers and time limits show in the dry run"
