"""What to run: `script.py` as __main__, or `script.py:function` called in a loop.

Validation here never runs user code: it reads and compiles the file, and
looks for the function among the module's top-level names with `ast`.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field

from diagnose.errors import TargetError


@dataclass(frozen=True)
class Target:
    script: str  # as the user gave it
    argv: list[str] = field(default_factory=list)  # the script's own arguments
    function: str | None = None  # function mode when set (its calls counted by Config.skip_steps and steps)

    @property
    def mode(self) -> str:
        return "function" if self.function else "script"

    @property
    def path(self) -> str:
        return os.path.abspath(self.script)

    @property
    def stem(self) -> str:
        return os.path.splitext(os.path.basename(self.script))[0]

    @property
    def label(self) -> str:
        return f"{self.script}:{self.function}" if self.function else self.script


def sha256_of(path: str) -> str | None:
    """The file's SHA-256 in hex (what TargetInfo.script_sha256 records); None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def parse_target_spec(spec: str) -> tuple[str, str | None]:
    """Split `model.py:step` into ("model.py", "step"); a plain path has no function."""
    if os.path.exists(spec):
        return spec, None
    head, sep, tail = spec.rpartition(":")
    if sep and head and tail.isidentifier():
        return head, tail
    return spec, None


def validate(target: Target) -> None:
    """Raise TargetError with a one-line message if the target cannot run."""
    path = target.script
    if not os.path.exists(path):
        raise TargetError(f"no such file: {path}")
    if os.path.isdir(path):
        raise TargetError(f"{path} is a directory; give the Python script to run (e.g. {os.path.join(path, 'train.py')})")
    try:
        with open(path, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        raise TargetError(f"cannot read {path}: {exc.strerror}") from None
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise TargetError(f"{path}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes
        raise TargetError(f"{path}: cannot be compiled: {exc}") from None
    if target.function:
        names = top_level_names(tree)
        if target.function not in names and not has_star_import(tree):
            funcs = sorted(n for n, kind in names.items() if kind == "function")
            hint = f" (functions defined there: {', '.join(funcs)})" if funcs else " (it defines no functions)"
            raise TargetError(f"{path} has no top-level function '{target.function}'{hint}")


def top_level_names(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = "function"
        elif isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.setdefault(n.id, "value")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], "import")
    return names


def has_star_import(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in tree.body)
