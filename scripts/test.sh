#!/usr/bin/env bash
# Sets up everything a fresh machine lacks, builds the extension (with CUDA when nvcc is found,
# unless PARPRIMS_CUDA=0) and runs every test: pytest, then the C++ tests through CMake + ctest.
#
#   bash scripts/test.sh                  # all of it
#   PARPRIMS_CUDA=0 bash scripts/test.sh  # CPU-only build
# Extra arguments go to pytest (e.g. `-m slow`, `-k scan`). See scripts/setup.sh for the
# environment variables; PARPRIMS_CMAKE_CUDA=1 also compiles the CUDA sources in the CMake build.
set -euo pipefail
# shellcheck source=scripts/setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
start=$SECONDS

pp_install_python_deps
pp_install_cpp_deps
pp_setup_cuda
pp_build_extension

# pytest exits 5 when it collects no test; under `set -e` that fails this script, as it must.
pp_log "python -m pytest -q tests $*"
"$PYTHON" -m pytest -q tests "$@"

pp_log "C++ tests: CMake build in build-cmake/ and ctest"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake_cuda=OFF
[ "${PARPRIMS_CMAKE_CUDA:-0}" = 1 ] && cmake_cuda=ON
cmake -S . -B build-cmake "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPARPRIMS_CUDA="$cmake_cuda" \
  -DPARPRIMS_PYTHON="$(command -v "$PYTHON")"
cmake --build build-cmake -j "$MAX_JOBS"
ctest --test-dir build-cmake --output-on-failure -j 2

pp_log "every test passed in $((SECONDS - start)) s"
