"""Benchmarks of ``selective_scan`` (Mamba-1's selective scan, fused forward and backward).

Rows (GPU sizes; ``--quick`` divides the channels by 8; ``--device cpu`` uses smaller shapes):
* (batch, dim, L, N) in (8, 1536, 2048, 16), (2, 1536, 16384, 16), (1, 2048, 65536, 16), float32
  and bfloat16; D, z, delta_bias and delta_softplus on; B and C variable (batch, N, L) in the
  input dtype; A, D, delta_bias float32. Each row: the forward, and forward+backward (gradients of
  every input for a random gradient of ``out``); on CUDA also the extra memory of fwd+bwd
  (``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` minus what was allocated
  with the inputs and the gradient of ``out`` in place: outputs, saved checkpoints, gradients and
  workspace).
* packed: the first shape's token count (8 * 2048, batch 1) as sequences whose lengths vary
  10x (drawn uniformly in [L0, 10 * L0], fixed seed), cu_seqlens int32; forward and fwd+bwd, and
  the ratio to the dense time of the first shape (target: within 1.1x).

Ideal bytes (the memory-bound ideal time is bytes / the copy bandwidth of this run):
* forward: read u, delta, z, B, C, write out.
* forward+backward: the forward's bytes, plus the backward reading u, delta, z, B, C and the
  gradient of out and writing the gradients of u, delta, z, B, C.

Baselines: mamba-ssm's ``selective_scan_fn`` when it is importable (timed on the same inputs,
its memory measured the same way). When it is not, the record says "not installed" and carries
the mamba-ssm figures published on H200 (2026-11-29), with the targets: forward >= 2.5x faster,
fwd+bwd >= 2x faster, memory <= theirs. Those published figures are compared with only on CUDA
at full size. On the CPU the baseline is the pure-PyTorch ``torch_parprims.reference.
selective_scan``, timed as it is (a Python loop over time computing in float64 from the float32
or bfloat16 inputs; its backward is autograd through that loop, quadratic in L since every step's
slice of B and C gets a full-size gradient); target: fwd+bwd >= 20x faster.

Correctness, once per timed configuration, before timing: the forward's output on a slice
(batch row 0, 8 channels, up to 256 steps from the start of the row or, packed, of the second
sequence) against the float64 reference run on that slice alone; fwd+bwd: one backward of the
full-size inputs with a gradient of out that is zero outside that slice (4 channels), whose
gradients on the slice equal the slice's own (u, delta, z, B, C on the slice; A, D, delta_bias
of the 4 channels), against autograd through the reference on the slice.
"""
import math
import os
import random
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402

import torch_parprims as pp  # noqa: E402
from torch_parprims import reference as ref  # noqa: E402

try:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn as mamba_selective_scan_fn
    MAMBA_ERROR = None
except Exception as e:  # noqa: BLE001
    mamba_selective_scan_fn = None
    MAMBA_ERROR = f"not installed ({type(e).__name__})"

GPU_SHAPES = [(8, 1536, 2048, 16), (2, 1536, 16384, 16), (1, 2048, 65536, 16)]

# mamba-ssm's selective_scan_fn, published on H200, 2026-11-29: (fwd ms, fwd+bwd ms, fwd+bwd GB).
PUBLISHED_WHEN = "published on H200, 2026-11-29"
PUBLISHED = {
    ((8, 1536, 2048, 16), "float32"): (0.874, 2.91, 0.51),
    ((8, 1536, 2048, 16), "bfloat16"): (0.444, 2.19, 0.26),
    ((2, 1536, 16384, 16), "float32"): (1.90, 6.09, 1.01),
    ((2, 1536, 16384, 16), "bfloat16"): (1.09, 4.76, 0.51),
    ((1, 2048, 65536, 16), "float32"): (5.68, 18.2, 2.70),
    ((1, 2048, 65536, 16), "bfloat16"): (2.94, 14.2, 1.36),
}
TARGET_FWD, TARGET_FWD_BWD, TARGET_PACKED = 2.5, 2.0, 1.1  # x faster than mamba-ssm; packed / dense
TARGET_CPU_REF = 20.0  # x faster than the reference on the CPU (fwd+bwd)

CHECK_STEPS, CHECK_CHANNELS, CHECK_GRAD_CHANNELS = 256, 8, 4


def shapes(h):
    """(dense shapes, packed: (dim, N, total tokens, L0))."""
    if h.gpu:
        div = 8 if h.quick else 1
        dense = [(b, d // div, L, n) for b, d, L, n in GPU_SHAPES]
        b, d, L, n = dense[0]
        return dense, (d, n, b * L, 256)
    if h.quick:
        return [(2, 32, 256, 16)], (32, 16, 2 * 256, 16)
    return [(2, 64, 512, 16), (1, 64, 2048, 16)], (64, 16, 2 * 512, 32)


def packed_lengths(total, L0, seed=0):
    """Lengths drawn uniformly in [L0, 10 L0] until they cover ``total``; the remainder of the
    last draw goes to the shortest sequence (so every length stays >= L0)."""
    rng = random.Random(seed)
    lengths = []
    while sum(lengths) < total:
        lengths.append(rng.randint(L0, 10 * L0))
    excess = sum(lengths) - total
    last = lengths.pop() - excess
    if last >= L0:
        lengths.append(last)
    elif last > 0:
        i = min(range(len(lengths)), key=lambda k: lengths[k])
        lengths[i] += last
    assert sum(lengths) == total
    return lengths


def offsets_of(lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


class SelectiveScan:
    def __init__(self, h):
        self.h = h
        self.dev = h.device
        self.full = h.gpu and not h.quick
        self.results = {}  # (label, dtype, mode) -> record

    # -- inputs --

    def gen(self, shape, dtype, seed, grad=False, offsets=None):
        b, d, L, n = shape
        g = torch.Generator(device=self.dev)
        g.manual_seed(3000 + seed)
        dev = self.dev

        def randn(*s, dt=dtype):
            return torch.randn(*s, generator=g, device=dev).to(dt)

        s = {
            "u": randn(b, d, L),
            "delta": (torch.randn(b, d, L, generator=g, device=dev) * 0.7 - 2.0).to(dtype),
            "z": randn(b, d, L),
            "B": randn(b, n, L),
            "C": randn(b, n, L),
            "A": -torch.exp(torch.rand(d, n, generator=g, device=dev) * math.log(100.0) + math.log(0.02)),
            "D": randn(d, dt=torch.float32),
            "delta_bias": 0.5 * randn(d, dt=torch.float32),
        }
        if grad:
            for k in ("u", "delta", "z", "B", "C", "A", "D", "delta_bias"):
                s[k].requires_grad_(True)
            s["g"] = randn(b, d, L)
        if offsets is not None:
            s["cu"] = torch.tensor(offsets, dtype=torch.int32, device=dev)
        return s

    GRAD_KEYS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")

    @staticmethod
    def ours_fwd(s):
        return pp.selective_scan(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"], True,
                                 cu_seqlens=s.get("cu"))

    @classmethod
    def ours_fwd_bwd(cls, s, g=None):
        out, _ = cls.ours_fwd(s)
        return torch.autograd.grad(out, [s[k] for k in cls.GRAD_KEYS], s["g"] if g is None else g)

    @staticmethod
    def mamba_fwd(s):
        return mamba_selective_scan_fn(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"],
                                       True)

    @classmethod
    def mamba_fwd_bwd(cls, s):
        return torch.autograd.grad(cls.mamba_fwd(s), [s[k] for k in cls.GRAD_KEYS], s["g"])

    @staticmethod
    def ref_fwd(s):
        return ref.selective_scan(s["u"], s["delta"], s["A"], s["B"], s["C"], s["D"], s["z"], s["delta_bias"], True,
                                  cu_seqlens=s.get("cu"))

    @classmethod
    def ref_fwd_bwd(cls, s):
        out, _ = cls.ref_fwd(s)
        return torch.autograd.grad(out, [s[k] for k in cls.GRAD_KEYS], s["g"].double())

    # -- correctness on a slice --

    def checker(self, fwd_bwd, t0, steps):
        """check(s, out) of harness.bench: see the module docstring."""
        keys = self.GRAD_KEYS

        def slice_inputs(s, ch):
            t1 = t0 + steps
            sl = {
                "u": s["u"][:1, :ch, t0:t1], "delta": s["delta"][:1, :ch, t0:t1], "z": s["z"][:1, :ch, t0:t1],
                "B": s["B"][:1, :, t0:t1], "C": s["C"][:1, :, t0:t1], "A": s["A"][:ch], "D": s["D"][:ch],
                "delta_bias": s["delta_bias"][:ch],
            }
            return {k: v.detach().cpu().double() for k, v in sl.items()}

        def check(s, out):
            if not fwd_bwd:
                sl = slice_inputs(s, CHECK_CHANNELS)
                r, _ = self.ref_fwd(sl)
                out = out[0] if isinstance(out, (tuple, list)) else out  # ours: (out, last_state)
                got = out[:1, :CHECK_CHANNELS, t0:t0 + steps]
                return harness.rel_err(got.cpu(), r), f"float64 reference on a slice (1, {CHECK_CHANNELS}, {steps})"
            ch = CHECK_GRAD_CHANNELS
            g = torch.zeros_like(s["g"])
            g[:1, :ch, t0:t0 + steps] = s["g"][:1, :ch, t0:t0 + steps]
            grads = dict(zip(keys, self.ours_fwd_bwd(s, g)))
            sl = slice_inputs(s, ch)
            for v in sl.values():
                v.requires_grad_(True)
            sl["g"] = s["g"][:1, :ch, t0:t0 + steps].detach().cpu().double()
            rg = dict(zip(keys, self.ref_fwd_bwd(sl)))
            got = {
                "u": grads["u"][:1, :ch, t0:t0 + steps], "delta": grads["delta"][:1, :ch, t0:t0 + steps],
                "z": grads["z"][:1, :ch, t0:t0 + steps], "B": grads["B"][:1, :, t0:t0 + steps],
                "C": grads["C"][:1, :, t0:t0 + steps], "A": grads["A"][:ch], "D": grads["D"][:ch],
                "delta_bias": grads["delta_bias"][:ch],
            }
            errs = {k: harness.rel_err(got[k].cpu(), rg[k]) for k in keys}
            worst = max(errs, key=errs.get)
            return errs[worst], f"float64 reference on a slice (1, {ch}, {steps}), grads (worst: {worst})"

        return check

    # -- memory --

    def memory(self, fn, make):
        """Peak extra bytes of one fwd+bwd beyond what is allocated with the inputs in place (CUDA)."""
        if not self.h.gpu:
            return None
        s = make(0)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        res = fn(s)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del res, s
        torch.cuda.empty_cache()
        return peak

    # -- one row --

    def row(self, label, shape, dtype, fwd_bwd, lengths=None):
        h = self.h
        b, d, L, n = shape
        dname = harness.dtype_name(dtype)
        mode = "fwd+bwd" if fwd_bwd else "fwd"
        es = torch.empty((), dtype=dtype).element_size()
        seq_bytes = b * d * L * es
        bc_bytes = b * n * L * es
        fwd_bytes = 4 * seq_bytes + 2 * bc_bytes  # u, delta, z, out; B, C
        bwd_bytes = 4 * seq_bytes + 2 * bc_bytes + 3 * seq_bytes + 2 * bc_bytes  # reads + writes
        nbytes = fwd_bytes + (bwd_bytes if fwd_bwd else 0)
        offsets = offsets_of(lengths) if lengths is not None else None
        t0 = offsets[1] if offsets is not None else 0
        steps = min(CHECK_STEPS, (lengths[1] if lengths is not None else L))

        def make(i):
            return self.gen(shape, dtype, i, grad=fwd_bwd, offsets=offsets)

        ours = self.ours_fwd_bwd if fwd_bwd else self.ours_fwd
        baselines = {}
        published = PUBLISHED.get((shape, dname)) if (self.full and lengths is None) else None
        if lengths is not None:
            pass  # compared with the dense row
        elif h.gpu:
            if mamba_selective_scan_fn is not None:
                # (the fwd+bwd check runs our op's backward: only mamba-ssm's forward is checked)
                baselines["mamba-ssm selective_scan_fn"] = {
                    "fn": self.mamba_fwd_bwd if fwd_bwd else self.mamba_fwd, "check": not fwd_bwd}
            elif published is not None:
                ms = published[1] if fwd_bwd else published[0]
                baselines["mamba-ssm selective_scan_fn"] = harness.Timing.fixed(
                    ms, f"{PUBLISHED_WHEN} (mamba-ssm {MAMBA_ERROR})")
            else:
                baselines["mamba-ssm selective_scan_fn"] = {
                    "skip": f"{MAMBA_ERROR}; published figures only for the full GPU sizes"}
        else:
            baselines["reference (float64 loop)"] = {
                "fn": self.ref_fwd_bwd if fwd_bwd else self.ref_fwd, "wall": True, "check": False,
                "note": "torch_parprims.reference.selective_scan as is: a Python loop over time computing in "
                        "float64 (inputs converted from the benchmark dtype); backward by autograd through it, where "
                        "each step's slice of the (batch, dim, N, L) B and C gets a full-size gradient: "
                        "O(L^2) work, so the fwd+bwd ratio grows with L"}
        notes = [f"B, C (batch, N, L) in {dname}; A, D, delta_bias float32; D, z, delta_bias, softplus on",
                 "ideal bytes: read u, delta, z, B, C, write out" +
                 ("; backward: read u, delta, z, B, C, grad out, write their gradients" if fwd_bwd else "")]
        if lengths is not None:
            notes.append(f"packed: {len(lengths)} sequences, lengths {lengths} (min {min(lengths)}, max "
                         f"{max(lengths)}), cu_seqlens int32, batch 1")
        rec = h.bench("selective_scan", f"{label} {mode}", shape, dtype, nbytes, make, ours=ours, baselines=baselines,
                      check=self.checker(fwd_bwd, t0, steps), out_bytes=seq_bytes, notes=notes)
        if rec is None:
            return None
        rec["mode"] = mode
        rec["ideal_ms"] = nbytes / h.copy_Bps * 1e3
        if rec.get("ms") is not None and not rec.get("skipped"):
            if fwd_bwd and h.gpu:
                extra = self.memory(self.ours_fwd_bwd, make)
                rec["extra_mem_bytes"] = extra
                rec["extra_mem_GB"] = extra / 1e9
                base = baselines.get("mamba-ssm selective_scan_fn")
                if mamba_selective_scan_fn is not None and lengths is None:
                    m = self.memory(self.mamba_fwd_bwd, make)
                    rec["baselines"]["mamba-ssm selective_scan_fn"]["extra_mem_GB"] = m / 1e9
                elif published is not None and isinstance(base, harness.Timing):
                    rec["baselines"]["mamba-ssm selective_scan_fn"]["extra_mem_GB"] = published[2]
            self._targets(rec, fwd_bwd, shape, dname, lengths, published)
        self.results[(label, dname, mode)] = rec
        h.save()
        return rec

    def _targets(self, rec, fwd_bwd, shape, dname, lengths, published):
        h = self.h
        if lengths is not None:
            dense = self.results.get(("dense0", dname, rec["mode"]))
            if dense and dense.get("ms"):
                rec["ratio_to_dense"] = rec["ms"] / dense["ms"]
                rec["dense_ms"] = dense["ms"]
                rec["target"] = f"packed ms / dense ms <= {TARGET_PACKED}"
                rec["meets_target"] = bool(rec["ratio_to_dense"] <= TARGET_PACKED)
            return
        if not h.gpu:
            base = rec["baselines"].get("reference (float64 loop)", {})
            if base.get("ratio") is not None:
                rec["target"] = f"fwd+bwd >= {TARGET_CPU_REF:g}x faster than the reference" if fwd_bwd else \
                    "(none; fwd+bwd is the CPU target)"
                if fwd_bwd:
                    rec["meets_target"] = bool(base["ratio"] >= TARGET_CPU_REF)
            return
        base = rec["baselines"].get("mamba-ssm selective_scan_fn", {})
        if base.get("ratio") is None:
            return
        want = TARGET_FWD_BWD if fwd_bwd else TARGET_FWD
        rec["target"] = f">= {want:g}x faster than mamba-ssm" + ("; memory <= theirs" if fwd_bwd else "")
        ok = base["ratio"] >= want
        if fwd_bwd and rec.get("extra_mem_GB") is not None and base.get("extra_mem_GB") is not None:
            rec["meets_memory_target"] = bool(rec["extra_mem_GB"] <= base["extra_mem_GB"])
            ok = ok and rec["meets_memory_target"]
        rec["meets_target"] = bool(ok)


def print_summary(b):
    h = b.h
    print(f"\n# selective_scan summary ({h.device_name}; copy {h.copy['GBps']:.0f} GB/s)")
    base_name = "mamba-ssm" if h.gpu else "reference"
    print(f"{'row':<30} {'dtype':<6} {'mode':<8} {'ms':>9} {'ideal ms':>9} {'mem GB':>7} "
          f"{base_name + ' ms':>13} {'x faster':>8} {'mem GB':>7} {'vs dense':>8} {'target':>6} chk")
    for (label, dname, mode), r in b.results.items():
        if r.get("ms") is None:
            print(f"{label:<30} {dname:<6} {mode:<8} {'skipped' if r.get('skipped') else 'ERROR'}")
            continue
        base = next(iter(r["baselines"].values()), {}) if r["baselines"] else {}
        mem = r.get("extra_mem_GB")
        bmem = base.get("extra_mem_GB")
        chk = "-" if not r.get("check") else ("ok" if r["check"]["ok"] else "BAD")
        tgt = {True: "yes", False: "NO"}.get(r.get("meets_target"), "-")
        row = harness.shape_str(r["shape"]) + (" packed" if label.startswith("packed") else "")
        print(f"{row:<30} {dname:<6} {mode:<8} {harness._fmt_ms(r['ms']):>9} {harness._fmt_ms(r['ideal_ms']):>9} "
              f"{'-' if mem is None else f'{mem:.2f}':>7} {harness._fmt_ms(base.get('ms')):>13} "
              f"{'-' if base.get('ratio') is None else '%.2f' % base['ratio']:>8} "
              f"{'-' if bmem is None else f'{bmem:.2f}':>7} "
              f"{'-' if r.get('ratio_to_dense') is None else '%.2f' % r['ratio_to_dense']:>8} {tgt:>6} {chk}")
    if h.gpu and mamba_selective_scan_fn is None:
        print(f"# mamba-ssm: {MAMBA_ERROR}; its figures are those {PUBLISHED_WHEN} (full sizes only)")


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv)
    h = harness.Harness("bench_selective_scan", args)
    b = SelectiveScan(h)
    dense, (pd, pn, total, L0) = shapes(h)
    lengths = packed_lengths(total, L0)
    for i, shape in enumerate(dense):
        for dt in (torch.float32, torch.bfloat16):
            for fwd_bwd in (False, True):
                b.row(f"dense{i}", shape, dt, fwd_bwd)
            if i == 0:
                for fwd_bwd in (False, True):
                    b.row("packed", (1, pd, total, pn), dt, fwd_bwd, lengths=lengths)
    h.finish()
    print_summary(b)


if __name__ == "__main__":
    main()
