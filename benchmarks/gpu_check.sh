#!/usr/bin/env bash
# Build, test and benchmark torch_parprims on the GPU machine, in one call from the repo root.
#
#   OUT=/some/dir bash benchmarks/gpu_check.sh          (results and logs go to $OUT)
#
# Stages (space separated in STAGES, default "build tests bench"):
#   build   TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 pip install --no-build-isolation --no-deps -e .
#           (falls back to `python3 setup.py build_ext --inplace`)          -> $OUT/build.log
#   tests   PARPRIMS_TEST_DEVICES=cuda pytest tests -m "$TEST_MARKERS" (default "not slow"), then
#           test_selective_scan.py and test_selective_scan_ops.py with 5 time segments forced (unless PYTEST_ARGS) -> $OUT/pytest_cuda.log
#   sanitizer  compute-sanitizer memcheck, racecheck and synccheck over benchmarks/sanitizer_cases.py
#           (small calls of every kernel family)                          -> $OUT/sanitizer.log
#   selftest  the Triton baselines against a float64 reference (also with bench if SELFTEST=1;
#           the bench rows check every baseline's output anyway)
#   bench   bench_scan, bench_affine_scan, bench_selective_scan, bench_compact, bench_reduce and bench_histogram (BENCH_SCRIPTS)
#           --device cuda -> $OUT/bench.log, $OUT/<device>.json (the scripts merged), <device>.png;
#           BENCH_SCRIPTS=bench_sweep runs the row-length sweep instead (and draws <device>-sweep.png)
#   models  bench_mamba_block.py (a Mamba block's fwd+bwd, tokens/s) -> $OUT/mamba-block.json
#   distributed  (2 GPUs or more) the NCCL tests of tests/test_distributed.py, then
#           torchrun bench_distributed.py over every GPU (DIST_OPS, default all four cases;
#           DIST_ARGS, e.g. "--longest") -> $OUT/distributed.log, $OUT/distributed-<device>-<n>ranks.json
# Always: $OUT/summary.txt, printed last. At most 6 files come back under $OUT.
#
# Time: TOTAL_BUDGET (s, default 560) bounds the whole script; each stage gets at most its own
# timeout and what is left of the total (each benchmark script gets an equal share of what
# remains and stops starting cases 20 s before its limit; results are saved after every case).
# Knobs: BUILD_TIMEOUT (s, default 360), TEST_TIMEOUT (240), SANITIZER_TIMEOUT (per tool, 150),
# SANITIZER_ARGS (e.g. "--only compaction,scans"), TEST_WORKERS (8, with pytest-xdist), BENCH_TIMEOUT (per script, 240),
# MODELS_TIMEOUT (150), BENCH_ARGS (extra args for every bench script, e.g. "--quick" or "--only 'scan:add'"),
# PYTEST_ARGS (extra pytest args, e.g. "-x -k scan"), SELFTEST (0), SUMMARY_WIDTH (125).
# The build stays in place between calls while the machine is warm, so a later call can run
# STAGES="tests bench" alone.

OUT="${OUT:-/tmp/parprims_gpu_out}"
mkdir -p "$OUT"
STAGES="${STAGES:-build tests bench}"
TOTAL_BUDGET="${TOTAL_BUDGET:-560}"
BUILD_TIMEOUT="${BUILD_TIMEOUT:-360}"
TEST_TIMEOUT="${TEST_TIMEOUT:-240}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-240}"
SELFTEST="${SELFTEST:-0}"
export PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
T0=$(date +%s)

has_stage() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(($(date +%s) - T0)); }
# limit LIMIT: the smaller of LIMIT and what is left of TOTAL_BUDGET (less 15 s for the summary)
limit() {
  local left=$((TOTAL_BUDGET - 15 - $(elapsed)))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

echo "== environment"
nvidia-smi -L 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv,noheader 2>&1 | head -4
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "| gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)' 2>&1
nvcc --version 2>&1 | tail -2
python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
note "gpu_check: STAGES='$STAGES' commit $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -c . ) changed files"

BUILD_STATUS="not run"
if has_stage build; then
  echo "== build (log: $OUT/build.log)"
  tb=$(date +%s)
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" MAX_JOBS="${MAX_JOBS:-16}"
  timeout "$(limit "$BUILD_TIMEOUT")" python3 -m pip install --no-build-isolation --no-deps -v -e . >"$OUT/build.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! python3 -c 'import torch_parprims' >>"$OUT/build.log" 2>&1; then
    echo "pip -e failed (rc=$rc); falling back to setup.py build_ext --inplace" | tee -a "$OUT/build.log"
    left=$(limit $((BUILD_TIMEOUT - ($(date +%s) - tb))))
    [ "$left" -lt 60 ] && left=60
    timeout "$left" python3 setup.py build_ext --inplace >>"$OUT/build.log" 2>&1
    rc=$?
  fi
  if [ $rc -eq 0 ] && python3 -c 'import torch_parprims' >>"$OUT/build.log" 2>&1; then
    BUILD_STATUS="ok ($(($(date +%s) - tb)) s)"
  else
    BUILD_STATUS="FAILED rc=$rc ($(($(date +%s) - tb)) s)"
    echo "---- build.log (last 60 lines)"
    tail -n 60 "$OUT/build.log"
    echo "---- compiler errors"
    grep -n -m 20 -E "error|Error" "$OUT/build.log" | head -20
  fi
  grep -E "ptxas info|spill" "$OUT/build.log" | grep -E "spill stores [1-9]|spill loads [1-9]" | head -5
  note "build: $BUILD_STATUS"
fi

# what the built extension has
python3 - <<'EOF' 2>&1 | tee -a "$SUMMARY"
try:
    import torch, torch_parprims  # noqa: F401
    ops = ["scan", "segmented_scan", "affine_scan", "matrix_affine_scan", "_selective_scan_forward",
           "selective_state_update", "compact_capacity"]
    have = {op: torch._C._dispatch_has_kernel_for_dispatch_key(f"parprims::{op}", "CUDA") for op in ops}
    print("CUDA kernels registered:", " ".join(f"{k}={'yes' if v else 'NO'}" for k, v in have.items()))
    if have["scan"]:
        x = torch.randn(1000, device="cuda")
        y = torch_parprims.scan(x, 0)
        torch.cuda.synchronize()
        print("smoke: scan 1000 on cuda, max abs err vs cumsum", float((y - x.cumsum(0)).abs().max()))
        try:  # an error message that formats numbers: crashes if the C++ runtime is linked wrong
            torch_parprims.scan(x, 3)
        except RuntimeError as e:
            print("smoke: error path ok:", str(e).splitlines()[0][:60])
except Exception as e:
    print("extension check failed:", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
EOF

TEST_STATUS="not run"
if has_stage tests; then
  echo "== tests (log: $OUT/pytest_cuda.log)"
  tt=$(date +%s)
  # shellcheck disable=SC2086
  tlim=$(limit "$TEST_TIMEOUT")
  # The default suite first (about 2 minutes on an H200); TEST_MARKERS="slow or not slow" adds
  # the exhaustive sweep when the budget allows.
  # pytest-xdist, when present, spreads the tests (torch.compile's are CPU-bound) over
  # TEST_WORKERS processes sharing the GPU; a worker that crashes is reported and replaced.
  workers=""
  python3 -c 'import xdist' 2>/dev/null && workers="-n ${TEST_WORKERS:-8}"
  PARPRIMS_TEST_DEVICES=cuda timeout "$tlim" python3 -m pytest -q tests -m "${TEST_MARKERS:-not slow}" \
    -p no:cacheprovider -rfE --durations=15 $workers ${PYTEST_ARGS:-} >"$OUT/pytest_cuda.log" 2>&1
  rc=$?
  last=$(grep -E "passed|failed|error|no tests ran" "$OUT/pytest_cuda.log" | tail -1)
  [ $rc -eq 124 ] && last="TIMEOUT after ${tlim}s; $last"
  TEST_STATUS="rc=$rc ($(($(date +%s) - tt)) s): $last"
  # The selective scan again with every row of 1024 steps or more cut into 5 time segments
  # (PARPRIMS_TIME_SEGMENTS): the default cuts only rows too few to fill the GPU, so most cases
  # never reach the summary and combine passes (about 50 s on an H100; appended to the log).
  tlim=$(limit "$TEST_TIMEOUT")
  if [ $rc -eq 0 ] && [ "$tlim" -gt 60 ] && [ -z "${PYTEST_ARGS:-}" ]; then
    echo "---- test_selective_scan.py, test_selective_scan_ops.py with PARPRIMS_TIME_SEGMENTS=5" >>"$OUT/pytest_cuda.log"
    PARPRIMS_TIME_SEGMENTS=5 PARPRIMS_TEST_DEVICES=cuda timeout "$tlim" python3 -m pytest -q tests/test_selective_scan.py tests/test_selective_scan_ops.py \
      -m "${TEST_MARKERS:-not slow}" -p no:cacheprovider -rfE $workers >>"$OUT/pytest_cuda.log" 2>&1
    rc=$?
    seg=$(grep -E "passed|failed|error|no tests ran" "$OUT/pytest_cuda.log" | tail -1)
    TEST_STATUS="$TEST_STATUS; with 5 time segments rc=$rc: $seg"
  fi
  if [ $rc -ne 0 ]; then
    echo "---- failures (first 40 lines of the short summary)"
    sed -n '/short test summary/,$p' "$OUT/pytest_cuda.log" | head -40
  fi
  note "tests: $TEST_STATUS"
fi

SANITIZER_STATUS="not run"
if has_stage sanitizer; then
  echo "== sanitizer (log: $OUT/sanitizer.log)"
  # Small calls of every kernel family (benchmarks/sanitizer_cases.py): the pytest suite is too
  # slow under the sanitizer, as its references loop over time on the device.
  # racecheck does not take bar.arrive as ordering the arriving threads' accesses before the
  # waiting threads' (it flags a minimal producer/consumer pair of named barriers that the PTX
  # rules make correct), so it checks the selective-scan forward's plain kernel, and synccheck
  # the barrier use of the warp-specialized one.
  SANITIZER_STATUS=""
  for tool in memcheck racecheck synccheck; do
    ts=$(date +%s)
    plain=0
    [ "$tool" = racecheck ] && plain=1
    PARPRIMS_NO_SPECIALIZED_FORWARD=$plain timeout "$(limit "${SANITIZER_TIMEOUT:-150}")" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 \
      python3 benchmarks/sanitizer_cases.py ${SANITIZER_ARGS:-} >>"$OUT/sanitizer.log" 2>&1
    rc=$?
    SANITIZER_STATUS="$SANITIZER_STATUS $tool rc=$rc ($(($(date +%s) - ts)) s);"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log" | tail -1
  done
  note "sanitizer:$SANITIZER_STATUS"
fi

if has_stage bench || has_stage selftest; then
  if [ "$SELFTEST" = "1" ] || has_stage selftest; then
    echo "== triton baselines self-test"
    timeout "$(limit 180)" python3 benchmarks/triton_baselines.py 2>&1 | tee -a "$OUT/bench.log" | tail -3
    note "triton self-test: rc=${PIPESTATUS[0]}"
  fi
fi

if has_stage bench; then
  scripts=(${BENCH_SCRIPTS:-bench_scan bench_affine_scan bench_selective_scan bench_compact bench_reduce bench_histogram})
  for i in "${!scripts[@]}"; do
    script=${scripts[$i]}
    echo "== $script (log: $OUT/bench.log)"
    tb=$(date +%s)
    left=$(limit 100000)
    share=$((left / (${#scripts[@]} - i)))  # an equal share of what is left
    blim=$BENCH_TIMEOUT
    [ "$share" -lt "$blim" ] && blim=$share
    if [ "$blim" -lt 45 ]; then
      note "$script: not run, only ${blim}s left (run again with STAGES=bench)"
      continue
    fi
    # shellcheck disable=SC2086
    eval timeout "$blim" python3 benchmarks/$script.py --device cuda --out "$OUT" \
      --budget-s $((blim - 20)) ${BENCH_ARGS:-} >>"$OUT/bench.log" 2>&1
    rc=$?
    note "$script: rc=$rc ($(($(date +%s) - tb)) s)"
    [ $rc -ne 0 ] && grep -E "Error|error" "$OUT/bench.log" | tail -5
  done
fi

if has_stage models; then
  echo "== bench_mamba_block (log: $OUT/bench_mamba_block.log)"
  tb=$(date +%s)
  timeout "$(limit "${MODELS_TIMEOUT:-150}")" python3 benchmarks/bench_mamba_block.py --device cuda \
    --out "$OUT/mamba-block.json" >"$OUT/bench_mamba_block.log" 2>&1
  note "bench_mamba_block: rc=$? ($(($(date +%s) - tb)) s)"
  tail -12 "$OUT/bench_mamba_block.log"
fi

if has_stage distributed; then
  echo "== distributed (log: $OUT/distributed.log)"
  gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  if [ "$gpus" -lt 2 ]; then
    note "distributed: not run, $gpus GPU(s)"
  else
    td=$(date +%s)
    timeout "$(limit "${DIST_TEST_TIMEOUT:-240}")" python3 -m pytest -q tests/test_distributed.py -k nccl \
      -p no:cacheprovider -rfE >"$OUT/distributed.log" 2>&1
    note "distributed tests (NCCL): rc=$? ($(($(date +%s) - td)) s): $(grep -E "passed|failed|error" "$OUT/distributed.log" | tail -1)"
    td=$(date +%s)
    # shellcheck disable=SC2086
    timeout "$(limit "${DIST_BENCH_TIMEOUT:-400}")" torchrun --nproc-per-node="$gpus" benchmarks/bench_distributed.py \
      --ops ${DIST_OPS:-affine affine-pipeline selective selective-pipeline} --out "$OUT" ${DIST_ARGS:-} \
      >>"$OUT/distributed.log" 2>&1
    note "bench_distributed: rc=$? ($(($(date +%s) - td)) s)"
    grep -E "^(op|affine|selective)" "$OUT/distributed.log" | tail -30
  fi
fi

rm -f "$OUT"/*.tmp
# the caller sees the last lines: the results table first, then the stage statuses
{
  for f in "$OUT"/*.json; do
    case "$f" in *mamba-block.json | */distributed-*.json) continue ;; esac  # not harness files; their tables are above
    [ -e "$f" ] && python3 benchmarks/harness.py --summarize "$f" --width "${SUMMARY_WIDTH:-125}"
  done
  echo "== stages ($(elapsed) s in all)"
  cat "$SUMMARY"
} >"$SUMMARY.new" 2>&1
mv "$SUMMARY.new" "$SUMMARY"
echo
cat "$SUMMARY"
echo "files in OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
