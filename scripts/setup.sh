# shellcheck shell=bash
# Shared set-up of scripts/run.sh and scripts/test.sh (sourced, not run): installs what a
# fresh machine lacks and builds the extension in place.
#
# Environment:
#   PARPRIMS_CUDA=0        build the CPU kernels only (default: with CUDA when nvcc is found)
#   TORCH_CUDA_ARCH_LIST   GPU architectures to compile for (default "8.0;9.0")
#   MAX_JOBS               parallel compile jobs (default 2)
#   PYTHON                 the Python to use. Default: python3 of the active virtual environment
#                          (VIRTUAL_ENV set), else the project's own .venv at the repository root,
#                          created on first use with `python3 -m venv .venv`. The system Python is
#                          never changed.
#   PARPRIMS_SKIP_BUILD=1  use the extension as already built
#   PARPRIMS_REBUILD=1     rebuild even when the extension looks up to date

PARPRIMS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$PARPRIMS_ROOT" || exit 1
PP_PROJECT_VENV=0
if [ -z "${PYTHON:-}" ]; then
  if [ -n "${VIRTUAL_ENV:-}" ]; then
    PYTHON=python3
  else
    PYTHON="$PARPRIMS_ROOT/.venv/bin/python"
    PP_PROJECT_VENV=1
  fi
fi
export MAX_JOBS="${MAX_JOBS:-2}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}"

pp_log() { printf '==> %s\n' "$*"; }
pp_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# apt-get, with one `apt-get update` first (as root, or through sudo).
PP_APT_UPDATED=0
pp_apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || pp_die "need root (or sudo) to apt-get install $*"
    sudo="sudo"
  fi
  if [ "$PP_APT_UPDATED" = 0 ]; then
    $sudo apt-get update -q
    PP_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
}

pp_pip() {
  local extra=()
  [ -t 1 ] || extra+=(--progress-bar off)  # no bars in a log file
  "$PYTHON" -m pip install --disable-pip-version-check "${extra[@]}" "$@"
}

# Creates the project's virtual environment .venv (once) when no virtual environment is active
# and PYTHON was not given, and puts its bin/ first on PATH, as `source .venv/bin/activate` does.
pp_setup_venv() {
  [ "$PP_PROJECT_VENV" = 1 ] || return 0
  local venv="$PARPRIMS_ROOT/.venv"
  # A venv that Debian's python3 created without python3-venv has a python but no pip.
  if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    pp_log "$venv has no pip: creating it again"
    rm -rf "$venv"
  fi
  if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null 2>&1 || pp_apt_install python3
    pp_log "creating the project's virtual environment: python3 -m venv .venv"
    if ! python3 -m venv "$venv"; then
      # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) separately.
      rm -rf "$venv"
      local ver
      ver="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
      pp_log "python3 -m venv failed: apt-get install python3-venv python$ver-venv"
      pp_apt_install python3-venv "python$ver-venv" || pp_apt_install python3-venv
      python3 -m venv "$venv" || pp_die "python3 -m venv .venv failed"
    fi
  fi
  export VIRTUAL_ENV="$venv"
  case ":$PATH:" in *":$venv/bin:"*) ;; *) export PATH="$venv/bin:$PATH" ;; esac
}

# Python packages: torch, numpy, pytest, pytest-xdist, hypothesis, ninja, expecttest, tqdm, matplotlib; setuptools
# and wheel for the build.
pp_install_python_deps() {
  pp_setup_venv
  command -v "$PYTHON" >/dev/null 2>&1 || pp_die "$PYTHON not found"
  "$PYTHON" -m pip --version >/dev/null 2>&1 || pp_apt_install python3-pip
  local missing
  missing="$("$PYTHON" - <<'PY'
import importlib.util
from importlib import metadata
need = {"torch": "torch", "numpy": "numpy", "pytest": "pytest", "xdist": "pytest-xdist",
        "hypothesis": "hypothesis", "ninja": "ninja", "expecttest": "expecttest", "wheel": "wheel",
        "tqdm": "tqdm", "matplotlib": "matplotlib"}  # the last two: the example's test
missing = [pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None]
try:
    major = int(metadata.version("setuptools").split(".")[0])
except Exception:
    major = 0
if major < 77:
    missing.append("setuptools>=77")
print(" ".join(missing))
PY
)"
  if [ -n "$missing" ]; then
    pp_log "pip install $missing"
    # shellcheck disable=SC2086
    pp_pip $missing
  fi
  # pip's ninja installs its binary next to the interpreter; make sure it is on PATH.
  local bindir
  bindir="$("$PYTHON" -c 'import sys, sysconfig; print(sysconfig.get_path("scripts"))')"
  case ":$PATH:" in *":$bindir:"*) ;; *) export PATH="$PATH:$bindir" ;; esac
}

# Decides PARPRIMS_CUDA: 1 when nvcc is found (unless PARPRIMS_CUDA=0), and checks that the
# torch wheel's CUDA has the same major version as nvcc (a minor mismatch is fine).
pp_setup_cuda() {
  if [ "${PARPRIMS_CUDA:-}" = 0 ]; then
    pp_log "PARPRIMS_CUDA=0: building the CPU kernels only"
    return
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    for dir in "${CUDA_HOME:-}" /usr/local/cuda; do
      if [ -n "$dir" ] && [ -x "$dir/bin/nvcc" ]; then
        export PATH="$dir/bin:$PATH"
        break
      fi
    done
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    if [ "${PARPRIMS_CUDA:-}" = 1 ] || [ "${CI:-}" = true ]; then
      pp_die "nvcc not found (looked on PATH, in \$CUDA_HOME and /usr/local/cuda); set PARPRIMS_CUDA=0 for a CPU-only build"
    fi
    pp_log "nvcc not found: building the CPU kernels only"
    export PARPRIMS_CUDA=0
    return
  fi
  export PARPRIMS_CUDA=1
  export CUDA_HOME="${CUDA_HOME:-$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)}"
  local nvcc_version torch_cuda
  nvcc_version="$(nvcc --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')"
  torch_cuda="$("$PYTHON" -c 'import torch; print(torch.version.cuda or "")')"
  [ -n "$torch_cuda" ] || pp_die "the installed torch is a CPU-only build: install a CUDA build of torch, or set PARPRIMS_CUDA=0"
  if [ "${nvcc_version%%.*}" != "${torch_cuda%%.*}" ]; then
    pp_die "nvcc is CUDA $nvcc_version but torch was built with CUDA $torch_cuda: the major versions must match (install a torch wheel for CUDA ${nvcc_version%%.*}, or set PARPRIMS_CUDA=0)"
  fi
  pp_log "CUDA build: nvcc $nvcc_version (torch built with CUDA $torch_cuda), TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS"
}

# Whether the in-place extension is up to date: built by this script with the same settings
# (stamp), newer than every source, and importable from elsewhere as this checkout's package.
pp_extension_current() {
  local stamp=build/.parprims-build-stamp so
  [ "${PARPRIMS_REBUILD:-0}" = 1 ] && return 1
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(pp_build_settings)" ] || return 1
  so="$(compgen -G "torch_parprims/_C*.so" | head -n 1)" || return 1
  [ -n "$so" ] || return 1
  [ -z "$(find csrc setup.py pyproject.toml -newer "$so" -print -quit)" ] || return 1
  (cd / && "$PYTHON" -c 'import os, sys, torch_parprims as p; sys.exit(os.path.dirname(p.__file__) != sys.argv[1])' \
    "$PARPRIMS_ROOT/torch_parprims") >/dev/null 2>&1
}

pp_build_settings() {
  printf 'cuda=%s arch=%s torch=%s python=%s\n' "${PARPRIMS_CUDA:-}" "$TORCH_CUDA_ARCH_LIST" \
    "$("$PYTHON" -c 'import torch; print(torch.__version__)')" "$(command -v "$PYTHON")"
}

# Builds torch_parprims._C in place (an editable install), unless it is up to date.
pp_build_extension() {
  if [ "${PARPRIMS_SKIP_BUILD:-0}" = 1 ]; then
    pp_log "PARPRIMS_SKIP_BUILD=1: using the extension as built"
  elif pp_extension_current; then
    pp_log "the extension is up to date (PARPRIMS_REBUILD=1 rebuilds it)"
  else
    pp_log "building the extension (PARPRIMS_CUDA=$PARPRIMS_CUDA)"
    local start=$SECONDS
    rm -f build/.parprims-build-stamp
    pp_pip --no-build-isolation --no-deps -e .
    mkdir -p build
    pp_build_settings > build/.parprims-build-stamp
    pp_log "extension built in $((SECONDS - start)) s"
  fi
  # Import from outside the source tree, as a user would, and report whether CUDA kernels were built.
  (cd / && "$PYTHON" - <<'PY'
import glob, os, torch_parprims
cuda = torch_parprims.cuda_kernels_built()
print(f"==> torch_parprims {torch_parprims.__version__} imported from {os.path.dirname(torch_parprims.__file__)}; "
      f"CUDA kernels: {'yes' if cuda else 'no (a CPU-only build)'}")
if os.environ.get("PARPRIMS_CUDA") == "1":
    root = os.path.dirname(os.path.dirname(os.path.abspath(torch_parprims.__file__)))
    if glob.glob(os.path.join(root, "csrc", "cuda", "*.cu")) and not cuda:
        raise SystemExit("error: built with CUDA, but the ops registered no CUDA kernel")
PY
  )
}

# C++ toolchain of the CMake build: a C++ compiler, cmake, GoogleTest (ninja is optional).
pp_install_cpp_deps() {
  local pkgs=()
  command -v g++ >/dev/null 2>&1 || command -v c++ >/dev/null 2>&1 || pkgs+=(g++)
  command -v cmake >/dev/null 2>&1 || pkgs+=(cmake)
  if [ ! -f /usr/include/gtest/gtest.h ] || ! compgen -G "/usr/lib/*/libgtest*" >/dev/null; then
    pkgs+=(libgtest-dev)
  fi
  if [ "${#pkgs[@]}" -gt 0 ]; then
    pp_log "apt-get install ${pkgs[*]}"
    pp_apt_install "${pkgs[@]}"
  fi
}
