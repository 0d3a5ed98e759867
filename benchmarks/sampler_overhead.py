"""How much the thread sampler slows the workload it watches.

    .venv/bin/python benchmarks/sampler_overhead.py [--rounds 6] [--work-s 2.5] [--write benchmarks/RESULTS.md]

A torch workload (matmul + tanh on 512x512, torch's default pool: every
usable CPU busy, the worst case for a sampler that needs a CPU too) does a
fixed number of iterations, calibrated once to take about --work-s seconds,
and reports its own wall time for them. Each round runs it twice, alone and
watched by the sampler (`python -m diagnose.layers.threads.sampler`, default
interval, started as diagnose starts it: polling its start, window and stop
markers every 10 ms), in ABBA order across rounds so drift hits both alike. The sampler
attaches after torch is imported and the workload warmed up, and the timed
work starts once the sampler has its first sample, so only the watched part
is timed. Result: the median over rounds of watched/alone wall time, with a
bootstrap 95% interval of that median; target < 2% slowdown.

Also measured: the sampler's own CPU time per second of run, and what one
read of a thread's files costs (stat+schedstat, children, status).
Before each run it waits (up to 30 s) for the machine's other load to drop
below 0.2 CPUs; a shared machine still adds noise, which the interval shows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose import procfs  # noqa: E402
from diagnose.layers.threads.sampler import DEFAULT_INTERVAL_S  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402

HEADING = "## Thread sampler overhead"

WORKLOAD = r"""
import sys, time, torch
iters = int(sys.argv[1])
a = torch.randn(512, 512)
b = torch.randn(512, 512)
for _ in range(5):
    a = torch.tanh(a @ b)
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
for _ in range(iters):
    a = torch.tanh(a @ b)
print(time.perf_counter() - start, flush=True)
"""


def machine_busy(seconds: float) -> float:
    b0, _ = procfs.busy_idle_ticks(procfs.machine_cpu_ticks())
    time.sleep(seconds)
    b1, _ = procfs.busy_idle_ticks(procfs.machine_cpu_ticks())
    return (b1 - b0) / procfs.clock_ticks_per_s() / seconds


def wait_quiet(limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and machine_busy(0.5) > 0.2:
        pass


def run_once(iters: int, watched: bool, workdir: Path) -> tuple[float, dict | None]:
    proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(iters)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    sampler = None
    out = workdir / "rec.json"
    ready, start, window, stop = (workdir / n for n in ("ready", "started", "window", "stopped"))
    for f in (out, ready, start, window, stop):
        if f.exists():
            f.unlink()
    try:
        assert proc.stdout.readline().strip() == "ready"
        if watched:  # as diagnose runs it: polling its start, window and stop markers every 10 ms
            sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid",
                                        str(proc.pid), "--out", str(out), "--ready", str(ready),
                                        "--start-when", str(start), "--restart-when", str(window),
                                        "--stop-when", str(stop)], cwd=REPO)
            while not ready.exists():
                time.sleep(0.005)
            start.touch()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        elapsed = float(proc.stdout.readline())
        stop.touch()
        proc.wait(timeout=60)
        rec = None
        if sampler is not None:
            sampler.wait(timeout=60)
            rec = json.loads(out.read_text())
        return elapsed, rec
    finally:
        for p in (proc, sampler):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def read_cost_us() -> dict[str, float]:
    """Cost of one read per thread, on this process with 16 idle threads."""
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(15)]
    for t in threads:
        t.start()
    pid = os.getpid()
    tids = procfs.list_tids(pid)
    out = {}
    try:
        for label, status in (("stat_schedstat_us", False), ("with_status_us", True)):
            start = time.perf_counter()
            for _ in range(100):
                for tid in tids:
                    procfs.read_thread(pid, tid, with_status=status)
            out[label] = (time.perf_counter() - start) / (100 * len(tids)) * 1e6
        start = time.perf_counter()
        for _ in range(100):
            procfs.children_of(pid, tids)
        out["children_us"] = (time.perf_counter() - start) / (100 * len(tids)) * 1e6
    finally:
        stop.set()
        for t in threads:
            t.join()
    return {k: round(v, 1) for k, v in out.items()}


def bootstrap_median_ci(values: list[float], n: int = 2000, seed: int = 1) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--work-s", type=float, default=2.5, help="timed work per run, seconds")
    parser.add_argument("--write", default=None, help="replace the section in this markdown file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        wait_quiet()
        probe_s, _ = run_once(50, False, workdir)
        iters = max(50, int(50 * args.work_s / probe_s))
        alone: list[float] = []
        watched: list[float] = []
        recs: list[dict] = []
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)  # ABBA
            for w in order:
                wait_quiet()
                elapsed, rec = run_once(iters, w, workdir)
                (watched if w else alone).append(elapsed)
                if rec:
                    recs.append(rec)
                print(f"round {r + 1}: {'watched' if w else 'alone  '} {elapsed:.3f} s", flush=True)
    ratios = [w / a for w, a in zip(watched, alone)]
    log_ratios = [math.log(x) for x in ratios]
    med = math.exp(statistics.median(log_ratios))
    lo, hi = (math.exp(x) for x in bootstrap_median_ci(log_ratios))
    cpu_share = statistics.median(r["health"]["sampler_cpu_s"] / max(1e-9, r["snapshots"][-1]["t_s"]) for r in recs)
    threads_seen = statistics.median(len(r["threads"]) for r in recs)
    read_ms = statistics.median(r["health"]["read_s_mean"] for r in recs) * 1e3
    costs = read_cost_us()
    usable, _, _ = usable_cpus()
    resolved = "the wall-time interval agrees" if hi - lo <= 0.02 else \
        "the interval above is too wide to resolve that on this shared machine"
    verdict = (f"{resolved} ({'inside' if hi < 1.02 else 'not inside'} the 2% target by wall time, "
               f"{'inside' if cpu_share / usable < 0.02 else 'not inside'} by CPU)")
    lines = [
        HEADING,
        "",
        f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"{usable} usable; {platform.platform()}; Python {platform.python_version()}.",
        f"- Workload: 512x512 matmul+tanh loop, torch's default pool ({usable} threads, every usable CPU busy), "
        f"{iters} iterations (~{args.work_s} s); {args.rounds} rounds, alone vs watched in ABBA order.",
        f"- Sampler: default interval {DEFAULT_INTERVAL_S} s; it saw {threads_seen:.0f} threads, "
        f"read them in {read_ms:.2f} ms per sample, and used {100 * cpu_share:.2f}% of one CPU.",
        f"- Slowdown (watched / alone wall time, median of {args.rounds} paired rounds): "
        f"**{100 * (med - 1):+.2f}%**, bootstrap 95% interval [{100 * (lo - 1):+.2f}%, {100 * (hi - 1):+.2f}%]; "
        f"target < 2%.",
        f"- The sampler's own CPU, {100 * cpu_share:.2f}% of one CPU = {100 * cpu_share / usable:.2f}% of the "
        f"{usable} usable CPUs, bounds what it can take from a CPU-bound workload (cache effects aside); "
        f"{verdict}.",
        f"- Alone: median {statistics.median(alone):.3f} s (min {min(alone):.3f}, max {max(alone):.3f}); "
        f"watched: median {statistics.median(watched):.3f} s (min {min(watched):.3f}, max {max(watched):.3f}).",
        f"- Read cost per thread and sample: stat+schedstat {costs['stat_schedstat_us']} us, with status "
        f"{costs['with_status_us']} us, children {costs['children_us']} us.",
        "- Reproduce: `.venv/bin/python benchmarks/sampler_overhead.py --write benchmarks/RESULTS.md` (~1.5 min).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
