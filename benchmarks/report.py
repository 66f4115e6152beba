"""The report side of the benchmark harness (benchmarks/harness.py): a record as a table row,
the compact summary of a results file (``python3 benchmarks/harness.py --summarize FILE.json``)
and the plot of every row's fraction of copy bandwidth."""
import json

_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64", "int32": "i32", "int64": "i64"}


def _short_error(e):
    msg = str(e).strip().splitlines()
    first = next((line for line in msg if line.strip()), "")
    return f"{type(e).__name__}: {first}"[:400]


# ---- table ----------------------------------------------------------------------------------


def shape_str(shape):
    if isinstance(shape, (tuple, list)):
        return "x".join(_pow2(s) for s in shape)
    return str(shape)


def _pow2(s):
    s = int(s)
    if s >= 1024 and s & (s - 1) == 0:
        return f"2^{s.bit_length() - 1}"
    return str(s)


def _fmt_ms(ms):
    if ms is None:
        return "-"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def _fmt_frac(f):
    return "-" if f is None else f"{f:.2f}"


def table_header():
    return (f"{'op':<22} {'case':<22} {'shape':<15} {'dtype':<5} {'ms':>8} {'GB/s':>6} {'frac':>5} {'tgt':>5} "
            f"{'chk':<4} baselines: ms (their ms / ours)")


def table_row(r):
    ms = r.get("ms")
    frac = r.get("frac_copy")
    tgt = r.get("target_frac")
    chk = "-"
    if r.get("check"):
        chk = "ok" if r["check"]["ok"] else "BAD"
    base = []
    for name, b in (r.get("baselines") or {}).items():
        if b.get("error"):
            base.append(f"{name} ERR")
        elif b.get("skipped"):
            base.append(f"{name} skipped")
        else:
            ratio = b.get("ratio")
            base.append(f"{name} {_fmt_ms(b.get('ms'))}" + (f" (x{ratio:.2f})" if ratio is not None else ""))
    head = (f"{r['op'][:22]:<22} {str(r['case'])[:22]:<22} {shape_str(r['shape'])[:15]:<15} "
            f"{_SHORT.get(r['dtype'], r['dtype'])[:5]:<5} ")
    if r.get("skipped"):
        return head + f"SKIPPED: {r['skipped']}"
    body = (f"{_fmt_ms(ms):>8} {(r.get('GBps') or 0):>6.0f} {_fmt_frac(frac):>5} {_fmt_frac(tgt):>5} {chk:<4} ")
    if ms is None:
        body = f"{'ERR':>8} {'':>6} {'':>5} {'':>5} {chk:<4} "
    line = head + body + "; ".join(base)
    if r.get("error"):
        line += f"  [ours: {r['error'][:120]}]"
    return line


def compact_row(r):
    """One short line: op, case, shape, dtype, ms, fraction, target, check, ratio to each baseline."""
    op = r["op"].replace("segmented_scan", "segscan").replace("affine_scan", "affine")
    head = (f"{op[:14]:<14} {str(r['case'])[:21]:<21} {shape_str(r['shape'])[:13]:<13} "
            f"{_SHORT.get(r['dtype'], r['dtype'])[:4]:<4} ")
    if r.get("skipped"):
        return head + "skipped: " + r["skipped"][:60]
    chk = "-" if not r.get("check") else ("ok" if r["check"]["ok"] else "BAD")
    if r.get("ms") is None:
        body = f"{'ERR':>8} {'':>5} {_fmt_frac(r.get('target_frac')):>5} {chk:<3} " + (r.get("error") or "")[:50]
    else:
        body = f"{_fmt_ms(r['ms']):>8} {_fmt_frac(r.get('frac_copy')):>5} {_fmt_frac(r.get('target_frac')):>5} {chk:<3}"
    base = []
    for name, b in (r.get("baselines") or {}).items():
        if b.get("error"):
            base.append(f"{name} ERR")
        elif b.get("skipped"):
            continue
        elif b.get("ratio") is not None:
            base.append(f"{name} x{b['ratio']:.2f}" + ("" if not b.get("check") or b["check"]["ok"] else " BAD"))
        elif b.get("ms") is not None:
            base.append(f"{name} {_fmt_ms(b['ms'])}ms")
    return head + body + (" | " + "; ".join(base) if base else "")


def summarize(path, width=150):
    """Compact summary of a results file: one line per record."""
    with open(path) as f:
        data = json.load(f)
    lines = [f"# {data.get('device')} ({path})"]
    for script, block in data.get("scripts", {}).items():
        m = block.get("meta", {})
        copy = m.get("copy", {})
        lines.append(f"## {script}: copy {copy.get('GBps', 0):.0f} GB/s, torch {m.get('torch')}, "
                     f"{len(block.get('records', []))} records, {m.get('elapsed_s')} s, CUDA kernels: "
                     f"{m.get('parprims_cuda_kernels')}")
        lines.append(f"{'op':<14} {'case':<21} {'shape':<13} {'dt':<4} {'ms':>8} {'frac':>5} {'tgt':>5} chk | "
                     "baseline x(their ms / ours)")
        for r in block.get("records", []):
            lines.append(compact_row(r)[:width])
        n_err = sum(1 for r in block.get("records", []) if r.get("error"))
        n_bad = sum(1 for r in block.get("records", []) if r.get("check") and not r["check"]["ok"])
        n_tgt = [r.get("meets_target") for r in block.get("records", []) if r.get("meets_target") is not None]
        lines.append(f"## {script}: {n_err} errors, {n_bad} failed checks, "
                     f"{sum(n_tgt)}/{len(n_tgt)} rows meet their target fraction")
    return "\n".join(lines)


# ---- plots ----------------------------------------------------------------------------------


def plot(data, path):
    """Horizontal bars of the fraction of copy bandwidth (log scale), one pair per record: ours and
    the fastest baseline (named at the bar's end); a black tick marks the target. Skipped quietly
    when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return None
    try:
        rows = []
        for script, block in data.get("scripts", {}).items():
            for r in block.get("records", []):
                best = None
                for name, b in (r.get("baselines") or {}).items():
                    f = b.get("frac_copy")
                    if f and (best is None or f > best[1]):
                        best = (name, f)
                if not r.get("frac_copy") and best is None:
                    continue
                label = f"{r['op']} {r['case']} {shape_str(r['shape'])} {_SHORT.get(r['dtype'], r['dtype'])}"
                rows.append((label, r.get("frac_copy"), best, r.get("target_frac")))
        if not rows:
            return None
        fig, ax = plt.subplots(figsize=(10, 0.2 * len(rows) + 1.2))
        hgt = 0.4
        for i, (label, ours, best, tgt) in enumerate(rows):
            if ours:
                ax.barh(i - hgt / 2, ours, height=hgt, color="tab:blue")
            if best:
                ax.barh(i + hgt / 2, best[1], height=hgt, color="tab:orange")
                ax.text(best[1] * 1.05, i + hgt / 2, best[0], fontsize=4, va="center")
            if tgt is not None:
                ax.plot([tgt, tgt], [i - 0.45, i + 0.45], color="k", linewidth=1)
        from matplotlib.patches import Patch

        handles = [Patch(color="tab:blue", label="torch_parprims"),
                   Patch(color="tab:orange", label="fastest baseline (named)")]
        ax.set_xscale("log")
        ax.set_xlim(1e-3, 2.0)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r[0] for r in rows], fontsize=5)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel("fraction of copy bandwidth (ideal bytes / time / copy GB/s), log scale; black tick: target")
        ax.set_title(f"torch_parprims on {data.get('device')}", fontsize=9)
        ax.legend(handles=handles, fontsize=6, loc="lower right")
        ax.grid(axis="x", alpha=0.3, which="both")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(f"# wrote {path}", flush=True)
        return path
    except Exception as e:  # noqa: BLE001
        print(f"# plot skipped: {_short_error(e)}", flush=True)
        return None
