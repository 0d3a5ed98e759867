"""Operator rows summed: the one place where rows of one (operator, input shapes) become one row.

`sum_rows(rows)` is a pure function of typed OperatorRows (the inputs are not
changed). Its two callers:
- the operators layer (layers/operators/rows.py `merge_rows`) types each raw
  row of its pass (of every rank, under torchrun) as an OperatorRow of its
  own, unrounded, and sums them into the report's table;
- `diagnose merge` (report/combine.py) sums the node reports' tables.

One row per (name, input shapes), in order of first appearance, then most self
time first (stable: ties keep that order):
- summed: calls, self and total CPU time, FLOPs, memory; `sources` by
  location (the first user function named), `modules` by (module, library
  line) (the first class named), `processes` by (role, thread), `called_by`
  by calling operator;
- the fastest and slowest call: min of `min_self_us`, max of `max_self_us`;
- the first row's `dtypes` that are not empty; the list inputs (torch.cat's
  tensors) of the row with most self time that has them; the layout (input strides,
  concrete inputs, contiguous) of the first row that has strides; the first
  row's `work` that is set;
- derived from the sums: `self_pct` (of all rows' self time), `gflops_per_s`,
  `bytes` (work.bytes x calls), `source` (the top source), `module`,
  `module_class`, `library_line` (the top module share that names a module or
  a library line; `modules` is left empty when none does).
Sums are rounded once, at the end, to the report's three decimals, and the
shares and rates are computed from the unrounded sums: raw rows summed here
give the numbers merge_rows gave when it summed the dicts itself.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable

from diagnose.report.model import ModuleShare, OperatorRow, ProcessShare, SourceShare


def sum_rows(rows: Iterable[OperatorRow]) -> list[OperatorRow]:
    """One row per (operator, input shapes), most self CPU time first (see the module docstring)."""
    rows = list(rows)
    groups: dict[tuple[str, str], list[OperatorRow]] = {}
    for row in rows:
        groups.setdefault((row.name, json.dumps(row.input_shapes)), []).append(row)
    total_us = sum(row.self_cpu_us for row in rows) or 1.0
    out = [_summed(parts, total_us) for parts in groups.values()]
    out.sort(key=lambda r: (-r.self_cpu_us, r.name))
    return out


def _summed(parts: list[OperatorRow], all_self_us: float) -> OperatorRow:
    first = parts[0]
    calls = sum(p.calls for p in parts)
    self_us = sum(p.self_cpu_us for p in parts)
    total_us = sum(p.total_cpu_us for p in parts)
    flops = sum(p.flops or 0 for p in parts)
    sources = _sources(parts)
    called_by: dict[str, float] = {}
    for p in parts:
        for caller, us in p.called_by.items():
            called_by[caller] = called_by.get(caller, 0.0) + us
    modules = _modules(parts)
    top = next((s for s in modules if s.module is not None or s.library_line), None)
    lows = [p.min_self_us for p in parts if p.min_self_us is not None]
    highs = [p.max_self_us for p in parts if p.max_self_us is not None]
    laid = next((p for p in parts if p.input_strides is not None), None)
    work = next((p.work for p in parts if p.work is not None), None)
    listed = max((p for p in parts if p.list_inputs), key=lambda p: p.self_cpu_us, default=None)
    return OperatorRow(
        name=first.name,
        input_shapes=copy.deepcopy(first.input_shapes),
        dtypes=list(next((p.dtypes for p in parts if p.dtypes), first.dtypes)),
        calls=calls,
        self_cpu_us=round(self_us, 3),
        total_cpu_us=round(total_us, 3),
        self_pct=round(100.0 * self_us / all_self_us, 3),
        source=sources[0].location if sources else None,
        sources=sources,
        flops=flops or None,
        gflops_per_s=round(flops / (total_us * 1e3), 3) if flops and total_us > 0 else None,
        cpu_memory_bytes=sum(p.cpu_memory_bytes for p in parts),
        called_by={k: round(v, 3) for k, v in sorted(called_by.items(), key=lambda kv: -kv[1])},
        input_strides=copy.deepcopy(laid.input_strides) if laid else None,
        contiguous=copy.deepcopy(laid.contiguous) if laid else None,
        concrete_inputs=copy.deepcopy(laid.concrete_inputs) if laid else None,
        work=copy.deepcopy(work),
        bytes=work.bytes * calls if work and work.bytes else None,
        module=top.module if top else None,
        module_class=top.module_class if top else None,
        library_line=top.library_line if top else None,
        modules=modules if top is not None else [],
        min_self_us=round(min(lows), 3) if lows else None,
        max_self_us=round(max(highs), 3) if highs else None,
        list_inputs=copy.deepcopy(listed.list_inputs) if listed else [],
        processes=_processes(parts),
    )


def _sources(parts: list[OperatorRow]) -> list[SourceShare]:
    by_location: dict[str | None, list] = {}  # location -> [calls, self_us, function, fastest call]
    for p in parts:
        for s in p.sources:
            acc = by_location.setdefault(s.location, [0, 0.0, None, None])
            acc[0] += s.calls
            acc[1] += s.self_cpu_us
            acc[2] = acc[2] or s.function
            if s.min_self_us is not None:
                acc[3] = s.min_self_us if acc[3] is None else min(acc[3], s.min_self_us)
    ranked = sorted((SourceShare(location=loc, calls=c, self_cpu_us=round(us, 3), function=fn,
                                 min_self_us=round(lo, 3) if lo is not None else None)
                     for loc, (c, us, fn, lo) in by_location.items()),
                    key=lambda s: (s.location is None, -s.self_cpu_us, -s.calls))
    calls = sum(p.calls for p in parts)
    fastest = min((p.min_self_us for p in parts if p.min_self_us is not None), default=None)
    slowest = max((p.max_self_us for p in parts if p.max_self_us is not None), default=None)
    mean = sum(p.self_cpu_us for p in parts) / calls if calls else 0.0
    top_calls = ranked[0].calls if ranked else 0
    return tied_first(ranked, lambda s: s.self_cpu_us, lambda s: s.location,
                      lambda s: tie_share(fastest, slowest, mean, min(s.calls, top_calls)), undisturbed)


def undisturbed(share: SourceShare) -> float | None:
    """A place's work without what disturbed some of its calls: its calls x its fastest call (None: unknown)."""
    return share.calls * share.min_self_us if share.min_self_us else None


TIE_SHARE = 0.10  # the least two lines' times may differ by and still be tied (run-to-run noise)


def mean_halfwidth(fastest_us: float | None, slowest_us: float | None, mean_us: float, calls: int) -> float:
    """The relative 95% half-width of a row's mean call: twice its standard error, the per-call spread taken from
    the row's fastest and slowest call (a range of about 4 standard deviations), at most 0.5; 0 where unknown."""
    if not fastest_us or not slowest_us or mean_us <= 0 or calls <= 0:
        return 0.0
    return min(0.5, 2 * (slowest_us - fastest_us) / (4 * mean_us) / math.sqrt(calls))


def tie_share(fastest_us: float | None, slowest_us: float | None, mean_us: float, calls: int) -> float:
    """How far apart (a share of the first) two lines' summed times of one operator row may be and still be
    equal work: twice the standard error of the difference of two sums of `calls` calls (sqrt(2) x
    `mean_halfwidth`); at least TIE_SHARE, at most 0.5. Sixteen 2048x2048 transposing copies a line, 5-16 ms a
    call: 18%."""
    return min(0.5, max(TIE_SHARE, math.sqrt(2) * mean_halfwidth(fastest_us, slowest_us, mean_us, calls)))


def line_order(location: str | None) -> tuple:
    """A user location ("path:line") in source order; None last."""
    if location is None:
        return (1, "", 0)
    path, _, line = location.rpartition(":")
    return (0, path, int(line)) if line.isdigit() else (0, location, 0)


def tied_first(ranked: list, time, location, share=lambda x: TIE_SHARE, work=lambda x: None) -> list:
    """`ranked` (most time first) with the places tied with the first in source order: two lines doing equal
    work (two .contiguous() calls of one shape) give the same first line in every run, not whichever measured a
    little more. A place is tied with the first when its time is within `share(place)` of the first's (the
    row's per-call noise), or when its undisturbed work, `work(place)` (calls x its fastest call), is within
    TIE_SHARE of the first's: then what set their times apart disturbed some calls of one line and not the
    other's (fresh pages faulted in for one line's outputs, which line depends on the allocator's state and
    changes from run to run; contiguous_copies' two copies measured 4-37% apart, their fastest calls alike)."""
    if len(ranked) < 2 or location(ranked[0]) is None:
        return ranked
    top, top_work = time(ranked[0]), work(ranked[0])

    def same_work(x) -> bool:
        w = work(x)
        return bool(top_work and w) and abs(w - top_work) <= TIE_SHARE * max(w, top_work)

    tied = [x for x in ranked if location(x) is not None and (time(x) >= (1 - share(x)) * top or same_work(x))]
    if len(tied) < 2:
        return ranked
    taken = {id(x) for x in tied}
    rest = [x for x in ranked if id(x) not in taken]
    return sorted(tied, key=lambda x: line_order(location(x))) + rest


def _modules(parts: list[OperatorRow]) -> list[ModuleShare]:
    by_place: dict[tuple, list] = {}  # (module, library line) -> [calls, self_us, module class]
    for p in parts:
        for s in p.modules:
            acc = by_place.setdefault((s.module, s.library_line), [0, 0.0, None])
            acc[0] += s.calls
            acc[1] += s.self_cpu_us
            acc[2] = acc[2] or s.module_class
    return sorted((ModuleShare(module=m, module_class=cls, library_line=lib, calls=c, self_cpu_us=round(us, 3))
                   for (m, lib), (c, us, cls) in by_place.items()),
                  key=lambda s: (-s.self_cpu_us, -s.calls))


def _processes(parts: list[OperatorRow]) -> list[ProcessShare]:
    by_place: dict[tuple, list] = {}  # (role, thread) -> [calls, self_us]
    for p in parts:
        for s in p.processes:
            acc = by_place.setdefault((s.role, s.thread), [0, 0.0])
            acc[0] += s.calls
            acc[1] += s.self_cpu_us
    return sorted((ProcessShare(role=role, thread=thread, calls=c, self_cpu_us=round(us, 3))
                   for (role, thread), (c, us) in by_place.items()),
                  key=lambda s: (-s.self_cpu_us, -s.calls))
