"""Operator shares by sampling (py-spy, uninstrumented pass) against the operator pass's, on the gallery.

    .venv/bin/python benchmarks/sampled_shares.py [--only mlp,...] [--write benchmarks/RESULTS.md]

Runs `diagnose --sample --layers operators --steps N TARGET` (one run gives both measures: the sample layer's
py-spy over the uninstrumented pass's window, and the operator pass) on examples/mlp.py, BERT training
(benchmarks/targets/bert_train.py) and examples/resnet_train.py, and compares, for the operator pass's top 5
operators (rows summed over shapes), each one's share of operator time with its share of the samples inside
an operator. Target: within 10 points for each of them (report/sampled.DISTORTION_POINTS).
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose.config import SAMPLE_RATE_HZ
from diagnose.machine import cpu_model, usable_cpus

HEADING = "## Sampled operator shares against the operator pass (--sample)"
TARGETS = {  # name -> (script, diagnose --steps): windows of several seconds, py-spy needs ~1 s to start
    "mlp": ("examples/mlp.py", 400),  # ~20 ms steps; the operator pass keeps ~6 MB a step (2.4 GB)
    "bert": ("benchmarks/targets/bert_train.py", 40),
    "resnet": ("examples/resnet_train.py", 120),
}
TOP = 5
LIMIT_POINTS = 10.0


def measure(script: str, steps: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "diagnose", "-q", "--force", "--sample", "--layers", "operators", "--steps",
           str(steps), "-o", str(out), script]
    subprocess.run(cmd, cwd=REPO, capture_output=True, check=False, timeout=1800)
    return json.loads((out / "report.json").read_text())


def compare(report: dict) -> tuple[list[tuple[str, float, float]], str, str | None]:
    traced: dict[str, float] = {}
    for row in report["operators"]:
        traced[row["name"]] = traced.get(row["name"], 0.0) + row["self_pct"]
    s = report.get("sampled")
    if not s:
        return [], "0", report["layers"].get("sample", {}).get("reason")
    sampled = {o["name"]: o["share_pct"] for o in s["operators"]}
    top = sorted(traced, key=lambda n: -traced[n])[:TOP]
    return ([(n, traced[n], sampled.get(n, 0.0)) for n in top], f"{s['operator_samples']} ({s['imputed_samples']})",
            None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(TARGETS))
    parser.add_argument("--write", default=None)
    args = parser.parse_args()
    lines = [HEADING, "",
             (f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
              f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}. A shared "
              "machine: another engineer's diagnose runs used it at the same time (the two measures come from "
              "two passes run one after the other, so load that changes between them moves the shares apart)."),
             (f"- `diagnose --sample --layers operators --steps N TARGET`, py-spy at {SAMPLE_RATE_HZ:g} Hz over "
              f"the uninstrumented pass's window; the operator pass's top {TOP} operators (rows summed over shapes): "
              f"their share of operator self time there, and of the samples inside an operator; target: within "
              f"{LIMIT_POINTS:g} points."),
             "",
             "| target | operator samples (imputed) | operator: operator pass % / sampled % | largest gap | within 10 |",
             "| --- | ---: | --- | ---: | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            script, steps = TARGETS[name]
            t0 = time.monotonic()
            pairs, samples, why = compare(measure(script, steps, Path(tmp) / name))
            took = time.monotonic() - t0
            if not pairs:
                lines.append(f"| {name} | {samples} | not sampled: {why} | - | - |")
                continue
            gap = max(abs(a - b) for _, a, b in pairs)
            cells = ", ".join(f"{op.removeprefix('aten::')} {a:.0f}/{b:.0f}" for op, a, b in pairs)
            lines.append(f"| {name} (`{script}`, --steps {steps}, {took:.0f} s) | {samples} | {cells} | "
                         f"{gap:.1f} | {'yes' if gap <= LIMIT_POINTS else 'no'} |")
            print(lines[-1], flush=True)
    lines += ["", "- Reproduce: `.venv/bin/python benchmarks/sampled_shares.py --write benchmarks/RESULTS.md`.", ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
