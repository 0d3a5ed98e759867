"""Does the pace reference steady a trial's passes? Steps from pass to pass, as timed and divided by the pace.

    .venv/bin/python benchmarks/trial_pace.py [--passes 80] [--write benchmarks/RESULTS.md]

Each pass is what a trial pass is (diagnose/doctor/trials.py): a fork of this process (torch imported, no op run
before forking), 5 warm-up steps, then 20 timed ones, each step a chain of tanh(a @ b) on 256 x 256 calibrated to
the step size, on 1 or 2 intra-op threads. The pass reads the pace reference (diagnose/pace.py) where a trial pass
does: at its last warm-up step and after its window. Per condition, `--passes` passes one after the other: the
pass-to-pass floor of their steps (each pass's lower quartile; the median |log ratio| of adjacent passes, exp - 1,
trials.noise_floor's measure on neighbours) and its 90th percentile, as timed and divided by the pace
(trials.on_pace), and the correlation of the two logs (how much of a pass's speed the reading saw).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks.results import replace_section  # noqa: E402
from diagnose.config import DEFAULT_SKIP_STEPS, DEFAULT_STEPS  # noqa: E402
from diagnose.doctor import trials  # noqa: E402
from diagnose.machine import cpu_model  # noqa: E402
from diagnose.pace import Pace  # noqa: E402

HEADING = "## Trials: the pace reference, pass to pass"
N = 256
CONDITIONS = [(0.2, 1), (2.0, 1), (20.0, 1), (2.0, 2), (20.0, 2)]  # (step ms, intra-op threads)


def in_fork(work, threads: int):
    """work() in a fork at `threads` intra-op threads (set in the child: OpenMP's pool is not fork-safe), its
    JSON result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        torch.set_num_threads(threads)
        with os.fdopen(w, "wb") as fh:
            fh.write(json.dumps(work()).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def units_for(step_ms: float, threads: int) -> int:
    def unit_s() -> float:
        a, b = torch.randn(N, N), torch.randn(N, N)
        for _ in range(10):
            torch.tanh(a @ b)
        t = time.perf_counter()
        for _ in range(50):
            torch.tanh(a @ b)
        return (time.perf_counter() - t) / 50
    return max(1, round(step_ms / 1e3 / in_fork(unit_s, threads)))


def one_pass(units: int) -> dict:
    pace = Pace(torch)
    a, b = torch.randn(N, N), torch.randn(N, N) / math.sqrt(N)
    times, readings = [], []
    for i in range(DEFAULT_SKIP_STEPS + DEFAULT_STEPS):
        if i == DEFAULT_SKIP_STEPS - 1:
            readings.append(pace.read())
        t = time.perf_counter()
        for _ in range(units):
            torch.tanh(a @ b)
        if i >= DEFAULT_SKIP_STEPS:
            times.append(time.perf_counter() - t)
    readings.append(pace.read())
    return {"times": times, "pace_s": readings}


def spread(steps: list[float]) -> tuple[float, float]:
    """(median, 90th percentile) of |log ratio| between adjacent passes' steps, as exp - 1."""
    logs = sorted(abs(math.log(x / y)) for x, y in zip(steps, steps[1:]))
    return math.expm1(statistics.median(logs)), math.expm1(logs[int(0.9 * (len(logs) - 1))])


def condition(step_ms: float, threads: int, passes: int) -> str:
    units = units_for(step_ms, threads)
    got = [trials.PassTimes(**in_fork(lambda: one_pass(units), threads)) for _ in range(passes)]
    timed = [trials.step_of(p.times) for p in got]
    paced = [trials.step_of(t) for t in trials.on_pace(got, got)]
    (f0, p0), (f1, p1) = spread(timed), spread(paced)
    corr = statistics.correlation([math.log(x) for x in timed], [math.log(p.pace) for p in got])
    return (f"| {step_ms:g} ms ({statistics.median(timed) * 1e3:.2f} ms measured) | {threads} | {passes} "
            f"| {100 * f0:.1f}% | {100 * p0:.1f}% | {100 * f1:.1f}% | {100 * p1:.1f}% | {corr:.2f} "
            f"| {max(timed) / statistics.median(timed):.2f}x |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=80)
    p.add_argument("--write", metavar="RESULTS.md")
    args = p.parse_args(argv)
    started = time.time()
    rows = []
    for step_ms, threads in CONDITIONS:
        rows.append(condition(step_ms, threads, args.passes))
        print(rows[-1], flush=True)
    text = "\n".join([
        HEADING, "",
        f"- When: {datetime.date.today()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs; "
        f"{platform.platform()}; Python {platform.python_version()}, torch {torch.__version__}. Took "
        f"{time.time() - started:.0f} s; nothing else of this benchmark's ran.",
        "- Method: benchmarks/trial_pace.py's docstring. Floor: the median |log ratio| of adjacent passes' steps "
        "(exp - 1); p90 its 90th percentile; correlation: of the passes' log step and log pace reading.",
        "",
        "| step | threads | passes | floor as timed | p90 as timed | floor on the pace | p90 on the pace "
        "| correlation | slowest pass / median |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows, "",
        "- Reproduce: `.venv/bin/python benchmarks/trial_pace.py --write benchmarks/RESULTS.md` (~2 min).", ""])
    print(text)
    if args.write:
        replace_section(args.write, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
