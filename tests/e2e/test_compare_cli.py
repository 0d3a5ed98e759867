"""`diagnose compare` and `--fail-on` through the real CLI, on committed real reports.

tests/data/compare holds report.json files the real CLI wrote for
examples/fix/row_loop_before.py and row_loop_after.py (the planted row loop
and its fix; README.md there says how they were made).
"""

from __future__ import annotations

import json
import subprocess

from conftest import DIAGNOSE, REPO, assert_one_line_error, CliRun

DATA = REPO / "tests" / "data" / "compare"
BEFORE, AFTER = DATA / "row_loop_before.json", DATA / "row_loop_after.json"


def diagnose(*args: str) -> CliRun:
    proc = subprocess.run([*DIAGNOSE, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=60)
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
    assert "one run: noise unknown" in run.stdout and "single runs: noise unknown" in run.stdout


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
