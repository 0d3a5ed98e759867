"""How much `diagnose attach` slows the job it samples: the target's step time while attached, interleaved A/B.

    .venv/bin/python benchmarks/attach_overhead.py [--rounds 4] [--rate 50] [--duration 8] [--write benchmarks/RESULTS.md]

The target is examples/mlp.py's training step (torch's default pool: every usable CPU busy, the worst case for
observers that need a CPU too), run in a loop that stamps every step's end with time.monotonic() (one clock
for all processes on Linux). Each round runs it twice, alone (A) and with `diagnose attach PID --duration D
--rate R` (B), in ABBA order across rounds. The steps compared are those that ended inside the same window
of both runs, from 2 s after the attach command started (py-spy's start-up: it reads libtorch's symbols
before its first sample) to 0.5 s before its --duration ends, so only sampled time is timed. Result: the
median over rounds of B's median step / A's median step, with a bootstrap 95% interval of that median;
target <= 3% slower. Also: py-spy's CPU time per second of sampling (from the threads recording's
observers_cpu_s).
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler_overhead import bootstrap_median_ci, wait_quiet  # noqa: E402

from diagnose.machine import cpu_model, usable_cpus  # noqa: E402

HEADING = "## diagnose attach: the target's step time while attached"
SKIP_S = 2.0  # after the attach command starts: py-spy's start-up
TAIL_S = 0.5

WORKLOAD = r"""
import runpy, sys, time
mlp = runpy.run_path(sys.argv[1])  # examples/mlp.py: its model, data and step(), not its __main__ loop
step = mlp["step"]
for _ in range(20):
    step()
print("ready", flush=True)
ends = []
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    step()
    ends.append(time.monotonic())
print(" ".join(f"{t:.6f}" for t in ends), flush=True)
"""


def run_once(attached: bool, duration_s: float, rate: float, workdir: Path) -> tuple[list[float], float | None]:
    """The step times (s) that ended inside the sampled window, and py-spy's CPU share (attached runs)."""
    total = duration_s + 6.0
    proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(REPO / "examples" / "mlp.py"), str(total)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    observer_share = None
    try:
        assert proc.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        if attached:
            out = workdir / "out"
            subprocess.run([sys.executable, "-m", "diagnose", "attach", str(proc.pid), "--duration",
                            str(duration_s), "--rate", str(rate), "-q", "-o", str(out), "--force"],
                           cwd=REPO, capture_output=True, check=False)
            report = json.loads((out / "report.json").read_text())
            health = (report.get("threads") or {}).get("health") or {}
            if health.get("observers_cpu_s") is not None and report["threads"]["duration_s"]:
                observer_share = health["observers_cpu_s"] / report["threads"]["duration_s"]
        ends = [float(x) for x in proc.stdout.readline().split()]
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lo, hi = t0 + SKIP_S, t0 + duration_s - TAIL_S
    steps = [b - a for a, b in zip(ends, ends[1:]) if lo <= a and b <= hi]
    return steps, observer_share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=float, default=None, help="samples a second (default: attach's own)")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--write", default=None, help="replace the section in this markdown file")
    args = parser.parse_args()
    from diagnose.config import ATTACH_RATE_HZ

    rate = args.rate or ATTACH_RATE_HZ
    alone: list[float] = []
    attached: list[float] = []
    shares: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)  # ABBA
            for a in order:
                wait_quiet(10.0)
                steps, share = run_once(a, args.duration, rate, Path(tmp))
                med = statistics.median(steps)
                (attached if a else alone).append(med)
                if share is not None:
                    shares.append(share)
                print(f"round {r + 1}: {'attached' if a else 'alone   '} median step {1000 * med:.2f} ms "
                      f"over {len(steps)} steps", flush=True)
    log_ratios = [math.log(b / a) for a, b in zip(alone, attached)]
    med = math.exp(statistics.median(log_ratios))
    lo, hi = (math.exp(x) for x in bootstrap_median_ci(log_ratios))
    usable, _, _ = usable_cpus()
    lines = [
        HEADING,
        "",
        f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"{usable} usable; {platform.platform()}; Python {platform.python_version()}. A shared machine: another "
        "engineer's runs were using it too (wait_quiet waited up to 10 s for it to quiet down before each run).",
        f"- Target: examples/mlp.py's training step in a loop, torch's default pool; {args.rounds} rounds, alone vs "
        f"`diagnose attach PID --duration {args.duration:g} --rate {rate:g}` in ABBA order; steps compared: those "
        f"ending from {SKIP_S:g} s after the attach started to {TAIL_S:g} s before its duration ended.",
        f"- Step time attached / alone (median of {args.rounds} paired rounds): **{100 * (med - 1):+.2f}%**, "
        f"bootstrap 95% interval [{100 * (lo - 1):+.2f}%, {100 * (hi - 1):+.2f}%]; target <= +3%.",
        f"- Alone: median step {1000 * statistics.median(alone):.2f} ms (rounds {', '.join(f'{1000 * x:.1f}' for x in alone)}); "
        f"attached: {1000 * statistics.median(attached):.2f} ms (rounds {', '.join(f'{1000 * x:.1f}' for x in attached)}).",
        (f"- py-spy and diagnose's own CPU while attached (observers_cpu_s over the sampled time): median "
         f"{100 * statistics.median(shares):.1f}% of one CPU." if shares else "- observers' CPU: not recorded."),
        f"- Reproduce: `.venv/bin/python benchmarks/attach_overhead.py --rate {rate:g} --write benchmarks/RESULTS.md` "
        f"(~{args.rounds * 2 * (args.duration + 12) / 60:.0f} min).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
