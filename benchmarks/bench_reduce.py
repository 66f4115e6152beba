"""Benchmarks of ``segment_reduce`` and masked ``reduce``: the reduction rows of benchmarks/TARGETS.md.

Rows (GPU sizes; ``--device cpu`` divides them by 2^6, ``--quick`` by 2^4 more):
* segment sum and max, 1-D 2^26 float32 in 2^16 random-length sequences, against
  ``torch.segment_reduce`` and ``index_add_`` / ``index_reduce_`` over precomputed segment ids.
* the same sum with one sequence of half the elements among 2^16 tiny ones (the length
  distribution must not matter), and over (2^20, 64) features.
* logsumexp per sequence, against ``torch.segment_reduce`` of nothing (torch has none): a
  ``segment_reduce`` max, then ``exp(x - max)`` summed.
* masked mean pooling of a padded (32, 4096, 1024) bfloat16 batch over the sequence, against
  ``(h * mask).sum(1) / lengths``.

Ideal bytes: a reduction reads its input (and mask) once and writes one value per output; the
offsets are counted too.
"""
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402

import torch_parprims as pp  # noqa: E402

# benchmarks/TARGETS.md, GPU (H200) rows.
SUM_TARGET = (0.85, "torch.segment_reduce 0.124 ms; CUB DeviceSegmentedReduce 0.128 ms")
MAX_TARGET = (0.85, "CUB DeviceSegmentedReduce 0.167 ms; torch.segment_reduce 0.298 ms")


def sizes(h):
    """(elements, sequences, (batch, seqlen, hidden) of the pooling row)."""
    if h.gpu and not h.quick:
        return 1 << 26, 1 << 16, (32, 4096, 1024)
    if h.gpu:
        return 1 << 22, 1 << 12, (8, 2048, 512)
    if not h.quick:
        return 1 << 20, 1 << 10, (8, 1024, 256)
    return 1 << 16, 1 << 6, (4, 256, 64)


class Reduce(harness.CaseSuite):
    def gen(self, n, sequences, seed, features=(), huge=False):
        g = torch.Generator(device="cpu")
        g.manual_seed(3000 + seed)
        if huge:  # one sequence of half the elements, the rest of about equal tiny lengths
            lengths = torch.randint(0, 2 * (n // 2) // sequences + 1, (sequences - 1,), generator=g)
            lengths = torch.cat([lengths[: sequences // 2], torch.tensor([n - int(lengths.sum())]),
                                 lengths[sequences // 2:]])
        else:  # random lengths (random cut points) adding up to n
            cuts = torch.randint(0, n + 1, (sequences - 1,), generator=g).sort().values
            lengths = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]))
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(self.dev)
        x = torch.randn((n,) + tuple(features), device=self.dev)
        ids = torch.repeat_interleave(torch.arange(sequences, device=self.dev), lengths.to(self.dev))
        return {"x": x, "offsets": offsets, "lengths": lengths.to(self.dev), "ids": ids}

    def segment_rows(self, n, sequences):
        h = self.h
        nbytes = n * 4 + (sequences + 1) * 8 + sequences * 4

        def check_with(op):
            def check(s, out):
                want = torch.segment_reduce(s["x"].double(), op, offsets=s["offsets"], axis=0)
                return harness.rel_err(out, want), "torch.segment_reduce (float64)"
            return check

        def index_add(s):
            return torch.zeros(sequences, device=self.dev).index_add_(0, s["ids"], s["x"])

        def index_amax(s):
            return torch.full((sequences,), float("-inf"), device=self.dev).index_reduce_(
                0, s["ids"], s["x"], "amax", include_self=True)

        h.bench("segment_reduce", f"sum, {sequences} random-length sequences", (n,), torch.float32, nbytes,
                lambda i: self.gen(n, sequences, i), ours=lambda s: pp.segment_reduce(s["x"], s["offsets"], "sum"),
                baselines={"torch.segment_reduce": lambda s: torch.segment_reduce(s["x"], "sum", offsets=s["offsets"]),
                           "index_add_": {"fn": index_add, "note": "segment ids precomputed"}},
                check=check_with("sum"), out_bytes=sequences * 4, notes=["bytes: x + offsets + outputs"],
                **self.target(SUM_TARGET))
        h.bench("segment_reduce", f"max, {sequences} random-length sequences", (n,), torch.float32, nbytes,
                lambda i: self.gen(n, sequences, i), ours=lambda s: pp.segment_reduce(s["x"], s["offsets"], "max"),
                baselines={"torch.segment_reduce": lambda s: torch.segment_reduce(s["x"], "max", offsets=s["offsets"]),
                           "index_reduce_ amax": {"fn": index_amax, "note": "segment ids precomputed"}},
                check=check_with("max"), out_bytes=sequences * 4, **self.target(MAX_TARGET))
        h.bench("segment_reduce", f"sum, 1 huge + {sequences - 1} tiny sequences", (n,), torch.float32, nbytes,
                lambda i: self.gen(n, sequences, i, huge=True),
                ours=lambda s: pp.segment_reduce(s["x"], s["offsets"], "sum"),
                baselines={"torch.segment_reduce": lambda s: torch.segment_reduce(s["x"], "sum", offsets=s["offsets"])},
                check=check_with("sum"), out_bytes=sequences * 4,
                notes=["the length distribution should not change the time"])
        rows, feats = n // 64, 64
        fbytes = n * 4 + (sequences + 1) * 8 + sequences * feats * 4
        h.bench("segment_reduce", f"sum over {feats} features", (rows, feats), torch.float32, fbytes,
                lambda i: self.gen(rows, sequences, i, features=(feats,)),
                ours=lambda s: pp.segment_reduce(s["x"], s["offsets"], "sum"),
                baselines={"torch.segment_reduce": lambda s: torch.segment_reduce(s["x"], "sum", offsets=s["offsets"]),
                           "index_add_": {"fn": lambda s: torch.zeros(sequences, feats, device=self.dev).index_add_(
                               0, s["ids"], s["x"]), "note": "segment ids precomputed"}},
                check=check_with("sum"), out_bytes=sequences * feats * 4)

        def torch_logsumexp(s):
            m = torch.segment_reduce(s["x"], "max", offsets=s["offsets"])
            e = torch.exp(s["x"] - m.index_select(0, s["ids"]))
            return m + torch.segment_reduce(e, "sum", offsets=s["offsets"]).log()

        h.bench("segment_reduce", f"logsumexp, {sequences} random-length sequences", (n,), torch.float32, nbytes,
                lambda i: self.gen(n, sequences, i),
                ours=lambda s: pp.segment_reduce(s["x"], s["offsets"], "logsumexp"),
                baselines={"torch max + exp + sum": torch_logsumexp},
                check=lambda s, out: (harness.rel_err(out, torch_logsumexp({**s, "x": s["x"].double()})),
                                      "torch, float64"),
                out_bytes=sequences * 4)

    def pooling_row(self, shape):
        h = self.h
        batch, seqlen, hidden = shape

        def gen(i):
            g = torch.Generator(device="cpu")
            g.manual_seed(4000 + i)
            hs = torch.randn(shape, generator=g).to(device=self.dev, dtype=torch.bfloat16)
            lengths = torch.randint(1, seqlen + 1, (batch,), generator=g).to(self.dev)
            mask = torch.arange(seqlen, device=self.dev)[None, :] < lengths[:, None]
            return {"h": hs, "mask": mask, "lengths": lengths}

        def torch_pool(s):
            return ((s["h"] * s["mask"][..., None]).sum(1) / s["lengths"][:, None]).to(torch.bfloat16)

        def check(s, out):
            want = (s["h"].double() * s["mask"][..., None]).sum(1) / s["lengths"][:, None]
            return harness.rel_err(out, want), "torch, float64"

        nbytes = batch * seqlen * (hidden * 2 + 1) + batch * hidden * 2
        h.bench("reduce", "masked mean pooling over the sequence", shape, torch.bfloat16, nbytes, gen,
                ours=lambda s: pp.reduce(s["h"], 1, "mean", s["mask"][..., None]),
                baselines={"(h * mask).sum(1) / lengths": torch_pool}, check=check, out_bytes=batch * hidden * 2,
                notes=["bytes: h + mask + outputs; the padded positions are read too"])


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv)
    h = harness.Harness("bench_reduce", args)
    b = Reduce(h)
    n, sequences, pooled = sizes(h)
    b.segment_rows(n, sequences)
    b.pooling_row(pooled)
    h.finish()


if __name__ == "__main__":
    main()
