"""Operators layer, parent side: operator time by nn.Module, and the folded stacks.

The operator pass labels every operator with the module whose forward ran it
(recorder.ModuleTracker; backward operators with the module whose forward
produced them, kineto.py). From the raw rows this builds:

- `Modules`: per module path its own (self) operator time and its total with
  its submodules, its forward calls in the window; per module class the sum
  over its instances ("12 BertSelfAttention: 41%"), an instance nested in
  another instance of the same class counted once; the time outside any
  module (the optimizer, functional code, glue). The roots' totals plus the
  outside time are all operator self time.
- folded stacks, `user line;module;...;operator  self-µs`, the format of
  flamegraph.pl and speedscope: one frame per module from the outermost in,
  each named `segment: Class` (the root by its class alone). When the
  operators ran in more than one process role or Python thread, each stack
  starts with where it ran (`place`): "thread ThreadPoolExecutor-0_1",
  "pool worker".

A module's parent is the longest proper prefix of its path that is a module
seen in the window; roots (the outermost module, "", and any other module
called outside every forward, named after its class) have none.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from diagnose.protocol import MAIN
from diagnose.report.model import FoldedStack, ModuleClassRow, ModuleRow, Modules

MAX_STACKS = 3000  # folded lines kept in the report, by weight


class Tree:
    """Module paths seen in the window, with their classes, calls and parent links."""

    def __init__(self, seen: dict[str, dict[str, Any]], roots: list[str], paths: set[str]):
        self.info = {p: dict(seen.get(p) or {"class": _class_from_path(p), "calls": 0}) for p in set(seen) | paths}
        self.roots = set(roots) & set(self.info)
        self.parent: dict[str, str | None] = {p: self._parent(p) for p in self.info}
        self.children: dict[str | None, list[str]] = defaultdict(list)
        for p, parent in self.parent.items():
            self.children[parent].append(p)

    def _parent(self, path: str) -> str | None:
        if path in self.roots or path == "":
            return None
        parts = path.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.info:
                return prefix
        return "" if "" in self.info else None

    def chain(self, path: str) -> list[str]:
        """The path and its ancestors, outermost first."""
        out = []
        node: str | None = path
        while node is not None and node not in out:
            out.append(node)
            node = self.parent.get(node)
        return out[::-1]

    def frame(self, path: str) -> str:
        cls = self.info[path]["class"]
        parent = self.parent.get(path)
        if parent is None:
            return cls if path == "" else f"{path}: {cls}"
        segment = path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path
        return f"{segment}: {cls}"


def _class_from_path(path: str) -> str:
    last = path.rsplit(".", 1)[-1]
    return last[1:-1] if last.startswith("<") and last.endswith(">") else "?"


def build(raw_rows: list[dict[str, Any]], seen: dict[str, dict[str, Any]], roots: list[str]) -> Modules | None:
    """The module table of a pass, or None when no operator ran inside a module."""
    own: dict[str, float] = defaultdict(float)
    outside = total = 0.0
    for r in raw_rows:
        total += r["self_cpu_us"]
        if r.get("module") is None:
            outside += r["self_cpu_us"]
        else:
            own[r["module"]] += r["self_cpu_us"]
    if not own:
        return None
    tree = Tree(seen, roots, set(own))
    totals: dict[str, float] = {}

    def total_of(path: str) -> float:
        if path not in totals:
            totals[path] = own.get(path, 0.0) + sum(total_of(c) for c in tree.children.get(path, []))
        return totals[path]

    rows: list[ModuleRow] = []
    scale = 100.0 / total if total else 0.0

    def visit(path: str, depth: int) -> None:
        rows.append(ModuleRow(path=path, module_class=tree.info[path]["class"], calls=int(tree.info[path]["calls"]),
                              self_cpu_us=round(own.get(path, 0.0), 3), total_cpu_us=round(total_of(path), 3),
                              total_pct=round(total_of(path) * scale, 3), depth=depth))
        for child in sorted(tree.children.get(path, []), key=lambda c: -total_of(c)):
            visit(child, depth + 1)

    for root in sorted(tree.children.get(None, []), key=lambda c: -total_of(c)):
        visit(root, 0)

    by_class: dict[str, list[ModuleRow]] = defaultdict(list)
    for row in rows:
        by_class[row.module_class].append(row)
    classes = []
    for cls, members in by_class.items():
        paths = {m.path for m in members}
        outermost = [m for m in members if not any(a in paths for a in tree.chain(m.path)[:-1])]
        class_total = sum(m.total_cpu_us for m in outermost)
        classes.append(ModuleClassRow(module_class=cls, instances=len(members), calls=sum(m.calls for m in members),
                                      self_cpu_us=round(sum(m.self_cpu_us for m in members), 3),
                                      total_cpu_us=round(class_total, 3), total_pct=round(class_total * scale, 3)))
    classes.sort(key=lambda c: -c.total_cpu_us)
    root_class = tree.info[""]["class"] if "" in tree.info else None
    return Modules(root_class=root_class, rows=rows, classes=classes, outside_cpu_us=round(outside, 3),
                   total_cpu_us=round(total, 3), notes=_notes(rows, raw_rows))


def _notes(rows: list[ModuleRow], raw_rows: list[dict[str, Any]]) -> list[str]:
    notes = []
    classes = {r.module_class for r in rows}
    if classes & {"OptimizedModule"} or any("CompiledFunction" in r["name"] or "Torch-Compiled" in r["name"]
                                            for r in raw_rows):
        notes.append("inside a torch.compile'd region no module hook runs: its operators (its generated kernels) "
                     "belong to the module that called the region")
    if any(c.startswith("RecursiveScriptModule") or c.endswith("ScriptModule") for c in classes):
        notes.append("a torch.jit.script'ed module runs its submodules without Python: their operators belong to "
                     "the scripted module")
    unseen = [r.path for r in rows if r.calls == 0 and r.self_cpu_us > 0]
    if unseen:
        notes.append(f"{len(unseen)} module(s) have operator time but no forward call in the window (their "
                     "forward ran before it, their backward inside it)")
    return notes


def stacks(raw_rows: list[dict[str, Any]], seen: dict[str, dict[str, Any]], roots: list[str]) -> list[FoldedStack]:
    """Folded stacks: user line; modules from the outermost in; operator, weighted by self time."""
    tree = Tree(seen, roots, {r["module"] for r in raw_rows if r.get("module") is not None})
    weights: dict[tuple[str, ...], float] = defaultdict(float)
    places = len({(r.get("role"), r.get("thread")) for r in raw_rows}) > 1
    for r in raw_rows:
        if r["self_cpu_us"] <= 0:
            continue
        frames = [place(r.get("role") or MAIN, r.get("thread"))] if places else []
        frames.append(r.get("source") or "(no line of yours)")
        if r.get("module") is not None:
            frames += [tree.frame(p) for p in tree.chain(r["module"])]
        frames.append(r["name"])
        weights[tuple(f.replace(";", ",") for f in frames)] += r["self_cpu_us"]
    kept = sorted(weights.items(), key=lambda kv: -kv[1])[:MAX_STACKS]
    return [FoldedStack(frames=list(frames), self_cpu_us=round(us, 3)) for frames, us in kept]


def place(role: str, thread: str | None) -> str:
    """Where operators ran, as a stack's first frame: "main thread", "thread Worker-1", "pool worker"."""
    if thread is None:  # one that called no root module and no torch function from Python while recorded
        thread_name = "an unnamed thread"
    else:
        thread_name = "main thread" if thread == "MainThread" else f"thread {thread}"
    if role == MAIN:
        return thread_name
    return role if thread == "MainThread" else f"{role}, {thread_name}"
