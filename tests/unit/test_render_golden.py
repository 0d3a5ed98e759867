"""Golden files for the renderers: committed reports rendered through the real entry points.

Each case renders a report recorded under tests/data and compares the text with
a file under tests/golden/:

- `<name>.terminal.txt`: what `diagnose --load REPORT` prints (cli.main, no colour);
- `<name>.md`: markdown.render(report), which `diagnose --load REPORT --format md` must print too;
- `<name>.judged.txt`: a recorded report judged again as a run judges it (its step budget, findings, what is
  not confirmed, the verdict): the verdict line and the not-confirmed list of its terminal summary and
  report.md (the parts its judgement writes; the budget's own line is tests/unit/test_budget.py's);
- `<name>.written.txt` and `<name>.written.html`: what output.write_report leaves in an output directory
  for a report as a run hands it over (the pictures' artifacts and "not made" reasons not yet set): the
  files written, report.json's artifacts and each layer's missing, report.md, the summary printed after
  a run, and report.html.

What legitimately varies is normalised before comparing: the temporary output directory and the
repository's absolute path become <TMP> and <REPO>, and the PNGs embedded in report.html (their bytes
depend on the matplotlib version) become <PNG>. Nothing else varies: the reports hold their own times
and dates.

A missing golden file is a failure, never created silently. To write (or rewrite) them on purpose,
after checking that the change in output is wanted:

    DIAGNOSE_UPDATE_GOLDEN=1 python -m pytest -q tests/unit/test_render_golden.py

then review `git diff tests/golden/` and commit it. These tests read committed files and draw pictures
from them; nothing is timed, so they are parallel_safe (tests/conftest.py: every test under tests/unit).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from diagnose import budget, cli, findings, output
from diagnose.render import markdown, terminal
from diagnose.report import io as report_io
from diagnose.report.model import FoldedStack

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("DIAGNOSE_UPDATE_GOLDEN") == "1"

LOADED = {
    "resnet_train": DATA / "findings" / "resnet_train_window_report.json",
    "bert_infer": DATA / "findings" / "bert_infer_window_report.json",
    "ddp_node0": DATA / "distributed" / "node0" / "report.json",
    "row_loop_before_script": DATA / "compare" / "row_loop_before_script.json",
}
# judged as a run would (a report of schema "3" has no verdict): healthy (BERT inference), and not, with a
# doubted micro-benchmark listed as not confirmed (GPT-2 generate)
JUDGED = {
    "bert_infer": DATA / "findings" / "bert_infer_window_report.json",
    "gpt2_generate": DATA / "findings" / "gpt2_generate_window_report.json",
}
# what write_report draws: threads.png and roofline.png (node0), a timeline too short to draw with the
# roofline drawn (row_loop_after), folded stacks added to a real report (flamegraph.png, stacks.folded)
WRITTEN = {
    "ddp_node0": DATA / "distributed" / "node0" / "report.json",
    "row_loop_after": DATA / "compare" / "row_loop_after.json",
    "resnet_train_stacks": DATA / "findings" / "resnet_train_window_report.json",
}
# the artifacts write_report itself adds; a run hands it a report holding only the layers' files
WRITTEN_BY_WRITE_REPORT = {"threads_png", "flamegraph_png", "roofline_png", "stacks", "report_json", "report_md",
                           "report_html"}
PICTURES = ("threads.png", "flamegraph.png", "roofline.png")


def normalise(text: str, tmp: Path | None = None) -> str:
    if tmp is not None:
        text = text.replace(str(tmp), "<TMP>")
    text = text.replace(str(REPO), "<REPO>")
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,<PNG>", text)


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), (f"golden file {path.relative_to(REPO)} is missing: write it on purpose with "
                            "DIAGNOSE_UPDATE_GOLDEN=1 (see this module's docstring)")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        import difflib

        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}", "rendered", n=2))
        pytest.fail(f"{name} differs from its golden file (DIAGNOSE_UPDATE_GOLDEN=1 rewrites it):\n{diff[:6000]}")


def run_cli(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0 and not err, (code, err)
    return out


@pytest.mark.parametrize("name", LOADED)
def test_terminal_summary_of_a_loaded_report(name, capsys):
    check(f"{name}.terminal.txt", normalise(run_cli(capsys, "--load", str(LOADED[name]))))


@pytest.mark.parametrize("name", LOADED)
def test_markdown_of_a_loaded_report(name, capsys):
    text = markdown.render(report_io.load(str(LOADED[name])))
    check(f"{name}.md", normalise(text))
    assert run_cli(capsys, "--load", str(LOADED[name]), "--format", "md") == text


@pytest.mark.parametrize("name", LOADED)
def test_load_format_json_prints_the_report_as_saved(name, capsys, tmp_path):
    report = report_io.load(str(LOADED[name]))
    report_io.save(report, str(tmp_path / "report.json"))
    assert run_cli(capsys, "--load", str(LOADED[name]), "--format", "json") == (tmp_path / "report.json").read_text()


@pytest.mark.parametrize("name", JUDGED)
def test_the_verdict_and_what_is_not_confirmed_of_a_judged_report(name):
    report = report_io.load(str(JUDGED[name]))
    report.step_budget = budget.of(report)
    findings.judge(report)
    parts = []
    for title, text, verdict, unconfirmed in (
            ("terminal", terminal.render(report), "verdict: ", "Not confirmed: "),
            ("report.md", markdown.render(report), "**Verdict:** ", "### Not confirmed: ")):
        lines = text.splitlines()
        parts.append(f"# {title}")
        parts += [line for line in lines if line.startswith(verdict)]
        start = next((i for i, line in enumerate(lines) if line.startswith(unconfirmed)), len(lines))
        end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")
                    and not lines[i].startswith("- ")), len(lines))
        parts += lines[start:end]
    check(f"{name}.judged.txt", normalise("\n".join(parts) + "\n"))


def as_handed_to_write_report(name: str):
    """The committed report as a run hands it to write_report: only the layers' own artifacts."""
    report = report_io.load(str(WRITTEN[name]))
    report.artifacts = {k: v for k, v in report.artifacts.items() if k not in WRITTEN_BY_WRITE_REPORT}
    for status in report.layers.values():
        for picture in PICTURES:
            status.missing.pop(picture, None)
    if name.endswith("_stacks"):
        report.stacks = [
            FoldedStack(frames=["examples/resnet_train.py:48", "ResNetModel", "Conv2d", "aten::mkldnn_convolution"],
                        self_cpu_us=141120.4),
            FoldedStack(frames=["examples/resnet_train.py:48", "ResNetModel", "MaxPool2d",
                                "aten::max_pool2d_with_indices"], self_cpu_us=208520.0),
            FoldedStack(frames=["examples/resnet_train.py:50", "aten::convolution_backward"], self_cpu_us=187620.7),
            FoldedStack(frames=["examples/resnet_train.py:50", "aten::fill_"], self_cpu_us=0.4),
        ]
    return report


@pytest.mark.parametrize("name", WRITTEN)
def test_files_written_by_write_report(name, tmp_path):
    report = as_handed_to_write_report(name)
    out = tmp_path / "out"
    out.mkdir()
    output.write_report(report, str(out))
    saved = json.loads((out / "report.json").read_text())
    assert saved == json.loads(report_io.dumps(report)), "report.json is the report write_report left in memory"
    parts = [
        "# files\n" + "".join(f"{p.name}\n" for p in sorted(out.iterdir())),
        "# report.json: artifacts\n" + json.dumps(saved["artifacts"], indent=1) + "\n",
        "# report.json: layers' missing\n" + json.dumps({k: v["missing"] for k, v in saved["layers"].items()},
                                                          indent=1) + "\n",
        "# stacks.folded\n" + ((out / "stacks.folded").read_text() if (out / "stacks.folded").exists() else ""),
        "# printed after the run\n" + terminal.render(report, str(out)),
        "# report.md\n" + (out / "report.md").read_text(),
    ]
    check(f"{name}.written.txt", normalise("\n".join(parts), tmp_path))
    check(f"{name}.written.html", normalise((out / "report.html").read_text(), tmp_path))
