"""Common benchmark harness for torch_parprims (the rows and their targets: benchmarks/TARGETS.md).

What it measures and how:

* Timing on CUDA: CUDA events around each call, after warm-up, many repeats, the median (p10 and
  p90 are kept too). Before each group of timed calls a ``torch.cuda._sleep`` kernel lets the host
  queue the group ahead of the GPU, so the events measure device time and not launch latency.
  When one input set is smaller than a few times the L2 (60 MB on an H200), calls rotate among
  several input sets so that the L2 is not what is measured. Host-bound baselines (Python loops)
  are timed on the wall clock with a synchronize on either side.
* Timing on CPU: ``time.perf_counter`` around each call, the median.
* The copy bandwidth is measured in the same run: a device-to-device copy of 1 GiB on GPU, a
  128 MiB ``copy_`` on CPU, counting bytes read plus bytes written.
* ``bytes`` of a record is the ideal traffic: each input read once, each output written once
  (scripts say how they count). GB/s = bytes / median time; ``frac_copy`` = GB/s over the copy
  bandwidth; a baseline's ``ratio`` = baseline ms / our ms (above 1: we are faster).

Results: a table on stdout and ``<out>/<device slug>.json`` (``nvidia-h200.json``, ``cpu.json``),
merged with the records that other scripts wrote for the same device (keyed by script), and a PNG
plot ``<out>/<device slug>.png`` when matplotlib is installed.

Command line of every script: ``--device cuda|cpu``, ``--quick`` (small sizes, smoke test),
``--out DIR`` (default benchmarks/results), ``--only REGEX`` (cases whose label matches),
``--budget-s S`` (skip the remaining cases once S seconds have passed), ``--no-plots``,
``--threads N`` (CPU threads), ``--target-s S`` (timed seconds per implementation and case).

``python3 benchmarks/harness.py --summarize FILE.json`` prints a compact summary of a results file.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
GiB = 1 << 30
MiB = 1 << 20


# ---- command line ---------------------------------------------------------------------------


def parse_args(description, argv=None, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    p.add_argument("--out", default=RESULTS_DIR, help="folder for <device>.json and plots")
    p.add_argument("--only", default=None, help="regex: run only the cases whose label matches")
    p.add_argument("--budget-s", type=float, default=None, help="skip cases once this many seconds have passed")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--target-s", type=float, default=None, help="timed seconds per implementation and case")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads for CPU runs (on a loaded machine, 1 gives stable numbers: "
                        "OpenMP barriers stall for whole scheduler ticks when a thread is descheduled)")
    if extra is not None:
        extra(p)
    return p.parse_args(argv)


def device_slug(device):
    if device == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "cuda"


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64", "int32": "i32", "int64": "i64"}


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


def _short_error(e):
    msg = str(e).strip().splitlines()
    first = next((line for line in msg if line.strip()), "")
    return f"{type(e).__name__}: {first}"[:400]


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


def check_record(err, dtype, ref_name, tol=None):
    tol = tolerance(dtype) if tol is None else tol
    return {"ref": ref_name, "rel_err": err, "tol": tol, "ok": bool(err <= tol)}


# ---- the harness ----------------------------------------------------------------------------


class CaseSuite:
    """Base of a benchmark script's cases: the harness `h`, its device, and the target columns
    of a row that the targets table names (only in full runs on the GPU)."""

    def __init__(self, h):
        self.h = h
        self.dev = h.device
        self.full = h.gpu and not h.quick

    def target(self, spec):
        """`spec`: (fraction of the copy bandwidth to reach, the best known today)."""
        if not self.full:
            return {}
        frac, best = spec
        return {"target": f"fraction >= {frac:.2f}", "target_frac": frac, "best_today": best}


class Harness:
    def __init__(self, script, args):
        self.script = script
        self.args = args
        self.device = args.device
        self.quick = args.quick
        self.gpu = self.device == "cuda"
        if self.gpu and not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device is available")
        if getattr(args, "threads", None):
            torch.set_num_threads(args.threads)
        self.t_start = time.time()
        self.records = []
        self.broken = None  # set after a fatal CUDA error: every later case is skipped
        self.finished = False
        self.only = re.compile(args.only) if args.only else None
        if args.target_s is not None:
            self.target_s = args.target_s
        elif self.gpu:
            self.target_s = 0.05 if self.quick else 0.2
        else:
            self.target_s = 0.1 if self.quick else 0.4
        self.max_reps = 200
        self.min_reps = 10 if self.gpu else 5
        self.max_s = 3.0 if self.gpu else 5.0  # cap on one implementation's timed seconds
        if self.gpu:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            self.device_name = props.name
            self.cache_bytes = int(getattr(props, "L2_cache_size", 0) or 60 * 10**6)
            self.sm_count = props.multi_processor_count
            self.mem_cap = 24 * GiB
        else:
            self.device_name = platform.processor() or platform.machine() or "cpu"
            self.cache_bytes = 32 * MiB
            self.sm_count = None
            self.mem_cap = 2 * GiB
        self.slug = device_slug(self.device)
        self._cycles_per_ms = None
        self.copy = self._copy_bandwidth()
        self.copy_Bps = self.copy["GBps"] * 1e9
        print(f"# {script}: device {self.device_name} ({self.slug}); copy bandwidth {self.copy['GBps']:.0f} GB/s "
              f"(read+write, {self.copy['bytes'] / GiB:.2f} GiB moved per copy, {self.copy['ms']:.3f} ms)"
              f"{'; quick sizes' if self.quick else ''}", flush=True)
        self._header_printed = False

    # -- device helpers --

    def sync(self):
        if self.gpu:
            torch.cuda.synchronize()

    def elapsed(self):
        return time.time() - self.t_start

    def over_budget(self):
        b = self.args.budget_s
        return b is not None and self.elapsed() > b

    def n_sets(self, ws_bytes, max_sets=None):
        """How many input sets to rotate among so that the L2 (or the CPU's last-level cache)
        does not hold the inputs of the next call: together well over three times the cache."""
        if max_sets is None:
            max_sets = 8 if self.gpu else 64
        ws = max(int(ws_bytes), 1)
        n = max(1, math.ceil(3 * self.cache_bytes / ws))
        n = min(n, max_sets, max(1, self.mem_cap // ws))
        return n

    def poison(self, nbytes):
        """Fill a block of the caching allocator with NaN and free it, so that an output of the
        same size allocated next lands on NaN: unwritten elements then show in the check."""
        if not self.gpu or nbytes <= 0:
            return
        t = torch.full((max(1, nbytes // 4),), float("nan"), device="cuda")
        del t

    def _calibrate_sleep(self):
        if not self.gpu or not hasattr(torch.cuda, "_sleep"):
            return
        try:
            torch.cuda._sleep(1000)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.cuda._sleep(2_000_000)
            e.record()
            e.synchronize()
            ms = s.elapsed_time(e)
            if ms > 0:
                self._cycles_per_ms = 2_000_000 / ms
        except Exception:  # pragma: no cover - private API
            self._cycles_per_ms = None

    def _copy_bandwidth(self):
        if self.gpu:
            n = (1 << 26) if self.quick else (1 << 28)  # float32: 256 MiB or 1 GiB
            src = torch.randn(n, device="cuda")
            dst = torch.empty_like(src)
            dst.copy_(src)
            torch.cuda.synchronize()
        else:
            n = (1 << 23) if self.quick else (1 << 25)  # 32 MiB or 128 MiB
            src = torch.randn(n)
            dst = torch.empty_like(src)
        t = self.time(lambda s: dst.copy_(src), [{}], min_reps=20 if self.gpu else 5)
        if self.gpu:
            # calibrated after the copies, with the clocks up; the copy itself needs no sleep (GPU-bound)
            self._calibrate_sleep()
        nbytes = 2 * src.numel() * src.element_size()
        return {"bytes": nbytes, "ms": t.ms, "GBps": nbytes / (t.ms * 1e-3) / 1e9, "reps": t.reps}

    # -- timing --

    def time(self, fn, sets, wall=False, target_s=None, min_reps=None, max_reps=None, warmup=2, reps=None):
        """Median timing of ``fn(sets[i % len(sets)])``; see the module docstring."""
        sets = sets or [{}]
        n = len(sets)
        target_s = self.target_s if target_s is None else target_s
        min_reps = self.min_reps if min_reps is None else min_reps
        max_reps = self.max_reps if max_reps is None else max_reps
        # first call (compilation, allocation), then an estimate of one call's time
        self.sync()
        t0 = time.perf_counter()
        fn(sets[0])
        self.sync()
        est = time.perf_counter() - t0
        if est < 0.3:  # slow calls (Python loops) get no further warm-up
            t0 = time.perf_counter()
            k = 0
            while k < max(1, warmup) or (time.perf_counter() - t0 < 0.02 and k < 20):
                fn(sets[k % n])
                k += 1
            self.sync()
            est = (time.perf_counter() - t0) / k
        est = max(est, 1e-7)
        if reps is None:
            reps = int(target_s / est)
            lo = max(1, min(min_reps, int(self.max_s / est)))
            reps = max(lo, min(max_reps, reps))
        if self.gpu and not wall:
            return self._time_events(fn, sets, reps)
        times = []
        for i in range(reps):
            self.sync()
            t0 = time.perf_counter()
            fn(sets[i % n])
            self.sync()
            times.append((time.perf_counter() - t0) * 1e3)
        return Timing(times, "wall clock" + (" + synchronize" if self.gpu else ""))

    def _time_events(self, fn, sets, reps):
        n = len(sets)
        # host time to queue one call (no synchronize), to size the sleep that lets the host run ahead
        k = 3
        t0 = time.perf_counter()
        for i in range(k):
            fn(sets[i % n])
        host_s = (time.perf_counter() - t0) / k
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        group = 25
        for g0 in range(0, reps, group):
            g1 = min(reps, g0 + group)
            if self._cycles_per_ms:
                ms = min(3.0 * host_s * 1e3 * (g1 - g0) + 0.05, 200.0)
                torch.cuda._sleep(int(ms * self._cycles_per_ms))
            for j in range(g0, g1):
                starts[j].record()
                fn(sets[j % n])
                ends[j].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        return Timing(times, "cuda events" + (f", {n} input sets" if n > 1 else ""))

    # -- one benchmark case --

    def label(self, op, case, shape, dtype):
        return f"{op} | {case} | {shape_str(shape)} | {dtype_name(dtype)}"

    def skip(self, op, case, shape, dtype):
        """True (and a note) if this case is filtered out or over budget; nothing is recorded
        for a filtered case."""
        if self.only is not None and not self.only.search(self.label(op, case, shape, dtype)):
            return True
        return False

    def bench(self, op, case, shape, dtype, nbytes, make_set, ours=None, baselines=None, check=None,
              out_bytes=0, notes=None, target=None, target_frac=None, best_today=None, wall=False, n_sets=None,
              check_tol=None):
        """Time ``ours`` and each baseline on the same rotating input sets and record the result.

        make_set(i) -> dict of inputs (seed i). ours(s) / baseline(s) run one call. A baseline is a
        callable, a dict(fn=..., wall=bool, note=str, check=bool, reps=int, target_s=float, skip=str,
        error=str) or a ready Timing.
        check(s, out) -> (rel_err, ref_name) compares our output for set 0 with a reference."""
        if self.skip(op, case, shape, dtype):
            return None
        rec = {
            "script": self.script, "op": op, "case": case, "shape": list(shape) if isinstance(shape, (tuple, list)) else shape,
            "dtype": dtype_name(dtype), "impl": "torch_parprims", "bytes": int(nbytes), "target": target,
            "target_frac": target_frac, "best_today": best_today, "notes": list(notes or []), "baselines": {},
            "error": None, "skipped": None, "check": None,
        }
        if self.broken:
            rec["skipped"] = f"CUDA context broken by an earlier error: {self.broken}"
            return self._finish_case(rec)
        if self.over_budget():
            rec["skipped"] = f"over the time budget ({self.args.budget_s:.0f} s)"
            return self._finish_case(rec)
        t_case = time.time()
        print(f"# case: {self.label(op, case, shape, dtype)} ({self.elapsed():.0f} s)", file=sys.stderr, flush=True)
        try:
            n = n_sets or self.n_sets(nbytes)
            sets = [make_set(i) for i in range(n)]
            self.sync()
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rec["error"] = "inputs: " + _short_error(e)
            self._note_fatal(e)
            return self._finish_case(rec)
        our_t = None
        if ours is not None:
            try:
                if check is not None:
                    self.poison(out_bytes)
                    out = ours(sets[0])
                    self.sync()
                    rec["check"] = self._run_check(check, sets[0], out, dtype, check_tol)
                    del out
                our_t = self.time(ours, sets, wall=wall)
                rec.update(our_t.as_dict())
                rec["GBps"] = nbytes / (our_t.ms * 1e-3) / 1e9
                rec["frac_copy"] = rec["GBps"] * 1e9 / self.copy_Bps
                if target_frac is not None:
                    rec["meets_target"] = bool(rec["frac_copy"] >= target_frac)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rec["error"] = _short_error(e)
                self._note_fatal(e)
        for name, b in (baselines or {}).items():
            if self.broken:
                rec["baselines"][name] = {"error": "skipped: CUDA context broken"}
                continue
            entry = {}
            try:
                if isinstance(b, Timing):
                    t = b
                else:
                    spec = b if isinstance(b, dict) else {"fn": b}
                    if spec.get("note"):
                        entry["note"] = spec["note"]
                    if spec.get("error"):
                        entry["error"] = spec["error"]
                        rec["baselines"][name] = entry
                        continue
                    if spec.get("skip"):
                        entry["skipped"] = spec["skip"]
                        rec["baselines"][name] = entry
                        continue
                    if spec.get("check") and check is not None:
                        self.poison(out_bytes)
                        out = spec["fn"](sets[0])
                        self.sync()
                        entry["check"] = self._run_check(check, sets[0], out, dtype, check_tol)
                        del out
                    t = self.time(spec["fn"], sets, wall=spec.get("wall", False), target_s=spec.get("target_s"),
                                  reps=spec.get("reps"))
                entry.update(t.as_dict())
                entry["GBps"] = nbytes / (t.ms * 1e-3) / 1e9
                entry["frac_copy"] = entry["GBps"] * 1e9 / self.copy_Bps
                if our_t is not None:
                    entry["ratio"] = t.ms / our_t.ms
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                entry["error"] = _short_error(e)
                self._note_fatal(e)
            rec["baselines"][name] = entry
        del sets
        rec["case_s"] = round(time.time() - t_case, 3)
        if self.gpu and not self.broken:
            torch.cuda.empty_cache()
        return self._finish_case(rec)

    def _run_check(self, check, s, out, dtype, tol):
        try:
            err, ref_name = check(s, out)
            return check_record(err, dtype, ref_name, tol)
        except Exception as e:  # noqa: BLE001 - a broken reference is not a broken op
            traceback.print_exc()
            self._note_fatal(e)
            return {"ref": None, "rel_err": None, "ok": False, "error": "check: " + _short_error(e)}

    def add_record(self, rec):
        """Record something measured outside bench() (same fields)."""
        rec.setdefault("script", self.script)
        return self._finish_case(rec)

    def _note_fatal(self, e):
        if self.gpu and _is_cuda_fatal(e):
            self.broken = _short_error(e)
            print(f"# FATAL CUDA error, skipping the remaining cases: {self.broken}", flush=True)

    def _finish_case(self, rec):
        self.records.append(rec)
        if not self._header_printed:
            print(table_header(), flush=True)
            self._header_printed = True
        print(table_row(rec), flush=True)
        try:
            self.save()
        except Exception as e:  # noqa: BLE001
            print(f"# could not save results: {_short_error(e)}", flush=True)
        return rec

    # -- output --

    def meta(self):
        m = {
            "script": self.script,
            "device": self.device,
            "device_name": self.device_name,
            "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "host": platform.node(),
            "threads": torch.get_num_threads(),
            "quick": self.quick,
            "argv": sys.argv[1:],
            "copy": self.copy,
            "cache_bytes": self.cache_bytes,
            "sm_count": self.sm_count,
            "elapsed_s": round(self.elapsed(), 1),
            "complete": self.finished,
        }
        try:
            m["loadavg_1min"] = os.getloadavg()[0]  # other work on the machine makes CPU numbers noisy
        except OSError:
            pass
        try:
            import torch_parprims  # noqa: F401  (registers the ops)

            m["parprims_cuda_kernels"] = bool(torch._C._dispatch_has_kernel_for_dispatch_key("parprims::scan", "CUDA"))
        except Exception:  # noqa: BLE001
            m["parprims_cuda_kernels"] = None
        try:
            import triton

            m["triton"] = triton.__version__
        except Exception:  # noqa: BLE001
            m["triton"] = None
        return m

    def save(self):
        """Merge this script's records into <out>/<slug>.json (called after every case, so that a
        run cut short by a timeout still leaves its results)."""
        out_dir = self.args.out
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{self.slug}.json")
        data = {}
        if os.path.exists(path):
            try:
                with open(path) as f:
                    data = json.load(f)
            except Exception:  # noqa: BLE001
                data = {}
        if not isinstance(data.get("scripts"), dict):
            data = {"scripts": {}}
        data["device"] = self.device_name
        data["slug"] = self.slug
        data["scripts"][self.script] = {"meta": self.meta(), "records": self.records}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, default=_json_default)
            f.write("\n")
        os.replace(tmp, path)
        return path, data

    def finish(self):
        self.finished = True
        path, data = self.save()
        print(f"# wrote {path} ({len(self.records)} records of {self.script}; {self.elapsed():.1f} s)", flush=True)
        if not self.args.no_plots:
            plot(data, os.path.join(self.args.out, f"{self.slug}.png"))
        bad = [r for r in self.records if r.get("error") or (r.get("check") and not r["check"]["ok"])]
        if bad:
            print(f"# {len(bad)} record(s) with errors or failed checks", flush=True)
        return path


def _json_default(o):
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, torch.dtype):
        return dtype_name(o)
    return str(o)


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


def main(argv=None):
    p = argparse.ArgumentParser(description="Summarize benchmark results files")
    p.add_argument("--summarize", nargs="+", required=True, metavar="FILE.json")
    p.add_argument("--width", type=int, default=150)
    a = p.parse_args(argv)
    for path in a.summarize:
        print(summarize(path, a.width))


if __name__ == "__main__":
    main()
