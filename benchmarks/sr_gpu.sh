#!/usr/bin/env bash
# The GPU check of the segment-reduce rows pass (branch sr-tiles), in one call from the repo root
# on an H200 machine with torch, nvcc, pytest and ncu; results and logs go to $OUT:
#
#   OUT=/some/dir bash benchmarks/sr_gpu.sh
#
#   build.log       pip install -e . (TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS=16)
#   pytest.log      tests/test_reduce.py and tests/test_masked_reduce.py on CUDA
#   sanitizer.log   compute-sanitizer racecheck and memcheck over small segment_reduce calls of
#                   each path (block and warp tiles, many starts, rows, strided, invalid offsets)
#   bench.log, nvidia-h200.json   benchmarks/bench_reduce.py --device cuda
#   ncu.txt         ncu of the segment sum of 2^26 float32 in 65536 random-length sequences
#   summary.txt     the statuses and the key numbers, printed last
#
# Every step after the build runs under `timeout`, within STEP_BUDGET seconds in all (default
# 410): tests 140, sanitizer 2 x 35, bench 140, ncu 60 at most, each cut to what is left.
# The build (BUILD_TIMEOUT, default 540 s) is not counted; to split the work over two calls of
# at most 10 minutes, run BUILD_ONLY=1 first and SKIP_BUILD=1 next (the build stays in place).
OUT="${OUT:-/tmp/sr_gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
WORK=$(mktemp -d)

note "sr_gpu: commit $(git rev-parse --short HEAD 2>/dev/null), $(git status --porcelain 2>/dev/null | grep -c .) changed files"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -2 | tee -a "$SUMMARY"

# ---- build (not counted in STEP_BUDGET) ----
if [ "${SKIP_BUILD:-0}" != "1" ]; then
  tb=$(date +%s)
  TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 timeout "${BUILD_TIMEOUT:-540}" \
    python3 -m pip install --no-build-isolation --no-deps -v -e . >"$OUT/build.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! python3 -c 'import torch_parprims' >>"$OUT/build.log" 2>&1; then
    note "build: FAILED rc=$rc ($(($(date +%s) - tb)) s)"
    grep -n -m 20 -E "error" "$OUT/build.log" | tee -a "$SUMMARY"
    exit 1
  fi
  note "build: ok ($(($(date +%s) - tb)) s)"
fi
# registers, stack (spills) and shared memory of the segment-reduce rows kernels (float32 sum and
# logsumexp) and of piece_segments_kernel, from the built module
so=$(python3 -c 'import torch_parprims._C as m; print(m.__file__)' 2>/dev/null)
[ -n "$so" ] && python3 - "$so" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import re, subprocess, sys
out = subprocess.run(["cuobjdump", "-res-usage", sys.argv[1]], capture_output=True, text=True).stdout
name = None
for line in out.splitlines():
    m = re.search(r"Function (\S+):", line)
    if m:
        name = m.group(1)
        continue
    if name and "REG:" in line:
        dem = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
        dem = re.sub(r"parprims::(cuda::)?", "", dem)
        if ("rows_kernel" in dem and ", float, float>" in dem) or "piece_segments" in dem:
            print(re.sub(r"\((ReduceProblem|ScanGeometry).*$", "", dem)[:90], " ".join(line.split()[:4]))
        name = None
EOF
[ "${BUILD_ONLY:-0}" = "1" ] && exit 0

T0=$(date +%s)
STEP_BUDGET="${STEP_BUDGET:-410}"
# limit LIMIT: the smaller of LIMIT and what is left of STEP_BUDGET
limit() {
  local left=$((STEP_BUDGET - ($(date +%s) - T0)))
  [ "$left" -lt 1 ] && left=1
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# ---- tests ----
workers=""
python3 -c 'import xdist' 2>/dev/null && workers="-n 8"
ts=$(date +%s)
# shellcheck disable=SC2086
PARPRIMS_TEST_DEVICES=cuda timeout "$(limit 140)" python3 -m pytest -q -x tests/test_reduce.py tests/test_masked_reduce.py \
  -p no:cacheprovider -rfE $workers >"$OUT/pytest.log" 2>&1
rc=$?
note "tests: rc=$rc ($(($(date +%s) - ts)) s): $(grep -E "passed|failed|error|no tests ran" "$OUT/pytest.log" | tail -1)"
[ $rc -ne 0 ] && sed -n '/short test summary/,$p' "$OUT/pytest.log" | head -30 | tee -a "$SUMMARY"

# ---- sanitizer: small calls of every path of the pass ----
cat >"$WORK/cases.py" <<'EOF'
import torch
import torch_parprims as pp
torch.manual_seed(0)
dev = "cuda"
def offsets_for(n, tile):
    cuts = [0, 0]
    for j in range(1, 4):
        cuts += [e for e in (j * tile - 1, j * tile, j * tile, j * tile + 1) if e < n]
    pos = n // 2 - min(n // 4, 700)
    while pos < min(n - 1, n // 2 + 700):
        pos += int(torch.randint(1, 9, (1,)))
        cuts.append(min(pos, n))
    return torch.tensor(sorted(cuts + [n - 1, n, n]), device=dev)
for n in (3 * 4096 + 101, 1901, 300):  # block tiles; warp tiles; one warp tile
    off = offsets_for(n, 4096 if n > 4096 else 512)
    for op in ("sum", "mean"):  # 4-byte and 16-byte accumulators
        for x in (torch.randn(n, device=dev), torch.randn(3, n, device=dev), torch.randn(2, 2 * n, device=dev)[:, ::2]):
            pp.segment_reduce(x, off, op, x.dim() - 1)
    pp.segment_reduce(torch.randn(n, device=dev, dtype=torch.float64), off, "max")
    pp.segment_reduce(torch.randint(-9, 9, (n,), device=dev, dtype=torch.int32), off, "sum")
    pp.reduce(torch.randn(5, n, device=dev), 1, "sum", torch.rand(5, n, device=dev) > 0.5)
bad = torch.tensor([3, -7, 100, 2], device=dev)
for op in ("sum", "max", "mean"):
    pp.segment_reduce(torch.randn(10, device=dev), bad, op)
    pp.segment_reduce(torch.randn(5000, device=dev), bad, op)
torch.cuda.synchronize()
print("cases done")
EOF
for tool in racecheck memcheck; do
  ts=$(date +%s)
  timeout "$(limit 35)" compute-sanitizer --tool "$tool" --error-exitcode 9 python3 "$WORK/cases.py" >>"$OUT/sanitizer.log" 2>&1
  rc=$?
  note "sanitizer $tool: rc=$rc ($(($(date +%s) - ts)) s): $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log" | tail -1)"
done

# ---- benchmark ----
ts=$(date +%s)
blim=$(limit 140)
timeout "$blim" python3 benchmarks/bench_reduce.py --device cuda --out "$OUT" --no-plots --budget-s $((blim > 40 ? blim - 20 : 20)) \
  >"$OUT/bench.log" 2>&1
note "bench_reduce: rc=$? ($(($(date +%s) - ts)) s)"
for f in "$OUT"/*.json; do
  [ -e "$f" ] && python3 benchmarks/harness.py --summarize "$f" --width 150 2>&1 | tee -a "$SUMMARY"
done

# ---- ncu: the random-length segment sum ----
cat >"$WORK/ncu_case.py" <<'EOF'
import torch
import torch_parprims as pp
n, sequences = 1 << 26, 1 << 16
g = torch.Generator().manual_seed(3000)  # as bench_reduce.py's first input set
cuts = torch.randint(0, n + 1, (sequences - 1,), generator=g).sort().values
offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]).cuda()
x = torch.randn(n, device="cuda")
for _ in range(2):
    out = pp.segment_reduce(x, offsets, "sum")
torch.cuda.synchronize()
want = torch.segment_reduce(x.double(), "sum", offsets=offsets)
print("max abs err", float((out.double() - want).abs().max()))
EOF
ts=$(date +%s)
timeout "$(limit 60)" ncu --clock-control none --print-kernel-base function \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  -k "regex:segment_reduce|piece_segments" python3 "$WORK/ncu_case.py" >"$OUT/ncu.txt" 2>&1
note "ncu: rc=$? ($(($(date +%s) - ts)) s)"
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Block Limit (Registers|Shared Mem)|Static Shared|Warp Cycles Per Issued|max abs err" \
  "$OUT/ncu.txt" | sed 's/  */ /g' | cut -c1-150 | head -60 | tee -a "$SUMMARY"

rm -rf "$WORK"
echo "== summary"
cat "$SUMMARY"
