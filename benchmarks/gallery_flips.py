"""Do the gallery's verdicts hold from run to run? Issue 34: each example diagnosed 5 times in a row, the set of
(kind, severity >= medium, location) the same in at least 4 of the 5 runs.

    .venv/bin/python benchmarks/gallery_flips.py [--runs 5] [--only mlp.py,...] [--write benchmarks/RESULTS.md]
        [--keep DIR]   keep each run's report (DIR/<example>-<run>/report.json)
        [--analyse DIR]   re-judge kept reports with the rules as they are now (no run): the same table
        [--resume DIR]   go on with a --keep directory: the runs it holds are read, the others run

The whole gallery (about 40 examples, ~5 h on 2 CPUs) does not fit in one sitting. To measure it at one commit
over several, run it from a worktree of that commit (`git worktree add /tmp/g <commit>`, then
`.venv/bin/python /tmp/g/benchmarks/gallery_flips.py --keep DIR` from /work/main's venv) and `--resume DIR`
later: DIR records the commit it was kept at and refuses to mix in runs of another.

Each run is a plain `diagnose examples/X.py` (default layers, HF_HUB_OFFLINE=1), as a user runs it, one after
the other. A run's verdict is its set of findings at medium or high: (kind, severity, location), as the report
lists them (one finding per line, findings/stake.py dedup; its severity the highest of the pieces about its
time). The table gives per example how many runs gave the most common set, how many distinct sets there were,
and what came and went between them (a finding in some runs and not in others, or at another severity). Beside
it, the stricter count of every piece merged under a finding (`also`) at its own severity: a piece about another
operator of the line, or the same operator at another shape, lends the finding nothing, and its severity can
flip where the finding's does not (autocast_weights' two weight casts, 10-50% of operator time each as the
operator pass's allocator happens to fault on one, both or neither). The machine's load (the threads layer's other processes' CPUs) is shown beside it: a flip on a
loaded machine may be the load's, not the rule's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results import replace_section  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402

HEADING = "## Verdicts from run to run on the gallery (issue 34)"
ARGS = {"ddp_train.py": ["--nproc-per-node", "2"]}  # how the gallery's README runs it
TARGET = 4  # of 5 runs with the most common set
COMMIT_FILE = "commit"  # in a --keep directory: the commit its runs were made at


def commit() -> str:
    """The commit the gallery runs from (REPO's HEAD), marked dirty when its tree has changes."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.strip()
    return head + ("-dirty" if dirty else "")


def gallery() -> list[str]:
    return sorted(p.name for p in (REPO / "examples").glob("*.py"))


def verdict(report: dict, pieces: bool = False) -> frozenset[tuple[str, str, str]]:
    """The report's findings at medium or high as (kind, severity, location); `pieces`: every merged piece too."""
    out = set()
    for f in report["findings"]:
        for g in [f, *(f.get("also", []) if pieces else [])]:
            if g["severity"] in ("high", "medium"):
                out.add((g["kind"], g["severity"], g.get("location") or f.get("location") or "-"))
    return frozenset(out)


def rejudge(path: Path) -> tuple[dict, list[str]]:
    """A kept report judged again by today's rules: the doctor's workload checks (which read only the report)
    and the findings, as the run would have made them; and what re-judging cannot do: a check that now warns
    where the run's did not would have started trials (doctor/trials.py) that no kept report holds."""
    from diagnose import budget, findings
    from diagnose.doctor.workload import check_denormals, check_page_faults
    from diagnose.report import io

    report = io.load(str(path))
    caveats = []
    if report.doctor is not None:
        again = {c.name: c for c in (check_page_faults(report), check_denormals(report))}
        for c in report.doctor.checks:
            if c.name in again and again[c.name].status != c.status:
                caveats.append(f"{path.parent.name}: {c.name} {c.status} -> {again[c.name].status}"
                               + (" (a run would have tried its fix: not re-run)" if again[c.name].status == "warn"
                                  else ""))
        report.doctor.checks = [again.get(c.name, c) for c in report.doctor.checks]
    report.step_budget = budget.of(report)  # as api.diagnose does: the budget reads the trials too
    findings.judge(report)
    return json.loads(io.dumps(report)), caveats


def run_once(example: str, out: Path) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "diagnose", "-q", "--force", "-o", str(out), *ARGS.get(example, []),
           f"examples/{example}"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=1800, env=env)
    took = time.monotonic() - t0
    if proc.returncode not in (0, 4):
        raise RuntimeError(f"{example}: diagnose exited {proc.returncode}: {proc.stderr[-1500:]}")
    return json.loads((out / "report.json").read_text()), took


def describe(sets: list[frozenset]) -> str:
    """What differs between the runs: each finding not in every run, with in how many it was."""
    seen = Counter(f for s in sets for f in s)
    varying = [(f, n) for f, n in seen.items() if n < len(sets)]
    if not varying:
        return "-"
    return "; ".join(f"{k} {sev} at {loc}: {n}/{len(sets)}" for (k, sev, loc), n in sorted(varying))


def row(example: str, reports: list[dict], took: float) -> tuple:
    """One example's row of the table: its runs' verdicts, how many agree, what varied, how many agree counting
    every merged piece, the load, the time."""
    sets = [verdict(r) for r in reports]
    mode, agree = Counter(sets).most_common(1)[0]
    strict = Counter(verdict(r, pieces=True) for r in reports).most_common(1)[0][1]
    others = [(r.get("threads") or {}).get("others_cpus") for r in reports]
    return (example, agree, len(set(sets)), describe(sets), strict,
            max((o for o in others if o is not None), default=None), took, mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", help="comma-separated examples (default: the whole gallery)")
    parser.add_argument("--write", help="replace this benchmark's section of RESULTS.md")
    parser.add_argument("--keep", help="keep each run's report in this directory (it must not exist)")
    parser.add_argument("--analyse", help="re-judge the reports --keep kept there with today's rules; run nothing")
    parser.add_argument("--resume", help="a --keep directory to go on with: its kept runs are read, the rest run")
    args = parser.parse_args()
    examples = [e for e in gallery() if not args.only or e in args.only.split(",")]
    started = time.monotonic()
    rows = []
    caveats: list[str] = []
    if args.analyse:
        kept, most = Path(args.analyse), 0
        for example in examples:
            paths = sorted(kept.glob(f"{Path(example).stem}-*/report.json"),
                           key=lambda q: int(q.parent.name.rsplit("-", 1)[1]))
            if not paths:
                continue
            judged = [rejudge(q) for q in paths]
            reports = [r for r, _ in judged]
            caveats += [c for _, cs in judged for c in cs]
            for r, rep in enumerate(reports):
                print(f"{example} run {r + 1}: {sorted(verdict(rep))} (re-judged)", file=sys.stderr, flush=True)
            rows.append(row(example, reports, float("nan")))
            most = max(most, len(paths))
        args.runs = most  # the table's "of N": the most runs any example kept
    else:
        keep = Path(args.resume or args.keep) if args.resume or args.keep else None
        if args.resume:
            kept_at = (keep / COMMIT_FILE).read_text().strip() if (keep / COMMIT_FILE).exists() else None
            if kept_at != commit():
                sys.exit(f"gallery_flips: {keep} was kept at {kept_at}, this tree is {commit()}: the runs would mix "
                         "two commits (run from a worktree of that commit)")
        elif keep is not None:
            keep.mkdir(parents=True)  # never into a directory that holds something already
            (keep / COMMIT_FILE).write_text(commit() + "\n")
        with tempfile.TemporaryDirectory(prefix="diagnose-flips-") as tmp:
            for example in examples:
                reports, took = [], []
                for r in range(args.runs):
                    out = (keep or Path(tmp)) / f"{Path(example).stem}-{r}"
                    if args.resume and (out / "report.json").exists():  # kept by an earlier sitting
                        reports.append(json.loads((out / "report.json").read_text()))
                        print(f"{example} run {r + 1}: {sorted(verdict(reports[-1]))} (kept)", file=sys.stderr,
                              flush=True)
                        continue
                    rep, t = run_once(example, out)
                    reports.append(rep)
                    took.append(t)
                    print(f"{example} run {r + 1}: {sorted(verdict(rep))} ({t:.0f} s)", file=sys.stderr, flush=True)
                rows.append(row(example, reports, sum(took) / len(took) if took else float("nan")))
    need = round(TARGET * args.runs / 5)
    lines = [HEADING, "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; {cpu_model()}, "
             f"{usable_cpus()[0]} usable CPUs, Python {platform.python_version()}; `benchmarks/gallery_flips.py "
             f"--runs {args.runs}{' --only ' + args.only if args.only else ''}`, {time.monotonic() - started:.0f} s. "
             "A run's verdict: its findings at medium or high as (kind, severity, location), as the report lists "
             "them; beside it, the runs alike counting every piece merged under a finding at its own severity.", "",
             f"| example | runs with the most common verdict | distinct verdicts | what varied (in how many runs) | "
             "runs alike, every piece counted | others' CPUs (most) | s a run | the most common verdict |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
    for example, agree, distinct, varied, strict, others, took, mode in rows:
        common = "; ".join(f"{k} {sev} at {loc}" for k, sev, loc in sorted(mode)) or "nothing above low"
        lines.append(f"| {example} | {agree}/{args.runs} | {distinct} | {varied.replace('|', '/')} | "
                     f"{strict}/{args.runs} | {'-' if others is None else format(others, '.1f')} | {took:.0f} | "
                     f"{common.replace('|', '/')} |")
    short = [r[0] for r in rows if r[1] < need]
    lines += ["", f"**Verdict (at least {need} of {args.runs} runs alike for every example):** "
              + ("met on every example run." if not short else "missed on " + ", ".join(short) + ".")]
    if caveats:
        lines += ["", "Re-judged checks whose status changed: " + "; ".join(caveats) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
