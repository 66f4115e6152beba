"""Where a selective-scan call's GPU time goes, kernel by kernel (torch.profiler).

Rows that cannot fill the GPU run in time segments: a summary pass (each segment's end state,
or the backward's state gradient, from zero), a combine pass, then the full pass from the
combined carries. This prints each pass's time, forward and forward+backward:

    python benchmarks/selective_scan_passes.py --shapes dense packed rows2 row1 --dtypes bfloat16
    PARPRIMS_TIME_SEGMENTS=8 python benchmarks/selective_scan_passes.py --shapes packed

Shapes (batch, dim, L, N = 16): dense (8, 1536, 2048), packed (1, 1536, 16384) in the sequences
of bench_selective_scan.py's packed row, rows2 (2, 1536, 16384), row1 (1, 2048, 65536). Inputs
as in bench_selective_scan.py: variable B and C, D, z, delta_bias, delta_softplus. Times are the
mean of --calls calls after three warm-up calls; `other` is torch's kernels (the gradient of
`out`, the sums of the per-block partial gradients).
"""
import argparse
import os
import re
import sys

import torch
from torch.profiler import ProfilerActivity, profile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]
import torch_parprims as pp  # noqa: E402
from bench_selective_scan import packed_lengths  # noqa: E402

SHAPES = {"dense": (8, 1536, 2048), "packed": (1, 1536, 16384), "rows2": (2, 1536, 16384), "row1": (1, 2048, 65536)}
PACKED_L0 = 256  # bench_selective_scan.py's shortest packed sequence at full size


def make_inputs(batch, dim, length, dtype, lengths=None, dstate=16):
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, dt=dtype):
        return torch.randn(*shape, device="cuda", dtype=dt, generator=g)

    u, delta, z = rand(batch, dim, length), rand(batch, dim, length) * 0.5 - 1, rand(batch, dim, length)
    A = -torch.rand(dim, dstate, device="cuda", generator=g) - 0.5
    B, C = rand(batch, dstate, length), rand(batch, dstate, length)
    D, delta_bias = rand(dim, dt=torch.float32), rand(dim, dt=torch.float32)
    cu_seqlens = None
    if lengths is not None:
        cu_seqlens = torch.tensor([0] + lengths, device="cuda").cumsum(0).to(torch.int32)
    return dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias, cu_seqlens=cu_seqlens)


def call(x, backward):
    grads_of = (x["u"], x["delta"], x["B"], x["C"], x["z"])
    for t in grads_of:
        t.requires_grad_(backward)
    out = pp.selective_scan_fn(x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"], x["z"], x["delta_bias"],
                               delta_softplus=True, cu_seqlens=x["cu_seqlens"])
    if backward:
        out.backward(torch.ones_like(out))
    for t in grads_of:
        t.grad = None


def pass_name(kernel):
    """fwd-full, fwd-summary, bwd-full, bwd-summary, combine or other."""
    m = re.search(r"selective_scan_(forward|backward)_kernel<[^,]+, [^,]+, (?:true|false), (true|false)", kernel)
    if m:
        return ("fwd" if m.group(1) == "forward" else "bwd") + ("-summary" if m.group(2) == "true" else "-full")
    return "combine" if "combine_segments" in kernel else "other"


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
            x = make_inputs(*SHAPES[shape], dtype, lengths if shape == "packed" else None)
            for backward in (False, True):
                times = pass_times(x, backward, args.calls)
                parts = "; ".join(f"{k} {v:.3f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
                mode = "fwd+bwd" if backward else "fwd"
                print(f"{segments} {dtype} {shape} {mode} total {sum(times.values()):.3f} ms: {parts}")


if __name__ == "__main__":
    main()
