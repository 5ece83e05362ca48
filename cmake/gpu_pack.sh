#!/usr/bin/env bash
# Chapter 06's GPU pack (./course gpu-pack; the ctest case "the GPU pack runs in a clean environment"): what a GPU
# machine with no -dev packages and no network needs for chapter 06's GPU check. DEST/run.sh (gpu_run.sh),
# bin/ (the chapter and its two test programs), lib/ (every library ldd resolves but glibc's, CUDA's and the C++
# runtime), lib/fallback/ (libstdc++ and libgcc_s, loaded only where the machine's own is missing or too old:
# Debian 12's need glibc 2.36), sdpa_compare.py, SOURCES_HASH (cmake/sources_hash.sh). Shared libraries, not
# static: OpenBLAS keeps every CPU's kernels, 28.9 MB per program linked statically, carried once shared.
# usage: gpu_pack.sh ROOT BUILD_DIR DEST   (BUILD_DIR: a configured build with CUDA, programs built)
set -euo pipefail
export LC_ALL=C
root=$1 build=$2 dest=$3
programs=(ch06_flash_cuda ch06_flash_cuda_solution_test ch06_flash_cuda_core_test)
limit=$((48 * 1024 * 1024))

for p in "${programs[@]}"; do
  [ -x "$build/bin/$p" ] || { echo "gpu_pack.sh: $build/bin/$p is missing (a build with CUDA is needed)" >&2; exit 1; }
done
# The kernels must carry sm_80 and sm_90 code and sm_90 PTX (for newer GPUs): read from the compile commands.
flags=$(grep -o '"command": "[^"]*04_flash_tc\.cu[^"]*"' "$build/compile_commands.json" || true)
for want in 'code=\[sm_80\]' 'code=\[compute_90,sm_90\]'; do
  grep -q "$want" <<<"$flags" || {
    echo "gpu_pack.sh: chapter 06 was not compiled with $want (CMAKE_CUDA_ARCHITECTURES must be '80-real;90')" >&2
    exit 1
  }
done

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
cp "${programs[@]/#/$build/bin/}" "$dest/bin/"
cp "$root/chapters/06_flash_cuda/gpu_run.sh" "$dest/run.sh"
cp "$root/chapters/06_flash_cuda/sdpa_compare.py" "$dest/"
"$root/cmake/sources_hash.sh" "$root" chapters/06_flash_cuda solutions/06_flash_cuda >"$dest/SOURCES_HASH"

# The libraries: what the loader resolves, less glibc's own (every Linux has them, and they must match
# the machine's loader) and CUDA's (the GPU machine's own CUDA 13 runtime and cuBLAS, matching its driver).
system='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so'
cuda='^(libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libnvJitLink)\.so'
cxx_runtime='^(libstdc\+\+|libgcc_s)\.so'
mkdir -p "$dest/lib/fallback"
ldd "${programs[@]/#/$dest/bin/}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    if [[ "$name" =~ $system ]] || [[ "$name" =~ $cuda ]]; then continue; fi
    if [[ "$name" =~ $cxx_runtime ]]; then cp -L "$path" "$dest/lib/fallback/$name"; else cp -L "$path" "$dest/lib/$name"; fi
  done

# What the packed files ask of the machine, read from their version-needs sections (readelf -V): the newest
# version of $1 (GLIBC, GLIBCXX, CXXABI) that any of the other arguments needs.
newest_needed() {
  local prefix=$1
  shift
  readelf -V --wide "$@" 2>/dev/null | awk -v p="$prefix" '
    /^Version needs section/ {needs = 1; next}
    /^Version (definition|symbols) section/ {needs = 0}
    needs { for (i = 1; i < NF; i++) if ($i == "Name:" && index($(i + 1), p "_") == 1) print substr($(i + 1), length(p) + 2) }' |
    sort -uV | tail -n 1
}
programs_and_libs=("$dest"/bin/* "$dest"/lib/*.so*)
glibc=$(newest_needed GLIBC "${programs_and_libs[@]}")
glibcxx=$(newest_needed GLIBCXX "${programs_and_libs[@]}")
cxxabi=$(newest_needed CXXABI "${programs_and_libs[@]}")
fallback_glibc=$(newest_needed GLIBC "$dest"/lib/fallback/*)

cat >"$dest/README.txt" <<EOF
Chapter 06's GPU check, packed by ./course gpu-pack (sources $(cat "$dest/SOURCES_HASH")).
Needs: an NVIDIA driver, CUDA 13's runtime and cuBLAS (libcudart.so.13, libcublas.so.13), python3 with torch,
glibc $glibc or newer, and a C++ runtime whose libstdc++ has GLIBCXX_$glibcxx and CXXABI_$cxxabi (read from
the packed files with readelf). When the machine's libstdc++ or libgcc_s is missing or older, run.sh loads the
copies in lib/fallback/ instead; those need glibc $fallback_glibc. Every other library is in lib/.
Run:   ./run.sh OUT_DIR           (about 3 minutes on an H100/H200, 7 at most: every step has a time limit;
                                   results appear in OUT_DIR as they exist, all of them in results.tar.gz)
       ./run.sh --dry-run OUT_DIR (no GPU needed: every step up to the first kernel launch)
Then copy OUT_DIR/06_flash_cuda.txt into the course's book/recorded/ (the book shows it; a test checks that
its first line matches the sources' hash).
EOF

size=$(du -sb "$dest" | cut -f1)
echo "gpu_pack.sh: $dest: $((size / 1024)) KiB (limit $((limit / 1024)) KiB)"
(cd "$dest" && du -b bin/* lib/*.so* lib/fallback/* | sort -k2 | awk '{printf "  %10d  %s\n", $1, $2}')
echo "gpu_pack.sh: needs glibc $glibc, GLIBCXX_$glibcxx, CXXABI_$cxxabi (lib/fallback/: glibc $fallback_glibc)"
if [ "$size" -gt "$limit" ]; then
  echo "gpu_pack.sh: the pack is larger than 48 MiB" >&2
  exit 1
fi
