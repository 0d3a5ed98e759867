"""The package's layering, read from its source with `ast`: no import circle, and the ground floor stays low.

A circle (a -> b -> ... -> a) makes import order matter and hides which
module owns what; the ground floor (config.py, protocol.py, report/) is what
every layer may import, so it must import nothing above it. A function-local
import of diagnose's (or microbench's) own modules is allowed only where it
defers a real cost or a child-only dependency, and then says why in a comment.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("diagnose", "microbench")
GROUND = ("diagnose.config", "diagnose.protocol", "diagnose.report")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, tree: ast.AST | None = None) -> list[tuple[str, ast.AST]]:
    """(imported module, node) for every import of the packages' own modules, wherever it stands."""
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree or ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            # `from pkg import sub` imports pkg.sub when it is a module, else pkg
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name) if name.split(".")[0] in PACKAGES else None
            # a module's own package is imported before it anyway: not an edge of its own
            if target and target != module and not module.startswith(target + "."):
                out.append((target, node))
                # importing a.b.c runs a.b's __init__ first (a layer package's holds its layer): an edge too
                parts = target.split(".")
                for i in range(2, len(parts)):
                    parent = ".".join(parts[:i])
                    if parent in MODULES and parent != module and not module.startswith(parent + "."):
                        out.append((parent, node))
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        graph[module] |= {target for target, _ in _imports(module, path)}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(MODULES):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_among_the_packages_modules():
    graph = _graph()
    assert _cycles(graph) == []
    # the check sees a real circle: a planted edge back from the ground floor closes one
    graph["diagnose.config"].add("diagnose.api")
    assert any("diagnose.config" in c and "diagnose.api" in c for c in _cycles(graph))


def test_the_ground_floor_imports_nothing_above_it():
    graph = _graph()
    for module in MODULES:
        if module.startswith(GROUND):
            above = {t for t in graph[module] if not t.startswith(GROUND) and t != "diagnose.errors"}
            assert not above, f"{module} imports {sorted(above)}"


def test_own_module_imports_inside_functions_say_why():
    bare = []
    for module, path in MODULES.items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        local = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for _, node in _imports(module, path, tree):
            if id(node) not in local:
                continue
            here, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
            if "#" not in here and not above.strip().startswith("#"):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: {here.strip()}")
    assert not bare, "function-local imports without a comment saying why:\n" + "\n".join(sorted(set(bare)))
