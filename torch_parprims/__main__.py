"""The main job: ``python -m torch_parprims``.

1. Checks every op (scan for each operator, segmented_scan, affine_scan, matrix_affine_scan,
   check_offsets) against ``torch_parprims.reference``, the pure-PyTorch oracle, on the best
   available device.
2. Prints a benchmark table against the PyTorch equivalents: median milliseconds, GB/s of the
   bytes each op must move (inputs read once, outputs written once) and the speed-up.

Options: ``--device cpu|cuda``, ``--quick`` (small sizes, for smoke tests), ``--no-bench``,
``--no-check``. Exits 1 when a check fails.
"""
import argparse
import math
import statistics
import sys
import time
from typing import Callable, List, Optional, Tuple

import torch

import torch_parprims as pp
from torch_parprims import reference as ref
from torch_parprims.ops.scan import OPS

_TORCH_SCAN = {
    "add": torch.cumsum,
    "mul": torch.cumprod,
    "max": lambda x, dim: torch.cummax(x, dim).values,
    "min": lambda x, dim: torch.cummin(x, dim).values,
    "logaddexp": torch.logcumsumexp,
}


# ---- progress ---------------------------------------------------------------------------------


class Progress:
    """A tiny text progress bar on stderr: ``[#####.....] 5/10 label``."""

    def __init__(self, total: int, title: str, width: int = 30):
        self.total, self.title, self.width, self.done = max(total, 1), title, width, 0
        self.tty = sys.stderr.isatty()
        self._draw("")

    def step(self, label: str = ""):
        self.done += 1
        self._draw(label)

    def _draw(self, label: str):
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        line = f"{self.title} [{bar}] {self.done}/{self.total} {label}"
        if self.tty:
            sys.stderr.write("\r" + line[:100].ljust(100))
        elif self.done and (self.done == self.total or self.done % max(1, self.total // 4) == 0):
            sys.stderr.write(line + "\n")  # a log file gets a few plain lines, not \r noise
        sys.stderr.flush()

    def close(self):
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


# ---- correctness checks -----------------------------------------------------------------------


def _close(got, want, rtol, atol) -> Tuple[bool, float]:
    if isinstance(got, (tuple, list)):
        results = [_close(g, w, rtol, atol) for g, w in zip(got, want)]
        return all(ok for ok, _ in results), max((err for _, err in results), default=0.0)
    if got.shape != want.shape:
        return False, math.inf
    if not (got.is_floating_point() or got.is_complex()):
        return bool(torch.equal(got.cpu(), want.to(got.dtype).cpu())), 0.0
    g, w = got.cpu().to(want.dtype), want.cpu()
    ok = bool(torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True))
    finite = torch.isfinite(w) & torch.isfinite(g)
    err = float((g - w)[finite].abs().max()) if finite.any() else 0.0
    return ok, err


def _offsets(lengths: List[int], device) -> torch.Tensor:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int64, device=device)


def build_checks(device, quick: bool) -> List[Tuple[str, Callable[[], Tuple[bool, float]]]]:
    """(name, check) pairs; a check returns (passed, max abs error)."""
    gen = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape, dtype=torch.float64):
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device)

    def rand(*shape, dtype=torch.float64):
        return torch.rand(*shape, generator=gen, dtype=dtype).to(device)

    long_len = 20_011 if quick else 200_003
    checks = []

    def add(name, fn, rtol=1e-9, atol=1e-9):
        checks.append((name, lambda: _close(*fn(), rtol, atol)))

    for op in OPS:
        x = randn(3, 257)
        if op == "mul":
            x = 1 + 0.05 * x
        add(f"scan {op}", lambda x=x, op=op: (pp.scan(x, -1, op), ref.scan(x, -1, op)))
        add(f"scan {op} dim=0 exclusive",
            lambda x=x, op=op: (pp.scan(x, 0, op, exclusive=True), ref.scan(x, 0, op, exclusive=True)))
        add(f"scan {op} reverse", lambda x=x, op=op: (pp.scan(x, 1, op, reverse=True),
                                                      ref.scan(x, 1, op, reverse=True)))
        xf = x.float().t()  # float32, a non-contiguous view
        add(f"scan {op} float32 transposed", lambda xf=xf, op=op: (pp.scan(xf, 1, op), ref.scan(xf, 1, op)),
            rtol=1e-4, atol=1e-4)
    xn = randn(2, 100)
    xn[0, 10] = math.nan
    add("scan max propagates NaN", lambda: (pp.scan(xn, 1, "max"), ref.scan(xn, 1, "max")))
    xi = torch.randint(-100, 100, (4, 999), generator=gen, dtype=torch.int32).to(device)
    add("scan add int32 -> int64", lambda: (pp.scan(xi, 1), ref.scan(xi, 1, "add")))
    xl = torch.randint(-5, 6, (1, long_len), generator=gen, dtype=torch.int64).to(device)
    add(f"scan add long row (L={long_len}, exact)", lambda: (pp.scan(xl, 1), ref.scan(xl, 1, "add")))

    offsets = _offsets([5, 0, 17, 1, 0, 40, 3], device)
    total = int(offsets[-1])
    for op in OPS:
        x = randn(total, 4)
        if op == "mul":
            x = 1 + 0.05 * x
        add(f"segmented_scan {op}",
            lambda x=x, op=op: (pp.segmented_scan(x, offsets, 0, op), ref.segmented_scan(x, offsets, 0, op)))
    xs = randn(3, total)
    add("segmented_scan add exclusive reverse int32 offsets",
        lambda: (pp.segmented_scan(xs, offsets.int(), 1, "add", True, True),
                 ref.segmented_scan(xs, offsets, 1, "add", True, True)))

    a, b, h0 = rand(2, 3, 64), randn(2, 3, 64), randn(2, 3)
    add("affine_scan", lambda: (pp.affine_scan(a, b), ref.affine_scan(a, b, -1)))
    add("affine_scan initial_state reverse",
        lambda: (pp.affine_scan(a, b, -1, h0, reverse=True), ref.affine_scan(a, b, -1, h0, reverse=True)))
    la = -rand(1, 3, 64)  # log gates, broadcast over the batch
    add("affine_scan log_gates broadcast", lambda: (pp.affine_scan(la, b, log_gates=True),
                                                    ref.affine_scan(la, b, -1, log_gates=True)))
    ap, bp, hp = rand(total, 5), randn(total, 5), randn(offsets.numel() - 1, 5)
    add("affine_scan packed sequences",
        lambda: (pp.affine_scan(ap, bp, 0, hp, offsets), ref.affine_scan(ap, bp, 0, hp, offsets)))
    ac = torch.polar(rand(2, 50), 3 * randn(2, 50)).to(torch.complex128)
    bc = torch.complex(randn(2, 50), randn(2, 50))
    add("affine_scan complex", lambda: (pp.affine_scan(ac, bc), ref.affine_scan(ac, bc, -1)))

    A, bm = 0.5 * randn(2, 40, 3, 3), randn(2, 40, 3)
    add("matrix_affine_scan", lambda: (pp.matrix_affine_scan(A, bm), ref.matrix_affine_scan(A, bm)))
    Ap, bmp, hmp = 0.5 * randn(total, 2, 2), randn(total, 2), randn(offsets.numel() - 1, 2)
    add("matrix_affine_scan packed reverse",
        lambda: (pp.matrix_affine_scan(Ap, bmp, 0, hmp, offsets, reverse=True),
                 ref.matrix_affine_scan(Ap, bmp, 0, hmp, offsets, reverse=True)))

    def bad_offsets():
        pp.check_offsets(offsets, total)
        for bad in ([0, 5, 3, total], [0, total - 1], [1, total]):
            try:
                pp.check_offsets(torch.tensor(bad, device=device), total)
            except RuntimeError as e:
                if "offsets" not in str(e):
                    return False, math.inf
            else:
                return False, math.inf
        return True, 0.0

    checks.append(("check_offsets", bad_offsets))
    return checks


def run_checks(device, quick: bool) -> bool:
    checks = build_checks(device, quick)
    print(f"Correctness on {device} against torch_parprims.reference:")
    failures = []
    bar = Progress(len(checks), "checks")
    results = []
    for name, check in checks:
        try:
            ok, err = check()
        except Exception as e:  # noqa: BLE001 - a crash is a failed check, reported by name
            ok, err = False, math.inf
            name = f"{name} ({type(e).__name__}: {e})"
        results.append((name, ok, err))
        if not ok:
            failures.append(name)
        bar.step(name)
    bar.close()
    for name, ok, err in results:
        print(f"  {'ok  ' if ok else 'FAIL'}  {name:<52} max abs err {err:.2e}")
    print(f"{len(checks) - len(failures)} passed, {len(failures)} failed")
    return not failures


# ---- benchmarks -------------------------------------------------------------------------------


def median_ms(fn, device, quick: bool) -> float:
    """Median wall time of fn() in milliseconds (CUDA events on GPU, perf_counter on CPU)."""
    fn()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
        reps = 10 if quick else 30
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    budget = 0.05 if quick else 0.25
    reps = max(3, min(30, int(budget / max(once, 1e-6))))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _torch_segmented_cumsum(x, offsets):
    """Segmented cumsum in plain PyTorch: one cumsum minus the total before each sequence."""
    y = torch.cumsum(x, 0)
    lengths = offsets[1:] - offsets[:-1]
    before = torch.cat([y.new_zeros((1,) + y.shape[1:]), y])[offsets[:-1]]
    return y - torch.repeat_interleave(before, lengths, dim=0, output_size=x.size(0))


def _python_affine_loop(a, b):
    h = torch.zeros_like(b[..., 0])
    out = torch.empty_like(b)
    for t in range(b.size(-1)):
        h = a[..., t] * h + b[..., t]
        out[..., t] = h
    return out


def _python_matrix_loop(A, b):
    h = torch.zeros_like(b[:, 0])
    out = torch.empty_like(b)
    for t in range(b.size(1)):
        h = (A[:, t] @ h.unsqueeze(-1)).squeeze(-1) + b[:, t]
        out[:, t] = h
    return out


def build_benchmarks(device, quick: bool):
    """(op, shape, dtype, bytes moved, ours, baseline name, baseline)."""
    gpu = device.type == "cuda"
    rows, length = ((64, 1 << 18) if gpu else (8, 1 << 16)) if not quick else (4, 1 << 12)
    dtype = torch.float32
    size = torch.tensor([], dtype=dtype).element_size()
    x = torch.randn(rows, length, device=device, dtype=dtype)
    x_mul = 1 + 1e-4 * x
    benches = []
    shape = f"({rows}, {length})"
    for op in OPS:
        xin = x_mul if op == "mul" else x
        benches.append((f"scan {op}", shape, dtype, 2 * xin.numel() * size,
                        lambda xin=xin, op=op: pp.scan(xin, -1, op), f"torch.{_TORCH_SCAN[op].__name__}"
                        if op in ("add", "mul", "logaddexp") else f"torch.cum{op}",
                        lambda xin=xin, op=op: _TORCH_SCAN[op](xin, -1)))
    long_x = x.reshape(-1)
    benches.append(("scan add, one long row", f"({long_x.numel()},)", dtype, 2 * long_x.numel() * size,
                    lambda: pp.scan(long_x, 0), "torch.cumsum", lambda: torch.cumsum(long_x, 0)))
    xt = x.t()  # (length, rows) strided: scanning the time dim of a (T, C) layout
    benches.append(("scan add, strided dim", f"({length}, {rows}).T", dtype, 2 * xt.numel() * size,
                    lambda: pp.scan(xt, 0), "torch.cumsum", lambda: torch.cumsum(xt, 0)))

    # Packed variable-length sequences: (total, channels) with lengths 1..2*mean.
    gen = torch.Generator(device="cpu").manual_seed(1)
    mean_len = 64 if quick else 512
    total_target = rows * length // 16
    lengths = []
    while sum(lengths) < total_target:
        lengths.append(int(torch.randint(0, 2 * mean_len, (1,), generator=gen)))
    offsets = _offsets(lengths, device)
    packed = torch.randn(int(offsets[-1]), 16, device=device, dtype=dtype)
    benches.append(("segmented_scan add", f"({packed.size(0)}, 16), S={len(lengths)}", dtype,
                    2 * packed.numel() * size, lambda: pp.segmented_scan(packed, offsets, 0),
                    "torch cumsum-gather", lambda: _torch_segmented_cumsum(packed, offsets)))

    # Recurrences: the PyTorch equivalent is a Python loop over time, so keep T modest.
    B, C, T = (8, 256, 2048) if gpu else (4, 64, 512)
    if quick:
        B, C, T = 2, 16, 64
    a = torch.rand(B, C, T, device=device, dtype=dtype)
    b = torch.randn(B, C, T, device=device, dtype=dtype)
    benches.append(("affine_scan", f"({B}, {C}, {T})", dtype, 3 * b.numel() * size,
                    lambda: pp.affine_scan(a, b, -1), "python loop", lambda: _python_affine_loop(a, b)))
    d = 4
    A = 0.5 * torch.randn(B * 4, T, d, d, device=device, dtype=dtype)
    bm = torch.randn(B * 4, T, d, device=device, dtype=dtype)
    benches.append(("matrix_affine_scan d=4", f"({B * 4}, {T}, {d})", dtype,
                    (A.numel() + 2 * bm.numel()) * size, lambda: pp.matrix_affine_scan(A, bm),
                    "python loop", lambda: _python_matrix_loop(A, bm)))
    return benches


def run_benchmarks(device, quick: bool):
    benches = build_benchmarks(device, quick)
    bar = Progress(len(benches), "benchmarks")
    rows = []
    for name, shape, dtype, nbytes, ours, base_name, base in benches:
        t_ours = median_ms(ours, device, quick)
        t_base = median_ms(base, device, quick)
        rows.append((name, shape, str(dtype).replace("torch.", ""), t_ours, nbytes / t_ours / 1e6,
                     base_name, t_base, nbytes / t_base / 1e6, t_base / t_ours))
        bar.step(name)
    bar.close()
    head = ("op", "shape", "dtype", "parprims ms", "GB/s", "baseline", "baseline ms", "GB/s", "speed-up")
    table = [head] + [(r[0], r[1], r[2], f"{r[3]:.3f}", f"{r[4]:.1f}", r[5], f"{r[6]:.3f}", f"{r[7]:.1f}",
                       f"{r[8]:.2f}x") for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"\nBenchmarks on {name}{threads} (median; GB/s of the bytes each op must move):")
    for i, row in enumerate(table):
        print("  " + "  ".join(str(c).rjust(w) if j >= 3 and j != 5 else str(c).ljust(w)
                               for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_parprims", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda when available, else cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    parser.add_argument("--no-bench", action="store_true", help="skip the benchmarks")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is available", file=sys.stderr)
        return 2
    print(f"torch_parprims {pp.__version__} | torch {torch.__version__} | device {device}")
    ok = True
    if not args.no_check:
        ok = run_checks(device, args.quick)
    if not args.no_bench:
        run_benchmarks(device, args.quick)
    if not ok:
        print("\nSome checks FAILED (see above).")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
