"""The output directory: choosing it, never endangering a user's files in it, and writing the report there.

`write_report` runs the renderer registry (diagnose/render/__init__.py) and
writes each file whole or not at all; `move_artifacts` brings a pass's files
(trace.json, callgraph.png, ...) from its workdir into the output directory.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

from diagnose import render
from diagnose.errors import OutputError
from diagnose.report.model import Report

# Files diagnose writes into an output directory; never replaced without --force.
ARTIFACT_NAMES = (
    "report.json", "report.md", "report.html", "trace.json", "callgraph.png", "callgraph.dot",
    "profile.pstats", "threads.png", "roofline.png", "reproducers", "flamegraph.png", "stacks.folded", "memory.png",
)


def default_output_dir(name: str, root: str, now: float | None = None) -> str:
    """root/NAME-YYYYmmdd-HHMMSS, with -2, -3, ... when that exists already."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = os.path.join(root, f"{name}-{stamp}")
    path, n = base, 2
    while os.path.exists(path):
        path, n = f"{base}-{n}", n + 1
    return path


REPRODUCER_FILE = re.compile(r"^\d\d_[\w.-]+\.py$")  # microbench/reproducer.py's names


def prepare_output_dir(path: str, force: bool) -> None:
    """Create (or accept) the output directory without endangering user files.

    With `force`, an earlier report's own files are removed first (report
    files, pictures, the trace, reproducer scripts by their names), so that
    nothing of an earlier run is shown as this one's; anything else in the
    directory, or in reproducers/, stays.
    """
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutputError(f"output directory {path} exists and is not a directory; nothing was written")
    clashes = [n for n in ARTIFACT_NAMES if os.path.lexists(os.path.join(path, n))] if os.path.isdir(path) else []
    if clashes and not force:
        raise OutputError(
            f"{path} already holds {', '.join(clashes)} from an earlier report; "
            "choose another -o, or add --force to replace those files"
        )
    for name in clashes:
        _remove_own(os.path.join(path, name))
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".diagnose-write-test-"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write to {path}: {exc.strerror or exc}") from None


def _remove_own(path: str) -> None:
    """Remove one of diagnose's artifacts: a file, or reproducers/ minus whatever a user put there."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            for name in os.listdir(path):
                if REPRODUCER_FILE.match(name) and os.path.isfile(os.path.join(path, name)):
                    os.unlink(os.path.join(path, name))
            if not os.listdir(path):
                os.rmdir(path)
        else:
            os.unlink(path)
    except OSError as exc:
        raise OutputError(f"cannot replace {path}: {exc.strerror or exc}") from None


def write_report(report: Report, output_dir: str) -> None:
    """Every file of the report into output_dir; a disk that fills up (or any write error) is an OutputError
    with the reason, never a traceback."""
    try:
        _write_report(report, output_dir)
    except OSError as exc:
        raise OutputError(f"cannot write the report into {output_dir}: {exc.strerror or exc}") from None


def _write_report(report: Report, output_dir: str) -> None:
    """The registry's renderers in order (diagnose/render/__init__.py): the drawings, written first (report.html
    embeds the pictures it finds in output_dir); then the report learns its files; then the documents render it."""
    renderers = render.RENDERERS.values()
    drawn = [r.render(report, output_dir) for r in renderers if not r.document]
    for rendered in drawn:
        _write_files(output_dir, rendered)
    documents = [r for r in renderers if r.document and r.written]
    _record_files(report, drawn, [name for r in documents for name in r.files])
    for r in documents:
        _write_files(output_dir, r.render(report, output_dir))


def _record_files(report: Report, drawn: list[render.Rendered], documents: list[str]) -> None:
    """report.artifacts and each layer's `missing` from what the drawings made, and the documents' own files:
    the one place the report learns its files, before any document renders it. A picture that could not be
    drawn is named missing in the layer whose data it shows (when that layer ran), with why."""
    layer_of = {p.file: p.layer for p in render.PICTURES}
    for rendered in drawn:
        for name in rendered.files:
            report.artifacts[render.artifact_key(name)] = name
        for name, why in rendered.missing.items():
            if layer_of.get(name) in report.layers:
                report.layers[layer_of[name]].missing[name] = why
    for name in documents:
        report.artifacts[render.artifact_key(name)] = name


def _write_files(output_dir: str, rendered: render.Rendered) -> None:
    """Each file whole or not at all (a temporary name, then renamed)."""
    for name, content in rendered.files.items():
        path = os.path.join(output_dir, name)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)


def move_artifacts(report: Report, workdir: str, output_dir: str) -> None:
    try:
        _move(report, workdir, output_dir)
    except OSError as exc:
        raise OutputError(f"cannot write into {output_dir}: {exc.strerror or exc}") from None


def _move(report: Report, workdir: str, output_dir: str) -> None:
    for key, fname in list(report.artifacts.items()):
        src = os.path.join(workdir, fname)
        dst = os.path.join(output_dir, fname)
        if os.path.isdir(src) and os.path.isdir(dst):  # a reproducers/ a user kept files in: merge into it
            for name in os.listdir(src):
                os.replace(os.path.join(src, name), os.path.join(dst, name))
        elif os.path.exists(src):
            shutil.move(src, dst)


def discard(output_dir: str, created: bool) -> None:
    """Remove the output directory only if this run created it and left it empty."""
    if created:
        try:
            os.rmdir(output_dir)
        except OSError:
            pass
