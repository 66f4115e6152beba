"""Where a segment reduction's GPU time goes, kernel by kernel (torch.profiler).

A CUDA `segment_reduce` fills its output with the empty result, may find each piece's first
sequence (`piece_segments_kernel`), runs one pass over the input (the stream, tile or columns
pass) and a fix-up of the sequences that cross pieces. This prints each kernel's time for the
rows of bench_reduce.py, with the call's time, torch's and a copy's from the same run:

    python benchmarks/segment_reduce_passes.py
    python benchmarks/segment_reduce_passes.py --rows features features-bf16 --calls 50

Rows (bench_reduce.py's inputs): random (2^26 float32 in 65536 random-length sequences, sum;
random-max the same with max), huge (one sequence of half the elements and 65535 tiny ones),
features ((2^20, 64) float32 along dim 0 in 65536 sequences; features-bf16 in bfloat16),
pooling (masked mean of a padded (32, 4096, 1024) bfloat16 batch over dim 1). Kernel times are
means over --calls calls after five warm-up calls; a kernel launched as a dependent of the one
before it starts before that one ends, so the kernels' times can add up to more than the call's.
"""
import argparse
import os
import sys
import types

import torch
from torch.profiler import ProfilerActivity, profile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]
import torch_parprims as pp  # noqa: E402
from bench_reduce import Reduce  # noqa: E402

N, SEQUENCES, FEATURES = 1 << 26, 1 << 16, 64
POOLED = (32, 4096, 1024)


def pooling_inputs(dev):
    g = torch.Generator().manual_seed(4000)
    batch, seqlen, hidden = POOLED
    h = torch.randn(POOLED, generator=g).to(device=dev, dtype=torch.bfloat16)
    lengths = torch.randint(1, seqlen + 1, (batch,), generator=g).to(dev)
    mask = torch.arange(seqlen, device=dev)[None, :] < lengths[:, None]
    return h, mask[..., None]


def rows(bench):
    """name -> (our call, torch's call, bytes moved), each built on first use."""
    def segment(op, features=(), dtype=torch.float32, huge=False):
        def build():
            n = N // FEATURES if features else N
            s = bench.gen(n, SEQUENCES, 0, features=features, huge=huge)
            x, offsets = s["x"].to(dtype), s["offsets"]
            nbytes = x.numel() * x.element_size() + offsets.numel() * 8 + SEQUENCES * x[0].numel() * x.element_size()
            return (lambda: pp.segment_reduce(x, offsets, op),
                    lambda: torch.segment_reduce(x, op, offsets=offsets, axis=0), nbytes)
        return build

    def pooling():
        h, mask = pooling_inputs(bench.dev)
        lengths = mask.sum(1)
        nbytes = h.numel() * 2 + mask.numel() + POOLED[0] * POOLED[2] * 2
        return (lambda: pp.reduce(h, 1, "mean", mask),
                lambda: ((h * mask).sum(1) / lengths).to(torch.bfloat16), nbytes)

    return {"random": segment("sum"), "random-max": segment("max"), "huge": segment("sum", huge=True),
            "features": segment("sum", (FEATURES,)), "features-bf16": segment("sum", (FEATURES,), torch.bfloat16),
            "pooling": pooling}


def event_time_us(fn, calls):
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def kernel_times_us(fn, calls):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" and e.self_device_time_total > 0:
            name = e.key.split("<")[0].split("(")[0].replace("void ", "").replace("parprims::cuda::", "")
            times[name] = times.get(name, 0.0) + e.self_device_time_total / calls
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", nargs="+", default=["random", "random-max", "huge", "features", "pooling"],
                    choices=["random", "random-max", "huge", "features", "features-bf16", "pooling"])
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    bench = Reduce(types.SimpleNamespace(device="cuda", gpu=True, quick=False))
    big = torch.empty(N, device="cuda")
    copy_us = event_time_us(big.clone, args.calls)
    copy_rate = 2 * big.numel() * 4 / copy_us  # bytes a microsecond, read + write
    print(f"# {torch.cuda.get_device_name()}; copy {copy_rate / 1e3:.0f} GB/s (read + write)")
    table = rows(bench)
    for name in args.rows:
        ours, theirs, nbytes = table[name]()
        ours_us, theirs_us = event_time_us(ours, args.calls), event_time_us(theirs, args.calls)
        parts = "; ".join(f"{k} {v:.1f}" for k, v in sorted(kernel_times_us(ours, args.calls).items(),
                                                            key=lambda kv: -kv[1]))
        print(f"{name}: {ours_us:.1f} us ({nbytes / ours_us / copy_rate:.2f} of copy), torch {theirs_us:.1f} us | "
              f"{parts}")


if __name__ == "__main__":
    main()
