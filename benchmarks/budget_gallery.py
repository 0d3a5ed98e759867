"""The step budget on the example gallery: do its measured slices add up to the uninstrumented step?

    .venv/bin/python benchmarks/budget_gallery.py [--only mlp.py,...] [--write benchmarks/RESULTS.md]

Issue 27's acceptance: on each example of the gallery, diagnosed with the default layers (a plain
`diagnose examples/X.py`, as a user runs it), the measured slices (every slice but `unexplained`) sum to the
uninstrumented median step within +-10%, and `unexplained` is at most 10% of it. The table gives, per example,
the step, each slice's share, the measured sum over the step, the unexplained share and the first finding, and
below it how long the calibration (the probe's per-call and per-page costs, report.model.CallCosts) takes to
measure, in a fresh process, which the probe then caches per machine.
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose.machine import cpu_model, usable_cpus

HEADING = "## The step budget on the example gallery"
SLICES = ("kernels", "dispatch", "python", "native", "data", "allocator", "waiting")
TOLERANCE = 0.10  # the issue's +-10% and <= 10%
CASES = [  # (example, script arguments)
    ("mlp.py", []),
    ("bert_infer.py", []),
    ("gpt2_generate.py", []),
    ("resnet_train.py", []),
    ("numpy_augment.py", []),
    ("fresh_temporaries.py", []),
    ("dataloader_contention.py", []),
    # torch calls through C slots (x[i], a - b): their dispatch was in both the python and dispatch slices
    ("python_row_loop.py", []),
    ("pointwise_block.py", []),
    ("no_inference_mode.py", []),
]
CALIBRATION_ROUNDS = 5
CALIBRATION = ("import time, torch; from diagnose.layers.efficiency import probe; "
               "threads = tuple(probe.thread_counts(probe.machine_usable())); t = time.perf_counter(); "
               "probe.measure_call_costs(torch, threads=threads); print(time.perf_counter() - t)")


def run_case(example: str, args: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "diagnose", "-q", "--force", "-o", str(out), f"examples/{example}", "--", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=1800, env=env)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{example}: diagnose exited {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    budget = report["step_budget"]
    shares = {s["name"]: s["share"] for s in budget["slices"]}
    measured = sum(v for k, v in shares.items() if k != "unexplained")
    first = report["findings"][0] if report["findings"] else None
    return {"example": example, "unit": budget["unit"], "step_s": budget["step_s"], "shares": shares,
            "measured": measured, "unexplained": budget["unexplained_share"], "costs": budget["costs"],
            "first": f"{first['kind']} ({first['severity']}): {first['title']}" if first else "none",
            "kinds": [f"{f['kind']}:{f['severity']}" for f in report["findings"]], "took_s": took,
            "others": (report.get("threads") or {}).get("others_cpus")}


def calibration_s() -> list[float]:
    """Seconds measure_call_costs takes in a fresh process, as the probe runs it (page costs at 1 and the usable
    CPUs; torch's import not counted)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return [float(subprocess.run([sys.executable, "-c", CALIBRATION], capture_output=True, text=True, check=True,
                                 env=env, cwd=REPO).stdout.split()[-1]) for _ in range(CALIBRATION_ROUNDS)]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def report(rows: list[dict], calibration: list[float], took_s: float) -> str:
    lines = [HEADING, "",
             (f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
              f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}. Took "
              f"{took_s:.0f} s."),
             ("- `diagnose examples/X.py` with the default layers; the step budget (`report.step_budget`): each "
              "slice's share of the uninstrumented median step, the measured slices' sum over the step (target "
              f"{100 * (1 - TOLERANCE):.0f}-{100 * (1 + TOLERANCE):.0f}%) and the unexplained share (target "
              f"|unexplained| <= {100 * TOLERANCE:.0f}%). Others' CPUs: what other processes used meanwhile "
              "(the threads layer; 2 = the whole machine)."), "",
             "| example | step | " + " | ".join(SLICES) + " | measured / step | unexplained | ok | others' CPUs | "
             "first finding |",
             "| --- | ---: | " + " | ".join("---:" for _ in SLICES) + " | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        ok = abs(r["measured"] - 1) <= TOLERANCE and abs(r["unexplained"]) <= TOLERANCE
        first = r["first"] if len(r["first"]) <= 140 else r["first"][:137] + "..."
        lines.append(f"| {r['example']} | {1e3 * r['step_s']:.2f} ms/{r['unit']} | "
                     + " | ".join(_pct(r["shares"].get(s)) for s in SLICES)
                     + f" | {100 * r['measured']:.0f}% | {100 * r['unexplained']:.1f}% | {'yes' if ok else 'NO'} | "
                     f"{'-' if r['others'] is None else format(r['others'], '.1f')} | {first.replace('|', '/')} |")
    bad = [r["example"] for r in rows
           if abs(r["measured"] - 1) > TOLERANCE or abs(r["unexplained"]) > TOLERANCE]
    others = [r["others"] for r in rows if r["others"] is not None]
    lines += ["", "- Verdict: " + ("every example's slices add up within the targets." if not bad else
                                   "outside the targets: " + ", ".join(bad) + "."),
              *([(f"- Other processes held {min(others):.1f}-{max(others):.1f} of the {usable_cpus()[0]} usable "
                  "CPUs during these runs, so the steps are several times their quiet length; each slice is a share "
                  "measured within its own pass, which is what the targets judge. Run it again on a quiet machine "
                  "for the steps themselves.")] if others and max(others) >= 0.5 else []),
              f"- The per-call and per-page costs came from: {rows[0]['costs'] if rows else '-'}.",
              (f"- Calibration (`probe.measure_call_costs` as the probe runs it, in a fresh process, {len(calibration)} "
               "runs): "
               f"median {statistics.median(calibration):.2f} s (min {min(calibration):.2f}, max "
               f"{max(calibration):.2f}); target <= 1 s. It runs once per machine with the roofs "
               "(`diagnose probe`) and is cached with them."),
              "- Findings per example: " + "; ".join(f"{r['example']}: {', '.join(r['kinds']) or 'none'}"
                                                     for r in rows) + ".",
              "", ("- Reproduce: `.venv/bin/python benchmarks/budget_gallery.py --write benchmarks/RESULTS.md` on a "
                   "quiet machine."), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated examples to run (default: the whole gallery)")
    parser.add_argument("--write", help="replace this benchmark's section in a RESULTS.md")
    parser.add_argument("--keep", help="write the reports under this directory (default: a temporary one)")
    args = parser.parse_args()
    started = time.monotonic()
    cases = [c for c in CASES if not args.only or c[0] in args.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="diagnose-budget-") as tmp:
        rows = []
        for example, script_args in cases:
            rows.append(run_case(example, script_args, Path(args.keep or tmp) / Path(example).stem))
            print(json.dumps(rows[-1]), file=sys.stderr)
    calibration = calibration_s()
    text = report(rows, calibration, time.monotonic() - started)
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
