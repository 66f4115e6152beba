"""Triton baselines for the affine scan h_t = a_t * h_{t-1} + b_t (benchmarks only).

accelerated-scan and flash-linear-attention are not installed on the GPU machine, so these stand
in for them, written the way they work:

* ``affine_lastdim(a, b)``: time contiguous, ``(..., T)``; one program per row, the row walked in
  chunks of BT with ``tl.associative_scan`` inside a chunk and the carry between chunks in a
  register (accelerated-scan's forward, chunked). ``AffineLastdim`` adds its backward: one reverse
  pass reading a, h and grad_h and writing grad_a and grad_b (accelerated-scan's backward).
* ``affine_time_strided(a, b, dim, offsets)``: channels contiguous, ``(B, T, D)`` scanned along
  ``dim=1`` or packed ``(N, D)`` along ``dim=0`` with ``offsets`` (cu_seqlens): one program per
  (sequence, block of BD channels), walking the sequence in [BT, BD] tiles with an associative scan
  along the time axis of each tile and the carry in registers (flash-linear-attention's
  fused_recurrent_hgrn, chunked so that each step moves a whole tile).

All compute in float32 and store the input dtype. On CUDA each (kernel, shape, dtype) picks the
fastest of a few block configurations on first use; under ``TRITON_INTERPRET=1`` (CPU tensors) the
first configuration runs, which is how this file is tested without a GPU:
``TRITON_INTERPRET=1 python3 benchmarks/triton_baselines.py``.
"""
import os

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except Exception:  # noqa: BLE001
    HAVE_TRITON = False

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("0", "")


def available(device):
    """Whether the baselines can run on ``device`` ("cuda", or "cpu" under TRITON_INTERPRET=1)."""
    if not HAVE_TRITON:
        return False
    return device == "cuda" or INTERPRET


if HAVE_TRITON:

    @triton.jit
    def _combine(a1, b1, a2, b2):
        # (a1, b1) is applied first: h -> a2 * (a1 * h + b1) + b2
        return a1 * a2, a2 * b1 + b2

    @triton.jit
    def _fwd_lastdim_kernel(a_ptr, b_ptr, h_ptr, T, s_a, s_b, s_h, BT: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        a_row = a_ptr + row * s_a
        b_row = b_ptr + row * s_b
        h_row = h_ptr + row * s_h
        offs = tl.arange(0, BT)
        carry = tl.sum(tl.zeros([BT], tl.float32), axis=0)
        for t0 in range(0, T, BT):
            t = t0 + offs
            m = t < T
            a = tl.load(a_row + t, mask=m, other=1.0).to(tl.float32)
            b = tl.load(b_row + t, mask=m, other=0.0).to(tl.float32)
            A, H = tl.associative_scan((a, b), 0, _combine)
            h = A * carry + H
            tl.store(h_row + t, h.to(h_ptr.dtype.element_ty), mask=m)
            carry = tl.sum(tl.where(offs == BT - 1, h, 0.0), axis=0)

    @triton.jit
    def _bwd_lastdim_kernel(a_ptr, h_ptr, g_ptr, ga_ptr, gb_ptr, T, s_a, s_h, s_g, s_ga, s_gb, BT: tl.constexpr):
        # lam_t = g_t + a_{t+1} lam_{t+1}; grad_b = lam; grad_a = lam * h_{t-1}. Chunks are walked
        # from the end and each is loaded in descending time order, so a forward associative scan
        # runs the recurrence backwards in time.
        row = tl.program_id(0).to(tl.int64)
        a_row = a_ptr + row * s_a
        h_row = h_ptr + row * s_h
        g_row = g_ptr + row * s_g
        ga_row = ga_ptr + row * s_ga
        gb_row = gb_ptr + row * s_gb
        offs = tl.arange(0, BT)
        carry = tl.sum(tl.zeros([BT], tl.float32), axis=0)
        n_chunks = tl.cdiv(T, BT)
        for c in range(0, n_chunks):
            t = T - 1 - c * BT - offs
            m = t >= 0
            gate = tl.load(a_row + t + 1, mask=m & (t + 1 < T), other=1.0).to(tl.float32)
            g = tl.load(g_row + t, mask=m, other=0.0).to(tl.float32)
            A, L = tl.associative_scan((gate, g), 0, _combine)
            lam = A * carry + L
            hp = tl.load(h_row + t - 1, mask=m & (t >= 1), other=0.0).to(tl.float32)
            tl.store(gb_row + t, lam.to(gb_ptr.dtype.element_ty), mask=m)
            tl.store(ga_row + t, (lam * hp).to(ga_ptr.dtype.element_ty), mask=m)
            carry = tl.sum(tl.where(offs == BT - 1, lam, 0.0), axis=0)

    @triton.jit
    def _fwd_time_strided_kernel(a_ptr, b_ptr, h_ptr, off_ptr, T, D, s_ab, s_at, s_bb, s_bt, s_hb, s_ht,
                                 HAS_OFF: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
        pid_s = tl.program_id(0).to(tl.int64)
        pid_d = tl.program_id(1)
        if HAS_OFF:
            start = tl.load(off_ptr + pid_s).to(tl.int64)
            end = tl.load(off_ptr + pid_s + 1).to(tl.int64)
            a_base = a_ptr
            b_base = b_ptr
            h_base = h_ptr
        else:
            start = 0
            end = T
            a_base = a_ptr + pid_s * s_ab
            b_base = b_ptr + pid_s * s_bb
            h_base = h_ptr + pid_s * s_hb
        d = pid_d * BD + tl.arange(0, BD)
        dm = d < D
        rows = tl.arange(0, BT)
        carry = tl.zeros([BD], tl.float32)
        for t0 in range(start, end, BT):
            t = (t0 + rows).to(tl.int64)
            m = (t < end)[:, None] & dm[None, :]
            a = tl.load(a_base + t[:, None] * s_at + d[None, :], mask=m, other=1.0).to(tl.float32)
            b = tl.load(b_base + t[:, None] * s_bt + d[None, :], mask=m, other=0.0).to(tl.float32)
            A, H = tl.associative_scan((a, b), 0, _combine)
            h = A * carry[None, :] + H
            tl.store(h_base + t[:, None] * s_ht + d[None, :], h.to(h_ptr.dtype.element_ty), mask=m)
            carry = tl.sum(tl.where(rows[:, None] == BT - 1, h, 0.0), axis=0)


_TUNED = {}
NO_TUNE = False  # the self-test runs the first config of each kernel only (fewer compilations)

# (BT, num_warps) for the time-contiguous kernels; (BT, BD, num_warps) for the strided one
_LASTDIM_CONFIGS = [(1024, 4), (2048, 8), (512, 4)]
_STRIDED_CONFIGS = [(64, 32, 4), (128, 16, 4), (32, 64, 4)]


def _pick(key, configs, launch):
    """The fastest config for ``key`` (timed once with CUDA events), or the first when
    interpreting. ``launch(cfg)`` runs the kernel once."""
    if key in _TUNED:
        return _TUNED[key]
    if INTERPRET or NO_TUNE or len(configs) == 1:
        _TUNED[key] = configs[0]
        return configs[0]
    best, best_ms = None, float("inf")
    for cfg in configs:
        try:
            launch(cfg)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(5):
                launch(cfg)
            e.record()
            e.synchronize()
            ms = s.elapsed_time(e) / 5
        except Exception:  # noqa: BLE001 - a config that does not compile is skipped
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f"no Triton configuration ran for {key}")
    _TUNED[key] = best
    return best


def _rows(x):
    """(..., T) with unit last stride -> a (R, T) view (copies only if the leading dims can't be
    flattened)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x.reshape(-1, x.shape[-1])


def affine_lastdim(a, b):
    """h for time-contiguous (..., T) a and b of one shape."""
    assert a.shape == b.shape, "affine_lastdim: a and b must have one shape"
    shape = b.shape
    a2, b2 = _rows(a), _rows(b)
    h = torch.empty_like(b2)
    R, T = b2.shape
    if R == 0 or T == 0:
        return h.reshape(shape)

    def launch(cfg):
        BT, warps = cfg
        BT = min(BT, triton.next_power_of_2(T))
        _fwd_lastdim_kernel[(R,)](a2, b2, h, T, a2.stride(0), b2.stride(0), h.stride(0), BT=BT, num_warps=warps)

    cfg = _pick(("fwd_lastdim", R, T, b.dtype), _LASTDIM_CONFIGS, launch)
    launch(cfg)
    return h.reshape(shape)


def affine_lastdim_bwd(a, h, g):
    """(grad_a, grad_b) of h = affine_lastdim(a, b) for incoming gradient g (zero initial state)."""
    shape = h.shape
    a2, h2, g2 = _rows(a), _rows(h), _rows(g)
    ga = torch.empty_like(h2)
    gb = torch.empty_like(h2)
    R, T = h2.shape
    if R == 0 or T == 0:
        return ga.reshape(shape), gb.reshape(shape)

    def launch(cfg):
        BT, warps = cfg
        BT = min(BT, triton.next_power_of_2(T))
        _bwd_lastdim_kernel[(R,)](a2, h2, g2, ga, gb, T, a2.stride(0), h2.stride(0), g2.stride(0), ga.stride(0),
                                  gb.stride(0), BT=BT, num_warps=warps)

    cfg = _pick(("bwd_lastdim", R, T, h.dtype), _LASTDIM_CONFIGS, launch)
    launch(cfg)
    return ga.reshape(shape), gb.reshape(shape)


class AffineLastdim(torch.autograd.Function):
    """Forward saves a and h; backward reads a, h, grad_h and writes grad_a, grad_b."""

    @staticmethod
    def forward(ctx, a, b):
        h = affine_lastdim(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, g):
        a, h = ctx.saved_tensors
        ga, gb = affine_lastdim_bwd(a, h, g.contiguous())
        return ga, gb


def affine_time_strided(a, b, dim, offsets=None):
    """h for channels-contiguous data: (B, T, D) along dim=1, or packed (N, D) along dim=0 with
    offsets (S+1 cu_seqlens on the device)."""
    assert a.shape == b.shape, "affine_time_strided: a and b must have one shape"
    if a.stride(-1) != 1:
        a = a.contiguous()
    if b.stride(-1) != 1:
        b = b.contiguous()
    h = torch.empty_like(b, memory_format=torch.contiguous_format)
    if offsets is not None:
        assert b.dim() == 2 and dim in (0, -2), "packed data: (N, D) along dim 0"
        N, D = b.shape
        S = offsets.numel() - 1
        grid_s = S
        args = (a, b, h, offsets, N, D, 0, a.stride(0), 0, b.stride(0), 0, h.stride(0))
        key_shape = (N, D, S)
    else:
        assert b.dim() == 3 and dim in (1, -2), "dense data: (B, T, D) along dim 1"
        B, T, D = b.shape
        grid_s = B
        args = (a, b, h, b, T, D, a.stride(0), a.stride(1), b.stride(0), b.stride(1), h.stride(0), h.stride(1))
        key_shape = (B, T, D)
    if b.numel() == 0 or grid_s == 0:
        return h

    def launch(cfg):
        BT, BD, warps = cfg
        grid = (grid_s, triton.cdiv(D, BD))
        _fwd_time_strided_kernel[grid](*args, HAS_OFF=offsets is not None, BT=BT, BD=BD, num_warps=warps)

    cfg = _pick(("fwd_time_strided", key_shape, b.dtype, offsets is not None), _STRIDED_CONFIGS, launch)
    launch(cfg)
    return h


# ---- self-test (CPU under TRITON_INTERPRET=1, or CUDA) -----------------------------------------


def _ref(a, b, dim, offsets=None):
    """Sequential float64 reference along ``dim`` (restarting at offsets)."""
    a64 = a.double().movedim(dim, 0)
    b64 = b.double().movedim(dim, 0)
    h = torch.empty_like(b64)
    starts = set(offsets.tolist()[:-1]) if offsets is not None else {0}
    state = torch.zeros_like(b64[0])
    for t in range(b64.shape[0]):
        if t in starts:
            state = torch.zeros_like(state)
        state = a64[t] * state + b64[t]
        h[t] = state
    return h.movedim(0, dim)


def _selftest(device):
    global NO_TUNE
    NO_TUNE = True
    torch.manual_seed(0)
    worst = 0.0

    def err(x, r):
        return float((x.double() - r).norm() / r.norm().clamp_min(1e-30))

    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        for shape in ((3, 5, 1), (2, 3, 37), (4, 1300), (1, 2, 2049)):
            a = (0.5 + 0.5 * torch.rand(shape, device=device)).to(dtype)
            b = torch.randn(shape, device=device).to(dtype)
            h = affine_lastdim(a, b)
            e = err(h, _ref(a, b, -1))
            worst = max(worst, e / tol)
            assert e < tol, (shape, dtype, e)
            # backward against autograd through the float64 reference
            a64 = a.double().requires_grad_(True)
            b64 = b.double().requires_grad_(True)
            g = torch.randn(shape, device=device).to(dtype)
            h64 = _ref(a64, b64, -1)
            ga_r, gb_r = torch.autograd.grad(h64, (a64, b64), g.double())
            aa = a.clone().requires_grad_(True)
            bb = b.clone().requires_grad_(True)
            ga, gb = torch.autograd.grad(AffineLastdim.apply(aa, bb), (aa, bb), g)
            for x, r in ((ga, ga_r), (gb, gb_r)):
                e = err(x, r)
                worst = max(worst, e / tol)
                assert e < tol * 4, ("bwd", shape, dtype, e)
        for shape in ((2, 37, 5), (3, 130, 70), (1, 1, 3)):
            a = (0.5 + 0.5 * torch.rand(shape, device=device)).to(dtype)
            b = torch.randn(shape, device=device).to(dtype)
            h = affine_time_strided(a, b, 1)
            e = err(h, _ref(a, b, 1))
            worst = max(worst, e / tol)
            assert e < tol, (shape, dtype, e)
        lengths = [5, 0, 131, 1, 64, 7]
        offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), device=device)
        N = sum(lengths)
        a = (0.5 + 0.5 * torch.rand(N, 19, device=device)).to(dtype)
        b = torch.randn(N, 19, device=device).to(dtype)
        for off in (offsets, offsets.to(torch.int32)):
            h = affine_time_strided(a, b, 0, off)
            e = err(h, _ref(a, b, 0, off))
            worst = max(worst, e / tol)
            assert e < tol, ("packed", dtype, e)
    print(f"triton baselines self-test passed on {device} (worst error / tolerance {worst:.3f})")


if __name__ == "__main__":
    dev = "cuda" if torch.cuda.is_available() and not INTERPRET else "cpu"
    if not available(dev):
        raise SystemExit("Triton is not available here (set TRITON_INTERPRET=1 to run on CPU)")
    _selftest(dev)
