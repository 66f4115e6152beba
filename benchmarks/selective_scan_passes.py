"""Where a selective-scan call's GPU time goes, kernel by kernel (torch.profiler).

Rows that cannot fill the GPU run in time segments: a summary pass (each segment's end state,
or the backward's state gradient, from zero), a combine pass, then the full pass from the
combined carries. This prints each pass's time, forward and forward+backward:

    python benchmarks/selective_scan_passes.py --shapes dense packed rows2 row1 --dtypes bfloat16
    PARPRIMS_TIME_SEGMENTS=8 python benchmarks/selective_scan_passes.py --shapes packed

Shapes (batch, dim, L, N = 16): dense (8, 1536, 2048), packed (1, 1536, 16384) in the sequences
of bench_selective_scan.py's packed row, rows2 (2, 1536, 16384), row1 (1, 2048, 65536). Inputs
and calls are bench_selective_scan.py's (variable B and C, D, z, delta_bias, delta_softplus;
fwd+bwd: the gradients of every input). Times are the mean of --calls calls after three warm-up
calls; `bwd-sums` is the kernel after the backward that adds its partial sums (the gradients of
A, B, C, D and delta_bias); `other` is torch's kernels (copies, casts). Kernels may overlap (a
packed row's full pass runs beside its summary when it folds the carries), so `wall`, the mean
time of a call between CUDA events, is the call's time; `total` sums the kernels' own times.
"""
import argparse
import os
import re
import sys
import types

import torch
from torch.profiler import ProfilerActivity, profile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]
from bench_selective_scan import SelectiveScan, offsets_of, packed_lengths  # noqa: E402

SHAPES = {"dense": (8, 1536, 2048), "packed": (1, 1536, 16384), "rows2": (2, 1536, 16384), "row1": (1, 2048, 65536)}
PACKED_L0 = 256  # bench_selective_scan.py's shortest packed sequence at full size
DSTATE = 16


def make_inputs(shape, dtype, lengths=None):
    """bench_selective_scan.py's inputs (gradients required, and a gradient of `out`)."""
    bench = SelectiveScan(types.SimpleNamespace(device="cuda", gpu=True, quick=False))
    offsets = offsets_of(lengths) if lengths is not None else None
    return bench.gen((*shape, DSTATE), dtype, seed=0, grad=True, offsets=offsets)


def call(x, backward):
    if backward:
        SelectiveScan.ours_fwd_bwd(x)
    else:
        with torch.no_grad():
            SelectiveScan.ours_fwd(x)


def pass_name(kernel):
    """fwd-full, fwd-summary, bwd-full, bwd-summary, bwd-sums, combine or other."""
    if "selective_scan_backward_sums_kernel" in kernel:
        return "bwd-sums"
    if "selective_scan_forward_specialized_kernel" in kernel:  # full passes only
        return "fwd-full"
    m = re.search(r"selective_scan_(forward|backward)_kernel<[^,]+, [^,]+, (?:true|false), (true|false)", kernel)
    if m:
        return ("fwd" if m.group(1) == "forward" else "bwd") + ("-summary" if m.group(2) == "true" else "-full")
    return "combine" if "combine_segments" in kernel else "other"


def wall_time(x, backward, calls):
    """The mean time of a call in ms, between CUDA events around `calls` calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call(x, backward)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def pass_times(x, backward, calls):
    for _ in range(3):
        call(x, backward)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call(x, backward)
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" and e.self_device_time_total > 0:
            name = pass_name(e.key)
            times[name] = times.get(name, 0.0) + e.self_device_time_total / calls / 1000
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["dense", "packed"], choices=sorted(SHAPES))
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    segments = os.environ.get("PARPRIMS_TIME_SEGMENTS", "default")
    lengths = packed_lengths(SHAPES["packed"][2], PACKED_L0)
    print(f"# {torch.cuda.get_device_name()}; segments: {segments}; packed lengths {lengths}")
    for dtype in (getattr(torch, d) for d in args.dtypes):
        for shape in args.shapes:
            x = make_inputs(SHAPES[shape], dtype, lengths if shape == "packed" else None)
            for backward in (False, True):
                times = pass_times(x, backward, args.calls)
                wall = wall_time(x, backward, args.calls)
                parts = "; ".join(f"{k} {v:.3f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
                mode = "fwd+bwd" if backward else "fwd"
                print(f"{segments} {dtype} {shape} {mode} wall {wall:.3f} ms, total {sum(times.values()):.3f}: {parts}")


if __name__ == "__main__":
    main()
