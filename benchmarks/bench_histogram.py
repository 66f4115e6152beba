"""Benchmarks of ``histogram``: the histogram rows of benchmarks/TARGETS.md.

Rows (GPU sizes; ``--device cpu`` divides them by 2^6, ``--quick`` by 2^4 more):
* 256 bins over 2^28 float32 values, uniform, and skewed (90 % in one bin), against
  ``torch.histc`` (float32 counts: wrong past 2^24 per bin) and ``torch.bincount`` of bin
  indices computed by torch (the index pass included: bincount needs integers).
* the same skewed data with float32 weights, and one histogram per sequence (2^16 random-length
  sequences).

Ideal bytes: the values (and weights) read once; the bins written once.
"""
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402

import torch_parprims as pp  # noqa: E402

# benchmarks/TARGETS.md, GPU (H200) rows.
UNIFORM_TARGET = (0.90, "CUB DeviceHistogram 0.286 ms; torch.histc 1.13 ms")
SKEWED_TARGET = (0.85, "CUB DeviceHistogram 0.311 ms; torch.histc 19.1 ms (counts wrong past 2^24 per bin)")
BINS = 256
LO, HI = 0.0, 1.0


def sizes(h):
    """(values, sequences of the per-sequence row)."""
    if h.gpu and not h.quick:
        return 1 << 28, 1 << 16
    if h.gpu:
        return 1 << 24, 1 << 12
    if not h.quick:
        return 1 << 22, 1 << 10
    return 1 << 18, 1 << 6


def torch_bin_index(x):
    """The bins as the library computes them (float32), as int64 for bincount."""
    return ((x - LO) * BINS / (HI - LO)).clamp(0, BINS - 1).long()


class Histogram(harness.CaseSuite):
    def gen(self, n, seed, skew=0.0, weights=False, sequences=None):
        g = torch.Generator(device=self.dev)
        g.manual_seed(5000 + seed)
        x = torch.rand(n, generator=g, device=self.dev)
        if skew:
            x = torch.where(torch.rand(n, generator=g, device=self.dev) < skew, 0.4 + x * 1e-3, x)
        s = {"x": x}
        if weights:
            s["w"] = torch.randn(n, generator=g, device=self.dev)
        if sequences:
            cuts = torch.randint(0, n + 1, (sequences - 1,), generator=g, device=self.dev).sort().values
            zero = torch.zeros(1, dtype=torch.int64, device=self.dev)
            s["offsets"] = torch.cat([zero, cuts, zero + n])
        return s

    def check_counts(self, s, out):
        """Exact: the share of the values counted in another bin than torch's float32 bins say."""
        want = torch.bincount(torch_bin_index(s["x"]), minlength=BINS)
        return float((out - want).abs().sum()) / s["x"].numel(), "bincount of torch's float32 bins"

    def rows(self, n, sequences):
        h = self.h
        nbytes = n * 4 + BINS * 8
        for skew, name, spec in ((0.0, "uniform", UNIFORM_TARGET), (0.9, "90% in one bin", SKEWED_TARGET)):
            h.bench("histogram", f"{BINS} bins, {name}", (n,), torch.float32, nbytes,
                    lambda i, skew=skew: self.gen(n, i, skew),
                    ours=lambda s: pp.histogram(s["x"], BINS, (LO, HI)),
                    baselines={"torch.histc": lambda s: torch.histc(s["x"], BINS, LO, HI),
                               "torch.bincount": {"fn": lambda s: torch.bincount(torch_bin_index(s["x"]), minlength=BINS),
                                                  "note": "bin indices computed by torch in the call"}},
                    check=self.check_counts, check_tol=0.0, out_bytes=BINS * 8,
                    notes=["bytes: values read, int64 bins written"], **self.target(spec))

        def check_weights(s, out):
            want = torch.bincount(torch_bin_index(s["x"]), s["w"].double(), minlength=BINS)
            return harness.rel_err(out, want), "bincount with weights, float64"

        h.bench("histogram", f"{BINS} bins, 90% in one bin, float32 weights", (n,), torch.float32,
                n * 8 + BINS * 4, lambda i: self.gen(n, i, 0.9, weights=True),
                ours=lambda s: pp.histogram(s["x"], BINS, (LO, HI), s["w"]),
                baselines={"torch.bincount": lambda s: torch.bincount(torch_bin_index(s["x"]), s["w"], minlength=BINS)},
                check=check_weights, out_bytes=BINS * 4, notes=["bytes: values + weights read"])

        def per_sequence_torch(s):
            ids = torch.repeat_interleave(torch.arange(sequences, device=self.dev), torch.diff(s["offsets"]))
            flat = ids * BINS + torch_bin_index(s["x"])
            return torch.bincount(flat, minlength=sequences * BINS).view(sequences, BINS)

        def check_per_sequence(s, out):
            return float((out - per_sequence_torch(s)).abs().sum()) / s["x"].numel(), "bincount per sequence"

        h.bench("histogram", f"{BINS} bins per sequence, {sequences} sequences", (n,), torch.float32,
                n * 4 + sequences * BINS * 8, lambda i: self.gen(n, i, sequences=sequences),
                ours=lambda s: pp.histogram(s["x"], BINS, (LO, HI), offsets=s["offsets"]),
                baselines={"torch.bincount": {"fn": per_sequence_torch, "note": "segment ids and bins in the call"}},
                check=check_per_sequence, check_tol=0.0, out_bytes=sequences * BINS * 8,
                notes=["bytes: values read, (S, bins) int64 written"])


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv)
    h = harness.Harness("bench_histogram", args)
    n, sequences = sizes(h)
    Histogram(h).rows(n, sequences)
    h.finish()


if __name__ == "__main__":
    main()
