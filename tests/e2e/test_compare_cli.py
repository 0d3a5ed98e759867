"""`diagnose compare` and `--fail-on` through the real CLI, on committed real reports.

tests/data/compare holds report.json files the real CLI wrote for
examples/fix/row_loop_before.py and row_loop_after.py (the planted row loop
and its fix; README.md there says how they were made).
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from conftest import DIAGNOSE, REPO, CliRun, assert_one_line_error, run_cli

DATA = REPO / "tests" / "data" / "compare"
BEFORE, AFTER = DATA / "row_loop_before.json", DATA / "row_loop_after.json"


def diagnose(*args: str, timeout: float = 60) -> CliRun:
    proc = subprocess.run([*DIAGNOSE, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, None)


def test_compare_says_the_fix_helped_with_numbers():
    run = diagnose("compare", BEFORE, AFTER)
    assert run.code == 0, run.stderr
    before = json.loads(BEFORE.read_text())["run"]["iterations"]["median_s"]
    after = json.loads(AFTER.read_text())["run"]["iterations"]["median_s"]
    verdict = run.stdout.splitlines()[2]
    assert verdict.startswith(f"the fix helped: wall time {before / after:.2f}x lower"), verdict
    assert "outside the noise (noise floor ±" in verdict and "gone" in verdict
    assert "IQR ±" in run.stdout  # each side's noise
    assert "python_overhead" in run.stdout and "aten::mean" in run.stdout


def test_markdown_and_json_formats():
    md = diagnose("compare", BEFORE, AFTER, "--format", "md")
    assert md.code == 0 and md.stdout.startswith("# diagnose compare:")
    assert "| operator | input shapes |" in md.stdout and "**the fix helped" in md.stdout
    js = diagnose("compare", BEFORE, AFTER, "--format", "json")
    data = json.loads(js.stdout)
    assert data["wall"]["direction"] == "faster" and data["wall"]["significant"] is True
    assert data["regression_pct"] == 0.0


def test_fail_on_regression_exits_4_only_on_a_real_regression():
    ok = diagnose("compare", BEFORE, AFTER, "--fail-on-regression", "5")
    assert ok.code == 0, ok.stderr
    bad = diagnose("compare", AFTER, BEFORE, "--fail-on-regression", "5")
    assert bad.code == 4, bad.stderr
    assert bad.stdout.splitlines()[2].startswith("regression: wall time")
    assert "--fail-on-regression 5; exit 4" in bad.stderr
    lenient = diagnose("compare", AFTER, BEFORE, "--fail-on-regression", "100000")
    assert lenient.code == 0, lenient.stderr


def test_script_mode_reports_say_their_noise_is_unknown():
    run = diagnose("compare", DATA / "row_loop_before_script.json", DATA / "row_loop_after_script.json")
    assert run.code == 0, run.stderr
    assert "one run: noise unknown" in run.stdout and "single runs: run-to-run drift not measured" in run.stdout


def test_repeat_measures_run_to_run_drift_and_compare_uses_it(tmp_path):
    """`--repeat 3` re-runs the uninstrumented workload twice more (no other layer here); compare then sets its
    floor from the runs' own spread and says so. Structure only: the spread itself is the machine's."""
    run = run_cli("--layers", ",", "--repeat", "3", "--steps", "5", "examples/mlp.py", outdir=tmp_path / "r")
    assert run.code == 0, run.stderr[-2000:]
    repeats = run.report["run"]["repeats"]
    assert repeats["unit"] == "step" and len(repeats["medians_s"]) == 3 and repeats["failed"] == 0
    assert repeats["medians_s"][0] == run.report["run"]["iterations"]["median_s"]  # the first is the baseline's
    assert run.report["layers"]["repeat"]["status"] == "ok"
    path = tmp_path / "r" / "report.json"
    same = diagnose("compare", path, path, "--format", "json")
    wall = json.loads(same.stdout)["wall"]
    assert wall["drift_measured"] and wall["ratio"] == 1.0 and wall["direction"] == "same"
    assert "3 and 3 runs (--repeat)" in wall["noise_basis"]


def test_compare_usage_errors_are_one_line_exit_2(tmp_path):
    assert_one_line_error(diagnose("compare", BEFORE), 2, "AFTER.json")
    assert_one_line_error(diagnose("compare", BEFORE, tmp_path / "nope.json"), 2, "no such report")
    assert_one_line_error(diagnose("compare", BEFORE, AFTER, "--fail-on-regression", "-1"), 2, ">= 0")


def test_fail_on_with_load_gates_an_existing_report(tmp_path):
    high = diagnose("--load", BEFORE, "--fail-on", "high")
    assert high.code == 4 and "--fail-on high" in high.stderr and "python_overhead" in high.stderr
    data = json.loads(BEFORE.read_text())
    data["findings"] = [f for f in data["findings"] if f["severity"] == "low"]
    (tmp_path / "report.json").write_text(json.dumps(data))
    clean = diagnose("--load", tmp_path / "report.json", "--fail-on", "medium")
    assert clean.code == 0 and clean.stderr == ""
    assert diagnose("--load", tmp_path / "report.json").code == 0


WORK_SCRIPT = """\
import sys
import torch

work = int(sys.argv[1]) if len(sys.argv) > 1 else 1
a = torch.randn(128, 128)
model = torch.nn.Identity()
for _ in range(30):
    x = model(a)  # the outermost module: one call a step
    for _ in range(8 * work):
        x = torch.mm(x, a) * 0.01
"""


@pytest.mark.serial  # beside another test its runs wait for CPUs, and contended rounds are left out (below)
def test_compare_repeat_reruns_both_sides_interleaved(tmp_path):
    """`compare --repeat 6` runs both reports' targets again, 6 rounds of BEFORE, AFTER, AFTER, BEFORE, and calls
    the change on the rounds. Asserted: the rounds' structure, that the verdict follows from the numbers shown,
    that a round is counted or left out as contended (a run in it waited for CPUs other processes held: its
    progress line says so), and, when all six are counted, one measured outcome with a wide margin: AFTER does
    three times BEFORE's matmuls, so its median round must read above 1.5x (a shift would have to halve at least
    four of the six rounds; a shift that lasts a round hits both sides). Uncounted, that outcome did not hold: beside
    a busy process, runs of this script took 0.3 ms or 120 ms a step, and six rounds read 0.61x."""
    script = tmp_path / "work.py"
    script.write_text(WORK_SCRIPT)
    for name, args in (("before", ()), ("after", ("--", "3"))):
        run = run_cli("--layers", ",", "--steps", "10", str(script), *args, outdir=tmp_path / name)
        assert run.code == 0, run.stderr[-2000:]
        assert run.report["target"]["script_sha256"] and run.report["target"]["cwd"] == str(REPO)
    run = diagnose("compare", tmp_path / "before" / "report.json", tmp_path / "after" / "report.json",
                   "--repeat", "6", "--format", "json", timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    lines = run.stderr.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == \
        ["warm-up (not counted)"] + [f"round {i}/6" for i in range(1, 7)]
    waited = sum(1 for line in lines[1:] if "for CPUs others held" in line)
    data = json.loads(run.stdout)
    wall = data["wall"]
    rounds = wall["interleaved"]
    if rounds is None:  # every round left out: the verdict rests on the two reports, and the notes say why
        assert waited == 6 and any("6 round(s) left out" in n for n in data["notes"]), (lines, data["notes"])
        return
    assert rounds["failed"] == 0 and rounds["rounds"] + rounds["contended"] == 6 and rounds["contended"] == waited
    assert len(rounds["before_s"]) == len(rounds["after_s"]) == 2 * rounds["rounds"]
    assert len(rounds["round_ratios"]) == rounds["rounds"]
    assert wall["ratio"] == rounds["ratio"] and wall["before"]["runs_s"] == rounds["before_s"]
    floor = max(5.0, rounds["drift_pct"])
    assert wall["noise_floor_pct"] == round(floor, 2)
    if waited:
        assert rounds["ci_low"] is None and data["verdict"].startswith("no verdict"), data["verdict"]
        assert any(f"{waited} round(s) left out" in n for n in data["notes"])
        return
    assert rounds["ci_low"] <= rounds["ratio"] <= rounds["ci_high"] and rounds["confidence"] >= 0.95
    excludes = rounds["ci_low"] > 1 or rounds["ci_high"] < 1
    assert wall["significant"] == (excludes and abs(math.log(rounds["ratio"])) > math.log1p(floor / 100))
    assert rounds["ratio"] > 1.5, rounds


def test_compare_repeat_refuses_what_it_cannot_run_again(tmp_path):
    # reports written before diagnose recorded the script's path and hash
    assert_one_line_error(diagnose("compare", BEFORE, AFTER, "--repeat", "6"), 2, "does not record its script")
    assert_one_line_error(diagnose("compare", BEFORE, AFTER, "--repeat", "3"), 2, "--repeat wants a number of "
                                                                                   "rounds >= 6")
    script = tmp_path / "work.py"
    script.write_text(WORK_SCRIPT)
    run = run_cli("--layers", ",", "--steps", "3", str(script), outdir=tmp_path / "r")
    assert run.code == 0, run.stderr[-2000:]
    script.write_text(WORK_SCRIPT + "# edited\n")  # the script changed since its report: it cannot run as it ran
    report = tmp_path / "r" / "report.json"
    assert_one_line_error(diagnose("compare", report, report, "--repeat", "6"), 2, "changed since its report")
