#!/usr/bin/env bash
# Every test: install what is missing, build, run the whole ctest suite (CUDA tests skip without a GPU;
# distributed tests run under mpirun -np 2 and -np 3). Then, as a user would: install minidp into a
# temporary prefix, build examples/custom_layer, examples/custom_hook and examples/minimal_step against that
# installation alone, and run their tests (the RMSNorm layer with minidp::testing, a 2-rank training run whose
# loss must fall, 2-rank runs with the example's top-k comm hook: overlap on and off byte-identical, 10 +
# resume + 10 steps byte-identical to 20, and minimal_step's 2-rank steps: the loss falls, the ranks' parameters
# are identical). Last, the CPU suite again, built with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ (MINIDP_SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
scripts/install-deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install build --prefix "$scratch/prefix" >/dev/null
for example in custom_layer custom_hook minimal_step; do
  cmake -S examples/$example -B "$scratch/$example" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
  cmake --build "$scratch/$example" -j"$(nproc)"
  (cd "$scratch/$example" && ctest --output-on-failure)
done

if [ "${MINIDP_SANITIZE:-1}" = 1 ]; then
  flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  cmake -S . -B build-asan -DMINIDP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-asan -j"$(nproc)"
  # Leaks are checked in every process that mpirun did not start. Under mpirun, OpenMPI's components
  # (dlopened, unloaded at MPI_Finalize) leave process-lifetime allocations whose stacks LeakSanitizer
  # can no longer attribute to a library, so no suppression can name them: there only address and
  # undefined-behaviour errors count.
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  under_mpirun='_np[0-9]+$|^train_'
  # The comm hooks' loss-curve checks (twice 400 steps each; 2 + 4 minutes under the sanitizers for bf16) run
  # no code that the shorter hook tests do not: they run in the plain build only.
  slow='^train_(bf16_wire|powersgd)_curve_'
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$(nproc)" -E "$under_mpirun" "$@")
  (cd build-asan &&
    ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j"$(nproc)" -R "$under_mpirun" -E "$slow" "$@")
fi
