#!/usr/bin/env bash
# Sets up everything a fresh machine lacks, builds the extension (with CUDA when nvcc is found,
# unless PARPRIMS_CUDA=0) and runs the main job, `python -m torch_parprims`: correctness checks
# of every op, then a benchmark table against the PyTorch equivalents, on the GPU if there is one.
# Extra arguments go to the main job (e.g. `--quick`, `--device cpu`, `--no-bench`).
set -euo pipefail
# shellcheck source=scripts/setup.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

pp_install_python_deps
pp_setup_cuda
pp_build_extension

cd "$PARPRIMS_ROOT"
exec "$PYTHON" -m torch_parprims "$@"
