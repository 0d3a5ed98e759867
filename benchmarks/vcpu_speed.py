"""How steady is each CPU's speed, and does the micro-benchmark's thread speedup hold from run to run?

    .venv/bin/python benchmarks/vcpu_speed.py [--seconds 30] [--runs 12] [--write benchmarks/RESULTS.md]

Part 1, the machine: one process pinned to each usable CPU runs the same pure-Python chunk (about 2.5 ms) over
and over for `--seconds`, both at once. Per CPU: the chunk's time in deciles (one CPU's speed over time), the
autocorrelation of log chunk time at lags of ~3 ms to ~1.3 s (how long a slow or fast stretch lasts), and the
correlation between the two CPUs' 100 ms medians (whether they slow together). Steal ticks (/proc/stat) over
the same seconds are shown beside them: a hypervisor that throttles a vCPU without counting steal is seen only
this way.

Part 2, what it does to a measurement: `--runs` runs of `python -m microbench run aten::mm` on a bfloat16
[64,1024] x [1024,4096] (the GEMM of examples/autocast_weights.py) at 1 and 2 threads, with the layer's
--max-run-time of 1 s, one after the other: the 2-thread speedup of each run, the speedup of the parallel
reference measured beside it (microbench/measure.py), and how many fall under findings/microbench.py's
sequential line (1.25x).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results import replace_section  # noqa: E402
from diagnose.findings.microbench import SEQUENTIAL_MAX_SPEEDUP  # noqa: E402
from diagnose.machine import cpu_model  # noqa: E402

HEADING = "## vCPU speed, and the micro-benchmark's thread speedup from run to run"
CHUNK = 25_000  # additions a chunk: 1-3 ms of one CPU
LAGS = (1, 5, 10, 50, 100, 500)


def _spin(cpu: int, seconds: float, out: str) -> None:
    os.sched_setaffinity(0, {cpu})
    times: list[float] = []
    end = time.time() + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        x = 0
        for i in range(CHUNK):
            x += i
        times.append(time.perf_counter() - t0)
    Path(out).write_text(json.dumps(times))


def _steal() -> dict[int, int]:
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3] != " ":
            f = line.split()
            out[int(f[0][3:])] = int(f[8]) if len(f) > 8 else 0
    return out


def _autocorr(x: list[float], lag: int) -> float:
    lx = [math.log(v) for v in x]
    mu = sum(lx) / len(lx)
    var = sum((v - mu) ** 2 for v in lx) / len(lx)
    cov = sum((lx[i] - mu) * (lx[i + lag] - mu) for i in range(len(lx) - lag)) / (len(lx) - lag)
    return cov / var if var else 0.0


def _windows(x: list[float], width: float = 0.1) -> list[float]:
    out, cur, t = [], [], 0.0
    for v in x:
        t += v
        cur.append(v)
        if t >= width * (len(out) + 1):
            out.append(statistics.median(cur))
            cur = []
    return out


def _corr(a: list[float], b: list[float]) -> float:
    n = min(len(a), len(b))
    a, b = [math.log(v) for v in a[:n]], [math.log(v) for v in b[:n]]
    ma, mb = sum(a) / n, sum(b) / n
    den = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / den if den else 0.0


def machine_part(seconds: float) -> list[str]:
    cpus = sorted(os.sched_getaffinity(0))[:2]
    ctx = get_context("fork")
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"{c}.json") for c in cpus]
        steal0 = _steal()
        procs = [ctx.Process(target=_spin, args=(c, seconds, o)) for c, o in zip(cpus, outs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        steal1 = _steal()
        chunks = [json.loads(Path(o).read_text()) for o in outs]
    chunk_ms = 1000 * statistics.median(chunks[0])
    lines = ["| CPU | chunks | chunk time deciles (ms, 10th-90th) | slowest / fastest decile | "
             + " | ".join(f"autocorr {lag} chunks (~{lag * chunk_ms:.3g} ms)" for lag in LAGS) + " | steal ticks |",
             "| --- | ---: | --- | ---: | " + " | ".join("---:" for _ in LAGS) + " | ---: |"]
    for c, x in zip(cpus, chunks):
        q = statistics.quantiles(x, n=10)
        lines.append(f"| {c} | {len(x)} | {', '.join(f'{1000 * v:.2f}' for v in q)} | {q[-1] / q[0]:.2f} | "
                     + " | ".join(f"{_autocorr(x, lag):.2f}" for lag in LAGS)
                     + f" | {steal1.get(c, 0) - steal0.get(c, 0)} |")
    if len(chunks) == 2:
        lines.append("")
        lines.append(f"Correlation of the two CPUs' 100 ms medians (log): "
                     f"{_corr(_windows(chunks[0]), _windows(chunks[1])):.2f}.")
    return lines


def microbench_part(runs: int) -> list[str]:
    speedups, lines = [], ["| run | 1 thread (us, IQR) | 2 threads (us, IQR) | speedup | reference's speedup |",
                           "| ---: | --- | --- | ---: | ---: |"]
    for i in range(1, runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "mb.json")
            subprocess.run([sys.executable, "-m", "microbench", "run", "aten::mm", "--shapes",
                            "[64,1024],[1024,4096]", "--dtype", "bfloat16", "--threads", "1,2",
                            "--max-run-time", "1.0", "--json", out, "-q"], cwd=REPO, check=True,
                           capture_output=True)
            rows = {r["threads"]: r for r in json.loads(Path(out).read_text())["measurements"]}
        s = rows[1]["median_us"] / rows[2]["median_us"]
        ref = rows[2].get("reference_speedup")
        speedups.append(s)
        lines.append(f"| {i} | {rows[1]['median_us']:.0f} ({rows[1]['noise_pct']:.0f}%) | "
                     f"{rows[2]['median_us']:.0f} ({rows[2]['noise_pct']:.0f}%) | {s:.2f} | "
                     f"{ref if ref is not None else '-'} |")
    under = sum(s < SEQUENTIAL_MAX_SPEEDUP for s in speedups)
    lines += ["", f"Speedup {min(speedups):.2f}-{max(speedups):.2f}x (median {statistics.median(speedups):.2f}); "
                  f"under the sequential line ({SEQUENTIAL_MAX_SPEEDUP:g}x) in {under} of {runs}."]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--runs", type=int, default=12)
    p.add_argument("--write", metavar="RESULTS.md")
    args = p.parse_args(argv)
    import torch

    started = time.time()
    head = [f"- When: {datetime.date.today()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs; "
            f"{platform.platform()}; Python {platform.python_version()}, torch {torch.__version__}."]
    body = machine_part(args.seconds) + [""] + microbench_part(args.runs)
    text = "\n".join([HEADING, "", *head, f"- Took {time.time() - started:.0f} s.", "", *body, ""])
    print(text)
    if args.write:
        replace_section(args.write, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
