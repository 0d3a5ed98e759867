"""gprof2dot and graphviz's `dot`, behind one module.

gprof2dot runs as a subprocess (`python -m gprof2dot`) so its module state
never mixes with ours; `dot` is an external program that may be missing, in
which case the caller keeps the .dot file and says how to get the PNG.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass

# A torch model's call graph at gprof2dot's defaults (0.5% / 0.1%) is a
# hairball of torch internals; these keep the paths that matter readable.
NODE_THRES_PCT = 2.0
EDGE_THRES_PCT = 0.5
DOT_TIMEOUT_S = 120.0
INSTALL_HINT = "install graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz)"


@dataclass
class CallgraphOptions:
    node_thres_pct: float = NODE_THRES_PCT
    edge_thres_pct: float = EDGE_THRES_PCT
    focus_paths: list[str] | None = None  # keep only functions under these directories (gprof2dot -p)
    root: str | None = None  # gprof2dot -z selector ("module:line:function")
    timeout_s: float = DOT_TIMEOUT_S  # gprof2dot and dot each, before they are stopped


class ToolError(Exception):
    pass


def dot_program() -> str | None:
    return shutil.which("dot")


def pstats_to_dot(pstats_path: str, dot_path: str, options: CallgraphOptions) -> None:
    cmd = [sys.executable, "-m", "gprof2dot", "-f", "pstats", pstats_path, "-o", dot_path,
           "-n", f"{options.node_thres_pct:g}", "-e", f"{options.edge_thres_pct:g}"]
    for path in options.focus_paths or []:
        cmd += ["-p", path]
    if options.root:
        cmd += ["-z", options.root]
    _run(cmd, "gprof2dot", options.timeout_s)


def dot_to_png(dot_path: str, png_path: str, timeout_s: float = DOT_TIMEOUT_S) -> None:
    dot = dot_program()
    if dot is None:
        raise ToolError(f"graphviz's dot is not on PATH; {INSTALL_HINT}")
    _run([dot, "-Tpng", dot_path, "-o", png_path], "dot", timeout_s)


def _run(cmd: list[str], what: str, timeout_s: float = DOT_TIMEOUT_S) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what} took longer than {timeout_s:g} s (--callgraph-timeout)") from None
    except OSError as exc:
        raise ToolError(f"{what} could not start: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise ToolError(f"{what} failed (exit {proc.returncode}): {last}")
