"""This machine's peaks: GEMM GFLOP/s (fp32) and memory bandwidth, measured and cached.

    python -m diagnose.layers.efficiency.probe [--json] [--refresh] [--quick]
    python -m diagnose.layers.efficiency.probe --sample-spread

Contract
- GEMM: `torch.mm(a, b, out=c)` on square fp32 matrices at 1 thread and at
  the usable CPU count (affinity and cgroup quota, diagnose.machine). The
  size is the smallest of GEMM_SIZES whose one call takes >= the target
  (20 ms; 5 ms quick), so the kernel runs at its steady state rather than
  in its small-matrix ramp; then it is repeated for ~0.3 s (>= 5 calls)
  after a warm-up call and the median call gives GFLOP/s = 2 n^3 / t.
- Memory: STREAM-style copy (`b.copy_(a)`, 2 x size bytes) and triad
  (`torch.add(b, c, alpha=3, out=a)`, 3 x size bytes) on fp32 arrays of
  max(256 MiB, 8 x the last-level cache) each (64 MiB in quick mode), at
  the same thread counts; GB/s = 1e9 bytes/s of the median call. Write-
  allocate traffic is not counted (STREAM's convention), so the real bus
  traffic is a little higher. The roof is the better of copy and triad.
- Process to process (first, before this process starts torch's threads):
  8 processes forked one after another (4 quick) each time the same step, a
  small GEMM, a pointwise op and a copy, for 0.3 s (0.15 s quick) at
  torch's default threads. Each number's spread (the three shares of the
  step, the GEMM's mean call) is exp(1.96 sd of its logs) - 1, the 95%
  half-width of one process's value; the largest is the floor of the
  interval findings judge a share or a call time on (report/borderline.py),
  where it is wider than the 10% assumed without it. Its processes are also
  the first samples of the machine's spread history (below).
- Spread history (`--sample-spread`, one sample a diagnosis): a vCPU's speed
  state lasts tens of seconds, so a probe's 8 processes (3 s) mostly sit in
  one state and read 3-7%, or 12-36% when a change of state falls inside
  them (benchmarks/RESULTS.md, "The probe's process spread from probe to
  probe"). Each diagnosis times the same step once more, in a process of
  its own, and appends it to `spread-<key>.json` beside the cache (the
  last HISTORY_KEEP samples, written under a lock and replaced atomically).
  Once HISTORY_MIN uncontended samples at the run's threads are there,
  their spread (the same statistic, the outermost 2.5% each side left out)
  is the floor instead of the probe's own: it spans the machine's states
  over the runs rather than one probe's seconds.
- Everything else runs in this process, which is its own (the layer starts
  it as a subprocess: it changes torch's thread count). Total ~6-8 s on 2
  cores plus torch's import; quick mode ~2-3 s.
- Cache: one JSON file per machine key (CPU model, usable CPUs, torch
  version) in $DIAGNOSE_CACHE_DIR, else $XDG_CACHE_HOME/diagnose, else
  ~/.cache/diagnose. `--refresh` measures again and replaces it. A probe
  during which other processes took CPUs our threads needed (/proc/stat busy
  time minus our own) is marked `contended` and used once, never cached; a
  contended process spread alone is cached, marked, and not used as a floor.
  Reading the
  cache (`cached_peaks`) needs no torch, so a report with warm cache pays
  nothing here.

Output (`--json`, and the cache file): {"key": {...}, "measured_at", "mode":
"full"|"quick", "gemm_fp32": [{"threads", "n", "gflops_per_s", "calls",
"median_s", "iqr_pct"}], "memory": [{"threads", "array_mib", "copy_gb_per_s",
"triad_gb_per_s", "gb_per_s"}], "call_costs": {...}, "process_spread": {"processes", "threads",
"window_s", "groups": [{"name", "what", "low", "high", "spread_pct"}], "spread_pct", "contended"} or null,
"loadavg_1m", "probe_s"}: plain JSON, readable
without diagnose. A report holds it typed, as report.model.Peaks (with
`cached` and `cache_path` added); its `gemm_peak`/`bandwidth_peak` read it.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from diagnose import machine
from diagnose.report import io as report_io
from diagnose.report.borderline import HISTORY_MIN
from diagnose.report.model import Peaks, ProcessSpread, SpreadGroup
from microbench.machine import cpu_snapshot, others_cpus

CACHE_ENV = "DIAGNOSE_CACHE_DIR"
# bump when the file's meaning changes: older files are then re-measured (2: call_costs; 3: pages; 4: the fastest
# loop; 5: process_spread)
CACHE_FORMAT = 5
GEMM_SIZES = (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
MODES = {
    # target seconds per GEMM call, seconds of repeats, min repeats, array MiB floor
    "full": {"gemm_call_s": 0.02, "repeat_s": 0.3, "min_calls": 5, "array_mib": 256, "llc_factor": 8},
    "quick": {"gemm_call_s": 0.005, "repeat_s": 0.08, "min_calls": 3, "array_mib": 64, "llc_factor": 0},
}
MAX_ARRAY_MIB = 1024
CONTENTION_SLACK_CPUS = 0.2  # background noise (kernel threads, editors) that is not contention


# ------------------------------------------------------------------ the cache (no torch needed)


def cache_dir(env: dict[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return env[CACHE_ENV]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "diagnose")


def machine_key(cpu_model: str, usable_cpus: int, torch_version: str, mode: str = "full",
                isa: str = "") -> dict[str, Any]:
    """What a cached probe result stands for: the machine (its model name and vector instruction sets: a VM's
    "AMD EPYC" can be an AVX2 or an AVX-512 host), torch, and the probe's mode (a quick probe's smaller
    arrays and runs are never taken for the full roofs)."""
    return {"cpu_model": cpu_model, "isa": isa, "usable_cpus": int(usable_cpus), "torch_version": torch_version,
            "mode": mode}


def _digest(key: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(key: dict[str, Any], directory: str | None = None) -> str:
    return os.path.join(directory or cache_dir(), f"peaks-{_digest(key)}.json")


def cached_peaks(key: dict[str, Any], directory: str | None = None) -> dict[str, Any] | None:
    """The cached probe result for this machine key, or None (missing, unreadable, other format)."""
    path = cache_path(key, directory)
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if data.get("format") != CACHE_FORMAT or data.get("key") != key:
        return None
    return data


def save_peaks(peaks: dict[str, Any], directory: str | None = None) -> str:
    path = cache_path(peaks["key"], directory)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(peaks, fh, indent=1)
    os.replace(tmp, path)  # atomic: two probes at once leave one whole file
    return path


# ------------------------------------------------------------------ the spread history (no torch needed)
HISTORY_KEEP = 48  # samples kept, the newest: a few days of a user's runs, a gallery benchmark's worth
HISTORY_TRIM = 0.025  # left out at each end before the spread: one odd sample in 48 (a 108 µs GEMM call among
# 55 and 68 µs ones) would otherwise set the floor for the next 48 runs


@dataclass
class SpreadSample:
    """One process's timing of the spread step (_spread_step), as the history file keeps it."""

    at: float  # time.time() when it was taken
    threads: int  # torch's intra-op threads it ran at
    gemm_s: float
    pointwise_s: float
    copy_s: float
    steps: int
    contended: bool  # other processes took CPUs meanwhile: kept, never used
    others_cpus: float | None = None


@dataclass
class SampledSpread:
    """What `--sample-spread` prints (JSON) for the efficiency layer."""

    sample: SpreadSample  # this diagnosis's
    history: ProcessSpread | None  # the history's spread with it; None while under HISTORY_MIN usable samples
    samples: int  # the history's uncontended samples at this sample's threads


def history_path(key: dict[str, Any], directory: str | None = None) -> str:
    return os.path.join(directory or cache_dir(), f"spread-{_digest(key)}.json")


def load_history(key: dict[str, Any], directory: str | None = None) -> list[SpreadSample]:
    """The machine's spread samples, oldest first ([] when there is no history or it cannot be read)."""
    try:
        with open(history_path(key, directory)) as fh:
            data = json.load(fh)
        if data.get("key") != key:
            return []
        return report_io.typed(list[SpreadSample], data.get("samples", []))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # missing, torn by hand, another shape
        return []


def record_spread(key: dict[str, Any], samples: list[SpreadSample], directory: str | None = None) -> list[SpreadSample]:
    """Append samples to the machine's history and keep the newest HISTORY_KEEP: under an exclusive lock (two
    runs at once lose no sample), written to a temporary file and renamed (a reader never sees half of one).
    Returns the history as written."""
    path = history_path(key, directory)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = (load_history(key, directory) + samples)[-HISTORY_KEEP:]
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump({"key": key, "samples": [asdict(s) for s in kept]}, fh, indent=1)
        os.replace(tmp, path)
    return kept


def usable_samples(samples: list[SpreadSample], threads: int) -> list[SpreadSample]:
    """The samples a floor is taken from: uncontended, at `threads`."""
    return [s for s in samples if not s.contended and s.threads == threads]


def history_spread(samples: list[SpreadSample], threads: int, window_s: float) -> ProcessSpread | None:
    """The spread of the usable samples at `threads` (spread_of), None below HISTORY_MIN of them."""
    usable = usable_samples(samples, threads)
    if len(usable) < HISTORY_MIN:
        return None
    spread = spread_of(usable, threads, window_s)
    if spread is None:
        return None
    spread.span_h = round((usable[-1].at - usable[0].at) / 3600, 2)
    spread.method = (f"the last {len(usable)} uncontended timings of the probe's step at {threads} threads on this "
                     f"machine, one a diagnosis (the probe's own first), over {spread.span_h:g} h; per number, "
                     f"exp({SPREAD_Z} x the standard deviation of its logs, the outermost {100 * HISTORY_TRIM:g}% "
                     "each side left out) - 1; the spread is the largest")
    return spread


# ------------------------------------------------------------------ summaries of a probe result


# ------------------------------------------------------------------ measuring (imports torch)


def _median_call(fn: Callable[[], Any], repeat_s: float, min_calls: int) -> tuple[float, int, float]:
    """(median seconds, calls, IQR/median %) of fn after one warm-up call."""
    fn()
    times: list[float] = []
    t_end = time.perf_counter() + repeat_s
    while len(times) < min_calls or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 200:
            break
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [med, med, med]
    return med, len(times), 100.0 * (q[2] - q[0]) / med if med > 0 else 0.0


def gemm_size(torch, settings: dict[str, Any]) -> int:
    """Smallest GEMM_SIZES entry whose one call takes >= the target at 1 thread."""
    torch.set_num_threads(1)
    n = GEMM_SIZES[0]
    for n in GEMM_SIZES:
        a, b = torch.randn(n, n), torch.randn(n, n)
        c = torch.empty(n, n)
        torch.mm(a, b, out=c)  # first call: packing buffers
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        if time.perf_counter() - t0 >= settings["gemm_call_s"]:
            break
    return n


def measure_gemm(torch, threads: int, n: int, settings: dict[str, Any]) -> dict[str, Any]:
    """One size for every thread count: the comparison is the threads' alone."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    before = cpu_snapshot()
    med, calls, iqr = _median_call(lambda: torch.mm(a, b, out=c), settings["repeat_s"], settings["min_calls"])
    return {"threads": threads, "n": n, "gflops_per_s": round(2 * n ** 3 / med / 1e9, 2), "calls": calls,
            "median_s": round(med, 6), "iqr_pct": round(iqr, 1), **_contention(before, threads)}


def _contention(before, threads: int) -> dict[str, Any]:
    """CPUs other processes used meanwhile, and whether they took CPUs our threads needed."""
    others = others_cpus(before, cpu_snapshot())
    usable = machine_usable()
    return {"others_cpus": round(others, 2) if others is not None else None,
            "contended": others is not None and others > max(0, usable - threads) + CONTENTION_SLACK_CPUS}


def llc_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the largest (last-level) cache of CPU 0, from sysfs."""
    best = None
    try:
        names = os.listdir(root)
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(root, name, "size")) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        try:
            size = int(text.rstrip("KMGkmg")) * mult
        except ValueError:
            continue
        best = max(best or 0, size)
    return best


def array_mib(settings: dict[str, Any]) -> int:
    mib = settings["array_mib"]
    llc = llc_bytes()
    if llc and settings["llc_factor"]:
        mib = max(mib, settings["llc_factor"] * llc // (1 << 20))
    return min(mib, MAX_ARRAY_MIB)


def measure_memory(torch, threads: int, arrays: tuple, mib: int, settings: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(threads)
    a, b, c = arrays
    nbytes = a.numel() * a.element_size()
    before = cpu_snapshot()
    copy_s, _, copy_iqr = _median_call(lambda: b.copy_(a), settings["repeat_s"], settings["min_calls"])
    triad_s, _, triad_iqr = _median_call(lambda: torch.add(b, c, alpha=3.0, out=a), settings["repeat_s"],
                                         settings["min_calls"])
    copy_gb, triad_gb = 2 * nbytes / copy_s / 1e9, 3 * nbytes / triad_s / 1e9
    return {"threads": threads, "array_mib": mib, "copy_gb_per_s": round(copy_gb, 2),
            "triad_gb_per_s": round(triad_gb, 2), "gb_per_s": round(max(copy_gb, triad_gb), 2),
            "iqr_pct": round(max(copy_iqr, triad_iqr), 1), **_contention(before, threads)}


PAGE_BLOCK_MIB = 40  # over glibc's largest mmap threshold (32 MiB): every block is a fresh mmap, munmapped on free
PAGE_ROUNDS = 3


def measure_page_costs(torch, threads: int, rounds: int = PAGE_ROUNDS) -> dict[str, Any]:
    """What a fresh page costs at `threads` (report.model.PageCost): a PAGE_BLOCK_MIB block allocated and written
    (fill_) less the same write into a block already written (the faults), and dropping its last reference (the
    munmap that gives its pages back), per 4 KiB page; the fastest of `rounds`. About 0.1 s."""
    torch.set_num_threads(threads)
    numel, pages = (PAGE_BLOCK_MIB << 20) // 4, (PAGE_BLOCK_MIB << 20) // 4096
    warm = torch.empty(numel)
    warm.fill_(1.0)
    fresh_s, warm_s, free_s = [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        block = torch.empty(numel)
        block.fill_(1.0)
        fresh_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        del block
        free_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        warm.fill_(2.0)
        warm_s.append(time.perf_counter() - t)
    # the fastest of each: another process on the machine only ever adds time to a round
    fault = max(0.0, min(fresh_s) - min(warm_s)) / pages * 1e6
    return {"threads": threads, "fault_us": round(fault, 4), "free_us": round(min(free_s) / pages * 1e6, 4)}


def measure_call_costs(torch, calls: int = 4000, threads: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """What a call costs beyond its work (report.model.CallCosts): tight loops of a tiny operator from Python,
    plain and recording autograd; its self time and what it adds to the call's wall time under the operator
    pass's profiler settings; what cProfile
    adds to a Python call; and a fresh page's fault and free at each of `threads` (measure_page_costs). Leaves
    torch at one thread. About 0.5 s; the goal is under 1 s (benchmarks/RESULTS.md)."""
    import cProfile

    # torch.autograd.profiler's profile is the recorder torch.profiler wraps (the same kineto events and self
    # times); torch.profiler's first start imports torch._inductor (hasattr(torch, "_inductor"), ~1.5 s here)
    from torch.autograd.profiler import profile

    t0 = time.perf_counter()
    pages = [measure_page_costs(torch, t) for t in threads]
    torch.set_num_threads(1)
    x, y = torch.ones(1), torch.ones(1)
    g = torch.ones(1, requires_grad=True)

    def per_call_us(fn, n: int = calls) -> float:
        loops = []
        for _ in range(5):  # the fastest of 5 loops, as the page costs: another process only ever adds time
            t = time.perf_counter()
            for _ in range(n // 5):
                fn()
            loops.append((time.perf_counter() - t) / (n // 5) * 1e6)
        return min(loops)

    with torch.no_grad():
        dispatch = per_call_us(lambda: torch.add(x, y))
    with torch.enable_grad():
        autograd = per_call_us(lambda: torch.add(g, y))
    with torch.no_grad(), profile(use_cpu=True, record_shapes=True, with_flops=True, profile_memory=True) as prof:
        recorded = per_call_us(lambda: torch.add(x, y), 500)
    # an add has no child operators: its self time is its duration (the raw kineto events, without building
    # torch's FunctionEvents, ~0.4 ms each)
    selfs = [(e.end_ns() - e.start_ns()) / 1e3 for e in prof.kineto_results.events() if e.name() == "aten::add"]

    def empty() -> None:
        pass

    plain = per_call_us(empty)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        profiled = per_call_us(empty)
    finally:
        profiler.disable()
    return {"dispatch_us": round(dispatch, 3), "autograd_dispatch_us": round(autograd, 3),
            "profiler_self_us": round(statistics.median(selfs), 3) if selfs else 0.0,
            "profiler_call_us": round(max(0.0, recorded - dispatch), 3),
            "cprofile_call_us": round(max(0.0, profiled - plain), 3), "pages": pages,
            "measure_s": round(time.perf_counter() - t0, 3),
            "method": f"the fastest of 5 loops of {calls // 5} calls at 1 thread: torch.add on one-element tensors (grad off, and "
                      "recording autograd), its self time and its wall time under the operator pass's profiler "
                      f"settings, and an empty Python function with and without cProfile; a fresh {PAGE_BLOCK_MIB} MiB block "
                      "written less a warm one (faults) and freed (munmap), per page, the fastest of "
                      f"{PAGE_ROUNDS}"}


SPREAD_PROCESSES = {"full": 8, "quick": 4}  # processes forked one after another, each timing the same step
SPREAD_WINDOW_S = {"full": 0.3, "quick": 0.15}  # each one's timed window, after 20 warm-up steps
SPREAD_Z = 1.96  # the 95% half-width of one process's value: 1.96 standard deviations of the processes' logs
SPREAD_GROUPS = (("gemm share", "addmm [64,256] x [256,256]'s share of the step"),
                 ("pointwise share", "tanh over [256,1024]'s share of the step"),
                 ("copy share", "a [1024,256] transpose made contiguous: its share of the step"),
                 ("gemm call", "addmm [64,256] x [256,256]'s mean call"))


def _spread_step(torch, window_s: float) -> dict[str, Any]:
    """In a forked process: a step of three operators of different kinds (a small GEMM, a pointwise op, a copy),
    each timed, for window_s after a warm-up; their seconds, the steps, and whether others took our CPUs. Into
    outputs allocated once: a fresh 1 MiB output's page faults came and went from process to process (a copy at
    200-740 µs a call in one probe, within 10% in the next), the allocator's state rather than the CPU's, which
    belongs to a workload's own allocations (the memory_churn and page-fault findings measure those)."""
    x, w, b = torch.randn(64, 256), torch.randn(256, 256), torch.randn(256)
    big = torch.randn(256, 1024)
    y, z, c = torch.empty(64, 256), torch.empty(256, 1024), torch.empty(1024, 256)
    with torch.no_grad():
        for _ in range(20):
            torch.addmm(b, x, w, out=y), torch.tanh(big, out=z), c.copy_(big.t())
        before, clock = cpu_snapshot(), time.perf_counter
        gemm = pointwise = copy = 0.0
        steps, end = 0, clock() + window_s
        while clock() < end:
            t0 = clock()
            torch.addmm(b, x, w, out=y)
            t1 = clock()
            torch.tanh(big, out=z)
            t2 = clock()
            c.copy_(big.t())
            t3 = clock()
            gemm, pointwise, copy, steps = gemm + t1 - t0, pointwise + t2 - t1, copy + t3 - t2, steps + 1
    return {"gemm_s": gemm, "pointwise_s": pointwise, "copy_s": copy, "steps": steps,
            **_contention(before, torch.get_num_threads())}


def _forked(fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """fn's JSON result from a forked child (None if the child died or wrote nothing)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the probe
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(fn()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _log_spread(values: list[float]) -> float:
    """The 95% half-width of one value among `values`, as a ratio less 1: exp(SPREAD_Z x sd of their logs) - 1,
    the outermost HISTORY_TRIM of them left out at each end (none of fewer than 40)."""
    logs = sorted(math.log(v) for v in values if v > 0)
    cut = int(len(logs) * HISTORY_TRIM)
    logs = logs[cut:len(logs) - cut]
    return math.expm1(SPREAD_Z * statistics.stdev(logs)) if len(logs) >= 3 else 0.0


def spread_of(samples: list[SpreadSample], threads: int, window_s: float) -> ProcessSpread | None:
    """How far the samples' (processes') shares of the spread step and their GEMM call spread (None: under 3
    that timed all three operators)."""
    runs = [r for r in samples if r.steps > 0 and min(r.gemm_s, r.pointwise_s, r.copy_s) > 0]
    if len(runs) < 3:
        return None
    totals = [r.gemm_s + r.pointwise_s + r.copy_s for r in runs]
    series = {"gemm share": [r.gemm_s / t for r, t in zip(runs, totals)],
              "pointwise share": [r.pointwise_s / t for r, t in zip(runs, totals)],
              "copy share": [r.copy_s / t for r, t in zip(runs, totals)],
              "gemm call": [r.gemm_s / r.steps * 1e6 for r in runs]}
    groups = [SpreadGroup(name=name, what=what, low=round(min(series[name]), 4), high=round(max(series[name]), 4),
                          spread_pct=round(100 * _log_spread(series[name]), 1)) for name, what in SPREAD_GROUPS]
    return ProcessSpread(processes=len(runs), threads=threads, window_s=window_s, groups=groups,
                         spread_pct=max(g.spread_pct for g in groups),
                         contended=any(r.contended for r in runs))


def _sample(run: dict[str, Any], threads: int) -> SpreadSample:
    return SpreadSample(at=time.time(), threads=threads, gemm_s=run["gemm_s"], pointwise_s=run["pointwise_s"],
                        copy_s=run["copy_s"], steps=run["steps"], contended=bool(run.get("contended")),
                        others_cpus=run.get("others_cpus"))


def measure_process_spread(torch, mode: str = "full", key: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """How far one process's measurement of the same work lands from another's here (report.model.ProcessSpread):
    SPREAD_PROCESSES forks, one after another, each timing the same step of a GEMM, a pointwise op and a copy at
    torch's default threads. A vCPU's speed state lasts for seconds and a process keeps its vCPU
    (benchmarks/RESULTS.md, "Trials: which vCPU a pass ran on"), so two runs of one script can read an
    operator's share or its call time further apart than either run's own steps spread; this is that spread,
    the floor of a window aggregate's interval (report/borderline.py). With `key`, the processes also start the
    machine's spread history (record_spread). Must run before this process starts torch's thread pool: a fork
    does not take it along."""
    t0 = time.perf_counter()
    window, threads = SPREAD_WINDOW_S[mode], torch.get_num_threads()
    runs = [_sample(r, threads) for r in (_forked(lambda: _spread_step(torch, window))
                                          for _ in range(SPREAD_PROCESSES[mode])) if r]
    if key is not None and runs:
        record_spread(key, runs)
    spread = spread_of(runs, threads, window)
    if spread is None:
        return None
    spread.measure_s = round(time.perf_counter() - t0, 3)
    spread.method = (f"{spread.processes} processes forked one after another, each timing the same step (a GEMM, "
                     f"a pointwise op, a copy) for {window:g} s at torch's default threads; per number, "
                     f"exp({SPREAD_Z} x the standard deviation of its logs) - 1; the spread is the largest")
    return asdict(spread)


def sample_spread(directory: str | None = None) -> SampledSpread:
    """One more process's timing of the spread step, in this process (a fresh one: the layer runs it as its own
    helper, forked from the run's fork server, where no operator ran), appended to the machine's history."""
    import torch  # the history itself needs no torch; the step does

    window, threads = SPREAD_WINDOW_S["full"], torch.get_num_threads()
    sample = _sample(_spread_step(torch, window), threads)
    history = record_spread(this_machine_key(torch.__version__, "full"), [sample], directory)
    return SampledSpread(sample=sample, history=history_spread(history, threads, window),
                         samples=len(usable_samples(history, threads)))


def this_machine_key(torch_version: str, mode: str) -> dict[str, Any]:
    """machine_key for the machine this process runs on."""
    return machine_key(machine.cpu_model(), machine_usable(), torch_version, mode, machine.vector_isa())


def machine_usable() -> int:
    return machine.usable_cpus()[0]


def thread_counts(usable: int) -> list[int]:
    return sorted({1, max(1, usable)})


def measure(mode: str = "full") -> dict[str, Any]:
    """Run the probe in this process (it changes torch's thread count)."""
    import torch

    settings = MODES[mode]
    t0 = time.perf_counter()
    usable = machine.usable_cpus()[0]
    before = torch.get_num_threads()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    key = this_machine_key(torch.__version__, mode)
    spread = measure_process_spread(torch, mode, key)  # first: before this process starts torch's thread pool
    try:
        with torch.no_grad():
            n = gemm_size(torch, settings)
            gemm = [measure_gemm(torch, t, n, settings) for t in thread_counts(usable)]
            mib = array_mib(settings)
            numel = mib * (1 << 20) // 4
            arrays = tuple(torch.ones(numel) for _ in range(3))  # ones(): pages touched before timing
            memory = [measure_memory(torch, t, arrays, mib, settings) for t in thread_counts(usable)]
            del arrays
        call_costs = measure_call_costs(torch, threads=tuple(thread_counts(usable)))
    finally:
        torch.set_num_threads(before)
    return {
        "format": CACHE_FORMAT,
        "key": key,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "mode": mode,
        "gemm_fp32": gemm,
        "memory": memory,
        "llc_bytes": llc_bytes(),
        "loadavg_1m": round(load, 2) if load is not None else None,
        "contended": any(r.get("contended") for r in gemm + memory),
        "call_costs": call_costs,
        "process_spread": spread,
        "probe_s": round(time.perf_counter() - t0, 2),
        "method": ("GEMM: torch.mm on square fp32 matrices, median call after a warm-up; memory: STREAM copy "
                   "and triad on fp32 arrays larger than the last-level cache, median call (write-allocate "
                   "traffic not counted)"),
    }


def peaks_for_this_machine(*, refresh: bool = False, mode: str = "full") -> tuple[dict[str, Any], str | None, bool]:
    """(peaks, cache file or None when not cached, came from the cache) for the machine this process runs on."""
    import torch

    key = this_machine_key(torch.__version__, mode)
    if not refresh:
        hit = cached_peaks(key)
        if hit is not None:
            return hit, cache_path(key), True
    peaks = measure(mode)
    if peaks.get("contended"):  # other processes took CPUs meanwhile: use it this once, measure next time
        return peaks, None, False
    return peaks, save_peaks(peaks), False


def describe(data: dict[str, Any], path: str | None = None, cached: bool | None = None) -> str:
    """A probe result (its JSON, as cached) in words."""
    peaks = report_io.typed(Peaks, data)
    key = peaks.key
    head = (f"Machine peaks: {key and key.cpu_model}, {key and key.usable_cpus} usable CPUs, "
            f"torch {key and key.torch_version} ({peaks.mode} probe, {peaks.measured_at}")
    head += ", from the cache)" if cached else f", {peaks.probe_s} s)"
    lines = [head]
    for g in peaks.gemm_fp32:
        lines.append(f"  GEMM fp32      {g.threads:>2} thread{'s' if g.threads != 1 else ' '}: "
                     f"{g.gflops_per_s:8.1f} GFLOP/s  (torch.mm {g.n}x{g.n}, median of {g.calls}, "
                     f"IQR {g.iqr_pct}%)")
    for m in peaks.memory:
        lines.append(f"  memory         {m.threads:>2} thread{'s' if m.threads != 1 else ' '}: "
                     f"{m.gb_per_s:8.1f} GB/s     (copy {m.copy_gb_per_s}, triad {m.triad_gb_per_s}; "
                     f"{m.array_mib} MiB arrays)")
    usable = (key and key.usable_cpus) or 1
    flops, bw = peaks.gemm_peak(usable), peaks.bandwidth_peak(usable)
    if flops and bw:
        lines.append(f"  ridge point at {usable} threads: {flops / bw:.1f} FLOP/byte (below it an operator is "
                     "memory-bound)")
    spread = peaks.process_spread
    if spread is not None:
        parts = ", ".join(f"{g.name} {g.spread_pct:g}%" for g in spread.groups)
        lines.append(f"  process to process: one process's number lands within {spread.spread_pct:g}% of another's "
                     f"({parts}; {spread.processes} processes at {spread.threads} threads"
                     f"{', contended: not used' if spread.contended else ''})")
    if peaks.contended:
        lines.append("  contended: other processes took CPUs during the probe, so these peaks are low; "
                     "not cached (run `diagnose probe` on a quiet machine)")
    elif spread is not None and spread.contended:
        lines.append("  process spread contended: other processes took CPUs while it was measured, so findings "
                     "judge their numbers on the 10% floor (`diagnose probe --refresh` on a quiet machine)")
    if data.get("key") and spread is not None:
        history = load_history(data["key"], os.path.dirname(path) if path else None)
        hist = history_spread(history, spread.threads, SPREAD_WINDOW_S["full"])
        if hist is not None:
            lines.append(f"  spread history: {hist.spread_pct:g}% over this machine's last {hist.processes} timings "
                         f"of the same step ({hist.span_h:g} h, one a diagnosis): the floor findings use")
        else:
            usable = len(usable_samples(history, spread.threads))
            lines.append(f"  spread history: {usable} of the {HISTORY_MIN} timings (one a diagnosis) it needs "
                         "before it replaces the probe's spread as the floor")
    if path:
        lines.append(f"  cache: {path} (diagnose probe --refresh measures again)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="diagnose probe",
                                description="Measure (or show the cached) GEMM and memory-bandwidth peaks of "
                                            "this machine, the roofs of the efficiency layer.")
    p.add_argument("--refresh", action="store_true", help="measure again and replace the cached result")
    p.add_argument("--quick", action="store_true", help="a cheaper, less precise probe (smaller arrays and runs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (with cache_path and cached)")
    p.add_argument("--sample-spread", action="store_true",
                   help="time the process-spread step once in this process, add it to the machine's spread history "
                        "and print the history's spread as JSON (what each diagnosis does)")
    args = p.parse_args(argv)
    if args.sample_spread:
        json.dump(asdict(sample_spread()), sys.stdout)
        sys.stdout.write("\n")
        return 0
    peaks, path, cached = peaks_for_this_machine(refresh=args.refresh, mode="quick" if args.quick else "full")
    if args.json:
        json.dump({**peaks, "cache_path": path, "cached": cached}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(describe(peaks, path, cached))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
