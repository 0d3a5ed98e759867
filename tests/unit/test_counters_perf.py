"""perf stat: the -x, parser on real captured output, the availability probe, the observer, the layer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.findings.efficiency import low_efficiency
from diagnose.layers.counters import CountersLayer, PerfStatObserver, counters_from_perf, skip_reason
from diagnose.report import io as report_io
from diagnose.report.model import Report, TargetInfo
from diagnose.markers import START as START_MARKER, STOP as STOP_MARKER
from diagnose.tools import perf

DATA = Path(__file__).resolve().parents[1] / "data" / "counters"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_not_supported_lines_as_this_machine_prints_them():
    events = perf.parse_stat_csv(text("perf_stat_pid_torch.csv"))
    assert set(events) == set(perf.EVENTS)
    assert events["cycles"]["supported"] is False and events["cycles"]["value"] is None
    assert events["task-clock"] == {**events["task-clock"], "value": 2667.32, "unit": "msec", "supported": True,
                                    "running_pct": 100.0, "metric": 0.888, "metric_unit": "CPUs utilized"}
    m = perf.metrics(events)
    assert m["cpi"] is None and m["cycles"] is None
    assert m["not_supported"] == ["branch-misses", "branches", "cache-misses", "cache-references", "cycles",
                                  "instructions"]
    assert (m["context_switches"], m["page_faults"], m["cpus_utilized"]) == (67, 47606, 0.888)


def test_the_probe_output_of_this_machine_gives_the_no_pmu_reason():
    proc_stderr = text("perf_probe_true.csv")
    reason = perf.diagnose_probe(0, proc_stderr)
    assert "<not supported>" in reason and "cycles, instructions" in reason and "PMU" in reason


def test_counting_output_gives_cpi_ipc_miss_rates_and_multiplexing():
    m = perf.metrics(perf.parse_stat_csv(text("perf_stat_counting_format.csv")))
    assert (m["cycles"], m["instructions"]) == (6410932111, 12821864222)
    assert m["cpi"] == 0.5 and m["ipc"] == 2.0
    assert m["cache_miss_pct"] == 13.0 and m["branch_miss_pct"] == 0.5
    assert m["multiplexed"] == ["cache-misses", "cache-references"]
    assert perf.diagnose_probe(0, text("perf_stat_counting_format.csv")) is None


def test_user_space_fallback_modifiers_and_not_counted():
    events = perf.parse_stat_csv(text("perf_stat_user_only_format.csv"))
    assert events["cycles"]["raw_name"] == "cycles:u"
    m = perf.metrics(events)
    assert m["cpi"] == 2.5 and m["not_counted"] == ["cache-misses"]


def test_a_refusal_names_perf_event_paranoid():
    reason = perf.diagnose_probe(255, text("perf_not_permitted.txt"))
    assert reason.startswith("perf stat could not count cycles and instructions")
    assert "perf_event_paranoid" in reason


def test_stat_command_attaches_to_the_pid_and_writes_a_file():
    assert perf.stat_command(123, "/tmp/x.csv") == [
        "perf", "stat", "-x,", "-e", ",".join(perf.EVENTS), "-p", "123", "-o", "/tmp/x.csv"]


def test_layer_analyse_fills_counters_from_a_counting_run(tmp_path):
    (tmp_path / "perf-stat.csv").write_text(text("perf_stat_counting_format.csv"))
    report = Report(target=TargetInfo(script="x.py"))
    status = CountersLayer().analyse(None, report, str(tmp_path))
    assert status.status == "ok" and "cache-misses" in status.notes[0]
    assert report.counters.source == "perf" and report.counters.cpi == 0.5
    assert report.counters.perf.events["cycles"].value and report.counters.vtune is None
    assert low_efficiency(report) == []  # CPI 0.5 is healthy


def test_layer_analyse_fails_honestly_without_hardware_counts(tmp_path):
    (tmp_path / "perf-stat.csv").write_text(text("perf_stat_pid_torch.csv"))
    report = Report(target=TargetInfo(script="x.py"))
    status = CountersLayer().analyse(None, report, str(tmp_path))
    assert status.status == "failed" and "<not supported>" in status.reason
    assert CountersLayer().analyse(None, report, str(tmp_path / "nope")).status == "failed"


def test_a_schema_1_counters_section_reads_as_the_typed_one():
    # schema "1" wrote counters_from_perf's dict as is: the migration's _empty_is_null keeps it, the fields match
    for name in ("perf_stat_counting_format.csv", "perf_stat_pid_torch.csv"):
        events = perf.parse_stat_csv(text(name))
        m = perf.metrics(events)
        v1 = {"source": "perf", **{k: m[k] for k in ("cpi", "ipc", "cycles", "instructions", "cache_miss_pct",
                                                      "branch_miss_pct", "cpus_utilized")},
              "perf": {**m, "events": events}}
        report = report_io.from_json_data({"schema_version": "1", "target": {"script": "x.py"}, "counters": v1})
        assert report.counters == counters_from_perf(text(name))
        assert report_io.from_json_data({"schema_version": "1", "target": {"script": "x.py"},
                                         "counters": {}}).counters is None


def test_high_cpi_is_a_low_efficiency_finding():
    report = Report(target=TargetInfo(script="x.py"))
    report.counters = counters_from_perf(text("perf_stat_user_only_format.csv"))  # CPI 2.5
    (f,) = low_efficiency(report)
    assert (f.kind, f.severity, f.evidence["cpi"], f.evidence["threshold_cpi"]) == ("low_efficiency", "medium",
                                                                                     2.5, 2.0)


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_this_machine_probe_agrees_with_what_perf_really_does():
    perf.unavailable.cache_clear()
    reason = perf.unavailable()
    proc = subprocess.run(["perf", "stat", "-x,", "-e", "cycles,instructions", "true"], capture_output=True,
                          text=True)
    m = perf.metrics(perf.parse_stat_csv(proc.stderr))
    if reason is None:
        assert m["cycles"] and m["instructions"]
        assert skip_reason() is None
    else:
        assert m["cpi"] is None
        full = skip_reason()
        assert full.startswith(reason) and "CPI" in full and "perf_event_paranoid" in full


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_observer_counts_only_between_the_markers(tmp_path):
    """A real child: perf starts at the start marker and is stopped at the stop marker."""
    work = tmp_path / "pass"
    work.mkdir()
    child = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "def busy(s):\n"  # CPU seconds, not wall: a loaded machine stretches the phases, never shrinks them
        "    t = time.process_time()\n"
        "    while time.process_time() - t < s: pass\n"
        "w = sys.argv[1]\n"
        "busy(0.5)\n"
        "open(os.path.join(w, 'started'), 'w').close()\n"
        "busy(0.4)\n"
        "open(os.path.join(w, 'stopped'), 'w').close()\n"
        "busy(0.8)\n"), str(work)])
    obs = PerfStatObserver(str(tmp_path))
    obs.attach(child.pid, str(work / START_MARKER))
    child.wait()
    obs.detach()
    assert STOP_MARKER == "stopped"
    events = perf.parse_stat_csv((tmp_path / "perf-stat.csv").read_text())
    ms = events["task-clock"]["value"]
    # the 0.4 s of busy loop between the markers, not the 1.3 s of busy loop around them
    assert 100 <= ms <= 900, ms
