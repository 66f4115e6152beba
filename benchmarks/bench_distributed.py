"""Strong scaling of ``torch_parprims.distributed.affine_scan`` and ``selective_scan``: one long
sequence split along time across the ranks of a process group, against the whole sequence on
one device.

Launch with torchrun, one process per GPU (NCCL), or on the CPU with gloo::

    torchrun --nproc-per-node=2 benchmarks/bench_distributed.py
    torchrun --nproc-per-node=2 benchmarks/bench_distributed.py --device cpu --quick   # smoke test
    python benchmarks/bench_distributed.py --device cpu --quick                       # one process

Cases (``--ops``, both by default):

* ``affine``: ``(B, C, T) = (1, 2048, 2^22)`` float32 along the last dim (each of a, b, h is
  32 GiB whole; ``--quick``: ``(1, 8, 2^12)``), gates in [0.9, 1); for comparison also the
  forward of the other scheme, a send/recv chain of states from rank to rank
  (``chain_affine_scan``); ``affine-pipeline``: the same with ``schedule="pipeline"`` (groups
  of channels: on a GPU as many as keep two channels a multiprocessor, 7 on an H200 at 2048).
* ``selective``: ``(batch, dim, L, N) = (1, 2048, 2^18, 16)`` float32, variable B and C
  (``--quick``: ``(1, 8, 2^12, 4)``); ``selective-pipeline``: the same with
  ``schedule="pipeline"`` (8 groups of channels).

Modes ``forward`` and ``forward+backward`` (the gradient of the output is an input of its
size). Every rank generates its own slice from a formula of the (time, channel) position, so
the split data is exactly the whole sequence's.

Also, per mode, the op on each rank's slice alone (``slice alone``: no carry, no collective),
which is what one pass of the distributed scheme costs.

Per mode: the median time over ``--reps`` calls (each call between a barrier and a device
synchronize; the slowest rank's median), the peak memory of each rank (the largest, on CUDA),
and on rank 0 the same op on the whole sequence on one device (skipped, or "oom", when it does
not fit), with the speedup and the relative error of the distributed final state against it.
``--longest`` also doubles the length from a sixteenth of the given one (to 8 times it) until
forward+backward no longer fits, on one device and across the group (a distributed size is
tried only when the peak of the last one, scaled, is predicted to fit: a rank that runs out of
memory inside a collective would leave the others waiting).

Writes ``<out>/distributed-<device slug>-<world>ranks.json`` (rank 0) and prints a table.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402

import torch_parprims as pp  # noqa: E402

GiB = 1 << 30


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ops", nargs="+", choices=sorted(OPS), default=sorted(OPS))
    p.add_argument("--quick", action="store_true", help="small shapes: a smoke test")
    p.add_argument("--reps", type=int, default=None, help="timed calls per mode (default 10, quick 3)")
    p.add_argument("--no-baseline", action="store_true", help="skip the whole sequence on one device")
    p.add_argument("--longest", action="store_true", help="search the longest length that fits, 1 device vs the group")
    p.add_argument("--out", default=harness.RESULTS_DIR)
    args = p.parse_args(argv)
    args.reps = args.reps or (3 if args.quick else 10)
    return args


# ---- the process group ----------------------------------------------------------------------


def init_group(device_kind):
    """torchrun's environment, or a one-process group when launched with plain python."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device_kind == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")
    return device


def slowest(value: float) -> float:
    """The largest value over the ranks (a time, a memory peak)."""
    t = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- inputs and the timed calls ----------------------------------------------------------------


def _phase(C, start, stop, device):
    """(1, C, stop - start): a formula of (channel, time), the same whole sequence for any split."""
    t = torch.arange(start, stop, device=device, dtype=torch.float32)
    c = torch.arange(C, device=device, dtype=torch.float32)
    return (t * 0.37).view(1, 1, -1) + (c * 1.3).view(1, -1, 1)


def affine_inputs(shape, start, stop, device):
    """a, b for time steps [start, stop); gates in [0.9, 1)."""
    B, C, _ = shape
    phase = _phase(C, start, stop, device).expand(B, C, stop - start)
    return [phase.cos().mul_(0.05).add_(0.95), phase.sin()]  # materialized (B, C, L) each


def selective_inputs(shape, start, stop, device):
    """u, delta, A, B, C (variable B and C) for time steps [start, stop)."""
    batch, dim, _, N = shape
    phase = _phase(dim, start, stop, device).expand(batch, dim, stop - start)
    u = phase.sin()
    delta = phase.cos().mul_(0.02).add_(0.03)
    A = -torch.linspace(0.5, 1.5, dim * N, device=device).view(dim, N)
    state_phase = _phase(N, start, stop, device).expand(batch, N, stop - start)
    return [u, delta, A, state_phase.sin().contiguous(), state_phase.mul(0.7).cos()]


# Per op: the full shape (and the quick one), where its length is, its inputs, the op on one
# device and across the group, and which inputs are split along time (and get gradients).
OPS = {
    "affine": dict(shape=(1, 2048, 1 << 22), quick=(1, 8, 1 << 12), length_at=2, inputs=affine_inputs,
                   local=lambda x: pp.affine_scan(*x), split=lambda x: pp.distributed.affine_scan(*x), timed=(0, 1)),
    # The pipeline schedule: each slice read once, in groups of channels whose scans write into
    # the output in place.
    "affine-pipeline": dict(shape=(1, 2048, 1 << 22), quick=(1, 8, 1 << 12), length_at=2, inputs=affine_inputs,
                            local=lambda x: pp.affine_scan(*x),
                            split=lambda x: pp.distributed.affine_scan(*x, schedule="pipeline"), timed=(0, 1)),
    "selective": dict(shape=(1, 2048, 1 << 18, 16), quick=(1, 8, 1 << 12, 4), length_at=2, inputs=selective_inputs,
                      local=lambda x: pp.selective_scan(*x), split=lambda x: pp.distributed.selective_scan(*x),
                      timed=(0, 1, 3, 4)),
    # The same, with the pipeline schedule (every slice scanned once, in groups of channels).
    "selective-pipeline": dict(shape=(1, 2048, 1 << 18, 16), quick=(1, 8, 1 << 12, 4), length_at=2,
                               inputs=selective_inputs, local=lambda x: pp.selective_scan(*x),
                               split=lambda x: pp.distributed.selective_scan(*x, schedule="pipeline"),
                               timed=(0, 1, 3, 4)),
}


def forward(scan, inputs, timed):
    with torch.no_grad():
        return scan(inputs)[1]


def forward_backward(scan, inputs, timed):
    for i in timed:
        inputs[i].requires_grad_(True)
    out, final = scan(inputs)
    torch.autograd.backward(out, inputs[0].detach())  # the gradient of out: any array of out's size
    del out
    for i in timed:
        inputs[i].grad = None
        inputs[i].requires_grad_(False)
    return final.detach()


MODES = {"fwd": forward, "fwd+bwd": forward_backward}


def measure(scan, mode, inputs, timed, reps, device, collective):
    """(median ms, peak GiB or None, final state). `collective`: every rank runs it, so time
    between barriers and report the slowest rank."""
    fn = MODES[mode]
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    final = fn(scan, inputs, timed)  # warm-up, and the peak memory
    peak = torch.cuda.max_memory_allocated(device) / GiB if device.type == "cuda" else None
    times = []
    for _ in range(reps):
        if collective:
            dist.barrier()
        synchronize(device)
        t0 = time.perf_counter()
        fn(scan, inputs, timed)
        synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    if collective:
        ms = slowest(ms)
        peak = slowest(peak) if peak is not None else None
    return ms, peak, final


def is_oom(e):
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()


# ---- the cases --------------------------------------------------------------------------------


def with_length(shape, op, length):
    shape = list(shape)
    shape[OPS[op]["length_at"]] = length
    return shape


def slice_inputs(op, shape, device):
    """This rank's slice of the whole sequence's inputs."""
    rank, world = dist.get_rank(), dist.get_world_size()
    T = shape[OPS[op]["length_at"]]
    return OPS[op]["inputs"](shape, T * rank // world, T * (rank + 1) // world, device)


def one_device(op, shape, device, reps):
    """{mode: (ms, peak, final) or "oom"} for the whole sequence on this device (rank 0)."""
    spec, out = OPS[op], {}
    for mode in MODES:
        inputs = None
        try:
            inputs = spec["inputs"](shape, 0, shape[spec["length_at"]], device)
            out[mode] = measure(spec["local"], mode, inputs, spec["timed"], reps, device, collective=False)
        except (RuntimeError, torch.OutOfMemoryError) as e:
            if not is_oom(e):
                raise
            out[mode] = "oom"
        del inputs
    return out


def chain_affine_scan(inputs):
    """The other scheme, for comparison (forward only): a chain of point-to-point messages, each
    rank waiting for the state of the rank before it and scanning its slice once from there.
    Its final state is global on the last rank only."""
    a, b = inputs
    rank, world = dist.get_rank(), dist.get_world_size()
    carry = None
    if rank > 0:
        carry = b.new_empty(b.shape[:-1])
        dist.recv(carry, src=rank - 1)
    h, final = pp.affine_scan(a, b, -1, carry)
    if rank < world - 1:
        dist.send(final.contiguous(), dst=rank + 1)
    return h, final


CHAIN = "fwd, send/recv chain"
ALONE = "slice alone"


def split(op, shape, device, reps):
    """{label: (ms, peak, final)} of the distributed op (and the affine chain) on this rank's slice."""
    spec = OPS[op]
    inputs = slice_inputs(op, shape, device)
    out = {mode: measure(spec["split"], mode, inputs, spec["timed"], reps, device, collective=True) for mode in MODES}
    if op == "affine" and dist.get_world_size() > 1:
        out[CHAIN] = measure(chain_affine_scan, "fwd", inputs, spec["timed"], reps, device, collective=True)
    # Where the time goes: the library's op on each rank's slice alone (no carry, no
    # collective), what one pass of the distributed scheme costs.
    for mode in MODES:
        out[f"{mode}, {ALONE}"] = measure(spec["local"], mode, inputs, spec["timed"], reps, device, collective=True)
    del inputs
    return out


def strong_scaling(op, shape, args, device):
    rank, world = dist.get_rank(), dist.get_world_size()
    baseline = {}
    if rank == 0 and not args.no_baseline:
        baseline = one_device(op, shape, device, args.reps)
    dist.barrier()
    distributed = split(op, shape, device, args.reps)
    rows = []
    for mode, (ms, peak, final) in distributed.items():
        row = {"op": op, "mode": mode, "shape": list(shape), "dtype": "float32", "ranks": world, "ms": ms,
               "peak_gib_per_rank": peak}
        base = baseline.get(mode.split(",")[0])
        if base == "oom":
            row["one_device"] = "oom"
        elif base is not None:
            base_ms, base_peak, base_final = base
            row.update(one_device_ms=base_ms, one_device_peak_gib=base_peak, speedup=base_ms / ms)
            if mode in MODES:  # the others' final states are not the global one on every rank
                err = (final - base_final).abs().max() / base_final.abs().max().clamp_min(1e-30)
                row["final_state_rel_err"] = err.item()
        rows.append(row)
    return rows


def fits(op, scan_fn, shape, start, stop, device):
    inputs = None
    try:
        inputs = OPS[op]["inputs"](shape, start, stop, device)
        forward_backward(scan_fn, inputs, OPS[op]["timed"])
        synchronize(device)
        return True
    except (RuntimeError, torch.OutOfMemoryError) as e:
        if not is_oom(e):
            raise
        return False
    finally:
        del inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()


def longest(op, shape, device, doublings=8):
    """The longest of T/16, T/8, ..., 8T that forward+backward runs on, one device and all."""
    spec = OPS[op]
    T = shape[spec["length_at"]]
    rank, world = dist.get_rank(), dist.get_world_size()
    lengths = [max(1, T >> 4) << k for k in range(doublings)]
    # A length equal to searched_up_to_T may not be the limit: the search stopped there.
    result = {"op": op, "mode": "fwd+bwd", "shape": list(shape), "ranks": world, "searched_up_to_T": lengths[-1]}
    if rank == 0:
        length = None
        for n in lengths:
            if not fits(op, spec["local"], with_length(shape, op, n), 0, n, device):
                break
            length = n
        result["one_device_longest_T"] = length
    dist.barrier()
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    length, peak = None, None
    for n in lengths:
        if peak is not None and total is not None and slowest(2 * peak) > 0.92 * total:
            break  # predicted not to fit: see the module docstring
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        ok = fits(op, spec["split"], with_length(shape, op, n), n * rank // world, n * (rank + 1) // world, device)
        if slowest(0.0 if ok else 1.0) > 0:
            break
        length = n
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    result["distributed_longest_T"] = length
    return result


def print_table(rows):
    print(f"{'op':18} {'mode':31} {'shape':>20} {'ranks':>5} {'ms':>10} {'1-dev ms':>10} {'speedup':>8} "
          f"{'GiB/rank':>9} {'1-dev GiB':>9} {'final err':>9}")
    for r in rows:
        def f(key, fmt):
            if key.startswith("one_device") and r.get("one_device") == "oom":
                return "oom"
            return "-" if r.get(key) is None else format(r[key], fmt)

        print(f"{r['op']:18} {r['mode']:31} {harness.shape_str(r['shape']):>20} {r['ranks']:>5} {r['ms']:>10.3f} "
              f"{f('one_device_ms', '.3f'):>10} {f('speedup', '.2f'):>8} {f('peak_gib_per_rank', '.2f'):>9} "
              f"{f('one_device_peak_gib', '.2f'):>9} {f('final_state_rel_err', '.1e'):>9}")


def main(argv=None):
    args = parse_args(argv)
    device = init_group(args.device)
    try:
        record = {"script": "bench_distributed", "device": harness.device_slug(args.device),
                  "backend": dist.get_backend(), "ranks": dist.get_world_size(), "rows": [], "longest": []}
        for op in args.ops:
            shape = OPS[op]["quick" if args.quick else "shape"]
            record["rows"] += strong_scaling(op, shape, args, device)
            if args.longest:
                record["longest"].append(longest(op, shape, device))
        if dist.get_rank() == 0:
            print_table(record["rows"])
            for result in record["longest"]:
                print("longest:", result)
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, f"distributed-{record['device']}-{record['ranks']}ranks.json")
            with open(path, "w") as f:
                json.dump(record, f, indent=1)
            print("wrote", path)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
