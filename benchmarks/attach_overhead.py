"""How much `diagnose attach`'s sampling slows the job it samples: the target's step time, interleaved A/B.

    .venv/bin/python benchmarks/attach_overhead.py [--rate 10] [--cycles 6] [--window 3] [--write benchmarks/RESULTS.md]

One target process runs examples/mlp.py's training step in a loop (torch's default pool: every usable CPU
busy, the worst case for observers that need a CPU too) and stamps every step's end with time.monotonic()
(one clock for all processes on Linux). The benchmark alternates windows of --window seconds on that same
process, alone (A) and sampled (B), in ABBA order over --cycles pairs: one process and adjacent windows, so
a shared machine's load, which changes over minutes, hits both sides of a pair alike (separate processes
per run gave pairs 10x apart here). B runs what `diagnose attach` runs while it samples: py-spy with
attach's exact command line (tools/pyspy.record_command) and the threads layer's /proc sampler; a B window
opens once py-spy prints that it samples (its start-up reads libtorch's symbols first) and closes before it
is stopped. Result: the median over pairs of B's median step / A's, with a bootstrap 95% interval of that
median; target <= 3% slower at the default rate. Also: py-spy's CPU time per second sampled.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler_overhead import bootstrap_median_ci

from diagnose import procfs
from diagnose.config import ATTACH_RATE_HZ
from diagnose.machine import cpu_model, usable_cpus
from diagnose.tools import pyspy

HEADING = "## diagnose attach: the target's step time while sampled"

WORKLOAD = r"""
import runpy, sys, time
mlp = runpy.run_path(sys.argv[1])  # examples/mlp.py: its model, data and step(), not its __main__ loop
step = mlp["step"]
for _ in range(20):
    step()
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    step()
    print(f"{time.monotonic():.6f}", flush=True)
"""


def cpu_s(pid: int) -> float:
    info = procfs.read_process(pid, with_cmdline=False)
    return info.cpu_ticks / procfs.clock_ticks_per_s() if info else 0.0


def sampled_window(pid: int, rate: float, window_s: float, workdir: Path, only: str = "all",
                   nonblocking: bool = False) -> tuple[float, float, float]:
    """(window start, window end, py-spy's CPU seconds a second) with attach's observers running (`only`: one
    of them, to tell their costs apart; `nonblocking`: py-spy without --native, not pausing the target)."""
    exe = pyspy.executable()
    log = open(workdir / "spy.log", "w+")  # noqa: SIM115 - read back below, closed at the end
    cmd = pyspy.record_command(exe, pid, str(workdir / "t.json"), rate, 3600)
    if nonblocking:
        cmd = [x for x in cmd if x != "--native"] + ["--nonblocking"]
    if only == "sampler":  # py-spy at 1 Hz stands in for nothing: its start-up line is still awaited
        cmd = [exe, "record", "--pid", str(pid), "--nonblocking", "--rate", "1", "-o", str(workdir / "t.txt"),
               "--format", "raw"]
    spy = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid", str(pid), "--out",
                                str(workdir / "rec.json"), "--max-duration", str(window_s + 30)]
                               if only != "py-spy" else ["sleep", str(window_s + 30)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            log.seek(0)
            if "Sampling process" in log.read():
                break
            time.sleep(0.02)
        time.sleep(0.2)
        c0, t0 = cpu_s(spy.pid), time.monotonic()
        time.sleep(window_s)
        c1, t1 = cpu_s(spy.pid), time.monotonic()
    finally:
        spy.send_signal(signal.SIGINT)
        sampler.send_signal(signal.SIGTERM)
        for p in (spy, sampler):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
    return t0, t1, (c1 - c0) / (t1 - t0)


def _machine_busy_s() -> float:
    """CPU seconds every CPU spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int) -> float:
    """A process's CPU seconds, its threads included (/proc/PID/stat utime + stime)."""
    with open(f"/proc/{pid}/stat") as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=ATTACH_RATE_HZ, help="samples a second (attach's default)")
    parser.add_argument("--cycles", type=int, default=6, help="A/B pairs")
    parser.add_argument("--window", type=float, default=3.0, help="seconds per window")
    parser.add_argument("--only", choices=("all", "py-spy", "sampler"), default="all",
                        help="run one observer in the sampled windows, to tell their costs apart")
    parser.add_argument("--nonblocking", action="store_true",
                        help="py-spy without --native and with --nonblocking (Python stacks only, no pauses)")
    parser.add_argument("--write", default=None, help="replace the section in this markdown file")
    args = parser.parse_args()
    total = args.cycles * 2 * (args.window + 4) + 30
    windows: list[tuple[bool, float, float]] = []
    spy_cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        stamps = Path(tmp) / "stamps.txt"  # a file, not a pipe: nobody reads while the windows run
        with open(stamps, "w") as out:
            proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(REPO / "examples" / "mlp.py"), str(total)],
                                    stdout=out, text=True, cwd=REPO)
        try:
            while not stamps.read_text().startswith("ready"):
                assert proc.poll() is None, "the workload ended"
                time.sleep(0.1)
            busy0, target0, clock0 = _machine_busy_s(), _process_cpu_s(proc.pid), time.monotonic()
            for c in range(args.cycles):
                for sampled in ((False, True) if c % 2 == 0 else (True, False)):  # ABBA
                    if sampled:
                        t0, t1, share = sampled_window(proc.pid, args.rate, args.window, Path(tmp), args.only,
                                                       args.nonblocking)
                        spy_cpu.append(share)
                    else:
                        time.sleep(1.0)  # the observers of the window before are gone
                        t0 = time.monotonic()
                        time.sleep(args.window)
                        t1 = time.monotonic()
                    windows.append((sampled, t0, t1))
                    print(f"cycle {c + 1}: {'sampled' if sampled else 'alone  '} {t0:.1f}-{t1:.1f}", flush=True)
            others = ((_machine_busy_s() - busy0) - (_process_cpu_s(proc.pid) - target0)) / (time.monotonic() - clock0)
        finally:
            proc.kill()
            proc.wait()
        ends = [float(x) for x in stamps.read_text().split()[1:]]
    medians = []
    for sampled, t0, t1 in windows:
        inside = [t for t in ends if t0 <= t <= t1]
        steps = [b - a for a, b in itertools.pairwise(inside)]
        medians.append((sampled, statistics.median(steps), len(steps)))
    alone = [m for s, m, _ in medians if not s]
    attached = [m for s, m, _ in medians if s]
    log_ratios = [math.log(b / a) for a, b in zip(alone, attached)]
    med = math.exp(statistics.median(log_ratios))
    lo, hi = (math.exp(x) for x in bootstrap_median_ci(log_ratios))
    usable, _, _ = usable_cpus()
    lines = [
        HEADING,
        "",
        (f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
         f"{usable} usable; {platform.platform()}; Python {platform.python_version()}; {pyspy.version(pyspy.executable())}. "
         f"Everything but the target (py-spy and the sampler included) used {others:.2f} CPUs on average "
         "(/proc/stat)."),
        (f"- Target: examples/mlp.py's training step in a loop, torch's default pool ({usable} threads); one process, "
         f"{args.cycles} pairs of {args.window:g} s windows alone / sampled (py-spy `record "
         f"{'--nonblocking' if args.nonblocking else '--native'} --idle "
         f"--subprocesses --threads --rate {args.rate:g}` and the /proc thread sampler, as `diagnose attach` runs "
         f"them; observers: {args.only}) in ABBA order."),
        (f"- Step time sampled / alone (median of {args.cycles} pairs): **{100 * (med - 1):+.2f}%**, bootstrap 95% "
         f"interval [{100 * (lo - 1):+.2f}%, {100 * (hi - 1):+.2f}%]; target <= +3%."),
        ("- Per pair, median step alone -> sampled (ms): "
         + ", ".join(f"{1000 * a:.1f} -> {1000 * b:.1f}" for a, b in zip(alone, attached)) + "."),
        f"- py-spy's own CPU while sampling: median {100 * statistics.median(spy_cpu):.1f}% of one CPU.",
        (f"- Reproduce: `.venv/bin/python benchmarks/attach_overhead.py --rate {args.rate:g} --write "
         f"benchmarks/RESULTS.md` (~{args.cycles * 2 * (args.window + 2.5) / 60:.0f} min)."),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
