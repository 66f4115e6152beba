"""Benchmarks of ``scan`` and ``segmented_scan``: every scan row of benchmarks/TARGETS.md.

Rows (GPU sizes; ``--device cpu`` divides them by about 2^6, ``--quick`` by 2^4 more):
* add, 1-D 2^28 float32, against torch.cumsum; 1-D 2^28 int32 -> int64 against torch.cumsum.
* add along the last dim of (12288, 2048), (65536, 256), (64, 2^20), float32 and bfloat16.
* max, min, mul, logaddexp at the same shapes (1-D in float32) against torch.cummax, cummin,
  cumprod, logcumsumexp. torch.cummax/cummin on the 1-D 2^28 GPU case take ~750 ms a call
  (benchmarks/TARGETS.md) and are not timed unless ``--slow-baselines`` (then once).
* segmented add: 2^26 elements in 2^16 sequences of random length (0 to ~2k, fixed to sum to
  2^26), and 1 sequence of 2^25 plus 10^5 sequences of length 1-8, against (a) a Python loop over
  the sequences calling torch.cumsum (timed in full when one pass is estimated under 10 s, else
  extrapolated from a timed sample: the record says which) and (b) torch.cumsum over the batch
  padded to the longest sequence (only the cumsum is timed; the padding cost is in the notes).
* backward: the reverse scan (``reverse=True``, what the backward of add runs) as its own rows,
  against flip-cumsum-flip; forward+backward through autograd for add at every shape and for the
  other ops at (12288, 2048).

Ideal bytes: forward and reverse scans read x once and write y once (int32 in, int64 out);
segmented scans add the offsets. Forward+backward: add moves 4 arrays (read x, write y; read
grad_y, write grad_x); max, min, mul and logaddexp 5 (their backward also re-reads x).
"""
import math
import os
import sys
import time

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402
from harness import Timing, rel_err  # noqa: E402

import torch_parprims as pp  # noqa: E402

OPS = ("max", "min", "mul", "logaddexp")
TORCH_OP = {"add": "torch.cumsum", "max": "torch.cummax", "min": "torch.cummin", "mul": "torch.cumprod",
            "logaddexp": "torch.logcumsumexp"}


def torch_scan(x, dim, op):
    if op == "add":
        return torch.cumsum(x, dim)
    if op == "max":
        return torch.cummax(x, dim)[0]
    if op == "min":
        return torch.cummin(x, dim)[0]
    if op == "mul":
        return torch.cumprod(x, dim)
    if op == "logaddexp":
        return torch.logcumsumexp(x, dim)
    raise ValueError(op)


# ---- float64 references -----------------------------------------------------------------------

_IDENTITY = {"add": 0.0, "mul": 1.0, "max": float("-inf"), "min": float("inf"), "logaddexp": float("-inf")}
_COMBINE = {"add": torch.add, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum,
            "logaddexp": torch.logaddexp}


def ref_scan(x, dim, op, reverse=False):
    """Inclusive scan in float64 (int64 for integer add) along ``dim``. Long rows go through two
    levels (rows of 4096, then the carries), since torch's cummax is very slow on long 1-D rows."""
    if not x.dtype.is_floating_point:
        y = x.long()
        y = y.flip(dim) if reverse else y
        y = y.cumsum(dim)
        return y.flip(dim) if reverse else y
    y = x.detach().double()
    if reverse:
        y = y.flip(dim)
    y = _two_level(y.movedim(dim, -1), op).movedim(-1, dim)
    return y.flip(dim) if reverse else y


def _two_level(x, op, C=4096):
    L = x.shape[-1]
    if L <= 2 * C:
        return torch_scan(x, -1, op)
    R = math.ceil(L / C)
    pad = R * C - L
    if pad:
        x = torch.cat([x, x.new_full(x.shape[:-1] + (pad,), _IDENTITY[op])], -1)
    y = torch_scan(x.reshape(x.shape[:-1] + (R, C)), -1, op)
    tot = torch_scan(y[..., -1], -1, op)  # inclusive over the rows
    carry = torch.cat([tot.new_full(tot.shape[:-1] + (1,), _IDENTITY[op]), tot[..., :-1]], -1)
    y = _COMBINE[op](carry.unsqueeze(-1), y)
    return y.reshape(x.shape)[..., :L]


def ref_segmented_add(x, offsets, reverse=False):
    """Segmented inclusive add in float64 of 1-D packed x."""
    x64 = x.detach().double()
    lengths = (offsets[1:] - offsets[:-1]).long()
    seg = torch.repeat_interleave(torch.arange(lengths.numel(), device=x.device), lengths)
    cs = torch.cat([x64.new_zeros(1), x64.cumsum(0)])
    if not reverse:
        return cs[1:] - cs[offsets[:-1].long()][seg]
    return cs[offsets[1:].long()][seg] - cs[:-1]


# ---- sizes ------------------------------------------------------------------------------------


def sizes(h):
    """(1-D length, 2-D shapes, (segA total, segA count, segA max length), (segB big, segB tiny count))."""
    if h.gpu and not h.quick:
        return 1 << 28, [(12288, 2048), (65536, 256), (64, 1 << 20)], (1 << 26, 1 << 16, 2048), (1 << 25, 100000)
    if h.gpu:
        return 1 << 24, [(768, 2048), (4096, 256), (4, 1 << 20)], (1 << 22, 1 << 12, 2048), (1 << 21, 6250)
    if not h.quick:
        return 1 << 22, [(192, 2048), (1024, 256), (8, 1 << 17)], (1 << 20, 1 << 10, 2048), (1 << 19, 1563)
    return 1 << 18, [(48, 2048), (256, 256), (4, 1 << 15)], (1 << 16, 64, 2048), (1 << 15, 100)


# benchmarks/TARGETS.md, GPU (H200) rows: (target fraction, best today by dtype)
FWD_TARGETS = {
    "1d": (0.90, "CUB DeviceScan 0.691 ms; torch.cumsum 0.83 ms"),
    "int": (0.85, "torch.cumsum 2.42 ms"),
    (12288, 2048): (0.85, {"float32": "torch.cumsum 0.129 ms", "bfloat16": "torch.cumsum 0.119 ms"}),
    (65536, 256): (0.85, {"float32": "torch.cumsum 0.074 ms", "bfloat16": "torch.cumsum 0.069 ms"}),
    (64, 1 << 20): (0.85, {"float32": "torch.cumsum 1.66 ms", "bfloat16": "torch.cumsum 1.62 ms"}),
}
OPS_BEST = ("torch.cummax 1-D 2^28: 751 ms; (12288, 2048): 0.227 ms; logcumsumexp 0.02-0.25 of ideal; "
            "cumprod as cumsum")


class Scan:
    def __init__(self, h, slow_baselines=False):
        self.h = h
        self.dev = h.device
        self.full = h.gpu and not h.quick
        self.slow_baselines = slow_baselines

    def target(self, key, dtype=None, op="add"):
        if not self.full:
            return {}
        if op != "add":
            return {"target": "fraction >= 0.80", "target_frac": 0.80, "best_today": OPS_BEST}
        frac, best = FWD_TARGETS[key]
        if isinstance(best, dict):
            best = best.get(harness.dtype_name(dtype))
        return {"target": f"fraction >= {frac:.2f}", "target_frac": frac, "best_today": best}

    def gen(self, shape, dtype, op, seed, grad=False):
        g = torch.Generator(device=self.dev)
        g.manual_seed(1000 + seed)
        if not dtype.is_floating_point:
            return torch.randint(-100, 100, shape, generator=g, device=self.dev, dtype=dtype)
        x = torch.randn(shape, generator=g, device=self.dev)
        if op == "mul":
            L = shape[-1]
            x = torch.exp(x * min(1e-2, 16.0 / math.sqrt(L)))  # log-products stay well inside the range
        x = x.to(dtype)
        if grad:
            x.requires_grad_(True)
        return x

    def tol(self, dtype, L):
        """Check tolerance: the dtype's, widened for long rows (rounding grows with the length)."""
        return harness.tolerance(dtype) * max(1.0, math.sqrt(L / 4096))

    # -- forward rows --

    def forward(self, op, shape, dtype, case, tkey):
        h = self.h
        dim = -1
        esize = torch.empty((), dtype=dtype).element_size()
        out_dtype = torch.int64 if (op == "add" and not dtype.is_floating_point) else dtype
        osize = torch.empty((), dtype=out_dtype).element_size()
        numel = math.prod(shape)
        nbytes = numel * (esize + osize)

        def make(i):
            return {"x": self.gen(shape, dtype, op, i)}

        def check(s, out):
            return rel_err(out, ref_scan(s["x"], dim, op)), "float64 two-level scan" if dtype.is_floating_point else "int64 cumsum"

        base_name = TORCH_OP[op]
        base = {"fn": lambda s: torch_scan(s["x"], dim, op), "check": True}
        if op in ("max", "min") and len(shape) == 1 and self.full:
            if self.slow_baselines:
                base = {"fn": base["fn"], "reps": 1, "note": "one timed call (very slow on 1-D)"}
            else:
                base = {"skip": f"{base_name} on 1-D 2^28 takes ~751 ms a call on an H200 (benchmarks/TARGETS.md); "
                                "not timed (--slow-baselines times it once)"}
        notes = ["int32 in, int64 out (as torch.cumsum)"] if not dtype.is_floating_point else []
        return h.bench(f"scan:{op}", case, shape, dtype, nbytes, make, ours=lambda s: pp.scan(s["x"], dim, op),
                       baselines={base_name: base, "same-bytes copy": harness.same_bytes_copy(
                           lambda s: s["x"].to(out_dtype, copy=True))},
                       check=check, out_bytes=numel * osize, notes=notes,
                       check_tol=self.tol(dtype, shape[-1]), **self.target(tkey, dtype, op))

    def reverse(self, shape, dtype, tkey):
        h = self.h
        dim = -1
        numel = math.prod(shape)
        esize = torch.empty((), dtype=dtype).element_size()

        def make(i):
            return {"x": self.gen(shape, dtype, "add", i)}

        def check(s, out):
            return rel_err(out, ref_scan(s["x"], dim, "add", reverse=True)), "float64 reverse scan"

        def flip_cumsum(s):
            return torch.flip(torch.cumsum(torch.flip(s["x"], [dim]), dim), [dim])

        t = self.target(tkey, dtype)
        if t:
            t["target"] = f"the forward's fraction ({t['target_frac']:.2f})"
        return h.bench("scan:add", "reverse", shape, dtype, numel * 2 * esize, make,
                       ours=lambda s: pp.scan(s["x"], dim, "add", False, True),
                       baselines={"flip+cumsum+flip": flip_cumsum,
                                  "same-bytes copy": harness.same_bytes_copy(lambda s: s["x"].clone())},
                       check=check, out_bytes=numel * esize,
                       notes=["the backward of add is this reverse scan"], check_tol=self.tol(dtype, shape[-1]), **t)

    def fwd_bwd(self, op, shape, dtype, tkey):
        h = self.h
        dim = -1
        numel = math.prod(shape)
        esize = torch.empty((), dtype=dtype).element_size()
        arrays = 4 if op == "add" else 5

        def make(i):
            return {"x": self.gen(shape, dtype, op, i, grad=True), "g": self.gen(shape, dtype, "add", 100 + i)}

        def ours(s):
            return torch.autograd.grad(pp.scan(s["x"], dim, op), s["x"], s["g"])

        def theirs(s):
            return torch.autograd.grad(torch_scan(s["x"], dim, op), s["x"], s["g"])

        t = self.target(tkey, dtype, op)
        if t:
            t["target"] = f"the forward's fraction ({t['target_frac']:.2f})"
        base = {TORCH_OP[op] + " autograd": theirs}
        if op in ("max", "min") and len(shape) == 1 and self.full:
            base = {TORCH_OP[op] + " autograd": {"skip": "too slow on 1-D 2^28 (see the forward row)"}}
        return h.bench(f"scan:{op}", "fwd+bwd", shape, dtype, numel * arrays * esize, make, ours=ours,
                       baselines=base, notes=[f"ideal bytes: {arrays} arrays"], **t)

    # -- segmented rows --

    def segmented(self, kind, sizes_seg, reverse=False, fwd_bwd=False):
        h = self.h
        dtype = torch.float32
        if kind == "A":
            total, S, maxlen = sizes_seg
            case = "2^%d rand seqs" % round(math.log2(S))
            lengths = self._random_lengths(total, S, maxlen)
        else:
            big, tiny = sizes_seg
            case = "1 big+%s tiny" % ("1e5" if tiny == 100000 else tiny)
            g = torch.Generator().manual_seed(7)
            small = torch.randint(1, 9, (tiny,), generator=g)
            pos = int(torch.randint(0, tiny + 1, (1,), generator=g))
            lengths = torch.cat([small[:pos], torch.tensor([big]), small[pos:]])
        if reverse:
            case += " rev"
        if fwd_bwd:
            case += " f+b"
        S = lengths.numel()
        N = int(lengths.sum())
        shape = (N,)
        if h.skip("segmented_scan:add", case, shape, dtype):
            return None
        if h.broken or h.over_budget():  # recorded as skipped by bench(), before any input is made
            return h.bench("segmented_scan:add", case, shape, dtype, 0, None)
        offsets_cpu = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        notes = [f"{S} sequences, lengths {int(lengths.min())}..{int(lengths.max())}, offsets int32"]
        try:
            gx = torch.Generator(device=h.device).manual_seed(11)
            x = torch.randn(N, generator=gx, device=h.device)
            offsets = offsets_cpu.to(torch.int32).to(h.device)
            data = {"x": x, "off": offsets}
            if fwd_bwd:
                x.requires_grad_(True)
                data["g"] = torch.randn(N, generator=gx, device=h.device)
        except Exception as e:  # noqa: BLE001
            return h.add_record({"op": "segmented_scan:add", "case": case, "shape": [N], "dtype": "float32",
                                 "error": "inputs: " + harness._short_error(e), "baselines": {}})
        arrays = 4 if fwd_bwd else 2
        nbytes = N * 4 * arrays + offsets.numel() * 4
        baselines = {}
        maxlen = int(lengths.max())
        pad_elems = S * maxlen
        # (b) padded batch
        if pad_elems * 4 * (3 if fwd_bwd else 2) > h.mem_cap:
            baselines["padded torch.cumsum"] = {
                "skip": f"padding {S} sequences to {maxlen} would need {pad_elems * 4 / 2**30:.0f} GiB"}
        else:
            try:
                padded, pad_ms = self._pad(x.detach(), offsets_cpu, lengths, maxlen)
                notes.append(f"padding to ({S}, {maxlen}) took {pad_ms:.3f} ms (not in the padded baseline's time; "
                             f"unpadding costs about as much again); padded tensor {pad_elems / N:.2f}x the data")
                if fwd_bwd:
                    padded.requires_grad_(True)
                    gp = torch.randn_like(padded)
                    baselines["padded torch.cumsum autograd"] = lambda s: torch.autograd.grad(
                        torch.cumsum(padded, 1), padded, gp)
                elif reverse:
                    baselines["padded flip+cumsum+flip"] = lambda s: torch.flip(
                        torch.cumsum(torch.flip(padded, [1]), 1), [1])
                else:
                    baselines["padded torch.cumsum"] = lambda s: torch.cumsum(padded, 1)
            except Exception as e:  # noqa: BLE001
                baselines["padded torch.cumsum"] = {"error": harness._short_error(e)}
        # (a) Python loop over the sequences (forward only)
        if not reverse and not fwd_bwd:
            try:
                baselines["loop of torch.cumsum"] = self._loop_baseline(x, offsets_cpu, lengths)
            except Exception as e:  # noqa: BLE001
                baselines["loop of torch.cumsum"] = {"error": harness._short_error(e)}

        if not fwd_bwd:
            baselines["same-bytes copy"] = harness.same_bytes_copy(lambda s: s["x"].clone())
        if fwd_bwd:
            def ours(s):
                return torch.autograd.grad(pp.segmented_scan(s["x"], s["off"], 0), s["x"], s["g"])
            check = None
        else:
            def ours(s):
                return pp.segmented_scan(s["x"], s["off"], 0, "add", False, reverse)

            def check(s, out):
                return rel_err(out, ref_segmented_add(s["x"], s["off"], reverse)), "float64 segmented cumsum"
        t = {}
        if self.full:
            t = {"target": "fraction >= 0.80", "target_frac": 0.80, "best_today": "a loop over sequences"}
        rec = h.bench("segmented_scan:add", case, shape, dtype, nbytes, lambda i: data, ours=ours,
                      baselines=baselines, check=check, out_bytes=N * 4, notes=notes, n_sets=1,
                      check_tol=self.tol(dtype, maxlen), **t)
        return rec

    @staticmethod
    def _random_lengths(total, S, maxlen):
        g = torch.Generator().manual_seed(5)
        raw = torch.randint(0, maxlen + 1, (S,), generator=g).double()
        lengths = torch.floor(raw * (total / raw.sum())).long()
        rest = total - int(lengths.sum())
        while rest > 0:  # hand out the remainder one by one to random sequences
            idx = torch.randperm(S, generator=g)[:rest]
            lengths[idx] += 1
            rest = total - int(lengths.sum())
        return lengths

    def _pad(self, x, offsets_cpu, lengths, maxlen):
        h = self.h
        S = lengths.numel()
        dev = x.device
        lengths_d = lengths.to(dev)
        offsets_d = offsets_cpu.to(dev)

        def build():
            seg = torch.repeat_interleave(torch.arange(S, device=dev), lengths_d)
            pos = torch.arange(x.numel(), device=dev) - offsets_d[:-1][seg]
            p = torch.zeros(S, maxlen, device=dev, dtype=x.dtype)
            p[seg, pos] = x
            return p

        build()
        ts = []
        for _ in range(3):
            h.sync()
            t0 = time.perf_counter()
            p = build()
            h.sync()
            ts.append((time.perf_counter() - t0) * 1e3)
        return p, sorted(ts)[1]

    def _loop_baseline(self, x, offsets_cpu, lengths):
        """Python loop over sequences calling torch.cumsum(out=...) on each slice. Timed in full
        when one pass is estimated under 10 s, else extrapolated from a sample of sequences."""
        h = self.h
        x = x.detach()
        out = torch.empty_like(x)
        bounds = [(a, b) for a, b in zip(offsets_cpu[:-1].tolist(), offsets_cpu[1:].tolist()) if b > a]
        n_all = len(bounds)

        def run(bs):
            for a, b in bs:
                torch.cumsum(x[a:b], 0, out=out[a:b])

        big = [ab for ab in bounds if ab[1] - ab[0] > 65536]
        rest = [ab for ab in bounds if ab[1] - ab[0] <= 65536]
        g = torch.Generator().manual_seed(3)
        k = min(len(rest), 2000 if h.gpu else 500)
        sample = [rest[i] for i in torch.randperm(len(rest), generator=g)[:k].tolist()]
        run(sample[:50] + big)  # warm-up
        h.sync()
        t0 = time.perf_counter()
        run(big)
        h.sync()
        t_big = time.perf_counter() - t0
        t0 = time.perf_counter()
        run(sample)
        h.sync()
        t_sample = time.perf_counter() - t0
        est = t_big + (t_sample * len(rest) / k if k else 0.0)
        if est < 10.0:
            reps = 1 if est > 2.0 else (2 if est > 0.5 else None)
            t = h.time(lambda s: run(bounds), [{}], wall=True, reps=reps, target_s=min(h.target_s * 3, 2.0))
            t.note = f"full loop over all {n_all} non-empty sequences ({t.reps} timed passes, wall clock)"
            return t
        ms = est * 1e3
        return Timing.fixed(ms, "extrapolated", note=(
            f"extrapolated: {len(big)} long sequences timed in full + a sample of {k} of the {len(rest)} others "
            f"scaled by {len(rest) / max(k, 1):.1f} (one full pass estimated at {est:.1f} s)"))


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv, extra=lambda p: p.add_argument(
        "--slow-baselines", action="store_true", help="time torch.cummax/cummin on 1-D 2^28 once"))
    h = harness.Harness("bench_scan", args)
    b = Scan(h, args.slow_baselines)
    n1, shapes, seg_a, seg_b = sizes(h)
    f32, bf16 = torch.float32, torch.bfloat16

    # headline rows first (a --budget-s cut drops the tail)
    b.forward("add", (n1,), f32, "1-D", "1d")
    b.forward("add", (n1,), torch.int32, "1-D int->int64", "int")
    for shape in shapes:
        for dt in (f32, bf16):
            b.forward("add", shape, dt, "last dim", shape if b.full else None)
    b.segmented("A", seg_a)
    b.segmented("B", seg_b)
    for op in OPS:
        b.forward(op, (n1,), f32, "1-D", None)
        for shape in shapes:
            for dt in (f32, bf16):
                b.forward(op, shape, dt, "last dim", None)
    # backward: the reverse scan, and forward+backward through autograd
    b.reverse((n1,), f32, "1d")
    for shape in shapes:
        for dt in (f32, bf16):
            b.reverse(shape, dt, shape if b.full else None)
    b.fwd_bwd("add", (n1,), f32, "1d")
    for shape in shapes:
        for dt in (f32, bf16):
            b.fwd_bwd("add", shape, dt, shape if b.full else None)
    for op in OPS:
        for dt in (f32, bf16):
            b.fwd_bwd(op, shapes[0], dt, None)
    b.segmented("A", seg_a, reverse=True)
    b.segmented("A", seg_a, fwd_bwd=True)
    b.segmented("B", seg_b, reverse=True)
    b.segmented("B", seg_b, fwd_bwd=True)
    h.finish()


if __name__ == "__main__":
    main()
