#!/usr/bin/env bash
# Chapter 06's GPU pack: everything a GPU machine without Debian's -dev packages and without a network
# needs to run chapter 06's GPU check (./course gpu-pack calls this after building; the ctest case
# "the GPU pack runs in a clean environment" calls it too).
#
#   DEST/run.sh            chapters/06_flash_cuda/gpu_run.sh: tests, sanitizers, ladder, SDPA, recording
#   DEST/bin/              ch06_flash_cuda and its two test programs (sm_80 and sm_90 code, sm_90 PTX)
#   DEST/lib/              the shared libraries they need that a CUDA machine lacks (OpenBLAS, gfortran,
#                          quadmath, fmt, Google Benchmark, libstdc++, libgcc_s): all ldd resolves except
#                          glibc's own libraries and CUDA's (cudart, cuBLAS, the driver)
#   DEST/sdpa_compare.py   PyTorch's SDPA on the same shapes, the summary table, the recording
#   DEST/SOURCES_HASH      cmake/sources_hash.sh over the sources the recording must come from
#
# Why shared libraries and not static linking: Debian ships libopenblas.a, libgfortran.a and
# libquadmath.a, but OpenBLAS's run-time kernel choice keeps every CPU's kernels: linked statically, each
# of the three programs is 28.9 MB; the shared libopenblas (36.5 MB) with gfortran and quadmath (3.2 MB)
# is carried once. fmt and Google Benchmark have no static library in Debian.
#
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
ldd "${programs[@]/#/$dest/bin/}" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    if [[ "$name" =~ $system ]] || [[ "$name" =~ $cuda ]]; then continue; fi
    cp -L "$path" "$dest/lib/$name"
  done

cat >"$dest/README.txt" <<EOF
Chapter 06's GPU check, packed by ./course gpu-pack (sources $(cat "$dest/SOURCES_HASH")).
Needs: an NVIDIA driver, CUDA 13's runtime and cuBLAS (libcudart.so.13, libcublas.so.13), python3 with torch,
glibc 2.34 or newer. Nothing else: the other libraries are in lib/.
Run:   ./run.sh OUT_DIR          (about 3-5 minutes on an H100/H200; results appear in OUT_DIR as they exist)
       ./run.sh --dry-run OUT_DIR (no GPU needed: every step up to the first kernel launch)
Then copy OUT_DIR/06_flash_cuda.txt into the course's book/recorded/ (the book shows it; a test checks that
its first line matches the sources' hash).
EOF

size=$(du -sb "$dest" | cut -f1)
echo "gpu_pack.sh: $dest: $((size / 1024)) KiB (limit $((limit / 1024)) KiB)"
(cd "$dest" && du -b bin/* lib/* | sort -k2 | awk '{printf "  %10d  %s\n", $1, $2}')
if [ "$size" -gt "$limit" ]; then
  echo "gpu_pack.sh: the pack is larger than 48 MiB" >&2
  exit 1
fi
