#!/usr/bin/env bash
# Builds a stand-alone kernel harness against variants of the sources and times each (on a GPU
# machine). KERNELS picks the harness: affine (affine_kernels.cu, the default) or
# selective_scan (selective_scan_kernels.cu with the tree's selective-scan kernel units).
#
#   bash benchmarks/kernel_variants/variants.sh NAME[=EDIT] ...
#
# Each NAME gets a copy of csrc/ (or of SRC_<NAME>, another tree's csrc, e.g. a `git archive` of
# an older commit) in which EDIT, a shell command, runs first (typically sed on a header), and
# its own binary, built with the extra nvcc flags in FLAGS_<NAME>. The builds run in parallel;
# then every CASES entry runs for every variant, twice (affine: mode:dtype:log_gates, default
# "row-grad:f32:0 row-grad:bf16:0"; selective_scan: a dtype, default "f32 bf16"), and ptxas's
# registers, stack and spills of the engine's kernels are listed.
# Output goes to $OUT (default /tmp/kernel_variants): regs.txt, times.txt. Example:
#
#   bash benchmarks/kernel_variants/variants.sh base \
#     "cap4=sed -i 's/kBytes <= 8 ? 5 : 2/kBytes <= 8 ? 4 : 2/' cuda/engine/policy.cuh"
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-/tmp/kernel_variants}
WORK=${WORK:-/tmp/kernel_variants_build}
mkdir -p "$OUT" "$WORK"
TORCH_INCLUDE=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")
ARCH=${ARCH:-sm_90}
TORCH_LIB=$(dirname "$TORCH_INCLUDE")/lib
KERNELS=${KERNELS:-affine}
# The extension's flags (torch's BuildExtension adds the __CUDA_NO_HALF* ones).
NVCC="nvcc -O3 -std=c++17 -gencode arch=compute_${ARCH#sm_},code=$ARCH -Xptxas -v --expt-relaxed-constexpr
  -DPARPRIMS_CUDA=1 -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
  -D__CUDA_NO_HALF2_OPERATORS__ -I$TORCH_INCLUDE"

build() {  # NAME EDIT
  local name=$1 edit=$2 src_var="SRC_$1" flags_var="FLAGS_$1"
  local dir="$WORK/$name"
  rm -rf "$dir" && mkdir -p "$dir" && cp -r "${!src_var:-$ROOT/csrc}" "$dir/csrc"
  if [ -n "$edit" ]; then (cd "$dir/csrc" && eval "$edit") || { echo "$name: the edit failed"; return; }; fi
  local sources=("$HERE/affine_kernels.cu") libs=()
  if [ "$KERNELS" = selective_scan ]; then
    sources=("$HERE/selective_scan_kernels.cu" "$dir/csrc/cuda/selective_scan_forward.cu"
      "$dir/csrc/cuda/selective_scan_backward.cu")
    libs=(-L"$TORCH_LIB" -lc10_cuda -lc10 -Xlinker -rpath="$TORCH_LIB")
  fi
  # shellcheck disable=SC2086
  $NVCC ${!flags_var:-} -I"$dir/csrc" "${sources[@]}" "${libs[@]}" -o "$dir/kernels" >"$dir/ptxas.txt" 2>&1 ||
    { echo "$name: build failed (see $dir/ptxas.txt)"; tail -5 "$dir/ptxas.txt"; }
}

names=()
for spec in "$@"; do
  name=${spec%%=*}
  edit=""
  [ "$spec" != "$name" ] && edit=${spec#*=}
  names+=("$name")
  build "$name" "$edit" &
done
wait

for name in "${names[@]}"; do
  echo "## $name"
  python3 - "$WORK/$name/ptxas.txt" <<'PY'
import re, subprocess, sys
entry = None
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        entry, spill = m.group(1), ""
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and entry:
        spill = f"stack {m.group(1)} B, spills {m.group(2)}/{m.group(3)} B"
    m = re.search(r"Used (\d+) registers", line)
    if m and entry:
        name = subprocess.run(["c++filt"], input=entry, capture_output=True, text=True).stdout.strip()
        if "parprims::" in name and "(anonymous namespace)" not in name:  # the engine's, not the harness's
            name = name.replace("parprims::cuda::", "").replace("parprims::", "").replace("void ", "")
            print(f"{m.group(1):>4} registers, {spill}: {name[:name.index('>(') + 1]}")
        entry = None
PY
done | tee "$OUT/regs.txt"

if [ "$KERNELS" = selective_scan ]; then
  default_cases="f32 bf16"
else
  default_cases="row-grad:f32:0 row-grad:bf16:0"
fi
for round in 1 2; do
  for case in ${CASES:-$default_cases}; do
    for name in "${names[@]}"; do
      [ -x "$WORK/$name/kernels" ] || continue
      printf "%-16s run %d  " "$name" "$round"
      # shellcheck disable=SC2046
      "$WORK/$name/kernels" $(echo "$case" | tr ':' ' ')
    done
  done
done 2>&1 | tee "$OUT/times.txt"
