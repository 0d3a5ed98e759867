"""What module tracking adds to the operator pass, on a transformers BERT (examples/bert_infer.py).

    .venv/bin/python benchmarks/modules_overhead.py [--rounds 6] [--write benchmarks/RESULTS.md]

Each round runs diagnose's operator pass (`--layers operators`, the same window
of steps) twice, with the module tracker (global forward hooks, the module
path in every label) and without it, in ABBA order across rounds, and takes
the ratio of the operator pass's median step (run.instrumented_iterations):
paired per round. Target: <= 1.10 (issue "See inside library models"). The
verdict uses the worst round.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose import api  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402
from diagnose.target import Target  # noqa: E402

HEADING = "## Module tracking overhead (operator pass, BERT)"
SCRIPT = REPO / "examples" / "bert_infer.py"
TARGET = 1.10


def step_s(tracking: bool, out: Path) -> float:
    config = api.Config(output_dir=str(out), force=True, layers=["operators"], track_modules=tracking)
    result = api.diagnose(Target(script=str(SCRIPT.relative_to(REPO))), config)
    it = result.report.run.instrumented_iterations
    assert it is not None and result.report.layers["operators"].status == "ok"
    assert (result.report.modules is not None) == tracking
    return it.median_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--write", help="replace this benchmark's section in a RESULTS.md")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.chdir(REPO)
    started = time.monotonic()
    ratios, on, off = [], [], []
    with tempfile.TemporaryDirectory(prefix="diagnose-modules-") as tmp:
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            row = {}
            for tracking in order:
                row[tracking] = step_s(tracking, Path(tmp) / f"r{r}{tracking}")
                print(f"round {r + 1}: tracking {'on' if tracking else 'off'} {row[tracking] * 1e3:.1f} ms/step",
                      file=sys.stderr)
            on.append(row[True])
            off.append(row[False])
            ratios.append(row[True] / row[False])
    worst = max(ratios)
    text = "\n".join([
        HEADING, "",
        f"- When: {datetime.date.today().isoformat()}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
        f"{usable_cpus()[0]} usable; {platform.platform()}; Python {platform.python_version()}. "
        f"Took {time.monotonic() - started:.0f} s.",
        f"- `examples/bert_infer.py` (BERT, 4 layers, hidden 256, batch 8 x 128 tokens), `diagnose --layers "
        f"operators`: the operator pass's median step over the window, with module tracking and without, "
        f"{args.rounds} rounds in ABBA order, paired.",
        f"- With tracking: median {statistics.median(on) * 1e3:.1f} ms/step; without: "
        f"{statistics.median(off) * 1e3:.1f} ms/step.",
        f"- Ratio per round: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {worst:.3f}; "
        f"target <= {TARGET:.2f}: **{'met' if worst <= TARGET else 'NOT met'}** (worst round).",
        "- Reproduce: `.venv/bin/python benchmarks/modules_overhead.py --write benchmarks/RESULTS.md` on a quiet "
        "machine.", ""])
    print(text)
    if args.write:
        from results import replace_section  # benchmarks/results.py, beside this script

        replace_section(args.write, HEADING, text)


if __name__ == "__main__":
    main()
