"""What the memory layer adds to diagnose, on examples/mlp.py (issue 28: <= 10% of diagnose's wall time).

    .venv/bin/python benchmarks/memory_overhead.py [--runs 6] [--write benchmarks/RESULTS.md]

The layer has no pass of its own; it costs
- in the uninstrumented pass, one RSS read per step boundary (a pread of
  /proc/self/statm on a kept descriptor) and, once at the window's end, the
  memory readings (MemAvailable, the cgroup, tensor bytes, the loops);
- in the operator pass, one profiler range per step boundary and, after the
  window, one walk over the profile's event tree (allocations, pairing,
  sites) and, when something grows, one scan of the process's Python objects.

The verdict: whole `diagnose --layers operators examples/mlp.py` commands
(the smallest run holding the layer, so its share is largest there) with the
layer on and off (Config.memory), paired in ABBA order; the ratio of wall
times per pair, the upper end of its bootstrap 95% interval against 1.10.
Beside it, the account by construction, each part's cost measured alone in
this process:
1. the RSS read: the median of 100,000 calls;
2. the step mark: one profiler range, median of 10,000 under the profiler;
3. the window-end readings (MemAvailable, the cgroup, tensor bytes, the
   script's loops) on mlp.py's model and optimizer: median of 200;
4. the operator pass's analysis: 20 recorded mlp.py training steps under the
   operator pass's profiler settings, marked as the recorder marks them, then
   `retained.analyse` (median of 5);
5. memory.png, drawn in the parent while the report is written (median of 5,
   from the committed keep_graph recording);
summed for one run (reads and marks times the window's steps) over that
run's wall time with the layer off. On a busy shared machine whole runs
differ by 10-20% from one to the next and the interval cannot resolve a few
per cent; the account then says what the layer costs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose import api  # noqa: E402
from diagnose.config import Config  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402
from diagnose.target import Target  # noqa: E402
from microbench.stats import bootstrap_median_ci  # noqa: E402

HEADING = "## Memory layer overhead (examples/mlp.py)"
SCRIPT = "examples/mlp.py"
TARGET = 1.10


def rss_read_us(calls: int = 100_000) -> float:
    from diagnose.layers.memory.readings import rss_reader

    read = rss_reader()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls // 5):
            read()
        times.append((time.perf_counter() - t) / (calls // 5) * 1e6)
    read.close()
    return statistics.median(times)


def mark_us(calls: int = 10_000) -> float:
    """One step mark (retained.mark: a profiler range) under a recording profiler, in microseconds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from diagnose.layers.memory import retained

    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True):
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(calls // 5):
                retained.mark(torch)
            times.append((time.perf_counter() - t) / (calls // 5) * 1e6)
    return statistics.median(times)


def readings_ms(repeats: int = 200) -> float:
    """The window-end readings on mlp.py's model and optimizer, from a frame inside a loop, in milliseconds."""
    import runpy

    from diagnose.layers.memory import readings
    from diagnose.usercode import UserCode

    mlp = runpy.run_path(str(REPO / SCRIPT))
    mlp["step"]()
    usercode = UserCode(__file__)
    times = []
    for _ in range(repeats):  # the loop above this line is what loops() reads
        t = time.perf_counter()
        readings.readings(readings.loops(usercode), mlp["model"], [mlp["optimizer"]], 25, 0)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def picture_s(repeats: int = 5) -> float:
    import json

    from diagnose.render import plots
    from diagnose.report import io as report_io

    report = report_io.from_json_data(json.loads((REPO / "tests/data/memory/keep_graph.report.json").read_text()))
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            t = time.perf_counter()
            assert plots.memory_png(report, os.path.join(tmp, f"m{i}.png")) is None
            times.append(time.perf_counter() - t)
    return statistics.median(times[1:] or times)  # the first pays matplotlib's import


def analysis_s(steps: int = 20, repeats: int = 5) -> tuple[float, int]:
    """(median seconds of retained.analyse over `steps` recorded mlp.py steps, allocation events seen)."""
    import runpy

    import torch
    from torch.profiler import ProfilerActivity, profile

    from diagnose.layers.memory import retained
    from diagnose.layers.operators.kineto import SOURCE_PREFIX, Label
    from diagnose.usercode import UserCode

    mlp = runpy.run_path(str(REPO / SCRIPT))
    step = mlp["step"]
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True, profile_memory=True) as prof:
        for _ in range(steps):
            step()
            retained.mark(torch)
    results = prof.profiler.kineto_results
    usercode = UserCode(str(REPO / SCRIPT))
    times, events = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        data = retained.analyse(results, steps, (SOURCE_PREFIX, Label.parse), usercode, sys._getframe())
        times.append(time.perf_counter() - t)
        events = data["allocation_events"]
    return statistics.median(times), events


def wall_s(memory: bool, out: Path) -> tuple[float, float | None, int]:
    """(the whole diagnose command's wall time, the uninstrumented median step, the window's steps)."""
    config = Config(output_dir=str(out), force=True, layers=("operators",), memory=memory)
    t = time.perf_counter()
    result = api.diagnose(Target(script=SCRIPT), config)
    elapsed = time.perf_counter() - t
    report = result.report
    assert report.layers["operators"].status == "ok"
    assert (report.memory is not None) == memory
    return elapsed, report.run.iterations.median_s if report.run.iterations else None, report.steps.window_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="whole diagnose runs per side (default 6)")
    parser.add_argument("--write", help="replace this benchmark's section in a RESULTS.md")
    args = parser.parse_args()
    os.chdir(REPO)
    started = time.monotonic()
    read_us, one_mark_us, end_ms = rss_read_us(), mark_us(), readings_ms()
    analyse_s, events = analysis_s()
    draw_s = picture_s()
    ratios, on, off, steps, windows = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="diagnose-memory-") as tmp:
        for r in range(args.runs):
            row = {}
            for memory in ((True, False) if r % 2 == 0 else (False, True)):
                row[memory], step, window = wall_s(memory, Path(tmp) / f"r{r}{memory}")
                windows.append(window)
                if step:
                    steps.append(step)
                print(f"round {r + 1}: memory {'on' if memory else 'off'} {row[memory]:.2f} s", file=sys.stderr)
            on.append(row[True])
            off.append(row[False])
            ratios.append(row[True] / row[False])
    low, high, _ = bootstrap_median_ci(ratios)
    step_ms = statistics.median(steps) * 1e3 if steps else float("nan")
    window = statistics.median(windows)
    # the uninstrumented pass reads window + 1 times and the readings once; the operator pass marks each step
    # and analyses once
    cost_s = (window + 1) * read_us * 1e-6 + end_ms * 1e-3 + window * one_mark_us * 1e-6 + analyse_s + draw_s
    share = cost_s / statistics.median(off)
    met = high <= TARGET
    text = "\n".join([
        HEADING, "",
        f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}. "
        f"Took {time.monotonic() - started:.0f} s.",
        f"- RSS read (one per step boundary of the uninstrumented window): {read_us:.2f} us, median of 100,000; "
        f"mlp.py's uninstrumented step is {step_ms:.1f} ms, so {100 * read_us / 1e3 / step_ms:.4f}% of a step.",
        f"- Step mark in the operator pass (one profiler range per step boundary): {one_mark_us:.2f} us, median of "
        "10,000 under a recording profiler.",
        f"- Window-end readings (MemAvailable, the cgroup, tensor bytes of mlp.py's model and SGD, the script's "
        f"loops): {end_ms:.3f} ms, median of 200, once per run.",
        f"- The operator pass's memory analysis (event tree walk, pairing, sites; the Python-object scan only "
        f"when something grows, which it does not here): {analyse_s * 1e3:.1f} ms for 20 recorded mlp.py "
        f"training steps ({events} allocation events), median of 5, once per run after the window.",
        f"- memory.png: {draw_s * 1e3:.0f} ms to draw, once per run, in the parent.",
        f"- Verdict: whole `diagnose --layers operators {SCRIPT}` commands, layer on and off (Config.memory), "
        f"{args.runs} pairs in ABBA order: on median {statistics.median(on):.2f} s, off "
        f"{statistics.median(off):.2f} s; ratio per pair median {statistics.median(ratios):.3f} (min "
        f"{min(ratios):.3f}, max {max(ratios):.3f}), bootstrap 95% interval [{low:.3f}, {high:.3f}]; target <= "
        f"{TARGET:.2f} at the interval's upper end: **{'met' if met else 'NOT met'}**.",
        f"- The account by construction: the window has {window:.0f} steps, so the parts above sum to "
        f"{cost_s * 1e3:.0f} ms, {100 * share:.1f}% of a run with the layer off (the picture is most of it). The "
        "default run (every layer) is longer by its other passes while the layer's cost stays the same, so its "
        "share there is smaller.",
        "- Reproduce: `.venv/bin/python benchmarks/memory_overhead.py --write benchmarks/RESULTS.md` on a quiet "
        "machine.", ""])
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
