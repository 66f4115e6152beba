"""The sweep: fraction of copy bandwidth against row length, at a fixed number of elements.

For row lengths 2^4, 2^6, ..., 2^28 (GPU; ``--device cpu`` stops at 2^22 elements, ``--quick``
at 2^16), a (total / length, length) tensor is scanned along its last dimension:
* ``scan`` add, ours and ``torch.cumsum``, float32 and bfloat16;
* ``affine_scan`` h_t = a_t h_{t-1} + b_t (no torch native exists), float32 and bfloat16.
Ideal bytes: a scan reads x and writes y; an affine scan reads a and b and writes h.

Besides the usual table and ``<device>.json`` records (script ``bench_sweep``), it draws
``<out>/<device>-sweep.png``: one line per (op, dtype, implementation), and the two row lengths
where the CUDA dispatch switches kernels for these shapes (``cuda/engine/engine.cuh``,
``Engine::operator()``, and ``cuda/engine/policy.cuh``): below the row loop's shortest row the
flat kernel packs several rows into a tile; from there while there are at least two rows per
SM, the row-loop kernel gives each block whole rows; past that (few long rows) the row-loop kernel cuts
each row into spans (a summary pass, then the full pass from each span's carry).

    python3 benchmarks/bench_sweep.py --device cuda             # about a minute on an H200
    python3 benchmarks/bench_sweep.py --device cpu --quick      # smoke test
"""
import math
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # harness, and the repo root (an in-place build works uninstalled)
import harness  # noqa: E402
from harness import rel_err  # noqa: E402

import torch_parprims as pp  # noqa: E402

# The shortest rows of the row-loop kernel (cuda/engine/policy.cuh RowPolicy::kMinRowLength):
# a float32 add scan has tiles of 64 x 8 and takes rows of a whole tile; a bfloat16 one
# (accumulated in float32) 128 x 16 and an affine pair of floats 128 x 8, from half a tile.
# The row loop also needs 2 rows per SM.
MIN_ROW_LOOP_LENGTH = {("scan:add", "float32"): 512, ("scan:add", "bfloat16"): 1024, ("affine_scan", None): 512}
ROW_LOOP_ROWS_PER_SM = 2


def log2_total(h):
    if not h.gpu:
        return 16 if h.quick else 22
    return 20 if h.quick else 28


def gen(shape, dtype, seed, device, positive=False):
    g = torch.Generator(device=device)
    g.manual_seed(2000 + seed)
    if positive:  # gates in (0.5, 1): the recurrence neither explodes nor forgets at once
        return (0.5 + 0.5 * torch.rand(shape, generator=g, device=device)).to(dtype)
    return torch.randn(shape, generator=g, device=device).to(dtype)


def check_rows(out, ref):
    """Relative error on the first rows (a float64 reference of the whole sweep would dominate)."""
    return rel_err(out[:4].double(), ref)


def scan_case(h, length, dtype):
    total = 1 << log2_total(h)
    shape = (total // length, length)
    esize = torch.empty((), dtype=dtype).element_size()

    def make(i):
        return {"x": gen(shape, dtype, i, h.device)}

    def check(s, out):
        return check_rows(out, torch.cumsum(s["x"][:4].double(), -1)), "float64 cumsum of the first rows"

    return h.bench("scan:add", f"sweep 2^{int(math.log2(length))}", shape, dtype, total * 2 * esize, make,
                   ours=lambda s: pp.scan(s["x"], -1), baselines={"torch.cumsum": lambda s: torch.cumsum(s["x"], -1)},
                   check=check, out_bytes=total * esize,
                   check_tol=harness.tolerance(dtype) * max(1.0, math.sqrt(length / 4096)))


def affine_reference(a, b):
    """h_t = a_t h_{t-1} + b_t in float64, by doubling (log2(L) vector steps)."""
    a, b = a.double().clone(), b.double().clone()
    step = 1
    while step < a.shape[-1]:
        b[..., step:] = a[..., step:] * b[..., :-step] + b[..., step:]
        a[..., step:] = a[..., step:] * a[..., :-step]
        step *= 2
    return b


def affine_case(h, length, dtype):
    total = 1 << log2_total(h)
    shape = (total // length, length)
    esize = torch.empty((), dtype=dtype).element_size()

    def make(i):
        return {"a": gen(shape, dtype, i, h.device, positive=True), "b": gen(shape, dtype, 100 + i, h.device)}

    def check(s, out):
        return check_rows(out, affine_reference(s["a"][:4], s["b"][:4])), "float64 doubling recurrence of the first rows"

    return h.bench("affine_scan", f"sweep 2^{int(math.log2(length))}", shape, dtype, total * 3 * esize, make,
                   ours=lambda s: pp.affine_scan(s["a"], s["b"], -1)[0], check=check, out_bytes=total * esize,
                   check_tol=harness.tolerance(dtype) * max(1.0, math.sqrt(length / 4096)))


def plot_sweep(h, records, path):
    """Fraction of copy bandwidth against log2(row length): ours solid, torch dashed; dotted
    verticals where the CUDA dispatch switches kernels. Skipped without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return None
    lines = {}
    for r in records:
        if not r or not r.get("frac_copy"):
            continue
        k = int(r["case"].split("^")[1])
        lines.setdefault((r["op"], r["dtype"], "ours"), []).append((k, r["frac_copy"]))
        for name, b in (r.get("baselines") or {}).items():
            if b.get("frac_copy"):
                lines.setdefault((r["op"], r["dtype"], name), []).append((k, b["frac_copy"]))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(9, 5))
    colors = {"scan:add": "tab:blue", "affine_scan": "tab:orange"}
    for (op, dt, impl), pts in sorted(lines.items()):
        pts.sort()
        style = "-" if impl == "ours" else "--"
        marker = "o" if dt == "float32" else "s"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=marker, markersize=4,
                color=colors.get(op, "gray") if impl == "ours" else "tab:gray", label=f"{op} {dt} {impl}")
    if h.gpu:
        total = log2_total(h)
        last_row_loop = total - math.ceil(math.log2(ROW_LOOP_ROWS_PER_SM * h.sm_count))
        for (op, _), length in MIN_ROW_LOOP_LENGTH.items():
            ax.axvline(math.log2(length), color=colors[op], ls=":", lw=1)
        ax.axvline(last_row_loop + 0.5, color="black", ls=":", lw=1)
        ax.text(last_row_loop + 0.6, 0.02, f"< {ROW_LOOP_ROWS_PER_SM} rows per SM:\nrows cut into spans", fontsize=8)
        ax.text(math.log2(min(MIN_ROW_LOOP_LENGTH.values())) - 5.5, 0.02, "short rows:\nflat kernel, rows packed",
                fontsize=8)
    ax.set_xlabel(f"log2(row length), 2^{log2_total(h)} elements in all")
    ax.set_ylabel("fraction of copy bandwidth")
    ax.set_ylim(0, 1.2)  # room for the legend above the lines
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    ax.set_title(f"scan and affine_scan along the last dim, {h.device_name}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    args = harness.parse_args(__doc__.splitlines()[0], argv)
    h = harness.Harness("bench_sweep", args)
    records = []
    for k in range(4, log2_total(h) + 1, 2):
        for dtype in (torch.float32, torch.bfloat16):
            records.append(scan_case(h, 1 << k, dtype))
            records.append(affine_case(h, 1 << k, dtype))
    h.finish()
    if not args.no_plots:
        path = plot_sweep(h, records, os.path.join(args.out, f"{h.slug}-sweep.png"))
        if path:
            print(f"# wrote {path}", flush=True)


if __name__ == "__main__":
    main()
