"""Does `diagnose compare` cry wolf? A/A pairs and a planted 15% slowdown, quiet and under a CPU hog.

    .venv/bin/python benchmarks/compare_drift.py [--rounds 20] [--keep DIR] [--write benchmarks/RESULTS.md]
    .venv/bin/python benchmarks/compare_drift.py --analyse DIR [--write benchmarks/RESULTS.md]

--keep DIR keeps every report (DIR/CONDITION-KIND-ROUND/report.json), so that a run stopped part-way can still
be judged: --analyse DIR judges the rounds DIR holds, complete rounds only.

Each round diagnoses three runs of benchmarks/drift_target.py with `--repeat 3` (the uninstrumented pass only:
`--layers ,`): BEFORE, AFTER-same (the same script and arguments: an A/A pair) and AFTER-slow (`--work 1.15`: 15%
more of the same matmuls in every step), in rotated order so that drift hits all three alike. Then it asks
compare.compare_wall, the function `diagnose compare` and `--fail-on-regression` use:

- with --repeat on both sides (the reports as written): A/A called a regression in at most 1 of 20 pairs, and the
  planted slowdown found in at least 19 of 20;
- as single runs (each report's first run only, its repeats dropped): how far A/A pairs drift apart, the figure
  SINGLE_RUN_DRIFT_PCT stands for, and how often the single-run rule calls a regression.

The hog is one busy Python process (`while True: pass`) for the whole condition, on a 2-CPU machine.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose import compare
from diagnose.machine import cpu_model, usable_cpus
from diagnose.report import io as report_io

HEADING = "## diagnose compare: A/A pairs and a planted slowdown"
TARGET = "benchmarks/drift_target.py"
DIAGNOSE = str(Path(sys.executable).parent / "diagnose")


def diagnose(out: Path, work: float, steps: int) -> Path:
    cmd = [DIAGNOSE, "-q", "--force", "-o", str(out), "--layers", ",", "--repeat", "3", "--steps", str(steps),
           TARGET, "--", "--work", f"{work:g}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"diagnose failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return out / "report.json"


def single(report):
    """The report as one run: its repeats dropped (what a run without --repeat would have written)."""
    out = copy.deepcopy(report)
    out.run.repeats = None
    return out


WORKS = {"before": 1.0, "same": 1.0, "slow": 1.15}


def measure(name: str, rounds: int, steps: int, keep: Path) -> None:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if name == "hog" else None
    try:
        for r in range(rounds):
            order = list(WORKS)[r % 3:] + list(WORKS)[:r % 3]
            for key in order:
                diagnose(keep / f"{name}-{key}-{r}", WORKS[key], steps)
            print(f"{name}: round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    finally:
        if hog:
            hog.kill()
            hog.wait()


def condition(name: str, keep: Path) -> dict | None:
    """Judge the complete rounds `keep` holds for this condition."""
    reports: dict[str, list] = {key: [] for key in WORKS}
    r = 0
    while all((keep / f"{name}-{key}-{r}" / "report.json").exists() for key in WORKS):
        for key in WORKS:
            reports[key].append(report_io.load(str(keep / f"{name}-{key}-{r}" / "report.json")))
        r += 1
    if not r:
        return None
    rounds = r
    out = {"name": name, "rounds": rounds}
    for label, pick in (("repeat", lambda x: x), ("single", single)):
        aa = [compare.compare_wall(pick(a), pick(b)) for a, b in zip(reports["before"], reports["same"])]
        ab = [compare.compare_wall(pick(a), pick(b)) for a, b in zip(reports["before"], reports["slow"])]
        out[label] = {
            "aa_regressions": sum(1 for w in aa if w.direction == "slower"),
            "aa_any_call": sum(1 for w in aa if w.direction != "same"),
            "ab_found": sum(1 for w in ab if w.direction == "slower"),
            "aa_abs_change": sorted(abs(w.change_pct) for w in aa),
            "ab_change": sorted(w.change_pct for w in ab),
            "floors": [w.noise_floor_pct for w in aa + ab],
        }
    out["spreads"] = [r.run.repeats.spread_pct for rs in reports.values() for r in rs if r.run.repeats]
    out["step_ms"] = statistics.median(r.run.repeats.medians_s[0] * 1000 for r in reports["before"])
    return out


def table(results: list[dict]) -> str:
    rows = [("| condition | rule | A/A called a regression | A/A called any change | planted +15% found | "
             "A/A |change| median / max | planted change median | floor median |"),
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for c in results:
        for label in ("repeat", "single"):
            x = c[label]
            n = c["rounds"]
            rows.append(f"| {c['name']} (step {c['step_ms']:.1f} ms) | "
                        f"{'--repeat 3 both sides' if label == 'repeat' else 'single runs'} | "
                        f"{x['aa_regressions']}/{n} | {x['aa_any_call']}/{n} | {x['ab_found']}/{n} | "
                        f"{statistics.median(x['aa_abs_change']):.1f}% / {max(x['aa_abs_change']):.1f}% | "
                        f"{statistics.median(x['ab_change']):+.1f}% | {statistics.median(x['floors']):.1f}% |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--conditions", default="quiet,hog")
    p.add_argument("--keep", metavar="DIR", help="keep every report here (default: a temporary directory)")
    p.add_argument("--analyse", metavar="DIR", help="judge the reports a --keep DIR holds; run nothing")
    p.add_argument("--write", metavar="RESULTS.md")
    args = p.parse_args()
    names = args.conditions.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(args.analyse or args.keep or tmp)
        if not args.analyse:
            keep.mkdir(parents=True, exist_ok=True)
            for name in names:
                measure(name, args.rounds, args.steps, keep)
        results = [c for c in (condition(name, keep) for name in names) if c]
    text = table(results)
    print(text)
    if args.write:
        from results import replace_section

        when = datetime.date.today().isoformat()
        body = (f"{HEADING}\n\n- When: {when}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
                f"{usable_cpus()} usable; {platform.platform()}; Python {platform.python_version()}.\n"
                f"- Each round: three reports of `{TARGET}` with `--repeat 3 --layers ,`: BEFORE, an identical "
                "AFTER (A/A) and AFTER with 15% more work per step (`--work 1.15`), in rotated order; "
                "`compare.compare_wall` on (BEFORE, A/A) and (BEFORE, planted), once as written and once with each "
                "report's repeats dropped (single runs). Targets with --repeat: A/A a regression in <= 1 of 20, the "
                "planted slowdown found in >= 19 of 20. The hog: one `while True: pass` process for the whole "
                "condition.\n\n" + text + "\n\n"
                "- Run-to-run spread of 3 runs, per report: median "
                + "; ".join(f"{c['name']} {statistics.median(c['spreads']):.1f}% (max {max(c['spreads']):.1f}%)"
                            for c in results)
                + ".\n- Reproduce: `.venv/bin/python benchmarks/compare_drift.py --write benchmarks/RESULTS.md`.\n")
        replace_section(args.write, HEADING, body)


if __name__ == "__main__":
    main()
