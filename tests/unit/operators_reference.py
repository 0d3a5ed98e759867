"""The reference reduction of a profile: through torch's `prof.events()` (FunctionEvents).

About 50x slower than diagnose/layers/operators/kineto.py's reduce_kineto on
profiles of many small operators; kept here as the oracle reduce_kineto must
match (test_operators_kineto.py). diagnose itself never uses it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from diagnose.layers.operators.kineto import MEMORY_EVENT, SOURCE_PREFIX, THREAD_PREFIX, Label, _jsonable, source_span


def memory_totals(kineto_events) -> dict[str, int]:
    """Allocations seen by the profiler. FunctionEvents fold allocations into
    the op that made them, so count the raw kineto memory records instead."""
    count = allocated = freed = live = peak = 0
    records = sorted((k.start_ns(), k.nbytes()) for k in kineto_events
                     if k.name() == MEMORY_EVENT and k.device_type() == _cpu_device())
    for _, nbytes in records:
        if nbytes > 0:
            count += 1
            allocated += nbytes
        else:
            freed -= nbytes
        live += nbytes
        peak = max(peak, live)
    return {"allocations": count, "allocated_bytes": allocated, "freed_bytes": freed, "peak_live_bytes": peak}


def _cpu_device():
    from torch.autograd import DeviceType

    return DeviceType.CPU


def _is_operator(e) -> bool:
    return not (
        e.is_python_function
        or e.is_user_annotation
        or e.name == MEMORY_EVENT
        or e.name.startswith("ProfilerStep#")
    )


def _parent_op(e) -> str:
    """Name of the nearest enclosing operator, or "" when Python called this one."""
    node = e.cpu_parent
    while node is not None:
        if _is_operator(node):
            return node.name
        node = node.cpu_parent
    return ""


def _label_of(e) -> tuple | None:
    """The nearest source annotation above the event, parsed (user, library, module)."""
    node = e.cpu_parent
    while node is not None:
        if node.name.startswith(SOURCE_PREFIX):
            return Label.parse(node.name)
        node = node.cpu_parent
    return None


def _context(e, forward: dict) -> tuple | None:
    """The event's (user, library, module): its label's, with the library line and module of the forward op
    of the same sequence number for a backward node and what runs under it (events come in time order)."""
    ctx = _label_of(e)
    if ctx is None:
        return None
    node = e
    while node is not None and not node.name.startswith(SOURCE_PREFIX):
        if node.sequence_nr >= 0 and node.fwd_thread:
            fwd = forward.get((node.fwd_thread, node.sequence_nr))
            if fwd is not None:
                return (ctx[0], *fwd)
        node = node.cpu_parent
    return ctx


def _aggregate(events) -> tuple[list[dict[str, Any]], float]:
    """Reduce FunctionEvents to raw rows keyed by (name, shapes, dtypes, context, parent op)."""
    acc: dict[tuple, list] = {}
    forward: dict[tuple, tuple] = {}
    attribution_us = 0.0
    for e in events:
        if e.name == MEMORY_EVENT:
            continue
        if e.name.startswith(SOURCE_PREFIX):
            attribution_us += e.self_cpu_time_total
            continue
        ctx = _context(e, forward)
        if ctx is not None and e.sequence_nr >= 0 and not e.fwd_thread:
            forward.setdefault((e.thread, e.sequence_nr), ctx[1:])
        if not _is_operator(e):
            continue
        key = (
            e.name,
            json.dumps(_jsonable(e.input_shapes)),
            json.dumps(list(getattr(e, "input_dtypes", None) or [])),
            ctx or (None, None, None),
            _parent_op(e),
        )
        row = acc.get(key)
        if row is None:
            row = acc[key] = [0, 0.0, 0.0, 0, 0, e.self_cpu_time_total, e.self_cpu_time_total]
        row[0] += 1
        row[1] += e.self_cpu_time_total
        row[2] += e.cpu_time_total
        row[3] += int(e.flops or 0)
        row[4] += int(e.self_cpu_memory_usage or 0)
        row[5] = min(row[5], e.self_cpu_time_total)
        row[6] = max(row[6], e.self_cpu_time_total)
    rows = [
        {
            "name": name,
            "input_shapes": json.loads(shapes),
            "dtypes": json.loads(dtypes),
            "source": user,
            "library": library,
            "module": module,
            "parent": parent,
            "calls": calls,
            "self_cpu_us": self_us,
            "total_cpu_us": total_us,
            "min_self_us": lo,
            "max_self_us": hi,
            "flops": flops,
            "cpu_memory_bytes": mem,
        }
        for (name, shapes, dtypes, (user, library, module), parent), (calls, self_us, total_us, flops, mem, lo, hi)
        in acc.items()
    ]
    return rows, attribution_us


def _write_chrome_trace(events, path: str, max_events: int) -> dict[str, Any]:
    """A Chrome/Perfetto trace of operator and source FunctionEvents, capped at max_events."""
    pid = os.getpid()
    items = []
    for e in events:
        if e.name == MEMORY_EVENT or e.is_python_function:
            continue
        src = e.name.startswith(SOURCE_PREFIX)
        if not src and not _is_operator(e):
            continue
        items.append((e.time_range.start, e))
    items.sort(key=lambda x: x[0])
    total = len(items)
    kept = items[:max_events]
    trace_events = []
    for start, e in kept:
        if e.name.startswith(SOURCE_PREFIX):
            name, args = source_span(Label.parse(e.name))
            trace_events.append({"name": name, "cat": "user_code", "ph": "X",
                                 "ts": start, "dur": e.time_range.elapsed_us(), "pid": pid, "tid": e.thread,
                                 "args": args})
        else:
            trace_events.append({
                "name": e.name, "cat": "cpu_op", "ph": "X", "ts": start, "dur": e.time_range.elapsed_us(),
                "pid": pid, "tid": e.thread,
                "args": {"Input Dims": _jsonable(e.input_shapes),
                         "Input type": list(getattr(e, "input_dtypes", None) or [])},
            })
    with open(path, "w") as fh:
        json.dump({"traceEvents": trace_events, "displayTimeUnit": "ms"}, fh)
    span_us = (kept[-1][0] - kept[0][0]) if kept else 0
    return {"events_written": len(kept), "events_total": total, "truncated": total > len(kept),
            "span_s": span_us / 1e6}


def _reference_collect(function_events, kineto_events, trace_path: str, max_events: int) -> dict[str, Any]:
    """What reduce_kineto gives, computed the slow way: from `prof.events()` and
    `prof.profiler.kineto_results.events()` (tests only)."""
    events = [e for e in function_events if not e.name.startswith(THREAD_PREFIX)]  # a thread's name, not an event
    rows, attribution_us = _aggregate(events)
    trace = _write_chrome_trace(events, trace_path, max_events)
    return {"rows": rows, "memory": memory_totals(kineto_events), "attribution_overhead_us": attribution_us,
            "events": len(events), "trace": trace}
