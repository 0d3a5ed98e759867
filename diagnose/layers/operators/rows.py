"""Operators layer, parent side: raw rows from the pass merged into one report row per (operator, input shapes)."""

from __future__ import annotations

from typing import Any

from diagnose.protocol import MAIN
from diagnose.report import io as report_io
from diagnose.report.model import ListInput, ModuleShare, OperatorRow, ProcessShare, SourceShare, Work
from diagnose.report.rows import sum_rows
from diagnose.usercode import FunctionSpans

MAX_ROWS = 1000


def merge_rows(raw_rows: list[dict[str, Any]], classes: dict[str, str] | None = None) -> list[OperatorRow]:
    """One row per (operator, input shapes), most self CPU time first; `classes` names the module paths.

    Each raw row is typed on its own, then report/rows.py's `sum_rows` sums them (as `diagnose merge`
    sums the node reports' tables)."""
    classes = classes or {}
    return sum_rows(typed_row(r, classes) for r in raw_rows)


def typed_row(r: dict[str, Any], classes: dict[str, str]) -> OperatorRow:
    """One raw row (recorder.py) as a row of its own, its times unrounded: sum_rows rounds the sums."""
    module, strides = r.get("module"), r.get("input_strides")
    return OperatorRow(
        name=r["name"],
        input_shapes=r["input_shapes"],
        dtypes=r["dtypes"],
        calls=r["calls"],
        self_cpu_us=r["self_cpu_us"],
        total_cpu_us=r["total_cpu_us"],
        self_pct=0.0,  # of the sum: sum_rows sets it
        source=r["source"],
        sources=[SourceShare(location=r["source"], calls=r["calls"], self_cpu_us=r["self_cpu_us"],
                             min_self_us=r.get("min_self_us"))],
        flops=r["flops"] or None,
        cpu_memory_bytes=r["cpu_memory_bytes"],
        called_by={r.get("parent", ""): r["self_cpu_us"]},
        input_strides=strides,
        contiguous=contiguous_flags(r["input_shapes"], strides),
        concrete_inputs=r.get("concrete_inputs"),
        work=report_io.typed(Work, r["work"]) if r.get("work") else None,
        modules=[ModuleShare(module=module, module_class=classes.get(module) if module is not None else None,
                             library_line=r.get("library"), calls=r["calls"], self_cpu_us=r["self_cpu_us"])],
        min_self_us=r.get("min_self_us"),
        max_self_us=r.get("max_self_us"),
        list_inputs=[report_io.typed(ListInput, x) for x in r.get("list_inputs") or []],
        processes=[ProcessShare(role=r.get("role") or MAIN, thread=r.get("thread"), calls=r["calls"],
                                self_cpu_us=r["self_cpu_us"])],
    )


def attach_functions(rows: list[OperatorRow]) -> None:
    """Name the user function around each source line (read from the file's AST)."""
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
