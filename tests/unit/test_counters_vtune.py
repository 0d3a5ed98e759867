"""VTune: the CSV/text report parsers on its documented formats, the commands, the scripts (shellcheck)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.config import Config
from diagnose.findings.efficiency import low_efficiency
from diagnose.layers.counters import VtuneLayer
from diagnose.report import io as report_io
from diagnose.report.model import Counters, Report, TargetInfo, VtuneSummary
from diagnose.tools import vtune

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "counters"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_summary_csv_hierarchy_units_and_nested_tables():
    s = vtune.parse_summary_csv(text("vtune_summary_hotspots.csv"))
    assert s["Elapsed Time"] == 4.212
    assert s["Elapsed Time/CPU Time/Spin Time"] == 1.642
    assert s["Elapsed Time/CPU Time/Spin Time/Imbalance or Serial Spinning"] == 1.31
    assert s["Elapsed Time/CPU Time/Overhead Time/Scheduling"] == 0.291
    assert s["Collection and Platform Info/CPU/Logical CPU Count"] == 4.0
    assert s["Collection and Platform Info/Application Command Line"].startswith('/usr/bin/python3 "vtune_scripts')
    u = vtune.parse_summary_csv(text("vtune_summary_uarch.csv"))
    assert u["Elapsed Time/Back-End Bound/Memory Bound/DRAM Bound"] == 41.7
    assert u["Bandwidth Utilization/DRAM, GB/sec"] == [42.0, 36.1, 21.4, 64.2]
    assert u["Elapsed Time/Average CPU Frequency"] == "3.1 GHz"


def test_summary_numbers_diagnose_uses():
    d = vtune.summarize(vtune.parse_summary_csv(text("vtune_summary_hotspots.csv")),
                        vtune.parse_table_csv(text("vtune_hotspots_tasks.csv")))
    assert (d["elapsed_s"], d["cpu_time_s"], d["spin_time_s"], d["overhead_time_s"]) == (4.212, 7.948, 1.642, 0.295)
    assert d["spin_overhead_pct"] == round(100 * (1.642 + 0.295) / 7.948, 2) == 24.37
    assert d["effective_cpu_utilization_pct"] == 71.4 and d["total_thread_count"] == 5.0
    assert d["cpi"] is None  # hotspots in user-mode sampling has no CPI
    assert [t["task"] for t in d["top_tasks"][:3]] == ["aten::bmm", "aten::_softmax", "aten::div"]
    assert d["top_tasks"][1]["spin_time_s"] == 0.581
    u = vtune.summarize(vtune.parse_summary_csv(text("vtune_summary_uarch.csv")))
    assert u["cpi"] == 1.6 and u["effective_cpu_utilization_pct"] == 88.7


def test_text_summary_gives_the_same_numbers_as_the_csv():
    t = vtune.summarize(vtune.parse_summary_text(text("vtune_summary_hotspots.txt")))
    c = vtune.summarize(vtune.parse_summary_csv(text("vtune_summary_hotspots.csv")))
    for key in ("elapsed_s", "cpu_time_s", "effective_time_s", "spin_time_s", "overhead_time_s",
                "spin_overhead_pct", "effective_cpu_utilization_pct", "total_thread_count"):
        assert t[key] == c[key], key


def test_function_grid_keeps_vtune_column_names():
    rows = vtune.parse_table_csv(text("vtune_hotspots_functions.csv"))
    assert rows[1]["Function"] == "__kmp_fork_barrier" and rows[1]["CPU Time:Spin Time"] == 1.38
    assert rows[2]["Function (Full)"].startswith("at::native::(anonymous namespace)::softmax")


def test_not_a_summary_is_refused():
    with pytest.raises(ValueError):
        vtune.parse_summary_csv(text("vtune_hotspots_tasks.csv"))


def test_value_units():
    assert [vtune.value(x) for x in ("1.857s", "24.3%", "250ms", "0s", "", "N/A with HT on")] == [
        1.857, 24.3, 0.25, 0.0, None, "N/A with HT on"]


def test_collect_and_report_commands():
    cmd = vtune.collect_command("uarch-exploration", "/r/x", ["python", "-m", "diagnose.runner", "s.json"],
                                {"collect-memory-bandwidth": "false"})
    assert cmd[:6] == ["vtune", "-collect", "uarch-exploration", "-result-dir", "/r/x", "-quiet"]
    assert "collect-memory-bandwidth=false" in cmd and "collect-memory-bandwidth=true" not in cmd
    assert cmd[cmd.index("--") + 1:] == ["python", "-m", "diagnose.runner", "s.json"]
    with pytest.raises(ValueError):
        vtune.collect_command("memory-access-typo", "/r", [])
    reports = vtune.report_commands("/r/x", "/o")
    assert reports["summary"] == ["vtune", "-report", "summary", "-result-dir", "/r/x", "-format", "csv",
                                  "-csv-delimiter", "comma", "-report-output", "/o/summary.csv"]
    assert "-group-by" in reports["tasks"] and reports["tasks"][reports["tasks"].index("-group-by") + 1] == "task"
    prefix = VtuneLayer().command_prefix("/w", Config(vtune="threading"))
    assert prefix[-1] == "--" and prefix[2] == "threading" and "/w/vtune-result" in prefix


def test_spin_and_overhead_share_is_a_finding():
    report = Report(target=TargetInfo(script="x.py"))
    d = vtune.summarize(vtune.parse_summary_csv(text("vtune_summary_hotspots.csv")))
    report.counters = Counters(source="vtune", spin_overhead_pct=d["spin_overhead_pct"],
                               vtune=report_io.typed(VtuneSummary, d))
    (f,) = low_efficiency(report)
    assert f.severity == "medium" and f.evidence["spin_overhead_pct"] == 24.37 and "OMP" in f.suggestion


def test_cli_summarizes_a_csv_directory(tmp_path):
    shutil.copy(DATA / "vtune_summary_uarch.csv", tmp_path / "summary.csv")
    shutil.copy(DATA / "vtune_hotspots_tasks.csv", tmp_path / "tasks.csv")
    out = subprocess.run([sys.executable, "-m", "diagnose.tools.vtune", str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert '"cpi": 1.6' in out and '"aten::bmm"' in out


SCRIPTS = sorted((REPO / "vtune_scripts").glob("*.sh"))


def test_the_scripts_exist():
    assert {p.name for p in SCRIPTS} == {"collect.sh", "report.sh"}


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_vtune_scripts_pass_shellcheck(script):
    proc = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_collect_script_refuses_an_unknown_analysis_without_vtune():
    proc = subprocess.run(["bash", str(REPO / "vtune_scripts" / "collect.sh"), "flamegraph", "x.py"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown analysis" in proc.stderr
