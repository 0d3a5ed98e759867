"""Which source files are the user's own code, and where in it we are now.

"User code" is every Python file except the standard library, installed
packages (site-packages, torch itself) and diagnose; the target script and
the files beside it always count, even when the script lives inside
site-packages. Used to attribute operators and Python time to the user's lines.

The *library line* of a torch call is the innermost frame outside torch
itself, diagnose and the standard library: in a transformers model the line
of `modeling_bert.py` that called the layer or the operator, in the user's
own model the user's line. Library files are shown relative to the
site-packages folder holding them (`transformers/models/bert/modeling_bert.py`).
"""

from __future__ import annotations

import dis
import importlib.util
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


def torch_root() -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    return os.path.realpath(os.path.dirname(spec.origin))


def _stdlib_roots() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)})


def _generated(filename: str) -> bool:
    """Code torch generated (torch.compile's inductor cache), which nobody wrote."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return "/torchinductor_" in filename or bool(cache and filename.startswith(cache))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# The instructions that run an operation through a C slot of its operand's type (`a - b`, `a @ b`, `x[i]`,
# `out[i] = v`, `a < b`): cProfile sees no call there (it sees calls made by a call instruction only), so the whole
# cost of a torch operator or numpy array operation reached this way is in the calling Python function's self time.
# The operator pass counts its torch calls made so (Autograd.slot_calls), for the step budget (budget.py); the
# call-graph pass samples the time its user functions' frames spend in them (layers/python.py OwnTimeSampler).
SLOT_OPCODES = frozenset(code for name, code in dis.opmap.items()
                         if name.startswith(("BINARY_", "UNARY_"))
                         or name in ("STORE_SUBSCR", "STORE_SLICE", "DELETE_SUBSCR", "COMPARE_OP", "CONTAINS_OP"))
# the instructions that call: a frame executing one is inside its callee, whose time cProfile books to the callee
CALL_OPCODES = frozenset(code for name, code in dis.opmap.items() if name.startswith(("CALL", "PRECALL")))

class UserCode:
    """Decides, per file name, whether it is the user's code (cached)."""

    def __init__(self, script: str, cwd: str | None = None):
        self.script = os.path.realpath(script)
        self.script_dir = os.path.dirname(self.script)
        self.cwd = os.path.realpath(cwd or os.getcwd())
        self.library_roots = _library_roots()
        self._script_dir_is_library = any(_under(self.script_dir, r) for r in self.library_roots)
        self._cache: dict[str, bool] = {}
        self._own = [r for r in (torch_root(), os.path.realpath(os.path.dirname(os.path.abspath(__file__))))
                     if r] + _stdlib_roots()
        self._site = sorted((r for r in self.library_roots if os.path.basename(r) in ("site-packages",
                                                                                     "dist-packages")),
                            key=len, reverse=True)
        self._library: dict[str, str | None] = {}  # filename -> display name as a library line, None: skip it

    def is_user(self, filename: str) -> bool:
        hit = self._cache.get(filename)
        if hit is None:
            hit = self._cache[filename] = self._decide(filename)
        return hit

    def _decide(self, filename: str) -> bool:
        if not filename or filename.startswith("<") or _generated(filename):
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

    def locations(self, frame) -> tuple[str | None, str | None]:
        """(innermost user line, library line: the innermost frame outside torch, diagnose and the
        standard library) at or above `frame`, each as `file.py:LINE`."""
        library = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if library is None:
                shown = self.library(filename)
                if shown is not None:
                    library = f"{shown}:{frame.f_lineno}"
            if self.is_user(filename):
                return f"{self.display(filename)}:{frame.f_lineno}", library
            frame = frame.f_back
        return None, library

    def library(self, filename: str) -> str | None:
        """A package's file as library lines name it (transformers/models/bert/modeling_bert.py), None for torch,
        diagnose and the standard library (the user's file: its display path)."""
        shown = self._library.get(filename, "?")
        if shown == "?":
            shown = self._library[filename] = self._library_name(filename)
        return shown

    def short(self, filename: str) -> str:
        """A file as reports show it: the user's relative to the working directory, an installed package's
        relative to its site-packages (torch/distributed/distributed_c10d.py), anything else in full."""
        if self.is_user(filename):
            return self.display(filename)
        path = os.path.realpath(filename)
        site = next((root for root in self._site if _under(path, root)), None)
        if site:
            return os.path.relpath(path, site)
        stdlib = next((root for root in _stdlib_roots() if _under(path, root)), None)
        return os.path.relpath(path, stdlib) if stdlib else filename

    def _library_name(self, filename: str) -> str | None:
        if not filename or filename.startswith("<") or _generated(filename):
            return None
        if self.is_user(filename):
            return self.display(filename)
        path = os.path.realpath(filename)
        site = next((root for root in self._site if _under(path, root)), None)
        if any(_under(path, r) for r in self._own if site is None or _under(r, site)):
            return None  # torch, diagnose, or the standard library (which may hold site-packages)
        return os.path.relpath(path, site) if site else path


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
