"""Operators layer, parent side: raw rows from the pass merged into one report row per (operator, input shapes)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from diagnose.report import io as report_io
from diagnose.report.model import ModuleShare, OperatorRow, SourceShare, Work

MAX_ROWS = 1000


def merge_rows(raw_rows: list[dict[str, Any]], classes: dict[str, str] | None = None) -> list[OperatorRow]:
    """One row per (operator, input shapes), most self CPU time first; `classes` names the module paths."""
    classes = classes or {}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in raw_rows:
        groups[(r["name"], json.dumps(r["input_shapes"]))].append(r)
    total_self = sum(r["self_cpu_us"] for r in raw_rows) or 1.0
    rows = []
    for (name, shapes), parts in groups.items():
        by_source: dict[str | None, list] = defaultdict(lambda: [0, 0.0])
        by_module: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
        called_by: dict[str, float] = defaultdict(float)
        dtypes: list[str] = []
        layout: dict[str, Any] = {}
        for p in parts:
            if not layout and p.get("input_strides") is not None:
                layout = {"input_strides": p["input_strides"], "concrete_inputs": p.get("concrete_inputs")}
            if p.get("work") and "work" not in layout:
                layout["work"] = p["work"]
            called_by[p.get("parent", "")] += p["self_cpu_us"]
            by_source[p["source"]][0] += p["calls"]
            by_source[p["source"]][1] += p["self_cpu_us"]
            where = by_module[(p.get("module"), p.get("library"))]
            where[0] += p["calls"]
            where[1] += p["self_cpu_us"]
            if not dtypes:
                dtypes = p["dtypes"]
        sources = sorted(
            (SourceShare(location=loc, calls=c, self_cpu_us=round(s, 3)) for loc, (c, s) in by_source.items()),
            key=lambda s: (s.location is None, -s.self_cpu_us, -s.calls),
        )
        modules = sorted(
            (ModuleShare(module=m, module_class=classes.get(m) if m is not None else None, library_line=lib,
                         calls=c, self_cpu_us=round(us, 3)) for (m, lib), (c, us) in by_module.items()),
            key=lambda s: (-s.self_cpu_us, -s.calls))
        top = next((s for s in modules if s.module is not None or s.library_line), None)
        lows = [p["min_self_us"] for p in parts if p.get("min_self_us") is not None]
        highs = [p["max_self_us"] for p in parts if p.get("max_self_us") is not None]
        calls = sum(p["calls"] for p in parts)
        work: Work | None = report_io.typed(Work, layout.get("work"))
        self_us = sum(p["self_cpu_us"] for p in parts)
        total_us = sum(p["total_cpu_us"] for p in parts)
        flops = sum(p["flops"] for p in parts)
        rows.append(OperatorRow(
            name=name,
            input_shapes=json.loads(shapes),
            dtypes=dtypes,
            calls=calls,
            self_cpu_us=round(self_us, 3),
            total_cpu_us=round(total_us, 3),
            self_pct=round(100.0 * self_us / total_self, 3),
            source=sources[0].location if sources else None,
            sources=sources,
            flops=flops or None,
            gflops_per_s=round(flops / (total_us * 1e3), 3) if flops and total_us > 0 else None,
            cpu_memory_bytes=sum(p["cpu_memory_bytes"] for p in parts),
            called_by={k: round(v, 3) for k, v in sorted(called_by.items(), key=lambda kv: -kv[1])},
            input_strides=layout.get("input_strides"),
            contiguous=contiguous_flags(json.loads(shapes), layout.get("input_strides")),
            concrete_inputs=layout.get("concrete_inputs"),
            work=work,
            bytes=work.bytes * calls if work and work.bytes else None,
            module=top.module if top else None,
            module_class=top.module_class if top else None,
            library_line=top.library_line if top else None,
            modules=modules if any(s.module is not None or s.library_line for s in modules) else [],
            min_self_us=round(min(lows), 3) if lows else None,
            max_self_us=round(max(highs), 3) if highs else None,
        ))
    rows.sort(key=lambda r: (-r.self_cpu_us, r.name))
    return rows


def attach_functions(rows: list[OperatorRow]) -> None:
    """Name the user function around each source line (read from the file's AST)."""
    from diagnose.usercode import FunctionSpans

    spans = FunctionSpans()
    for row in rows:
        for share in row.sources:
            path, _, line = (share.location or "").rpartition(":")
            if path and line.isdigit():
                hit = spans.enclosing(path, int(line))
                share.function = hit[0] if hit else "<module>"


def contiguous_flags(shapes: list, strides: list | None) -> list[bool | None] | None:
    """Per input: True when its strides are the row-major ones for its shape (None: not a tensor)."""
    if strides is None or len(strides) != len(shapes):
        return None
    flags: list[bool | None] = []
    for shape, stride in zip(shapes, strides):
        if not shape or not isinstance(shape, list) or not isinstance(stride, list) or len(stride) != len(shape):
            flags.append(None)
            continue
        expected, acc = [], 1
        for dim in reversed(shape):
            expected.append(acc)
            acc *= max(int(dim), 1)
        expected.reverse()
        flags.append(all(d == 1 or s == e for d, s, e in zip(shape, stride, expected)))
    return flags
