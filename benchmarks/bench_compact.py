"""Benchmarks of ``compact`` and ``unpad``/``pad``: the compaction rows of benchmarks/TARGETS.md.

Rows (GPU sizes; ``--device cpu`` divides them by 2^6, ``--quick`` by 2^4 more):
* compact, 1-D 2^28 float32, 50 % random mask: the fixed-capacity form (no host sync; capacity
  a bound just above the expected count, and capacity = n) and the exact-size form, against
  ``torch.masked_select``, ``x[mask]`` and ``torch.nonzero_static`` + ``index_select``
  (sync-free, but no count).
* the sync-free ``nonzero`` with a count (``return_indices=True`` on the mask itself), against
  ``torch.nonzero_static``.
* unpad and pad of (32, 4096, 1024) bfloat16 with random lengths, against flash-attn's steps
  written with ``torch.nonzero`` and indexing.

Ideal bytes: compaction reads x and the mask once and writes the kept values (and the count);
the capacity form writes all its slots (kept values, then the fill);
the nonzero row reads the mask and writes the int64 indices of the kept positions. unpad reads
the mask and the kept rows and writes them (plus int64 indices); pad reads the packed rows and
the indices and writes the whole padded grid.
"""
import math
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402

import torch_parprims as pp  # noqa: E402

# benchmarks/TARGETS.md, GPU (H200) rows.
CAPACITY_TARGET = (0.80, "CUB DeviceSelect::Flagged 0.78 ms (count on device); torch.masked_select 1.70 ms")
EXACT_TARGET = (0.60, "torch.masked_select 1.70 ms (host sync)")
NONZERO_BEST = "torch.nonzero_static 0.74 ms (no count)"


def sizes(h):
    """(1-D length, (batch, seqlen, hidden) of the unpad rows)."""
    if h.gpu and not h.quick:
        return 1 << 28, (32, 4096, 1024)
    if h.gpu:
        return 1 << 24, (8, 2048, 512)
    if not h.quick:
        return 1 << 22, (8, 1024, 256)
    return 1 << 18, (4, 256, 64)


def exact(out, ref):
    """0 when equal, inf otherwise: compaction moves values, it never rounds them."""
    return (0.0 if out.shape == ref.shape and torch.equal(out, ref) else float("inf")), "x[mask]"


class Compact(harness.CaseSuite):
    def gen(self, n, seed, density=0.5):
        g = torch.Generator(device=self.dev)
        g.manual_seed(1000 + seed)
        x = torch.randn(n, generator=g, device=self.dev)
        mask = torch.rand(n, generator=g, device=self.dev) < density
        return {"x": x, "mask": mask}

    def compact_rows(self, n):
        h = self.h
        kept = n // 2  # the expected count of a 50 % mask; the bytes count it
        nbytes = n * 4 + n + kept * 4

        def check(s, out):
            return exact(out[0][: int(out[1])] if isinstance(out, tuple) else out, s["x"][s["mask"]])

        def nonzero_static_select(s):
            idx = torch.nonzero_static(s["mask"], size=n, fill_value=0).flatten()
            return s["x"].index_select(0, idx)

        baselines = {
            "torch.masked_select": {"fn": lambda s: torch.masked_select(s["x"], s["mask"]), "check": True},
            "x[mask]": lambda s: s["x"][s["mask"]],
            "torch.nonzero_static+index_select": {
                "fn": nonzero_static_select,
                "note": "size=n, no count; the padding slots gather x[0]"},
        }
        # The capacity form writes all `capacity` slots (the kept values, then fill_value): a
        # capacity just above the expected count is the common use (a known bound) and moves what
        # CUB's select moves; capacity = n writes n/2 more slots, counted in its bytes.
        bound = kept + n // 64
        h.bench("compact", "capacity=n/2+n/64, 50%", (n,), torch.float32, n * 4 + n + bound * 4,
                lambda i: self.gen(n, i), ours=lambda s: pp.compact(s["x"], s["mask"], capacity=bound),
                baselines=baselines, check=check, out_bytes=bound * 4,
                notes=["bytes: x + mask + the capacity's slots (kept values, then fill)"],
                **self.target(CAPACITY_TARGET))
        h.bench("compact", "capacity=n, 50% mask", (n,), torch.float32, n * 4 + n + n * 4, lambda i: self.gen(n, i),
                ours=lambda s: pp.compact(s["x"], s["mask"], capacity=n), baselines=dict(list(baselines.items())[:1]),
                check=check, out_bytes=n * 4, notes=["bytes: x + mask + n slots (kept values, then fill)"])
        h.bench("compact", "exact size, 50% mask", (n,), torch.float32, nbytes, lambda i: self.gen(n, i),
                ours=lambda s: pp.compact(s["x"], s["mask"]), baselines=dict(list(baselines.items())[:2]),
                check=check, out_bytes=kept * 4, notes=["host sync for the count, as x[mask]"],
                **self.target(EXACT_TARGET))

    def nonzero_row(self, n):
        h = self.h
        kept = n // 2
        nbytes = n + kept * 8

        def check(s, out):
            return exact(out[2][: int(out[1])], s["mask"].nonzero().flatten())

        h.bench("compact:indices", "sync-free nonzero with count", (n,), torch.bool, nbytes,
                lambda i: self.gen(n, i), ours=lambda s: pp.compact(s["mask"], s["mask"], capacity=n,
                                                                   return_indices=True),
                baselines={"torch.nonzero_static": lambda s: torch.nonzero_static(s["mask"], size=n)},
                check=check, notes=["bytes: mask + int64 indices of the kept positions; ours also copies the "
                                    "kept mask values (1 byte each, not counted)"],
                best_today=NONZERO_BEST if self.full else None)

    def gen_padded(self, shape, seed):
        batch, seqlen, hidden = shape
        g = torch.Generator(device=self.dev)
        g.manual_seed(2000 + seed)
        x = torch.randn(shape, generator=g, device=self.dev).to(torch.bfloat16)
        lengths = torch.randint(1, seqlen + 1, (batch,), generator=g, device=self.dev)
        am = torch.arange(seqlen, device=self.dev) < lengths[:, None]
        return {"x": x, "am": am}

    def unpad_pad_rows(self, shape):
        h = self.h
        batch, seqlen, hidden = shape
        cells = batch * seqlen
        tokens = cells // 2  # random lengths in [1, seqlen]: about half the grid
        row_bytes = hidden * 2

        def torch_unpad(s):
            seqlens = s["am"].sum(dim=-1, dtype=torch.int32)
            indices = torch.nonzero(s["am"].flatten(), as_tuple=False).flatten()
            cu = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
            return s["x"].reshape(cells, hidden)[indices], indices, cu, int(seqlens.max())

        def check_unpad(s, out):
            return exact(out[0], torch_unpad(s)[0])

        h.bench("unpad", "exact size", shape, torch.bfloat16, cells + tokens * (2 * row_bytes + 8),
                lambda i: self.gen_padded(shape, i), ours=lambda s: pp.unpad(s["x"], s["am"]),
                baselines={"torch.nonzero+indexing": torch_unpad}, check=check_unpad,
                notes=["bytes: mask + kept rows read and written + int64 indices (tokens ~ half the grid)"])
        h.bench("unpad", "capacity=batch*seqlen", shape, torch.bfloat16, cells + tokens * (2 * row_bytes + 8),
                lambda i: self.gen_padded(shape, i), ours=lambda s: pp.unpad(s["x"], s["am"], capacity=cells),
                notes=["no host sync; the rows past the token count are filled too"])

        def make_packed(i):
            s = self.gen_padded(shape, i)
            packed, indices, _, _ = torch_unpad(s)
            return {"packed": packed, "indices": indices}

        def torch_pad(s):
            out = s["packed"].new_zeros(cells, hidden)
            out[s["indices"]] = s["packed"]
            return out.view(batch, seqlen, hidden)

        h.bench("pad", "flash-attn pad_input", shape, torch.bfloat16, tokens * (row_bytes + 8) + cells * row_bytes,
                make_packed, ours=lambda s: pp.pad(s["packed"], s["indices"], batch, seqlen),
                baselines={"torch zeros+index_put": torch_pad},
                check=lambda s, out: exact(out, torch_pad(s)),
                notes=["bytes: packed rows + indices read, the padded grid written"])


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv)
    h = harness.Harness("bench_compact", args)
    b = Compact(h)
    n, padded = sizes(h)
    b.compact_rows(n)
    b.nonzero_row(n)
    b.unpad_pad_rows(padded)
    h.finish()


if __name__ == "__main__":
    main()
