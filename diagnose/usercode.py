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
