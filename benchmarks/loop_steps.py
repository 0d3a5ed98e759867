"""What the loop step detector adds to the first (uninstrumented) pass (issue 29: <= 2% of the step).

    .venv/bin/python benchmarks/loop_steps.py [--rounds 10] [--write benchmarks/RESULTS.md]

The first pass runs the target compiled with probes in its loops and, while no
other detector fires, the loop finder's sampling thread (diagnose/loops.py);
once the loop is armed, each iteration calls the step clock's loop probe.
Before, the pass ran the script with runpy.run_path and the same step clock.
Each round runs both, in fresh interpreters, in alternating order (ABBA), the
way runner.py does (a StepClock with the first pass's window, installed on
torch), and reads the per-step time each side sees:

- examples/mlp.py: an optimizer loop. Its steps are optimizer steps either
  way; the loop detector's part is the idle probe in the script's loop and the
  finder until the first forward. Per-step time: the window's median step.
- a loop of tiny operators at module scope (eight element-wise operators on
  256 floats a step, ~17 µs): no other detector, so the loop detector finds
  the loop, arms it and counts every iteration. Per-step time: the script's
  own perf_counter over the second half of its iterations (the window's
  kind of step: the finder has stopped), and apart over the first half,
  which holds the finder's 0.25 s of sampling (before any window).

The verdict is the median over rounds of the paired ratio (with probes / without)
and its spread; the per-iteration cost of the armed probe alone (fast path,
and the clock's slow path) is measured beside it, by construction.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results import replace_section  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402
from diagnose.steps import LOOP_GROUP  # noqa: E402

TINY = textwrap.dedent("""\
    import sys, time
    import torch

    x = torch.randn(256)
    n = int(sys.argv[1])
    t = time.perf_counter()
    half = None
    for i in range(n):
        if i == n // 2:
            half = time.perf_counter()
        y = x * 0.5
        y = y + 1.0
        y = torch.relu(y)
        y = y - x
        y = y.abs()
        y = torch.sqrt(y)
        y = y.clamp(max=3.0)
        y = torch.tanh(y)
    end = time.perf_counter()
    print("FIRST_HALF", (half - t) / (n // 2))
    print("PER_ITERATION", (end - half) / (n - n // 2))
""")

DRIVER = textwrap.dedent("""\
    import json, runpy, sys, threading
    sys.path.insert(0, {repo!r})
    import torch
    from diagnose import loops
    from diagnose.protocol import WindowSpec
    from diagnose.steps import StepClock, MIN_WINDOW_S

    arm, script, *argv = sys.argv[1:]
    sys.argv = [script, *argv]
    window = WindowSpec(5, 20, min_window_s=MIN_WINDOW_S, stop_after_window=False, find_loop=(arm == "loop"))
    clock = StepClock(window)
    clock.install(torch)
    probed = loops.probe(script) if window.find_loop else None
    finder = None
    if probed is not None:
        finder = loops.Finder(probed, clock)
        finder.start()
    import io, contextlib
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if probed is not None:
            loops.run(probed)
        else:
            runpy.run_path(script, run_name="__main__")
    if finder is not None:
        finder.stop()
    seen = clock.result()
    steps = sorted(seen.step_s)
    said = dict(l.split() for l in out.getvalue().splitlines() if l.startswith(("PER_ITERATION", "FIRST_HALF")))
    print(json.dumps({{"detector": seen.detector, "median_step_s": steps[len(steps) // 2] if steps else None,
                       "per_iteration_s": float(said["PER_ITERATION"]) if "PER_ITERATION" in said else None,
                       "first_half_s": float(said["FIRST_HALF"]) if "FIRST_HALF" in said else None,
                       "window_steps": seen.window_steps}}))
""")


def one(arm: str, script: str, argv: list[str], driver: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, driver, arm, script, *argv], capture_output=True, text=True, env=env,
                          timeout=600, cwd=str(REPO))
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def probe_cost(n: int = 200_000) -> tuple[float, float, float]:
    """ns per iteration of an empty-bodied loop with the armed probe: fast path (each stamped), grouped fast path
    (the first pass's window on steps under 50 µs) and slow path (the clock's locked boundary each iteration),
    minus the idle probe's loop."""
    import time

    from diagnose import loops
    from diagnose.protocol import WindowSpec
    from diagnose.steps import StepClock

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "empty.py")
        Path(path).write_text("for i in range(N):\n    len('')\n")

        def run(mode: str) -> float:
            probed = loops.probe(path)
            clock = StepClock(WindowSpec(0, 1 << 40, stop_after_window=False, find_loop=mode == "grouped"))
            if mode != "idle":
                clock.arm_loop(lambda: loops.arm(probed, probed.sites[0], clock, late=False))
            if mode == "slow":
                clock.read_rss = lambda: 0  # a per-step action: every boundary takes the slow path
            g = {loops.TABLE: probed.table, loops.NEXT: next, "N": n}
            t = time.perf_counter()
            exec(probed.code, g)  # noqa: S102 - the benchmark's own loop
            return (time.perf_counter() - t) / n

        idle = min(run("idle") for _ in range(5))
        fast = min(run("fast") for _ in range(5))
        grouped = min(run("grouped") for _ in range(5))
        slow = min(run("slow") for _ in range(5))
    return (fast - idle) * 1e9, (grouped - idle) * 1e9, (slow - idle) * 1e9


IN_PROCESS_N, IN_PROCESS_ROUNDS = 6_000, 100  # short alternating blocks: a drift of the machine hits both sides


def in_process(tiny: str, n: int = IN_PROCESS_N, rounds: int = IN_PROCESS_ROUNDS) -> tuple[float, float, float]:
    """The tiny loop in this interpreter, plain and probed with the loop armed from its start (as the passes after
    the first run it, with the first pass's stretched 1 s window), alternating: (plain s/iteration, the median
    ratio, the IQR's width of the ratios)."""
    import time

    import torch

    from diagnose import loops
    from diagnose.protocol import WindowSpec
    from diagnose.steps import MIN_WINDOW_S, StepClock

    plain_code = compile(Path(tiny).read_text(), tiny, "exec")
    sys.argv = [tiny, str(n)]
    ratios, base = [], []
    for r in range(rounds):
        got = {}
        for arm in (("plain", "armed") if r % 2 == 0 else ("armed", "plain")):
            clock = StepClock(WindowSpec(5, 20, min_window_s=MIN_WINDOW_S, stop_after_window=False, find_loop=True))
            clock.install(torch)
            g: dict = {"__name__": "__main__"}
            code = plain_code
            if arm == "armed":
                probed = loops.probe(tiny)
                clock.arm_loop(lambda p=probed, c=clock: loops.arm(p, p.sites[0], c, late=False))
                g[loops.TABLE], g[loops.NEXT], code = probed.table, next, probed.code
            t = time.perf_counter()
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, g)  # noqa: S102 - the benchmark's own target
            got[arm] = (time.perf_counter() - t) / n
            clock.uninstall()
        ratios.append(got["armed"] / got["plain"])
        base.append(got["plain"])
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(base), statistics.median(ratios), q[2] - q[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--write", help="replace this benchmark's section of RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        driver, tiny = os.path.join(tmp, "driver.py"), os.path.join(tmp, "tiny_loop.py")
        Path(driver).write_text(DRIVER.format(repo=str(REPO)))
        Path(tiny).write_text(TINY)
        cases = [("examples/mlp.py", str(REPO / "examples" / "mlp.py"), ["--steps", "60"], "median_step_s"),
                 ("a loop of 8 tiny operators, its second half", tiny, ["120000"], "per_iteration_s"),
                 ("the same loop's first half (the finder samples for 0.25 s of it)", tiny, ["120000"],
                  "first_half_s")]
        rows = []
        for name, script, argv, key in cases:
            ratios, base, detectors = [], [], set()
            for r in range(args.rounds):
                order = ("plain", "loop") if r % 2 == 0 else ("loop", "plain")
                got = {arm: one(arm, script, argv, driver) for arm in order}
                detectors.add(got["loop"]["detector"])
                ratios.append(got["loop"][key] / got["plain"][key])
                base.append(got["plain"][key])
                print(f"{name} round {r + 1}: {got['plain'][key] * 1e6:.1f} µs -> {got['loop'][key] * 1e6:.1f} µs "
                      f"({100 * (ratios[-1] - 1):+.1f}%)", flush=True)
            q = statistics.quantiles(ratios, n=4)
            rows.append((name, statistics.median(base), statistics.median(ratios), q[0], q[2], sorted(map(str, detectors))))
        inside = in_process(tiny)
    fast_ns, grouped_ns, slow_ns = probe_cost()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["## The loop step detector's cost (first pass; issue 29: <= 2% of the step)", "",
             f"{stamp}; {cpu_model()}, {usable_cpus()[0]} usable CPUs, Python {platform.python_version()}; "
             f"`benchmarks/loop_steps.py --rounds {args.rounds}` (fresh interpreters, ABBA order; the load average "
             f"was {os.getloadavg()[0]:.2f} at the end).", "",
             "| target | step without | with the loop detector (median ratio) | IQR of the ratios | detector |",
             "| --- | --- | --- | --- | --- |"]
    for name, base, ratio, lo, hi, det in rows:
        lines.append(f"| {name} | {base * 1e6:.1f} µs | {100 * (ratio - 1):+.2f}% | {100 * (lo - 1):+.2f}% to "
                     f"{100 * (hi - 1):+.2f}% | {', '.join(det)} |")
    lines += ["", f"In one interpreter, alternating ({IN_PROCESS_ROUNDS} rounds of {IN_PROCESS_N:,} iterations, the "
              "loop armed from its start, in the first pass's window, which times steps under 50 µs in groups "
              f"after its first 16): {inside[0] * 1e6:.1f} µs an iteration plain, "
              f"{100 * (inside[1] - 1):+.2f}% with the armed probe (IQR of the ratios {100 * inside[2]:.2f} points). "
              "Fresh interpreters differ by a few percent between themselves (the table's IQRs): this is the "
              "figure that resolves the probe's cost."]
    mlp_ratio, tiny_pct = rows[0][2], 100 * (inside[1] - 1)
    lines += ["", f"**Verdict (issue 29's target, <= 2% of the step):** examples/mlp.py "
              f"{'met' if mlp_ratio <= 1.02 else 'not shown'} ({100 * (mlp_ratio - 1):+.2f}% over whole-run pairs, "
              "whose spread is a few percent; its loop's probe is idle and the finder stops at the first forward); "
              f"the tiny-operator loop {'met' if tiny_pct <= 2 else 'missed'}: {tiny_pct:+.2f}% of a "
              f"{inside[0] * 1e6:.1f} µs iteration in one interpreter, {inside[0] * tiny_pct * 1e7:.0f} ns an "
              "iteration, more than the probe's own cost by construction (below): in the loop, beside the "
              "operators, the probe's bytecode and C calls cost more than alone. Such steps are timed in groups "
              f"of {LOOP_GROUP} (each step its group's mean; the report's notes say so): a clock read and a kept "
              "time every iteration cost about 1% more. A step under 100 µs is also named in the report's notes "
              "as possibly finer than the script's loop."]
    lines += ["", f"By construction: the armed probe costs {fast_ns:.0f} ns an iteration on its fast path (a plain "
              f"boundary, stamped), {grouped_ns:.0f} ns grouped (one stamp in {LOOP_GROUP}), and {slow_ns:.0f} ns on the clock's slow path (a boundary with a per-step action: "
              "the memory layer's RSS read, which costs its own ~2 µs on top, benchmarks/memory_overhead.py)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        replace_section(args.write, lines[0], text)


if __name__ == "__main__":
    main()
