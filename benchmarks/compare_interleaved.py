"""`diagnose compare --repeat N`: A/A pairs and a planted 15% slowdown, each judged on interleaved re-runs.

    .venv/bin/python benchmarks/compare_interleaved.py [--trials 20] [--rounds 6] [--conditions quiet,hog]
        [--keep DIR] [--write benchmarks/RESULTS.md]
    .venv/bin/python benchmarks/compare_interleaved.py --analyse DIR [--write benchmarks/RESULTS.md]

Per condition, three reports of benchmarks/drift_target.py (the uninstrumented pass only, `--layers ,`): BEFORE,
SAME (the same script and arguments) and SLOW (`--work 1.15`: 15% more of the same matmuls in every step). Each
trial then calls interleave.run and compare.compare_wall, what `diagnose compare --repeat N` runs, on (BEFORE,
SAME) and on (BEFORE, SLOW), in alternating order. Targets (issue 34): an A/A pair called a regression in at most
1 of 20 trials, the planted slowdown found in at least 19 of 20, per condition.

"quiet": nothing of ours besides the benchmark, torch's default threads. "hog": one busy process
(`while True: pass`) for the whole condition, and the target on one intra-op thread (OMP_NUM_THREADS=1): with
two, a 2-CPU machine's hog stalls the second thread at every barrier (steps of 4 ms took 624 ms in
compare_drift.py's run). Each trial's Interleaved is kept as JSON (--keep), so that --analyse can judge a run
stopped part-way.
"""

from __future__ import annotations

import argparse
import datetime
import json
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

from diagnose import compare, interleave
from diagnose.machine import cpu_model, usable_cpus
from diagnose.report import io as report_io
from diagnose.report.comparison import Interleaved

HEADING = "## diagnose compare --repeat: interleaved A/A pairs and a planted slowdown"
TARGET = "benchmarks/drift_target.py"
DIAGNOSE = str(Path(sys.executable).parent / "diagnose")
WORKS = {"before": 1.0, "same": 1.0, "slow": 1.15}


def env_of(name: str) -> dict[str, str]:
    env = dict(os.environ)
    if name == "hog":
        env["OMP_NUM_THREADS"] = "1"
    else:
        env.pop("OMP_NUM_THREADS", None)
    return env


def reports(name: str, keep: Path, steps: int) -> dict:
    out = {}
    for key, work in WORKS.items():
        where = keep / f"{name}-{key}"
        if not (where / "report.json").exists():
            cmd = [DIAGNOSE, "-q", "--force", "-o", str(where), "--layers", ",", "--steps", str(steps), TARGET,
                   "--", "--work", f"{work:g}"]
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                                  env=env_of(name))
            if proc.returncode != 0:
                raise SystemExit(f"diagnose failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
        out[key] = report_io.load(str(where / "report.json"))
    return out


def measure(name: str, trials: int, rounds: int, steps: int, keep: Path) -> None:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env_of(name))  # the re-runs inherit it (interleave runs them from this process)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if name == "hog" else None
    try:
        reps = reports(name, keep, steps)
        for t in range(trials):
            pairs = [("same", "aa"), ("slow", "ab")]
            for key, label in (pairs if t % 2 == 0 else pairs[::-1]):
                path = keep / f"{name}-{label}-{t}.json"
                if path.exists():
                    continue
                t0 = time.monotonic()
                run = interleave.run(reps["before"], reps[key], rounds)
                data = report_io.to_dict(run)
                data["elapsed_s"] = round(time.monotonic() - t0, 1)
                data["busy_cpus"] = load_average()
                path.write_text(json.dumps(data))
            print(f"{name}: trial {t + 1}/{trials}", file=sys.stderr, flush=True)
    finally:
        if hog:
            hog.kill()
            hog.wait()
        os.environ.clear()
        os.environ.update(saved)


def load_average() -> float | None:
    """The machine's load average over the last minute (what else ran beside the benchmark)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def condition(name: str, keep: Path) -> dict | None:
    """Judge the complete trials `keep` holds for this condition."""
    reps = {key: report_io.load(str(keep / f"{name}-{key}" / "report.json")) for key in WORKS
            if (keep / f"{name}-{key}" / "report.json").exists()}
    if len(reps) < len(WORKS):
        return None
    aa, ab, loads, elapsed = [], [], [], []
    t = 0
    while all((keep / f"{name}-{label}-{t}.json").exists() for label in ("aa", "ab")):
        for label, key, into in (("aa", "same", aa), ("ab", "slow", ab)):
            data = json.loads((keep / f"{name}-{label}-{t}.json").read_text())
            loads.append(data.pop("busy_cpus"))
            elapsed.append(data.pop("elapsed_s"))
            run = Interleaved(**data)
            into.append(compare.compare_wall(reps["before"], reps[key], interleaved=run))
        t += 1
    if not t:
        return None
    return {"name": name, "trials": t,
            "aa_regressions": sum(1 for w in aa if w.direction == "slower"),
            "aa_any": sum(1 for w in aa if w.direction != "same"),
            "ab_found": sum(1 for w in ab if w.direction == "slower"),
            "aa_change": [abs(w.change_pct) for w in aa], "ab_change": [w.change_pct for w in ab],
            "floors": [w.noise_floor_pct for w in aa + ab],
            "spreads": [w.before.drift_pct for w in aa + ab],
            "step_ms": statistics.median(w.before.seconds * 1000 for w in aa + ab),
            "load": statistics.median(x for x in loads if x is not None),
            "elapsed": statistics.median(elapsed)}


def table(results: list[dict], rounds: int) -> str:
    rows = [("| condition | A/A called a regression | A/A called any change | planted +15% found | "
             "A/A \\|change\\| median / max | planted change median / min | floor median | runs' spread median | "
             "load average | s a comparison | targets |"),
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in results:
        n = c["trials"]
        met = c["aa_regressions"] <= n / 20 and c["ab_found"] >= n * 19 / 20
        rows.append(f"| {c['name']} (step {c['step_ms']:.1f} ms) | {c['aa_regressions']}/{n} | {c['aa_any']}/{n} | "
                    f"{c['ab_found']}/{n} | {statistics.median(c['aa_change']):.1f}% / {max(c['aa_change']):.1f}% | "
                    f"{statistics.median(c['ab_change']):+.1f}% / {min(c['ab_change']):+.1f}% | "
                    f"{statistics.median(c['floors']):.1f}% | {statistics.median(c['spreads']):.1f}% | "
                    f"{c['load']:.1f} | {c['elapsed']:.0f} | {'met' if met else 'missed'} |")
    return "\n".join(rows)


def main() -> None:
    # killed with SIGTERM: unwind, so that measure()'s `finally` stops the hog (a hog left behind spoils every
    # measurement after it)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--rounds", type=int, default=compare.ROUNDS_ADVISED)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--conditions", default="quiet,hog")
    p.add_argument("--keep", metavar="DIR", help="keep every trial here (default: a temporary directory)")
    p.add_argument("--analyse", metavar="DIR", help="judge the trials a --keep DIR holds; run nothing")
    p.add_argument("--write", metavar="RESULTS.md")
    args = p.parse_args()
    names = args.conditions.split(",")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(args.analyse or args.keep or tmp)
        if not args.analyse:
            keep.mkdir(parents=True, exist_ok=True)
            for name in names:
                measure(name, args.trials, args.rounds, args.steps, keep)
        results = [c for c in (condition(name, keep) for name in names) if c]
    text = table(results, args.rounds)
    print(text)
    if args.write:
        from results import replace_section

        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        body = (f"{HEADING}\n\n- When: {when}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
                f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}. "
                f"Took {time.monotonic() - t0:.0f} s.\n"
                f"- Per condition, three reports of `{TARGET}` (`--layers ,`): BEFORE, SAME (A/A) and SLOW "
                "(`--work 1.15`). Each trial runs what `diagnose compare --repeat "
                f"{args.rounds}` runs (interleave.run, then compare.compare_wall) on (BEFORE, SAME) and (BEFORE, "
                f"SLOW): {args.rounds} rounds of BEFORE, AFTER, AFTER, BEFORE, {4 * args.rounds} runs of the "
                "window. Targets: A/A called a regression in <= 1 of 20, the planted +15% found in >= 19 of 20. "
                "quiet: torch's default threads, nothing of ours beside it; hog: one `while True: pass` process "
                "and the target on one thread (OMP_NUM_THREADS=1). Load average: /proc/loadavg's first field "
                "after each comparison (the benchmark itself is about 1).\n\n" + text + "\n\n"
                "- Reproduce: `.venv/bin/python benchmarks/compare_interleaved.py --write benchmarks/RESULTS.md` "
                "(`--keep DIR` keeps each trial; `--analyse DIR` judges them again).\n")
        replace_section(args.write, HEADING, body)


if __name__ == "__main__":
    main()
