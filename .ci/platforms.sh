# The platforms CI proves beside its own Debian 12 / GCC / x86-64 (sourced by .ci/run): Debian 13 as a new reader
# meets it, Clang, and arm64 under emulation. Each function is one stage; each installs what it needs.
#
# ccache keeps each platform's objects between CI runs on one machine (/var/cache/attn-ci): a first run on a new
# machine compiles everything, later ones only what changed.
CI_CACHE=/var/cache/attn-ci

# The chapters' core tests (chNN_name_core_test: each chapter's own code, its fast kernels among it) and common's
# (the CPU detection among them): the subset the Clang and arm64 lanes build and run.
core_test_targets() {
  local stem
  echo attn_common_test
  for stem in $(python3 driver/manifest.py stems); do echo "ch${stem%%_*}_${stem#*_}_core_test"; done
}

# run_core_tests BUILD_DIR [LAUNCHER...]: runs every core test program of BUILD_DIR (under LAUNCHER, e.g. qemu),
# each in its own scratch folder, with doctest's options CORE_TEST_ARGS; one line per program, and its output when
# it fails.
run_core_tests() {
  local dir=$PWD/$1 failed=0 t out rc
  shift
  for t in $(core_test_targets); do
    out=$(
      scratch=$(mktemp -d) && cd "$scratch" || exit 1
      "$@" "$dir/bin/$t" --no-intro ${CORE_TEST_ARGS:-} 2>&1 # split into words; the scratch folder is empty, so no glob matches
      status=$?
      rm -rf "$scratch"
      exit $status
    )
    rc=$?
    if [ $rc -eq 0 ]; then
      echo "$t: $(grep -E '^\[doctest\] test cases:' <<<"$out" | sed 's/\[doctest\] //')"
    else
      echo "$t FAILED (status $rc):"
      echo "$out" | tail -40
      failed=1
    fi
  done
  return $failed
}

# --- Debian 13 ----------------------------------------------------------------------------------------------------
# The README's two commands on a fresh clone in a fresh Debian 13 root (debootstrap), run by
# a new user with sudo as the README says: nothing of this machine's packages or build reaches it.
debian13_root=$CI_CACHE/debian13-root

debian13_unmount() {
  local m
  for m in home/reader/.cache/ccache sys dev proc; do
    mountpoint -q "$debian13_root/$m" && umount -R "$debian13_root/$m"
  done
  return 0
}

debian13_reader() {
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
  debian13_unmount
  if grep -q " $debian13_root/" /proc/mounts; then # never delete through a mount of the machine's /dev or /sys
    echo "a mount under $debian13_root is still there: not removing it"
    return 1
  fi
  rm -rf "$debian13_root"
  mkdir -p "$CI_CACHE/ccache-debian13"
  echo "debootstrap: a minimal Debian 13 (trixie) with git, python3 and sudo"
  debootstrap --variant=minbase --include=git,python3,sudo,ca-certificates trixie "$debian13_root" \
    http://deb.debian.org/debian >"$CI_CACHE/debootstrap.log" 2>&1 || { tail -20 "$CI_CACHE/debootstrap.log"; return 1; }
  # This workplace reaches the package registries through its own certificate authority: the root trusts it as
  # the machine does (a reader's machine has its own network and needs none of this).
  cp /etc/resolv.conf "$debian13_root/etc/"
  cp /usr/local/share/ca-certificates/* "$debian13_root/usr/local/share/ca-certificates/" 2>/dev/null || true
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$debian13_root/etc/"
  chroot "$debian13_root" update-ca-certificates >/dev/null 2>&1
  chroot "$debian13_root" useradd -m -s /bin/bash reader
  echo "reader ALL=(ALL) NOPASSWD:ALL" >"$debian13_root/etc/sudoers.d/reader"
  git clone -q "$PWD" "$debian13_root/home/reader/course"
  mkdir -p "$debian13_root/home/reader/.cache/ccache"
  chroot "$debian13_root" chown -R reader:reader /home/reader
  # The ccache of earlier runs is mounted over that folder: it must be the reader's too (by the root's uid and gid),
  # or the first compile stops with "ccache: error: Permission denied" on a machine where root made it.
  chown -R "$(chroot "$debian13_root" id -u reader):$(chroot "$debian13_root" id -g reader)" "$CI_CACHE/ccache-debian13"
  echo "127.0.1.1 $(hostname)" >>"$debian13_root/etc/hosts" # sudo looks the machine's name up
  # The README's two commands, then the book's check in a browser, as the reader would run them.
  as_debian13_reader 'echo "Debian $(cat /etc/debian_version)"; cd course &&
    ./course run && g++ --version | head -1 && ./course test && ./course book --check'
}

# as_debian13_reader COMMAND: runs COMMAND as the reader in the Debian 13 root, with /proc, /dev and /sys mounted
# (Chromium reads /sys) and the ccache of earlier CI runs at the reader's ~/.cache/ccache.
as_debian13_reader() {
  (
    set -e
    trap debian13_unmount EXIT
    mount -t proc proc "$debian13_root/proc"
    mount --rbind /dev "$debian13_root/dev"
    mount --rbind /sys "$debian13_root/sys"
    mount --bind "$CI_CACHE/ccache-debian13" "$debian13_root/home/reader/.cache/ccache"
    chroot "$debian13_root" su - reader -c "$1"
  )
}

# Debian 13's Clang (19) on the chapters' core tests, in the root the reader's lane made: a CI reference build,
# warnings as errors, as the Clang 14 lane is on Debian 12.
debian13_clang() {
  [ -d "$debian13_root/home/reader/course" ] || { echo "no Debian 13 root: the reader's lane did not make it"; return 1; }
  as_debian13_reader 'cd course && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null &&
    clang++ --version | head -1 && . .ci/platforms.sh && CI=true clang_core_tests'
}

# --- Clang --------------------------------------------------------------------------------------------------------
# Debian 12's Clang 14, warnings as errors as in every CI build, the fast kernels included (attn/isa.hpp): every
# chapter's core tests and common's, on this machine's CPU.
clang_core_tests() {
  CC=clang CXX=clang++ cmake -S . -B build/clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_BOOK=OFF -DATTN_CUDA=OFF \
    >/dev/null || return 1
  cmake --build build/clang --target $(core_test_targets) || return 1
  run_core_tests build/clang
}

# --- arm64 --------------------------------------------------------------------------------------------------------
# Cross-compiled with Debian's g++-aarch64-linux-gnu against the arm64 packages (multiarch), run under qemu-user:
# every chapter's core tests and common's. A cross build and emulated tests fit CI's time, where a whole arm64 root
# under emulation would compile ten times slower. Open MPI's arm64 package is not installed beside the x86-64 one,
# so the MPI programs of chapters 13 and 15 are left out here; everything else of theirs runs.
arm64_packages=(g++-aarch64-linux-gnu qemu-user libopenblas-dev:arm64 libfmt-dev:arm64 libbenchmark-dev:arm64
                libfftw3-dev:arm64 libicu-dev:arm64 libigraph-dev:arm64 libhwy-dev:arm64)

arm64_core_tests() {
  dpkg --add-architecture arm64 && apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${arm64_packages[@]}" >/dev/null ||
    return 1
  cmake -S . -B build/arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DATTN_BOOK=OFF -DATTN_CUDA=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null ||
    return 1
  cmake --build build/arm64 --target $(core_test_targets) || return 1
  # Under the toolchain's emulator. The hostile battery's cases are left out: their hang alarm and address-space limit
  # would measure qemu (a refusal that takes microseconds natively ran past the alarm under emulation), not the
  # course; they run natively in the other lanes.
  CORE_TEST_ARGS="-tce=*hostile?battery*" run_core_tests build/arm64 qemu-aarch64 || return 1
  # Once on NEON (the path qemu's CPU has), once on the portable path every kernel also has.
  echo "again on the portable path (ATTN_VECTOR_ISA=portable):"
  ATTN_VECTOR_ISA=portable CORE_TEST_ARGS="-tce=*hostile?battery*" run_core_tests build/arm64 qemu-aarch64
}
