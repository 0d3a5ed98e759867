"""A fault inside diagnose itself fails one layer, or one section, never the report."""

from __future__ import annotations

from diagnose import output, session
from diagnose.render import markdown
from diagnose.report.model import LayerStatus, Report, Run, TargetInfo


class Crashing:
    name = "python"

    def analyse(self, outcome, report, workdir):
        return {}["missing"]  # a KeyError deep in an analysis


def test_a_crash_in_a_layers_analysis_fails_that_layer_with_the_reason(tmp_path):
    status = session.analysed(Crashing(), None, Report(target=TargetInfo(script="m.py")), str(tmp_path))
    assert isinstance(status, LayerStatus) and status.status == "failed"
    assert "its analysis failed: KeyError: 'missing'" in status.reason and "test_layer_faults.py" in status.reason


def test_a_crash_in_a_markdown_section_leaves_the_rest(monkeypatch):
    report = Report(target=TargetInfo(script="m.py"), run=Run(exit_code=0, wall_s=1.0))

    def broken(report):
        raise ValueError("bad data")

    broken.__name__ = "_threads"
    monkeypatch.setattr(markdown, "_threads", broken)
    text = markdown.render(report)
    assert "_could not write the threads section: ValueError: bad data_" in text
    assert text.startswith("# diagnose: `m.py`") and "## Machine" in text


def test_a_picture_that_fails_to_draw_is_named_missing(tmp_path, monkeypatch):
    from diagnose.report.model import FoldedStack

    report = Report(target=TargetInfo(script="m.py"), run=Run(exit_code=0, wall_s=1.0))
    report.layers["operators"] = LayerStatus("ok")
    report.stacks = [FoldedStack(frames=["m.py:1", "aten::mm"], self_cpu_us=10.0)]
    monkeypatch.setattr(output.render.plots, "flame_png", lambda r, p: 1 / 0)
    output.write_report(report, str(tmp_path))
    assert "ZeroDivisionError" in report.layers["operators"].missing["flamegraph.png"]
    assert (tmp_path / "report.json").is_file() and (tmp_path / "report.html").is_file()
    assert (tmp_path / "stacks.folded").read_text() == "m.py:1;aten::mm 10\n"
