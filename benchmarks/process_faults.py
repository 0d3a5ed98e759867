"""The fault table of issue 33: targets that start processes or threads, each run under diagnose's default layers.

    .venv/bin/python benchmarks/process_faults.py [--runs 5] [--only NAME ...] [--write benchmarks/RESULTS.md]

For each case of tests/data/processes/cases.py: the plain run once (`python script.py ARGS`, its stdout and
stderr), then `diagnose -q --microbench-budget 0 --force script.py ARGS` `--runs` times, each judged by
cases.judge against the plain run:
- no traceback printed (diagnose's or a child's);
- exit code 0;
- a report.json that validates against docs/report.schema.json;
- the children's operators in the table with their process role (the case's roles), and the Python processes
  the operator pass cannot record named as not recorded (the case's `not_recorded`);
- nothing printed that the plain run does not print (stdout begins with the plain run's; no stderr line the
  plain run did not print).
The table is rewritten after each case, so an interrupted run leaves the cases it finished.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "data" / "processes"))

from benchmarks.results import replace_section  # noqa: E402
from cases import CASES, Case, judge  # noqa: E402
from diagnose.machine import cpu_model, usable_cpus  # noqa: E402

HEADING = "## Targets that start processes or threads (issue 33's fault table)"
COLUMNS = ("no traceback", "exit 0", "valid report", "children's operators / named", "output unchanged")


def valid(path: Path) -> dict | None:
    """report.json when it validates against the generated schema; None otherwise."""
    import jsonschema_rs

    try:
        data = json.loads(path.read_text())
        schema = json.loads((REPO / "docs" / "report.schema.json").read_text())
        jsonschema_rs.Draft202012Validator(schema).validate(data)
        return data
    except (OSError, ValueError, jsonschema_rs.ValidationError):
        return None


def run_case(case: Case, runs: int) -> tuple[list, float, float]:
    t = time.monotonic()
    plain = subprocess.run([sys.executable, *case.command], cwd=REPO, capture_output=True, text=True, timeout=600,
                           check=False)
    plain_s = time.monotonic() - t
    verdicts, took = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as out:
            t = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "diagnose", "-q", "--microbench-budget", "0", "--force",
                                   "-o", out, *case.command], cwd=REPO, capture_output=True, text=True, timeout=1800,
                                  check=False)
            took.append(time.monotonic() - t)
            report = valid(Path(out) / "report.json")
            verdicts.append(judge(case, proc.returncode, proc.stdout, proc.stderr, report,
                                  plain=(plain.stdout, plain.stderr)))
    return verdicts, plain_s, sum(took) / len(took)


def table(done: list[tuple[Case, list, float, float]], runs: int) -> str:
    lines = [HEADING, "",
             (f"`benchmarks/process_faults.py --runs {runs}`, {datetime.date.today()}, {cpu_model()} "
              f"({usable_cpus()[0]} usable CPUs), Python {platform.python_version()}; each case under the default "
              "layers, judged against its plain run (tests/data/processes/cases.py says what each must show). "
              "A cell counts the runs that passed."), "",
             "| case | " + " | ".join(COLUMNS) + " | plain s | diagnose s | what failed |",
             "| --- | " + " | ".join("---" for _ in COLUMNS) + " | --- | --- | --- |"]
    for case, verdicts, plain_s, diag_s in done:
        n = len(verdicts)
        cells = [sum(v.no_traceback for v in verdicts), sum(v.exit_0 for v in verdicts),
                 sum(v.valid_report for v in verdicts), sum(v.children_seen for v in verdicts),
                 sum(v.output_unchanged for v in verdicts)]
        why = sorted({w for v in verdicts for w in v.why})
        seen = ", ".join(case.roles) + (" (per thread)" if case.threads else "")
        if case.not_recorded:
            seen += ("; " if seen else "") + "named not recorded: " + ", ".join(case.not_recorded)
        lines.append(f"| {case.name} ({seen}) | " + " | ".join(f"{c}/{n}" for c in cells)
                     + f" | {plain_s:.1f} | {diag_s:.1f} | {'; '.join(why)[:300].replace('|', '/') or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--write", help="replace this benchmark's section of RESULTS.md")
    args = parser.parse_args()
    done = []
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        verdicts, plain_s, diag_s = run_case(case, args.runs)
        done.append((case, verdicts, plain_s, diag_s))
        print(f"{case.name}: {sum(v.ok for v in verdicts)}/{len(verdicts)} ok", *sorted({w for v in verdicts
                                                                                        for w in v.why}), flush=True)
        text = table(done, args.runs)
        if args.write:
            replace_section(args.write, HEADING, text)
    print(table(done, args.runs))


if __name__ == "__main__":
    main()
