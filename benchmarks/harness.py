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
import sys
import time
import traceback

import torch

# The results table, the summary and the plot (re-exported: the bench scripts use them as harness.*).
from report import _fmt_ms, _short_error, plot, shape_str, summarize, table_header, table_row  # noqa: F401,E402
# How a time and an error are measured (re-exported likewise).
from measure import Timing, _is_cuda_fatal, rel_err, tolerance  # noqa: F401,E402

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


def check_record(err, dtype, ref_name, tol=None):
    """What a record keeps of its output check: the error, the tolerance and whether it passed."""
    tol = tolerance(dtype) if tol is None else tol
    return {"ref": ref_name, "rel_err": err, "tol": tol, "ok": bool(err <= tol)}


def same_bytes_copy(fn):
    """A baseline that moves a row's ideal bytes in one elementwise kernel (a copy, or a + b for
    two inputs): on the GPU, the most any kernel reaches at this size, with its launch, ramp-up and
    tail included, which the 1 GiB copy that ``frac_copy`` divides by does not show. Its
    ``frac_copy`` is the row's ceiling; its ``ratio`` is our share of it."""
    return {"fn": fn, "note": "an elementwise kernel moving the same ideal bytes (this size's ceiling)"}


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


def main(argv=None):
    p = argparse.ArgumentParser(description="Summarize benchmark results files")
    p.add_argument("--summarize", nargs="+", required=True, metavar="FILE.json")
    p.add_argument("--width", type=int, default=150)
    a = p.parse_args(argv)
    for path in a.summarize:
        print(summarize(path, a.width))


if __name__ == "__main__":
    main()
