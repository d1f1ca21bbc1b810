#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole ctest suite (CUDA tests skip without a GPU;
# distributed tests run under mpirun -np 2 and -np 3). Then the CPU suite again, built with
# AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/ (MINIDP_SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")

if [ "${MINIDP_SANITIZE:-1}" = 1 ]; then
  flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  cmake -S . -B build-asan -DMINIDP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-asan -j"$(nproc)"
  # OpenMPI's own process-lifetime allocations are suppressed (scripts/lsan-openmpi.supp); every minidp
  # leak, overflow or undefined behaviour fails the test that hit it.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-openmpi.supp:print_suppressions=0"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd build-asan && ctest --output-on-failure -j"$(nproc)" "$@")
fi
