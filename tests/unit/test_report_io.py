"""report.json round trip, schema version checks and migrations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from diagnose.errors import UsageError
from diagnose.report import io as report_io
from diagnose.report.model import (PEAKS_CONTENDED_DOUBT, SCHEMA_VERSION, Finding, IterationStats, LayerStatus,
                                   OperatorRow, Place, Report, Run, SourceShare, Stake, TargetInfo)


def sample() -> Report:
    r = Report(target=TargetInfo(script="m.py", argv=["--x", "1"], mode="function", function="step", warmup=1,
                                 iters=5))
    r.run = Run(exit_code=0, wall_s=1.0, instrumented_wall_s=1.2,
                iterations=IterationStats(n=5, median_s=0.2, q1_s=0.19, q3_s=0.21, min_s=0.18, max_s=0.3))
    r.layers["operators"] = LayerStatus("ok", notes=["n"])
    r.operators = [OperatorRow(name="aten::mm", input_shapes=[[2, 3], [3, 4]], dtypes=["float", "float"], calls=2,
                               self_cpu_us=5.0, total_cpu_us=6.0, self_pct=100.0, source="m.py:3",
                               sources=[SourceShare("m.py:3", 2, 5.0)], flops=96, gflops_per_s=0.016,
                               called_by={"": 5.0})]
    r.findings = [Finding("hot_operator", "low", "t", "aten::mm", "m.py:3", {"share_pct": 100.0}, "s")]
    return r


def test_round_trip(tmp_path):
    path = tmp_path / "report.json"
    report_io.save(sample(), str(path))
    text = path.read_text()
    assert text.lstrip().startswith('{\n "schema_version": "4"')
    loaded = report_io.load(str(path))
    assert loaded == sample()
    assert report_io.to_dict(loaded) == json.loads(text)


def test_unknown_version_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": "99", "target": {"script": "x"}}))
    with pytest.raises(UsageError, match="schema_version '99'"):
        report_io.load(str(path))


def test_not_a_report(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("[1, 2]")
    with pytest.raises(UsageError, match="not a diagnose report"):
        report_io.load(str(path))
    with pytest.raises(UsageError, match="no such report"):
        report_io.load(str(tmp_path / "missing.json"))


def test_migration_is_applied(monkeypatch):
    data = json.loads(report_io.dumps(sample()))
    data["schema_version"] = "0"
    data["target"]["file"] = data["target"].pop("script")

    def from_zero(old):
        new = dict(old, schema_version="1")  # then "1" -> "2" as usual
        target = dict(old["target"])
        new["target"] = dict(target, script=target.pop("file"))
        return new

    monkeypatch.setitem(report_io.MIGRATIONS, "0", from_zero)
    assert report_io.from_json_data(data) == sample()


COMMITTED_REPORTS = sorted(p for p in (Path(__file__).parent.parent / "data").rglob("*.json")
                           if re.match(r'\s*\{\s*"schema_version": "\d+"', p.read_text()[:200]))
V1_REPORTS = [p for p in COMMITTED_REPORTS if '"schema_version": "1"' in p.read_text()[:200]]


def test_committed_v1_reports_are_v1():
    # the recordings below stay in "1" (and one in "2", most later ones in "3") on purpose: they are what the
    # migrations are tested on; recordings added since are in the current version
    assert len(V1_REPORTS) >= 10
    assert {"1", "2", "3"} <= {json.loads(p.read_text())["schema_version"] for p in COMMITTED_REPORTS} \
        <= {"1", "2", "3", SCHEMA_VERSION}


def _with_merged(findings: list[Finding]) -> list[Finding]:
    return [piece for f in findings for piece in [f, *f.also]]


@pytest.mark.parametrize("path", COMMITTED_REPORTS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_committed_report_loads_through_the_migrations(path):
    report = report_io.load(str(path))
    assert report.schema_version == SCHEMA_VERSION == "4"
    # doubted results are not findings: "4" lists them apart (_v3_to_v4)
    assert not any(f.doubts for f in _with_merged(report.findings))
    assert all(n.finding.doubts and not n.finding.also for n in report.not_confirmed)
    # a v4 round trip is exact: nothing of an older version survives that "3" would write differently
    again = report_io.from_json_data(json.loads(report_io.dumps(report)))
    assert again == report
    assert report_io.to_dict(again) == report_io.to_dict(report)
    # what findings are ranked by left their evidence for typed fields, merged findings' too
    for f in _with_merged(report.findings):
        assert not set(f.evidence) & set(report_io.V2_RANKING_KEYS), (path, f.kind)
        assert f.stake is not None and not f.stake.basis.startswith("None")


def test_a_v2_findings_ranking_keys_move_into_typed_fields():
    basis = "hot_operator: operator share (an upper bound: the allocating operators' whole time)"
    why = ["the time at stake is an upper bound", f"the measurement is doubted: noisy; {PEAKS_CONTENDED_DOUBT}"]
    v2 = {"schema_version": "2", "target": {"script": "m.py"}, "findings": [{
        "kind": "sequential_operator", "severity": "high", "title": "mm flat", "op": "aten::mm", "location": "m.py:3",
        "suggestion": "s", "layer": "microbench",
        "evidence": {"share_pct": 40.0, "doubts": ["noisy"], "peaks_contended": True, "module": "lm_head (Linear)",
                     "module_class": "Linear", "library_line": "lib.py:9", "time_at_stake_pct": 25.0,
                     "time_at_stake_basis": basis, "confidence": 0.25, "confidence_why": why,
                     "rule_severity": "low", "severity_basis": "under 5%", "severity_from": "hot_operator (operators)",
                     "also": [{"kind": "hot_operator", "severity": "high", "layer": "operators", "op": "aten::mm",
                               "title": "mm hot", "suggestion": "s2",
                               "evidence": {"share_pct": 50.0, "compute_kernel": True, "observation": True,
                                            "time_at_stake_pct": 25.0, "time_at_stake_basis": "share",
                                            "confidence": 1.0}}]}}]}
    report = report_io.from_json_data(v2)
    # doubted, it is not a finding in "4": the hot_operator merged into it is, and it is not confirmed
    (n,) = report.not_confirmed
    f = n.finding
    assert n.reproduce is None  # no reproducer in its evidence: "3" did not record a command
    assert f.evidence == {"share_pct": 40.0, "peaks_contended": True}  # the rule's own measurements stay
    assert f.stake == Stake(25.0, basis, upper_bound=True, confidence=0.25, confidence_why=why)
    assert f.stake.expected_pct == 6.25
    assert f.doubts == ["noisy", PEAKS_CONTENDED_DOUBT]  # what stake.py doubted in "2"
    assert f.place == Place("lm_head (Linear)", "Linear", "lib.py:9")
    assert (f.rule_severity, f.severity_basis, f.severity_from, f.observation) == (
        "low", "under 5%", "hot_operator (operators)", None)
    # a merged finding is a finding at the same line, its ranking typed too; it stays a finding in "4"
    assert f.also == [] and report.findings == [Finding("hot_operator", "high", "mm hot", "aten::mm", "m.py:3",
                              {"share_pct": 50.0, "compute_kernel": True}, "s2", "operators",
                              stake=Stake(25.0, "share", confidence=1.0), observation=True)]
    # "1" had the same findings: it reaches "4" through "2" and "3"
    assert report_io.from_json_data(dict(v2, schema_version="1")) == report


def test_a_v3_doubted_finding_is_not_confirmed_and_its_undoubted_pieces_stay_findings():
    def finding(kind, doubts=(), also=(), reproducer=None):
        return {"kind": kind, "severity": "low", "title": kind, "op": "aten::mm", "location": "m.py:3",
                "evidence": {"reproducer": reproducer} if reproducer else {}, "suggestion": "s", "layer": "x",
                "doubts": list(doubts), "also": list(also)}

    v3 = {"schema_version": "3", "target": {"script": "m.py"}, "findings": [
        finding("python_overhead"),
        finding("sequential_operator", ["noisy"], [finding("hot_operator")], reproducer="reproducers/01_mm.py"),
        finding("low_efficiency", also=[finding("sequential_operator", ["contended"])])]}
    report = report_io.from_json_data(v3)
    assert [f.kind for f in report.findings] == ["python_overhead", "hot_operator", "low_efficiency"]
    assert report.findings[2].also == []
    assert [(n.finding.kind, n.finding.doubts, n.reproduce) for n in report.not_confirmed] == [
        ("sequential_operator", ["noisy"], "python reproducers/01_mm.py"), ("sequential_operator", ["contended"], None)]
    assert report.verdict is None  # a "3" report was not judged


@pytest.mark.parametrize("fmt", ["terminal", "md", "json"])
def test_diagnose_load_renders_every_committed_report(fmt, capsys):
    from diagnose import cli

    for path in COMMITTED_REPORTS:
        assert cli.main(["--load", str(path), "--format", fmt]) == 0, path
        out, err = capsys.readouterr()
        assert out.strip() and not err, (path, err)
        if fmt == "json":
            assert json.loads(out)["schema_version"] == "4"


def test_every_committed_report_renders_as_html():
    from diagnose.render import html

    for path in COMMITTED_REPORTS:
        page = html.render(report_io.load(str(path)))
        assert page.startswith("<!DOCTYPE html>") and "could not draw" not in page, path
