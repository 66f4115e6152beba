"""Benchmarks of ``affine_scan`` (h_t = a_t * h_{t-1} + b_t): every affine row of benchmarks/TARGETS.md.

Rows (GPU sizes; ``--device cpu`` divides the channels by 2^6, ``--quick`` shrinks further):
* (B, C, T) = (8, 2048, 4096), T contiguous, float32 and bfloat16: forward, and forward+backward.
* (8, 1536, 2048) float32 / bfloat16 forward; on float32 also a Python loop over time on the same
  data seen as (12288, 2048) (``h = a[:, t] * h + b[:, t]; out[:, t] = h``, 3 kernels a step, and
  ``torch.addcmul(..., out=out[:, t])``, 1 kernel a step), eager and captured in a CUDA graph.
* (B, T, D) = (8, 4096, 2048), D contiguous, scanned along dim=1 (strided, no transpose copy),
  float32 / bfloat16 forward; float32 forward+backward.
* packed: 8 sequences (5269, 762, 1791, 858, 2279, 1696, 7996, 12117 = 32768 tokens) x 2048
  channels, (32768, 2048) along dim 0 with offsets, float32 / bfloat16 forward; float32
  forward+backward.
* packed, many short sequences (no TARGETS row): 2000 sequences of 1 to 999 tokens (drawn with
  seed 3, 1004404 tokens) x 256 channels along dim 0, float32 / bfloat16 forward: rows cut into
  spans that most sequences start inside, whose first pass walks each span from its last start.

Baselines: accelerated-scan and flash-linear-attention are not installed on the GPU machine;
("triton accel-scan", "triton fla-recurrent", "triton transposed" below)
``triton_baselines.py`` reimplements their approaches in Triton (time-contiguous associative scan
with its reverse-pass backward; a channels-contiguous chunked recurrence with cu_seqlens) and the
D-contiguous rows also time "transpose to T-contiguous copies, scan, transpose back".

Ideal bytes (2 bytes an element for bfloat16, 4 for float32; the final state is negligible):
* forward: read a and b, write h = 3 arrays.
* forward+backward: forward 3 arrays; backward reads a, b (to recompute h, or h saved: the same
  count) and grad_h and writes grad_a and grad_b = 5 arrays; 8 arrays in all.
* packed rows add the (S+1) int32 offsets.
"""
import math
import os
import sys

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402
import triton_baselines as tb  # noqa: E402

import torch_parprims as pp  # noqa: E402

PACKED_LENGTHS = [5269, 762, 1791, 858, 2279, 1696, 7996, 12117]
# The many-sequences row's lengths: 2000 drawn from 1..999 (1004404 tokens).
MANY_LENGTHS = torch.randint(1, 1000, (2000,), generator=torch.Generator().manual_seed(3)).tolist()


def sizes(h):
    """(T-contiguous big, T-contiguous small, D-contiguous, packed lengths, packed channels)."""
    if h.gpu and not h.quick:
        return (8, 2048, 4096), (8, 1536, 2048), (8, 4096, 2048), PACKED_LENGTHS, 2048
    if h.gpu:
        return (8, 128, 4096), (8, 96, 2048), (8, 4096, 128), PACKED_LENGTHS, 128
    if not h.quick:
        return (8, 32, 4096), (8, 24, 2048), (8, 4096, 32), PACKED_LENGTHS, 32
    return (2, 16, 1024), (2, 8, 512), (2, 1024, 16), [max(1, n // 8) for n in PACKED_LENGTHS], 16


# benchmarks/TARGETS.md, GPU (H200): (target fraction, best today) by (row, dtype)
TARGETS = {
    ("tbig", "float32", "fwd"): (0.95, "accelerated-scan (Triton) 0.194 ms"),
    ("tbig", "bfloat16", "fwd"): (0.90, "accelerated-scan (Triton) 0.109 ms"),
    ("tbig", "float32", "fwd+bwd"): (0.92, "accelerated-scan (Triton) 0.543 ms"),
    ("tbig", "bfloat16", "fwd+bwd"): (0.85, "accelerated-scan (Triton) 0.409 ms"),
    ("tsmall", "float32", "fwd"): (0.93, "accelerated-scan 0.076 ms; Python loop 60.8 ms (6.5 ms as a CUDA graph)"),
    ("tsmall", "bfloat16", "fwd"): (0.90, "accelerated-scan 0.044 ms"),
    ("dcontig", "float32", "fwd"): (0.90, "flash-linear-attention chunk_hgrn 0.467 ms"),
    ("dcontig", "bfloat16", "fwd"): (0.90, "flash-linear-attention chunk_hgrn 0.499 ms"),
    ("packed", "float32", "fwd"): (0.85, "flash-linear-attention fused_recurrent_hgrn (cu_seqlens) 5.28 ms"),
    ("packed", "bfloat16", "fwd"): (0.85, "flash-linear-attention fused_recurrent_hgrn (cu_seqlens) 5.33 ms"),
}


# ---- float64 references on a few channels -------------------------------------------------------


def ref_forward(a, b, starts):
    """(T, k) float64 numpy arrays -> h, restarting at the time indices in ``starts``."""
    h = np.empty_like(b)
    state = np.zeros(b.shape[1])
    for t in range(b.shape[0]):
        if t in starts:
            state = np.zeros(b.shape[1])
        state = a[t] * state + b[t]
        h[t] = state
    return h


def ref_backward(a, h, g, starts, ends):
    """grad_a, grad_b of ref_forward for incoming gradient g (zero initial state)."""
    lam = np.empty_like(g)
    nxt = np.zeros(g.shape[1])
    for t in range(g.shape[0] - 1, -1, -1):
        if t + 1 in ends:  # t is the last step of its sequence
            nxt = np.zeros(g.shape[1])
        nxt = g[t] + nxt
        lam[t] = nxt
        nxt = a[t] * nxt  # carried to t-1 as a_t * lam_t
    h_prev = np.concatenate([np.zeros((1, h.shape[1])), h[:-1]])
    for s in starts:
        h_prev[s] = 0.0
    return lam * h_prev, lam


class Layout:
    """How to take a (T, k) float64 sample of a few channels from a tensor of one layout."""

    def __init__(self, kind, offsets_list=None):
        self.kind = kind
        self.offsets = offsets_list

    def take(self, x):
        x = x.detach()
        if self.kind == "tcontig":  # (B, C, T)
            s = x[[0, -1]][:, :4, :]
            return s.reshape(-1, s.shape[-1]).T.double().cpu().numpy()
        if self.kind == "dcontig":  # (B, T, D)
            s = x[[0, -1]][:, :, :4]
            return s.permute(1, 0, 2).reshape(s.shape[1], -1).double().cpu().numpy()
        return x[:, :8].double().cpu().numpy()  # packed (N, D)

    def starts_ends(self):
        if self.kind == "packed":
            return set(self.offsets[:-1]), set(self.offsets[1:])
        return {0}, set()


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


class Affine:
    def __init__(self, h):
        self.h = h
        self.dev = h.device
        self.full = h.gpu and not h.quick
        self.triton = tb.available(self.dev)

    def target(self, row, dtype, mode):
        if not self.full:
            return {}
        t = TARGETS.get((row, harness.dtype_name(dtype), mode))
        if t is None:
            return {"target": "(no TARGETS row)"}
        return {"target": f"fraction >= {t[0]:.2f}", "target_frac": t[0], "best_today": t[1]}

    def gen(self, shape, dtype, seed, grad=False):
        g = torch.Generator(device=self.dev)
        g.manual_seed(2000 + seed)
        a = (0.5 + 0.5 * torch.rand(shape, generator=g, device=self.dev)).to(dtype)
        b = torch.randn(shape, generator=g, device=self.dev).to(dtype)
        s = {"a": a, "b": b}
        if grad:
            a.requires_grad_(True)
            b.requires_grad_(True)
            s["g"] = torch.randn(shape, generator=g, device=self.dev).to(dtype)
        return s

    def no_triton(self):
        return {"skip": "Triton needs a CUDA device" if self.dev == "cpu" else "Triton is not importable"}

    def checker(self, layout, fwd_bwd=False):
        starts, ends = layout.starts_ends()

        def check(s, out):
            a, b = layout.take(s["a"]), layout.take(s["b"])
            h_ref = ref_forward(a, b, starts)
            if not fwd_bwd:
                return harness.rel_err(torch.from_numpy(layout.take(_first(out))), torch.from_numpy(h_ref)), \
                    "float64 loop on 8 channels"
            ga_ref, gb_ref = ref_backward(a, h_ref, layout.take(s["g"]), starts, ends)
            ga, gb = out
            err = max(harness.rel_err(torch.from_numpy(layout.take(ga)), torch.from_numpy(ga_ref)),
                      harness.rel_err(torch.from_numpy(layout.take(gb)), torch.from_numpy(gb_ref)))
            return err, "float64 loop on 8 channels (grad_a, grad_b)"

        return check

    # -- rows --

    def tcontig(self, row, shape, dtype, fwd_bwd=False, loops=False):
        h = self.h
        numel = math.prod(shape)
        esize = torch.empty((), dtype=dtype).element_size()
        arrays = 8 if fwd_bwd else 3
        mode = "fwd+bwd" if fwd_bwd else "fwd"

        def make(i):
            return self.gen(shape, dtype, i, grad=fwd_bwd)

        if fwd_bwd:
            def ours(s):
                hh, _ = pp.affine_scan(s["a"], s["b"], -1)
                return torch.autograd.grad(hh, (s["a"], s["b"]), s["g"])

            def tri(s):
                return torch.autograd.grad(tb.AffineLastdim.apply(s["a"], s["b"]), (s["a"], s["b"]), s["g"])
            base = {"triton accel-scan autograd": {"fn": tri, "check": True} if self.triton
                    else self.no_triton()}
        else:
            def ours(s):
                return pp.affine_scan(s["a"], s["b"], -1)
            base = {"triton accel-scan": {"fn": lambda s: tb.affine_lastdim(s["a"], s["b"]),
                                                        "check": True} if self.triton else self.no_triton(),
                    "same-bytes copy": harness.same_bytes_copy(lambda s: torch.add(s["a"], s["b"]))}
        if loops:
            base.update(self.loop_baselines(shape))
        notes = [f"ideal bytes: {arrays} arrays"]
        return h.bench("affine_scan", f"T-contig {mode}", shape, dtype, numel * arrays * esize, make, ours=ours,
                       baselines=base, check=self.checker(Layout("tcontig"), fwd_bwd), out_bytes=numel * esize,
                       notes=notes, **self.target(row, dtype, mode))

    def loop_baselines(self, shape):
        """Python loops over time on the data seen as (B*C, T): eager (wall clock) and as CUDA graphs."""
        R, T = math.prod(shape[:-1]), shape[-1]
        label = f"({R}, {T})"

        def views(s):
            if "out" not in s:
                s["out"] = torch.empty(R, T, device=s["b"].device, dtype=s["b"].dtype)
            return s["a"].reshape(R, T), s["b"].reshape(R, T), s["out"]

        def naive(s):
            a, b, out = views(s)
            hh = torch.zeros(R, device=b.device, dtype=b.dtype)
            for t in range(T):
                hh = a[:, t] * hh + b[:, t]
                out[:, t] = hh
            return out.reshape(shape)

        def addcmul(s):
            a, b, out = views(s)
            hh = torch.zeros(R, device=b.device, dtype=b.dtype)
            for t in range(T):
                torch.addcmul(b[:, t], a[:, t], hh, out=out[:, t])
                hh = out[:, t]
            return out.reshape(shape)

        def graphed(fn, key):
            def run(s):
                if key not in s:
                    s[key] = _capture(lambda: fn(s))
                s[key].replay()
                return s["out"].reshape(shape)
            return run

        base = {
            "loop eager": {"fn": naive, "wall": True, "check": True,
                                    "note": f"{label}: h = a[:, t] * h + b[:, t]; out[:, t] = h (3 kernels a step)"},
            "loop addcmul eager": {"fn": addcmul, "wall": True, "check": True,
                                            "note": f"{label}: torch.addcmul(b[:, t], a[:, t], h, out=out[:, t]) (1 kernel a step)"},
        }
        if self.h.gpu:
            base["loop graph"] = {"fn": graphed(naive, "graph_naive"), "check": True,
                                                "note": f"{label}: the 3-kernel loop captured once and replayed"}
            base["loop addcmul graph"] = {"fn": graphed(addcmul, "graph_addcmul"), "check": True,
                                                        "note": f"{label}: the 1-kernel loop captured once and replayed"}
        return base

    def dcontig(self, shape, dtype, fwd_bwd=False):
        h = self.h
        numel = math.prod(shape)
        esize = torch.empty((), dtype=dtype).element_size()
        arrays = 8 if fwd_bwd else 3
        mode = "fwd+bwd" if fwd_bwd else "fwd"

        def make(i):
            return self.gen(shape, dtype, i, grad=fwd_bwd)

        if fwd_bwd:
            def ours(s):
                hh, _ = pp.affine_scan(s["a"], s["b"], 1)
                return torch.autograd.grad(hh, (s["a"], s["b"]), s["g"])

            def tri_t(s):
                hh = tb.AffineLastdim.apply(s["a"].transpose(1, 2).contiguous(), s["b"].transpose(1, 2).contiguous())
                return torch.autograd.grad(hh.transpose(1, 2), (s["a"], s["b"]), s["g"])
            base = {"triton transposed autograd": {"fn": tri_t, "check": True}
                    if self.triton else self.no_triton()}
        else:
            def ours(s):
                return pp.affine_scan(s["a"], s["b"], 1)

            def tri_t(s):
                hh = tb.affine_lastdim(s["a"].transpose(1, 2).contiguous(), s["b"].transpose(1, 2).contiguous())
                return hh.transpose(1, 2).contiguous()
            base = {
                "triton fla-recurrent": {
                    "fn": lambda s: tb.affine_time_strided(s["a"], s["b"], 1), "check": True}
                if self.triton else self.no_triton(),
                "triton transposed": {"fn": tri_t, "check": True,
                                      "note": "transpose copies to T-contiguous, triton accel-scan, transpose back "
                                              "(copies timed)"}
                if self.triton else self.no_triton(),
                "same-bytes copy": harness.same_bytes_copy(lambda s: torch.add(s["a"], s["b"])),
            }
        return h.bench("affine_scan", f"D-contig dim1 {mode}", shape, dtype, numel * arrays * esize, make,
                       ours=ours, baselines=base, check=self.checker(Layout("dcontig"), fwd_bwd),
                       out_bytes=numel * esize, notes=[f"ideal bytes: {arrays} arrays; no transpose copy"],
                       **self.target("dcontig", dtype, mode))

    def packed(self, lengths, D, dtype, fwd_bwd=False, row="packed"):
        h = self.h
        N = sum(lengths)
        shape = (N, D)
        numel = N * D
        esize = torch.empty((), dtype=dtype).element_size()
        arrays = 8 if fwd_bwd else 3
        mode = "fwd+bwd" if fwd_bwd else "fwd"
        offsets_list = [0]
        for n in lengths:
            offsets_list.append(offsets_list[-1] + n)
        S = len(lengths)

        def make(i):
            s = self.gen(shape, dtype, i, grad=fwd_bwd)
            s["off"] = torch.tensor(offsets_list, dtype=torch.int32, device=self.dev)
            return s

        if fwd_bwd:
            def ours(s):
                hh, _ = pp.affine_scan(s["a"], s["b"], 0, None, s["off"])
                return torch.autograd.grad(hh, (s["a"], s["b"]), s["g"])
            base = {}
        else:
            def ours(s):
                return pp.affine_scan(s["a"], s["b"], 0, None, s["off"])
            base = {"triton fla-recurrent varlen": {
                "fn": lambda s: tb.affine_time_strided(s["a"], s["b"], 0, s["off"]), "check": True}
                if self.triton else self.no_triton(),
                "same-bytes copy": harness.same_bytes_copy(lambda s: torch.add(s["a"], s["b"]))}
        return h.bench("affine_scan", f"packed {S} seqs {mode}", shape, dtype, numel * arrays * esize + (S + 1) * 4,
                       make, ours=ours, baselines=base, check=self.checker(Layout("packed", offsets_list), fwd_bwd),
                       out_bytes=numel * esize, notes=[f"lengths {lengths}; offsets int32; ideal bytes: {arrays} arrays"],
                       **self.target(row, dtype, mode))


def _capture(run):
    """Capture ``run`` (a loop of many small kernels) in a CUDA graph after one eager warm-up on a
    side stream, as torch.cuda.graph requires."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    torch.cuda.synchronize()
    return g


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv)
    h = harness.Harness("bench_affine_scan", args)
    b = Affine(h)
    tbig, tsmall, dcont, lengths, channels = sizes(h)
    f32, bf16 = torch.float32, torch.bfloat16
    for dt in (f32, bf16):
        b.tcontig("tbig", tbig, dt)
    for dt in (f32, bf16):
        b.tcontig("tbig", tbig, dt, fwd_bwd=True)
    for dt in (f32, bf16):
        b.tcontig("tsmall", tsmall, dt, loops=(dt == f32))
    for dt in (f32, bf16):
        b.dcontig(dcont, dt)
    for dt in (f32, bf16):
        b.packed(lengths, channels, dt)
    many, many_channels = (MANY_LENGTHS, channels // 8) if not h.quick else (MANY_LENGTHS[:200], channels)
    for dt in (f32, bf16):
        b.packed(many, many_channels, dt, row="packed-many")
    b.dcontig(dcont, f32, fwd_bwd=True)
    b.packed(lengths, channels, f32, fwd_bwd=True)
    h.finish()


if __name__ == "__main__":
    main()
