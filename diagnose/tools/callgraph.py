"""gprof2dot and graphviz's `dot`, behind one module.

gprof2dot runs as a subprocess (`python -m gprof2dot`) so its module state
never mixes with ours; `dot` is an external program that may be missing, in
which case the caller keeps the .dot file and says how to get the PNG.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from diagnose.config import CallgraphOptions

INSTALL_HINT = "install graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"



class ToolError(Exception):
    pass


def dot_program() -> str | None:
    return shutil.which("dot")


def pstats_to_dot(pstats_path: str, dot_path: str, options: CallgraphOptions, focus_paths: list[str] | None = None,
                  root: str | None = None) -> None:
    """`focus_paths`: keep only functions under these directories (gprof2dot -p); `root`: gprof2dot's -z
    selector ("module:line:function")."""
    cmd = [sys.executable, "-m", "gprof2dot", "-f", "pstats", pstats_path, "-o", dot_path,
           "-n", f"{options.node_thres_pct:g}", "-e", f"{options.edge_thres_pct:g}"]
    for path in focus_paths or []:
        cmd += ["-p", path]
    if root:
        cmd += ["-z", root]
    _run(cmd, "gprof2dot", options.timeout_s)


def dot_to_png(dot_path: str, png_path: str, timeout_s: float) -> None:
    dot = dot_program()
    if dot is None:
        raise ToolError(f"graphviz's dot is not on PATH; {INSTALL_HINT}")
    _run([dot, "-Tpng", dot_path, "-o", png_path], "dot", timeout_s)


def _run(cmd: list[str], what: str, timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what} took longer than {timeout_s:g} s (--callgraph-timeout)") from None
    except OSError as exc:
        raise ToolError(f"{what} could not start: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise ToolError(f"{what} failed (exit {proc.returncode}): {last}")
