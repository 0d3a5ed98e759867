"""What diagnosing costs, side by side with plain runs and other profilers, on the same workloads.

    .venv/bin/python benchmarks/overhead.py [--rounds 3] [--workloads mlp,python_row_loop]
        [--write benchmarks/RESULTS.md]

Per workload (examples/NAME.py, run as a script), each round runs, in an
order rotated from round to round so drift hits all alike:

- `plain`: `python script.py`, end to end (interpreter, torch import, work);
- `cprofile`: `python -m cProfile -o FILE script.py`, end to end;
- `pyinstrument`, `py-spy record`: the same, where installed;
- `diagnose`: the full `diagnose script.py --microbench-budget 0`, end to end
  (three passes, each its own process, call graph drawn, report written);
- `sampler` and `no sampler`: the workload's own wall time (torch imported
  first, as diagnose's runner does) in diagnose's uninstrumented pass, with
  the thread sampler watching (`diagnose threads`) and without it
  (`diagnose --layers operators`), from report.json's run.wall_s.

Results: medians over rounds, as ratios to `plain` (end to end) and, for the
sampler, to `no sampler` (the same pass without the observer), with the
rounds' spread. Targets: sampler pass < 2% over the pass without it; full
diagnose (no micro-benchmarks) < 4x the plain run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose.machine import cpu_model, usable_cpus  # noqa: E402

HEADING = "## Overhead of diagnosing, against plain runs and other profilers"
PY = sys.executable


def _timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return elapsed


def _pass_wall(args: list[str], tmp: Path) -> float:
    out = tmp / f"r{time.monotonic_ns()}"
    _timed([PY, "-m", "diagnose", "-q", "-o", str(out), "--microbench-budget", "0", *args], REPO)
    wall = json.loads((out / "report.json").read_text())["run"]["wall_s"]
    shutil.rmtree(out, ignore_errors=True)
    return wall


def tools() -> dict[str, object]:
    """name -> function(script path, tmp dir) -> seconds."""
    found: dict[str, object] = {
        "plain": lambda s, t: _timed([PY, str(s)], REPO),
        "cprofile": lambda s, t: _timed([PY, "-m", "cProfile", "-o", str(t / "p.pstats"), str(s)], REPO),
        "diagnose": lambda s, t: _full(s, t),
        "no sampler": lambda s, t: _pass_wall(["--layers", "operators", str(s)], t),
        "sampler": lambda s, t: _threads(s, t),
    }
    if subprocess.run([PY, "-c", "import pyinstrument"], capture_output=True).returncode == 0:
        found["pyinstrument"] = lambda s, t: _timed([PY, "-m", "pyinstrument", "-o", str(t / "p.txt"), str(s)], REPO)
    if shutil.which("py-spy"):
        found["py-spy"] = lambda s, t: _timed(["py-spy", "record", "-o", str(t / "p.svg"), "--", PY, str(s)], REPO)
    return found


def _full(script: Path, tmp: Path) -> float:
    out = tmp / f"full{time.monotonic_ns()}"
    seconds = _timed([PY, "-m", "diagnose", "-q", "-o", str(out), "--microbench-budget", "0", str(script)], REPO)
    shutil.rmtree(out, ignore_errors=True)
    return seconds


def _threads(script: Path, tmp: Path) -> float:
    out = tmp / f"thr{time.monotonic_ns()}"
    _timed([PY, "-m", "diagnose", "threads", "-q", "-o", str(out), str(script)], REPO)
    wall = json.loads((out / "report.json").read_text())["run"]["wall_s"]
    shutil.rmtree(out, ignore_errors=True)
    return wall


def _half_range(values: list[float]) -> float:
    """Half the range over rounds, relative to the median."""
    med = statistics.median(values)
    return (max(values) - min(values)) / 2 / med if len(values) > 1 and med else 0.0


def _spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"±{100 * (max(values) - min(values)) / 2 / med:.1f}%" if len(values) > 1 and med else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default="mlp,python_row_loop")
    parser.add_argument("--write", default=None, help="replace this benchmark's section in a RESULTS.md")
    args = parser.parse_args()
    runners = tools()
    names = list(runners)
    results: dict[str, dict[str, list[float]]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="diagnose-overhead-") as tmpdir:
        tmp = Path(tmpdir)
        for workload in args.workloads.split(","):
            script = REPO / "examples" / f"{workload}.py"
            runners["plain"](script, tmp)  # warm the file cache before timing anything
            results[workload] = {n: [] for n in names}
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    seconds = runners[name](script, tmp)
                    results[workload][name].append(seconds)
                    print(f"{workload} round {r + 1}: {name} {seconds:.3f} s", file=sys.stderr)
    lines = [
        HEADING,
        "",
        f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}.",
        f"- {args.rounds} rounds per workload, tools in rotated order; medians, spread = half the range over rounds. "
        f"Took {time.monotonic() - started:.0f} s.",
        "- End to end: the whole command's wall time, interpreter start and `import torch` included, as a user waits "
        "for it. Pass: the workload's own wall time inside diagnose's uninstrumented pass (torch imported before the "
        "clock starts).",
        "",
        "| workload | tool | measures | median | spread | ratio | target |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    verdicts = []
    for workload, by_tool in results.items():
        plain = statistics.median(by_tool["plain"])
        base = statistics.median(by_tool["no sampler"])
        for name, values in by_tool.items():
            med = statistics.median(values)
            if name in ("sampler", "no sampler"):
                ratio, measures = med / base, "pass"
                target = "< 1.02 (vs no sampler)" if name == "sampler" else "reference"
                if name == "sampler":
                    verdicts.append((workload, "sampler", ratio, ratio < 1.02, _half_range(values) + _half_range(
                        by_tool["no sampler"])))
            else:
                ratio, measures = med / plain, "end to end"
                target = "< 4x (vs plain)" if name == "diagnose" else ("reference" if name == "plain" else "-")
                if name == "diagnose":
                    verdicts.append((workload, "diagnose", ratio, ratio < 4.0, _half_range(values)))
            lines.append(f"| {workload} | {name} | {measures} | {med:.3f} s | {_spread(values)} | {ratio:.3f} "
                         f"| {target} |")
    lines.append("")
    for workload, what, ratio, ok, noise in verdicts:
        resolved = abs(ratio - 1) > noise if what == "sampler" else True
        verdict = ("met" if ok else "NOT met") if resolved else \
            f"not resolved: the difference is inside the rounds' spread (±{100 * noise:.0f}%)"
        lines.append(f"- {workload}: {what} {ratio:.3f}x: {verdict}.")
    lines += [
        "- The sampler's ratio is within the rounds' spread unless that spread is smaller than the difference; "
        "its own CPU cost, which bounds what it takes from the workload, is in \"Thread sampler overhead\" above.",
        f"- Reproduce: `.venv/bin/python benchmarks/overhead.py --rounds {args.rounds} --workloads {args.workloads} "
        "--write benchmarks/RESULTS.md` on a quiet machine.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
