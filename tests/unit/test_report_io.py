"""report.json round trip, schema version checks and migrations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose.errors import UsageError
from diagnose.report import io as report_io
from diagnose.report.model import (SCHEMA_VERSION, Finding, IterationStats, LayerStatus, OperatorRow, Report, Run,
                                   SourceShare, TargetInfo)


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
    assert text.lstrip().startswith('{\n "schema_version": "2"')
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
    data["target"]["path"] = data["target"].pop("script")

    def from_zero(old):
        new = dict(old, schema_version="1")  # then "1" -> "2" as usual
        new["target"] = dict(old["target"], script=old["target"]["path"])
        return new

    monkeypatch.setitem(report_io.MIGRATIONS, "0", from_zero)
    assert report_io.from_json_data(data) == sample()


V1_REPORTS = sorted(p for p in (Path(__file__).parent.parent / "data").rglob("*.json")
                    if '"schema_version": "1"' in p.read_text()[:200])


def test_committed_v1_reports_are_v1():
    # the recordings below stay in "1" on purpose: they are what the migration is tested on
    assert len(V1_REPORTS) >= 10


@pytest.mark.parametrize("path", V1_REPORTS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_committed_v1_report_loads_through_the_migration(path):
    report = report_io.load(str(path))
    assert report.schema_version == SCHEMA_VERSION == "2"
    # a v2 round trip is exact: nothing of "1" survives that "2" would write differently
    again = report_io.from_json_data(json.loads(report_io.dumps(report)))
    assert again == report
    assert report_io.to_dict(again) == report_io.to_dict(report)


@pytest.mark.parametrize("fmt", ["terminal", "md", "json"])
def test_diagnose_load_renders_every_committed_v1_report(fmt, capsys):
    from diagnose import cli

    for path in V1_REPORTS:
        assert cli.main(["--load", str(path), "--format", fmt]) == 0, path
        out, err = capsys.readouterr()
        assert out.strip() and not err, (path, err)
        if fmt == "json":
            assert json.loads(out)["schema_version"] == "2"
