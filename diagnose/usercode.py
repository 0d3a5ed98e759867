"""Which source files are the user's own code, and where in it we are now.

"User code" is every Python file except the standard library, installed
packages (site-packages, torch itself) and diagnose; the target script and
the files beside it always count, even when the script lives inside
site-packages. Used to attribute operators and Python time to the user's lines.
"""

from __future__ import annotations

import os
import sys
import sysconfig


def _library_roots() -> list[str]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(os.path.realpath(p))
    for p in sys.path:
        if p and os.path.basename(p) in ("site-packages", "dist-packages"):
            roots.add(os.path.realpath(p))
    roots.add(os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep + "diagnose")
    return sorted(roots)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class UserCode:
    """Decides, per file name, whether it is the user's code (cached)."""

    def __init__(self, script: str, cwd: str | None = None):
        self.script = os.path.realpath(script)
        self.script_dir = os.path.dirname(self.script)
        self.cwd = os.path.realpath(cwd or os.getcwd())
        self.library_roots = _library_roots()
        self._script_dir_is_library = any(_under(self.script_dir, r) for r in self.library_roots)
        self._cache: dict[str, bool] = {}

    def is_user(self, filename: str) -> bool:
        hit = self._cache.get(filename)
        if hit is None:
            hit = self._cache[filename] = self._decide(filename)
        return hit

    def _decide(self, filename: str) -> bool:
        if not filename or filename.startswith("<"):
            return False
        path = os.path.realpath(filename)
        if path == self.script:
            return True
        if self._script_dir_is_library and _under(path, self.script_dir):
            return True
        return not any(_under(path, r) for r in self.library_roots)

    def display(self, filename: str) -> str:
        """Path as shown in reports: relative to the working directory when inside it."""
        path = os.path.realpath(filename)
        return os.path.relpath(path, self.cwd) if _under(path, self.cwd) else path

    def location(self, frame) -> str | None:
        """`file.py:LINE` of the innermost user frame at or above `frame`."""
        while frame is not None:
            code = frame.f_code
            if self.is_user(code.co_filename):
                return f"{self.display(code.co_filename)}:{frame.f_lineno}"
            frame = frame.f_back
        return None


class FunctionSpans:
    """Which function of a source file encloses a line, from the file's AST.

    Joins the operator pass (which knows lines) with the call-graph pass
    (which knows functions by their first line). Reads files, never runs them.
    """

    def __init__(self) -> None:
        self._cache: dict[str, list[tuple[int, int, int, str]]] = {}

    def spans(self, path: str) -> list[tuple[int, int, int, str]]:
        """(first_line, def_line, end_line, qualname) per function; first_line
        is the first decorator's line, as in code objects and cProfile."""
        hit = self._cache.get(path)
        if hit is None:
            hit = self._cache[path] = _function_spans(path)
        return hit

    def enclosing(self, path: str, line: int) -> tuple[str, int, int] | None:
        """(qualname, first_line, end_line) of the innermost function holding `line`."""
        best = None
        for first, _def, end, name in self.spans(path):
            if first <= line <= end and (best is None or first >= best[1]):
                best = (name, first, end)
        return best

    def end_line(self, path: str, first_line: int) -> int | None:
        for first, def_line, end, _name in self.spans(path):
            if first_line in (first, def_line):
                return end
        return None


def _function_spans(path: str) -> list[tuple[int, int, int, str]]:
    import ast

    try:
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[tuple[int, int, int, str]] = []

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    out.append((first, child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out
