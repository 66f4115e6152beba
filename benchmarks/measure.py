"""What the benchmark harness (benchmarks/harness.py) measures with: a timing's median and
spread, and the relative error of an output against its reference."""
import math
import statistics

import torch


# ---- timing ---------------------------------------------------------------------------------


class Timing:
    """Median / p10 / p90 milliseconds of ``reps`` calls; ``how`` says how they were taken."""

    def __init__(self, times_ms, how, note=None):
        ts = sorted(times_ms)
        self.ms = statistics.median(ts)
        self.p10 = ts[int(0.1 * (len(ts) - 1))]
        self.p90 = ts[int(math.ceil(0.9 * (len(ts) - 1)))]
        self.reps = len(ts)
        self.how = how
        self.note = note

    @classmethod
    def fixed(cls, ms, how, note=None):
        return cls([ms], how, note)

    def as_dict(self):
        d = {"ms": self.ms, "ms_p10": self.p10, "ms_p90": self.p90, "reps": self.reps, "how": self.how}
        if self.note:
            d["note"] = self.note
        return d


def _is_cuda_fatal(e):
    s = str(e)
    return any(k in s for k in ("illegal memory access", "device-side assert", "unspecified launch failure",
                                "CUDA error: an illegal", "misaligned address", "illegal instruction"))


# ---- checks ---------------------------------------------------------------------------------


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 over the elements where ref is finite; inf if the
    non-finite pattern differs (NaN never passes)."""
    if out.shape != ref.shape:
        return float("inf")
    o = out.detach().to(torch.complex128 if out.is_complex() else torch.float64)
    r = ref.detach().to(o.dtype).to(o.device)
    fin_r = torch.isfinite(r)
    fin_o = torch.isfinite(o)
    if not torch.equal(fin_r, fin_o):
        return float("inf")
    if not fin_r.all():
        same = (o[~fin_r] == r[~fin_r]) | (torch.isnan(o[~fin_r]) & torch.isnan(r[~fin_r]))
        if not bool(same.all()):
            return float("inf")
        o, r = o[fin_r], r[fin_r]
    den = float(torch.linalg.vector_norm(r))
    num = float(torch.linalg.vector_norm(o - r))
    return num / den if den > 0 else num


def tolerance(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return 2e-2
    if dtype == torch.float32:
        return 1e-4
    if dtype == torch.float64:
        return 1e-10
    return 0.0
