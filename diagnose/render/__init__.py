"""Renderers: turn a Report into files. They never run code, read profilers or edit the report.

Every renderer is registered in RENDERERS, in the order output.write_report runs
them: a pure function from a report (and, read only, the directory its files
sit in) to a `Rendered`, the files it made (name -> text or bytes) and the
ones it could not make with why. Two kinds:
- files drawn from one section (threads.png, flamegraph.png, roofline.png,
  stacks.folded) come first; a picture with no data is not attempted, one
  that cannot be drawn is named missing;
- documents render the whole report (report.json, report.md, report.html,
  the terminal summary). They list the report's files, so write_report first
  records what the drawings made (report.artifacts) and could not make (the
  layer's `missing`), then renders them; report.html embeds the pictures
  written by then.

`diagnose --load REPORT --format NAME` prints the one output of a PRINTABLE
renderer. Renderer modules are imported when used, not with this package.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable

from diagnose.render import fmt, html, markdown, plots, terminal
from diagnose.report import io as report_io
from diagnose.report.model import Report

STDOUT = "-"  # the terminal summary's one output: printed, never written


@dataclass
class Rendered:
    files: dict[str, str | bytes] = field(default_factory=dict)  # file name -> content, in the order made
    missing: dict[str, str] = field(default_factory=dict)  # file name -> why it could not be made

    def text(self) -> str:
        """The one output of a document (what --load --format prints)."""
        (content,) = self.files.values()
        return content if isinstance(content, str) else content.decode("utf-8")


@dataclass(frozen=True)
class Renderer:
    name: str  # --load --format NAME, when printable
    render: Callable[[Report, str | None], Rendered]  # (report, the directory beside it, read only, or None)
    files: tuple[str, ...]  # every file it may make
    document: bool = True  # renders the whole report, after the drawings' artifacts are recorded in it
    written: bool = True  # False: printed only (the terminal summary)


@dataclass(frozen=True)
class Picture:
    file: str
    layer: str  # the layer whose data it shows: a picture that cannot be drawn is named in its `missing`
    draw: str  # the function of render/plots.py drawing it: draw(report, path) -> None, or why not
    data: Callable[[Report], Any]  # nothing to draw without it: the picture is not attempted, nor missing


PICTURES = (
    # the step budget (diagnose/budget.py): named missing under operators, whose pass makes its kernels slice
    Picture("budget.png", "operators", "budget_png", lambda r: r.step_budget),
    Picture("threads.png", "threads", "threads_png", lambda r: r.threads.timeline if r.threads else None),
    Picture("flamegraph.png", "operators", "flame_png", lambda r: r.stacks),
    Picture("roofline.png", "efficiency", "roofline_png",
            lambda r: r.efficiency.operators if r.efficiency else None),
    Picture("memory.png", "memory", "memory_png", lambda r: r.memory and (r.memory.rss or r.memory.allocator)),
)
ARTIFACT_KEYS = {"stacks.folded": "stacks"}  # report.artifacts key of a file; others: the name with _ for .


def artifact_key(file: str) -> str:
    return ARTIFACT_KEYS.get(file, file.replace(".", "_"))


def _pictures(report: Report, directory: str | None) -> Rendered:
    """The PNGs, drawn side by side by plots.draw_all into a scratch directory and returned as bytes."""
    todo = [p for p in PICTURES if p.data(report)]
    out = Rendered()
    if not todo:
        return out
    with tempfile.TemporaryDirectory(prefix="diagnose-pictures-") as scratch:
        whys = plots.draw_all(report, [(getattr(plots, p.draw), os.path.join(scratch, p.file)) for p in todo])
        for p, why in zip(todo, whys):
            if why is None:
                with open(os.path.join(scratch, p.file), "rb") as fh:
                    out.files[p.file] = fh.read()
            else:
                out.missing[p.file] = why
    return out


def _stacks(report: Report, directory: str | None) -> Rendered:
    """stacks.folded, which flamegraph.pl and speedscope read."""
    return Rendered({"stacks.folded": fmt.folded_stacks(report)} if report.stacks else {})


def _json(report: Report, directory: str | None) -> Rendered:
    return Rendered({"report.json": report_io.dumps(report) + "\n"})


def _markdown(report: Report, directory: str | None) -> Rendered:
    return Rendered({"report.md": markdown.render(report)})


def _html(report: Report, directory: str | None) -> Rendered:
    return Rendered({"report.html": html.render(report, directory)})  # embeds the pictures found in directory


def _terminal(report: Report, directory: str | None) -> Rendered:
    return Rendered({STDOUT: terminal.render(report)})


RENDERERS = {r.name: r for r in (
    Renderer("pictures", _pictures, tuple(p.file for p in PICTURES), document=False),
    Renderer("stacks", _stacks, ("stacks.folded",), document=False),
    Renderer("json", _json, ("report.json",)),
    Renderer("md", _markdown, ("report.md",)),
    Renderer("html", _html, ("report.html",)),
    Renderer("terminal", _terminal, (STDOUT,), written=False),
)}
PRINTABLE = ("terminal", "md", "json")  # diagnose --load --format's choices, in --help's order
