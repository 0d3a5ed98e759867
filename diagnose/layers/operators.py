"""Operators layer: torch.profiler with shapes, FLOPs, memory and source lines.

Child side (`OperatorsRecorder`) profiles the measured part of the workload
and reduces the events to raw rows keyed by (operator, shapes, dtypes, source),
plus a Chrome trace capped in size. Parent side (`OperatorsLayer.analyse`)
merges them into one row per (operator, input shapes) for the report.

Source lines: with torch 2.13 the profiler's `with_stack` frames carry the
*definition* line of each Python function (`model.py(0): <module>`), not the
calling line, and its Python tracer combined with record_function corrupts
event names now and then (UnicodeDecodeError in `events()`). So instead a
TorchFunctionMode wraps every torch call made from Python in a
`record_function` labelled with the innermost user frame and its current
line; every operator below that label in the event tree belongs to that line.
Backward and optimizer ops land on the `loss.backward()` / `opt.step()` line.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from typing import Any

from diagnose.layers.base import Layer
from diagnose.report.model import LayerStatus, OperatorRow, Report, SourceShare

SOURCE_PREFIX = "diagnose@"
MEMORY_EVENT = "[memory]"
MAX_ROWS = 1000
# Calls that never run an operator; skipping them keeps the mode cheap.
_NO_OP_CALLS = frozenset(
    {"__get__", "__set__", "size", "dim", "stride", "numel", "__len__", "is_contiguous",
     "data_ptr", "element_size", "__hash__", "__repr__", "__format__", "storage_offset"}
)


# ---------------------------------------------------------------- child side


def _source_mode(usercode):
    import torch
    from torch.overrides import TorchFunctionMode

    record_function = torch.profiler.record_function

    class SourceMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") in _NO_OP_CALLS:
                return func(*args, **kwargs)
            loc = usercode.location(sys._getframe(1))
            with record_function(SOURCE_PREFIX + (loc or "?")):
                return func(*args, **kwargs)

    return SourceMode()


class OperatorsRecorder:
    def __init__(self, spec: dict[str, Any]):
        from diagnose.usercode import UserCode

        self.spec = spec
        self.usercode = UserCode(spec["script"], cwd=spec.get("cwd"))
        self.max_trace_events = int(spec.get("options", {}).get("trace_max_events", 100_000))
        self.window = int(spec.get("options", {}).get("profile_iters", 20))
        self.prof = None
        self.mode = None
        self.events = None
        self.memory = None
        self.steps = 0
        self.schedule_note = None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        sched = None
        iters = self.spec.get("iters") if self.spec.get("mode") == "function" else None
        if iters and iters > self.window:
            # Long loops: record only the last `window` iterations so the
            # trace and the profiler's memory stay bounded.
            skip = iters - self.window - 1
            sched = schedule(skip_first=skip, wait=0, warmup=1, active=self.window, repeat=1)
            self.schedule_note = (
                f"recorded the last {self.window} of {iters} measured iterations "
                f"(torch.profiler schedule: skip_first={skip}, warmup=1, active={self.window})"
            )
        self.prof = profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            with_flops=True,
            profile_memory=True,
            schedule=sched,
            on_trace_ready=self._ready if sched else None,
        )
        self.prof.__enter__()
        self.mode = _source_mode(self.usercode)
        self.mode.__enter__()

    def _ready(self, prof) -> None:
        self.events = prof.events()
        self.memory = memory_totals(prof.profiler.kineto_results.events())

    def step(self) -> None:
        self.steps += 1
        if self.prof is not None and self.schedule_note:
            self.prof.step()

    def stop(self) -> None:
        mode, self.mode = self.mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.__exit__(None, None, None)
            if self.events is None and not self.schedule_note:
                self._ready(prof)

    def collect(self, workdir: str) -> dict[str, Any]:
        events = list(self.events or [])
        rows, attribution_us = aggregate(events)
        memory = self.memory or memory_totals([])
        trace = write_chrome_trace(events, os.path.join(workdir, "trace.json"), self.max_trace_events)
        return {
            "rows": rows,
            "memory": memory,
            "attribution_overhead_us": attribution_us,
            "events": len(events),
            "trace": trace,
            "window": self.schedule_note,
            "recorded_iters": self.window if self.schedule_note else None,
        }


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


def _source_of(e, memo: dict[int, str | None]) -> str | None:
    """The label of the nearest source annotation above the event."""
    chain = []
    node = e.cpu_parent
    found = None
    while node is not None:
        key = id(node)
        if key in memo:
            found = memo[key]
            break
        if node.name.startswith(SOURCE_PREFIX):
            found = node.name[len(SOURCE_PREFIX):]
            break
        chain.append(key)
        node = node.cpu_parent
    for key in chain:
        memo[key] = found
    if found == "?":
        return None
    return found


def memory_totals(kineto_events) -> dict[str, int]:
    """Allocations seen by the profiler. FunctionEvents fold allocations into
    the op that made them, so count the raw kineto memory records instead."""
    count = allocated = freed = 0
    for k in kineto_events:
        if k.name() != MEMORY_EVENT or k.device_type() != _cpu_device():
            continue
        nbytes = k.nbytes()
        if nbytes > 0:
            count += 1
            allocated += nbytes
        else:
            freed -= nbytes
    return {"allocations": count, "allocated_bytes": allocated, "freed_bytes": freed}


def _cpu_device():
    from torch.autograd import DeviceType

    return DeviceType.CPU


def aggregate(events) -> tuple[list[dict[str, Any]], float]:
    """Reduce profiler events to raw rows keyed by (name, shapes, dtypes, source, parent op)."""
    memo: dict[int, str | None] = {}
    acc: dict[tuple, list] = {}
    attribution_us = 0.0
    for e in events:
        if e.name == MEMORY_EVENT:
            continue
        if e.name.startswith(SOURCE_PREFIX):
            attribution_us += e.self_cpu_time_total
            continue
        if not _is_operator(e):
            continue
        source = _source_of(e, memo)
        key = (
            e.name,
            json.dumps(_jsonable(e.input_shapes)),
            json.dumps(list(getattr(e, "input_dtypes", None) or [])),
            source,
            _parent_op(e),
        )
        row = acc.get(key)
        if row is None:
            row = acc[key] = [0, 0.0, 0.0, 0, 0]
        row[0] += 1
        row[1] += e.self_cpu_time_total
        row[2] += e.cpu_time_total
        row[3] += int(e.flops or 0)
        row[4] += int(e.self_cpu_memory_usage or 0)
    rows = [
        {
            "name": name,
            "input_shapes": json.loads(shapes),
            "dtypes": json.loads(dtypes),
            "source": source,
            "parent": parent,
            "calls": calls,
            "self_cpu_us": self_us,
            "total_cpu_us": total_us,
            "flops": flops,
            "cpu_memory_bytes": mem,
        }
        for (name, shapes, dtypes, source, parent), (calls, self_us, total_us, flops, mem) in acc.items()
    ]
    return rows, attribution_us


def _jsonable(shapes) -> list:
    out = []
    for s in shapes or []:
        if isinstance(s, (list, tuple)):
            out.append([_jsonable(x) if isinstance(x, (list, tuple)) else x for x in s])
        else:
            out.append(s)
    return out


def write_chrome_trace(events, path: str, max_events: int) -> dict[str, Any]:
    """A Chrome/Perfetto trace of operator and source events, capped at max_events."""
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
            trace_events.append({"name": e.name[len(SOURCE_PREFIX):], "cat": "user_code", "ph": "X",
                                 "ts": start, "dur": e.time_range.elapsed_us(), "pid": pid, "tid": e.thread})
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


# --------------------------------------------------------------- parent side


def merge_rows(raw_rows: list[dict[str, Any]]) -> list[OperatorRow]:
    """One row per (operator, input shapes), most self CPU time first."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in raw_rows:
        groups[(r["name"], json.dumps(r["input_shapes"]))].append(r)
    total_self = sum(r["self_cpu_us"] for r in raw_rows) or 1.0
    rows = []
    for (name, shapes), parts in groups.items():
        by_source: dict[str | None, list] = defaultdict(lambda: [0, 0.0])
        called_by: dict[str, float] = defaultdict(float)
        dtypes: list[str] = []
        for p in parts:
            called_by[p.get("parent", "")] += p["self_cpu_us"]
            by_source[p["source"]][0] += p["calls"]
            by_source[p["source"]][1] += p["self_cpu_us"]
            if not dtypes:
                dtypes = p["dtypes"]
        sources = sorted(
            (SourceShare(location=loc, calls=c, self_cpu_us=round(s, 3)) for loc, (c, s) in by_source.items()),
            key=lambda s: (s.location is None, -s.self_cpu_us, -s.calls),
        )
        calls = sum(p["calls"] for p in parts)
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
        ))
    rows.sort(key=lambda r: (-r.self_cpu_us, r.name))
    return rows


def _attach_functions(rows: list[OperatorRow]) -> None:
    """Name the user function around each source line (read from the file's AST)."""
    from diagnose.usercode import FunctionSpans

    spans = FunctionSpans()
    for row in rows:
        for share in row.sources:
            path, _, line = (share.location or "").rpartition(":")
            if path and line.isdigit():
                hit = spans.enclosing(path, int(line))
                share.function = hit[0] if hit else "<module>"


class OperatorsLayer(Layer):
    name = "operators"
    description = "torch.profiler with shapes, FLOPs, memory and source lines"

    def recorder(self, spec: dict[str, Any]) -> OperatorsRecorder:
        return OperatorsRecorder(spec)

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        raw = outcome.raw
        if raw is None:
            return LayerStatus("failed", outcome.failure_reason("the operator pass"))
        rows = merge_rows(raw["rows"])
        notes = []
        if len(rows) > MAX_ROWS:
            notes.append(f"kept the {MAX_ROWS} rows with most self CPU time of {len(rows)}")
            rows = rows[:MAX_ROWS]
        _attach_functions(rows)
        report.operators = rows
        total_self_us = sum(r["self_cpu_us"] for r in raw["rows"])
        attributed_us = sum(r["self_cpu_us"] for r in raw["rows"] if r["source"])
        report.operator_summary = {
            "total_self_cpu_us": round(total_self_us, 3),
            "attributed_share": round(attributed_us / total_self_us, 4) if total_self_us else None,
            "attribution_overhead_us": round(raw.get("attribution_overhead_us", 0.0), 3),
            "events": raw.get("events"),
            "memory": raw.get("memory", {}),
            "window": raw.get("window"),
            "trace": raw.get("trace"),
        }
        if raw.get("window"):
            notes.append(raw["window"])
        trace = raw.get("trace") or {}
        if os.path.exists(os.path.join(workdir, "trace.json")):
            report.artifacts["trace"] = "trace.json"
            if trace.get("truncated"):
                notes.append(
                    f"trace.json holds the first {trace['events_written']} of {trace['events_total']} events "
                    f"({trace['span_s']:.2f} s); use function mode (script.py:step) to record a window of iterations"
                )
        if outcome.status != "ok":
            notes.append(f"the target did not finish this pass ({outcome.status}): rows cover what ran before")
        if not rows:
            return LayerStatus("skipped", "the target ran no torch operators", notes=notes)
        return LayerStatus("ok", notes=notes)
