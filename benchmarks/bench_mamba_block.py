"""Benchmark of one ``torch_parprims.nn.Mamba`` block, forward + backward, in tokens/s.

Cases (full size; ``--quick`` shrinks everything to a CPU-sized smoke test):

* ``dense``: ``--tokens`` tokens as ``tokens // seqlen`` sequences of ``--seqlen`` (batch, L),
  d_model ``--d-model`` (d_inner 2x, N 16): the block with the library's fused scan, eager and
  under ``torch.compile``; and the whole selective scan alone on the block's shapes, to give its
  share of the block's time.
* ``reference``: the same block with the pure-PyTorch ``torch_parprims.reference.selective_scan``
  (a float64 loop over time whose autograd graph holds every step), on ``--reference-tokens``
  tokens in one sequence (its autograd graph would not fit the full batch); eager, and compiled
  with ``--compile-reference``. Compiling unrolls the loop over time: it took minutes for 128
  steps on a CPU, so pair it with a small ``--reference-tokens`` (256). The fused block runs on
  the same input, for the ratio.
* ``skewed``: about ``--tokens`` tokens in sequences whose lengths spread 10x (most short, a few
  long: log-uniform in [seqlen / 10, seqlen]), run packed (batch 1 with ``cu_seqlens``) and
  padded to the longest (batch S, no ``cu_seqlens``); tokens/s counts real tokens only. Eager
  and compiled.

Every case: forward + backward of ``out.sum()``-like loss (a fixed random output gradient), all
parameter gradients, after warm-up; the median of ``--reps`` timed calls, with a device
synchronize on either side; on CUDA the peak memory of one fwd+bwd (``max_memory_allocated``
after ``reset_peak_memory_stats``, minus what was allocated before).

Writes a JSON file (``--out``, default ``benchmarks/results/mamba-block-<device>.json``) with the
configuration, torch version, device name and one record per case, and prints a table.

    python benchmarks/bench_mamba_block.py                       # H200-sized, bf16
    python benchmarks/bench_mamba_block.py --quick --out /tmp/mamba-block.json   # a CPU smoke test
"""
import argparse
import json
import math
import os
import platform
import statistics
import time
import traceback

import torch

import torch_parprims as pp
from torch_parprims.nn import Mamba

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args(argv=None):
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--tokens", type=int, default=32768, help="tokens per batch")
    p.add_argument("--seqlen", type=int, default=2048, help="dense sequence length, and the longest of the skewed mix")
    p.add_argument("--reference-tokens", type=int, default=2048, help="tokens (one sequence) for the reference scan")
    p.add_argument("--compile-reference", action="store_true",
                   help="also compile the block with the reference scan (slow to compile: use a small --reference-tokens)")
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test that runs on a CPU in a minute")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: PyTorch's)")
    p.add_argument("--out", default=None, help="the JSON file to write")
    args = p.parse_args(argv)
    if args.quick:
        args.d_model, args.tokens, args.seqlen, args.reference_tokens = 64, 2048, 256, 128
        args.reps, args.warmup = 3, 1
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    if args.out is None:
        slug = torch.cuda.get_device_name(args.device).lower().replace(" ", "-") if args.device.startswith("cuda") \
            else "cpu"
        args.out = os.path.join(HERE, "results", f"mamba-block-{slug}{'-quick' if args.quick else ''}.json")
    return args


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def skewed_lengths(total: int, longest: int, generator) -> list:
    """Lengths log-uniform in [longest / 10, longest] (most short, a few long) summing to ~total."""
    lengths, low = [], max(1, longest // 10)
    while sum(lengths) < total:
        u = torch.rand((), generator=generator).item()
        lengths.append(int(round(math.exp(math.log(low) + u * (math.log(longest) - math.log(low))))))
    lengths[-1] -= sum(lengths) - total  # exactly `total` tokens
    return [n for n in lengths if n > 0]


def time_fwd_bwd(fn, inputs, device, reps, warmup):
    """Median ms of ``fn(*inputs)`` forward + backward, and the peak extra memory (CUDA)."""
    def once():
        out = fn(*inputs)
        out.backward(grad_of(out))

    grads = {}

    def grad_of(out):  # one fixed random gradient per output shape, made outside the timing
        if out.shape not in grads:
            grads[out.shape] = torch.randn_like(out)
        return grads[out.shape]

    for _ in range(warmup):
        once()
    sync(device)
    peak = None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        once()
        sync(device)
        peak = torch.cuda.max_memory_allocated(device) - before
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        once()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), peak


def block_runner(block, compiled):
    def run(x, cu_seqlens):
        return block(x, cu_seqlens=cu_seqlens)

    # dynamic=False: each case's shapes get their own specialized graph, as a training loop with
    # fixed shapes would, rather than one dynamic-shape graph shared by all cases.
    return torch.compile(run, fullgraph=True, dynamic=False) if compiled else run


def scan_alone_runner(block, batch, length, device, dtype):
    """The selective scan alone, on inputs laid out as the block gives them (time-contiguous:
    u and delta (batch, d_inner, L); z the second half of a (2 d_inner, batch, L) projection;
    B and C slices of a (batch, dt_rank + 2N, L) one), gradients to all."""
    d, n = block.d_inner, block.d_state

    def leaf(*shape, dt=dtype):
        return torch.randn(*shape, device=device, dtype=dt).requires_grad_()

    u, delta = leaf(batch, d, length), leaf(batch, d, length)
    z = leaf(2 * d, batch, length)[d:].transpose(0, 1)
    B, C = leaf(batch, n, length), leaf(batch, n, length)
    A, D, bias = leaf(d, n, dt=torch.float32), leaf(d, dt=torch.float32), leaf(d, dt=torch.float32)

    def run():
        return pp.selective_scan(u, delta, -torch.exp(A), B, C, D, z, bias, True)[0]

    return run


def record(results, case, impl, compiled, tokens, ms, peak, note=None):
    row = {"case": case, "impl": impl, "compiled": compiled, "tokens": tokens, "ms": round(ms, 4),
           "tokens_per_s": round(tokens / ms * 1e3, 1), "peak_memory_bytes": peak}
    if note:
        row["note"] = note
    results.append(row)
    mem = f"{peak / 2**30:7.2f} GiB" if peak is not None else "       -   "
    print(f"{case:10s} {impl:22s} {'compiled' if compiled else 'eager':8s} {tokens:>8d} tok "
          f"{ms:10.3f} ms {row['tokens_per_s']:>14,.0f} tok/s {mem}", flush=True)


def guarded(results, case, impl, compiled, tokens, measure):
    """Runs one measurement; a failure becomes a record with the error (the others still run)."""
    try:
        ms, peak = measure()
        record(results, case, impl, compiled, tokens, ms, peak)
    except Exception as e:  # noqa: BLE001 - report and carry on with the other cases
        traceback.print_exc()
        results.append({"case": case, "impl": impl, "compiled": compiled, "tokens": tokens,
                        "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def summarize(results) -> dict:
    """The ratios the benchmark is for (absent when a case failed or was not run)."""
    def rate(case, impl, compiled=False):
        for r in results:
            if (r["case"], r["impl"], r["compiled"]) == (case, impl, compiled) and "tokens_per_s" in r:
                return r["tokens_per_s"]
        return None

    def ratio(a, b):
        return round(a / b, 3) if a and b else None

    summary = {}
    dense, scan = rate("dense", "fused"), rate("dense", "selective_scan alone")
    summary["scan_share_of_block_time"] = ratio(dense, scan)  # = scan ms / block ms
    summary["fused_over_reference_eager"] = ratio(rate("reference", "fused"), rate("reference", "reference scan"))
    summary["fused_compiled_over_reference_compiled"] = ratio(rate("reference", "fused", True),
                                                              rate("reference", "reference scan", True))
    for compiled in (False, True):
        key = "compiled" if compiled else "eager"
        summary[f"packed_over_padded_{key}"] = ratio(rate("skewed", "fused packed", compiled),
                                                     rate("skewed", "fused padded", compiled))
        summary[f"packed_over_dense_{key}"] = ratio(rate("skewed", "fused packed", compiled),
                                                    rate("dense", "fused", compiled))
    return summary


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    block = Mamba(args.d_model, device=device).to(dtype)
    compile_modes = [False] + ([] if args.no_compile else [True])
    results = []
    timing = {"device": device, "reps": args.reps, "warmup": args.warmup}

    def x_of(batch, length):
        return torch.randn(batch, length, args.d_model, device=device, dtype=dtype, requires_grad=True)

    # dense batch, fused scan; and the scan alone on the same shapes
    batch = max(1, args.tokens // args.seqlen)
    dense_tokens = batch * args.seqlen
    x = x_of(batch, args.seqlen)
    for compiled in compile_modes:
        run = block_runner(block, compiled)
        guarded(results, "dense", "fused", compiled, dense_tokens, lambda: time_fwd_bwd(run, (x, None), **timing))
    scan = scan_alone_runner(block, batch, args.seqlen, device, dtype)
    guarded(results, "dense", "selective_scan alone", False, dense_tokens, lambda: time_fwd_bwd(scan, (), **timing))

    # the pure-PyTorch reference scan, on fewer tokens
    reference = Mamba(args.d_model, scan_impl="reference", device=device).to(dtype)
    reference.load_state_dict(block.state_dict())
    x_ref = x_of(1, args.reference_tokens)
    ref_timing = dict(timing, reps=min(args.reps, 3), warmup=1)
    for compiled in [False] + ([True] if args.compile_reference else []):
        run = block_runner(reference, compiled)
        guarded(results, "reference", "reference scan", compiled, args.reference_tokens,
                lambda: time_fwd_bwd(run, (x_ref, None), **ref_timing))
    for compiled in compile_modes:  # the fused block on the same small input, for a like-for-like ratio
        run = block_runner(block, compiled)
        guarded(results, "reference", "fused", compiled, args.reference_tokens,
                lambda: time_fwd_bwd(run, (x_ref, None), **timing))

    # a skewed length mix: packed against padded to the longest
    lengths = skewed_lengths(args.tokens, args.seqlen, generator)
    total = sum(lengths)
    cu_seqlens = torch.tensor([0] + lengths, device=device).cumsum(0).to(torch.int32)
    x_packed = x_of(1, total)
    x_padded = x_of(len(lengths), max(lengths))
    for compiled in compile_modes:
        run = block_runner(block, compiled)
        guarded(results, "skewed", "fused packed", compiled, total,
                lambda: time_fwd_bwd(run, (x_packed, cu_seqlens), **timing))
        guarded(results, "skewed", "fused padded", compiled, total,
                lambda: time_fwd_bwd(run, (x_padded, None), **timing))

    report = {
        "summary": summarize(results),
        "script": "bench_mamba_block.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "torch_parprims": pp.__version__,
        "config": {"d_model": args.d_model, "d_inner": block.d_inner, "d_state": block.d_state,
                   "dtype": args.dtype, "tokens": args.tokens, "seqlen": args.seqlen, "dense_batch": batch,
                   "reference_tokens": args.reference_tokens, "skewed_sequences": len(lengths),
                   "skewed_longest": max(lengths), "skewed_shortest": min(lengths), "quick": args.quick,
                   "threads": torch.get_num_threads()},
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
