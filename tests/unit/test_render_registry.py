"""The renderer registry (diagnose/render/__init__.py): pure renderers, and write_report's record of their files.

The rendered text itself is pinned by test_render_golden.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose import output, render
from diagnose.report import io as report_io
from diagnose.report.model import FoldedStack

DATA = Path(__file__).resolve().parents[1] / "data"


def with_stacks(path: Path):
    report = report_io.load(str(path))
    report.stacks = [FoldedStack(frames=["m.py:1", "Linear", "aten::addmm"], self_cpu_us=120.0),
                     FoldedStack(frames=["m.py:2", "aten::relu"], self_cpu_us=30.0)]
    return report


@pytest.mark.parametrize("name", render.RENDERERS)
def test_every_renderer_leaves_the_report_as_it_found_it(name, tmp_path):
    report = with_stacks(DATA / "compare" / "row_loop_after.json")  # every picture tried, one of them missing
    before = report_io.dumps(report)
    rendered = render.RENDERERS[name].render(report, str(tmp_path))
    assert report_io.dumps(report) == before
    assert list(tmp_path.iterdir()) == [], "a renderer returns its files, it writes none"
    assert set(rendered.files) | set(rendered.missing) <= set(render.RENDERERS[name].files)


def test_the_pictures_are_png_bytes_or_missing_with_why():
    rendered = render.RENDERERS["pictures"].render(with_stacks(DATA / "compare" / "row_loop_after.json"), None)
    assert list(rendered.files) == ["flamegraph.png", "roofline.png"]
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in rendered.files.values())
    assert rendered.missing == {"threads.png": "the thread sampler took too few samples to draw a timeline"}


def test_a_picture_without_data_is_neither_drawn_nor_missing():
    report = report_io.load(str(DATA / "compare" / "row_loop_after_script.json"))  # no timeline, stacks, roofline
    assert render.RENDERERS["pictures"].render(report, None) == render.Rendered()
    assert render.RENDERERS["stacks"].render(report, None) == render.Rendered()


def test_write_report_records_the_files_before_the_documents_list_them(tmp_path):
    report = with_stacks(DATA / "compare" / "row_loop_after.json")
    report.artifacts = {"trace": "trace.json"}
    report.layers["threads"].missing = {}
    output.write_report(report, str(tmp_path))
    assert list(report.artifacts.items()) == [
        ("trace", "trace.json"), ("flamegraph_png", "flamegraph.png"), ("roofline_png", "roofline.png"),
        ("stacks", "stacks.folded"), ("report_json", "report.json"), ("report_md", "report.md"),
        ("report_html", "report.html")]
    assert "too few samples" in report.layers["threads"].missing["threads.png"]
    assert report_io.load(str(tmp_path / "report.json")).artifacts == report.artifacts
    assert "`stacks.folded`" in (tmp_path / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "flamegraph.png", "report.html", "report.json", "report.md", "roofline.png", "stacks.folded"]


def test_the_printable_renderers_are_the_load_formats():
    from diagnose import cli

    action = next(a for a in cli.build_parser()._actions if a.dest == "format")  # noqa: SLF001
    assert tuple(action.choices) == render.PRINTABLE == ("terminal", "md", "json")
    assert all(render.RENDERERS[name].document for name in render.PRINTABLE)
