"""What a --what-if run costs, against what it announces before it starts.

    .venv/bin/python benchmarks/whatif_cost.py [--write benchmarks/RESULTS.md]

The what-if layer announces (progress line, and report.what_if.estimate_s)
"runs x the uninstrumented pass's time, plus compilation": each variant and
the unchanged run, three rounds each, every run as long as the uninstrumented
pass was from start to exit (setup, warm-up and the window). This runs the
real CLI on the planted examples (`--layers operators`, so the what-if layer
is the only derived one) and compares the announcement with the layer's own
elapsed time, and with that time less compilation (compile's one-off cost per
round, as the report measures it: torch.compile() and the first compiled call
less a compiled step). The claim holds when the elapsed time less compilation
is within a factor of 2 of the announcement.
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

from diagnose.machine import cpu_model, usable_cpus  # noqa: E402

HEADING = "## What-if cost, announced and actual"
CASES = [  # (example, what-if list, diagnose window options, script arguments)
    ("no_inference_mode.py", "inference_mode", [], ["--steps", "300"]),
    ("conv_nchw.py", "channels_last", ["--skip-steps", "2", "--steps", "5"], ["--steps", "40"]),
    ("pointwise_block.py", "compile", [], ["--steps", "400"]),
    ("mlp.py", "auto", [], ["--steps", "40"]),
]


def run_case(example: str, what_if: str, window: list[str], args: list[str], out: Path) -> dict:
    cmd = [str(Path(sys.executable).parent / "diagnose"), "-q", "--force", "-o", str(out), "--layers", "operators",
           "--what-if", what_if, *window, f"examples/{example}", "--", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    total = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{example}: diagnose exited {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    w = report["what_if"]
    compile_s = sum((v.get("compile") or {}).get("compile_s") or 0.0 for v in w["variants"]) * 3  # slowest x rounds
    return {"example": example, "what_if": what_if, "variants": [v["name"] for v in w["variants"]],
            "runs": 3 * (len(w["variants"]) + 1), "pass_s": report["run"]["pass_s"], "estimate_s": w["estimate_s"],
            "elapsed_s": w["elapsed_s"], "compile_s": compile_s, "diagnose_s": total}


def report(rows: list[dict], took_s: float) -> str:
    lines = [HEADING, "",
             f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
             f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}. Took "
             f"{took_s:.0f} s.",
             "- `diagnose --layers operators --what-if LIST examples/X.py`: the announcement (runs x the "
             "uninstrumented pass, start to exit) against the what-if layer's elapsed time; compilation is the "
             "compile variant's measured one-off cost, its slowest round x 3 rounds (an upper bound).", "",
             "| example | --what-if | variants run | runs | one run | announced | actual | compilation | actual "
             "less compilation / announced |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        rest = max(0.0, r["elapsed_s"] - r["compile_s"])
        lines.append(f"| {r['example']} | {r['what_if']} | {', '.join(r['variants'])} | {r['runs']} | "
                     f"{r['pass_s']:.2f} s | {r['estimate_s']:.1f} s | {r['elapsed_s']:.1f} s | "
                     f"{r['compile_s']:.1f} s | {rest / r['estimate_s']:.2f}x |")
    ratios = [max(0.0, r["elapsed_s"] - r["compile_s"]) / r["estimate_s"] for r in rows]
    ok = all(0.5 <= x <= 2.0 for x in ratios)
    lines += ["", f"- Verdict: the elapsed time less compilation is {min(ratios):.2f}x-{max(ratios):.2f}x the "
                  f"announcement: {'within' if ok else 'NOT within'} a factor of 2. Compilation is announced as "
                  "extra, without a figure (it depends on the model and on inductor's cache).",
              "", "- Reproduce: `.venv/bin/python benchmarks/whatif_cost.py --write benchmarks/RESULTS.md`.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", help="replace this benchmark's section in a RESULTS.md")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="diagnose-whatif-") as tmp:
        rows = []
        for i, case in enumerate(CASES):
            rows.append(run_case(*case, Path(tmp) / f"r{i}"))
            print(rows[-1], file=sys.stderr)
    text = report(rows, time.monotonic() - started)
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
