"""Operators layer: torch.profiler with shapes, FLOPs, memory and source lines.

Child side (`OperatorsRecorder`) profiles the measured part of the workload
and reduces the events to raw rows keyed by (operator, shapes, dtypes, source,
parent operator), plus a Chrome trace capped in size. Parent side
(`OperatorsLayer.analyse`) merges them into one row per (operator, input
shapes) for the report.

The reduction (`reduce_kineto`) reads the profiler's raw kineto events and
rebuilds the event tree itself, the way torch's `prof.events()` builds it
(nesting by time per thread, memory by time window, same-named only children
folded), instead of calling `prof.events()`: torch spends ~100 µs of Python
per event there, minutes on a loop of tiny ops. `_reference_collect` keeps
the straightforward reduction over `prof.events()`; the tests check that both
give the same rows, counts and trace.

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
        # The recorded profile and its raw kineto results, kept from the
        # profiler's stop until collect() reduces them.
        self.profile = None
        self.results = None
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
        # Only keep the raw results here: with a schedule this runs inside the
        # measured loop, and prof.events() would build ~100 µs of Python
        # objects per event. collect() reduces the raw events directly.
        self.profile = prof
        self.results = prof.profiler.kineto_results

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
            if self.results is None and not self.schedule_note:
                self._ready(prof)

    def collect(self, workdir: str) -> dict[str, Any]:
        reduced = reduce_kineto(self.results, os.path.join(workdir, "trace.json"), self.max_trace_events)
        if self.spec.get("distributed"):  # a torchrun rank: its collectives (gloo:all_reduce, ...) too
            from diagnose.distributed import collectives

            reduced["collectives"] = collectives.summarise(self.results)
        attach_work(reduced.get("rows") or [])
        return {
            **reduced,
            "window": self.schedule_note,
            "recorded_iters": self.window if self.schedule_note else None,
        }


WORK_MIN_SHARE = 0.01  # rows with >= 1% of self time get a work estimate (the efficiency layer's hot rows)
WORK_MAX_ROWS = 24


def attach_work(rows: list[dict[str, Any]]) -> None:
    """Per-call FLOPs and bytes of the hot (operator, shapes), estimated here where torch is loaded.

    The efficiency layer would otherwise start a process (and import torch)
    to do it; estimating on meta tensors takes milliseconds per row.
    """
    from diagnose.layers.efficiency.work import estimate

    total = sum(r["self_cpu_us"] for r in rows) or 1.0
    by_key: dict[str, float] = defaultdict(float)
    for r in rows:
        by_key[r["name"] + json.dumps(r["input_shapes"])] += r["self_cpu_us"]
    hot = sorted((k for k, v in by_key.items() if v >= WORK_MIN_SHARE * total), key=lambda k: -by_key[k])
    hot = set(hot[:WORK_MAX_ROWS])
    done: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["name"] + json.dumps(r["input_shapes"])
        if key in hot and r.get("input_strides") is not None:
            if key not in done:
                try:
                    done[key] = estimate(r)
                except Exception as exc:  # noqa: BLE001 - the efficiency layer reports rows without work
                    done[key] = {"flops": None, "bytes": None, "reason": f"{type(exc).__name__}: {exc}"}
            r["work"] = done[key]


# Names torch drops before it builds FunctionEvents (torch.autograd.profiler_util._filter_name);
# "[memory]" and "[OutOfMemory]" are handled on their own below.
_FILTERED_NAMES = frozenset({
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
})
OOM_EVENT = "[OutOfMemory]"
_OTHER, _OP, _SOURCE = 0, 1, 2
_TRACE_CHUNK = 5000
# Trace spans as json.dump writes them (floats and ints by repr, ", " and ": " separators).
_SOURCE_SPAN = '{"name": %s, "cat": "user_code", "ph": "X", "ts": %r, "dur": %r, "pid": %d, "tid": %d}'
_OP_SPAN = '{"name": %s, "cat": "cpu_op", "ph": "X", "ts": %r, "dur": %r, "pid": %d, "tid": %d, "args": %s}'


def reduce_kineto(results, trace_path: str, max_events: int) -> dict[str, Any]:
    """Raw rows, memory totals, event count and trace.json from a profile's kineto results.

    Gives what `_aggregate(prof.events())`, `memory_totals` and
    `_write_chrome_trace(prof.events(), ...)` give, without building torch's
    FunctionEvents (~100 µs each). It redoes what
    torch.autograd.profiler._parse_kineto_results and EventList._build_tree do,
    in the same order so float sums come out the same:
    - drop the utility events torch filters out and hidden events;
    - sort by (start, -end), kineto order breaking ties;
    - per thread, nest synchronous CPU events by time with a stack
      (`_populate_cpu_children`); self time = duration minus the direct
      children's durations;
    - CPU memory of an event = the bytes of all "[memory]" records whose
      timestamp lies in [start, end], on any thread (MemRecordsAcc); self
      memory subtracts the direct children's;
    - a child with its parent's name that is the parent's only child is
      dropped and its children lifted (`_remove_dup_nodes`);
    - memory records inside no CPU event become top-level events of their own
      (counted in "events" only); out-of-memory records become zero-length
      events carrying their bytes, which the old reduction counted as
      operators ("[OutOfMemory]" rows; CPU allocators do not report these).
    Device-runtime events linked to CPU ops by correlation id, which torch
    moves to the op's thread, only exist when a GPU is profiled; this layer
    records CPU activity only.
    """
    import gc

    was_enabled = gc.isenabled()
    gc.disable()  # ~10 container objects per event: the collector would walk them again and again
    try:
        return _reduce_kineto(results, trace_path, max_events)
    finally:
        if was_enabled:
            gc.enable()


def _reduce_kineto(results, trace_path: str, max_events: int) -> dict[str, Any]:
    from bisect import bisect_left, bisect_right

    import torch
    from torch.autograd import DeviceType

    cpu_device = DeviceType.CPU
    memory_devices = (DeviceType.CPU, DeviceType.MKLDNN, DeviceType.IDEEP)

    events = results.events() if results is not None else []
    trace_start = results.trace_start_ns() if results is not None else 0

    # ---- one pass over the raw events: the only calls into C++ (~10 µs per
    # operator, half of it in shapes())
    nodes: list[tuple] = []
    mem_records: list[tuple[int, int, Any]] = []
    oom_records = []
    renamed: dict[str, str] = {}
    op_event: dict[int, Any] = {}  # node index -> its event, for a row's strides and scalar inputs
    if events:
        kt = type(events[0])
        k_name, k_start, k_end = kt.name, kt.start_ns, kt.end_ns
        k_tid, k_end_tid, k_async, k_device = kt.start_thread_id, kt.end_thread_id, kt.is_async, kt.device_type
        k_hidden = getattr(kt, "is_hidden_event", None)
        k_user, k_python = kt.is_user_annotation, kt.is_python_function
        k_shapes, k_dtypes, k_flops, k_nbytes = kt.shapes, kt.dtypes, kt.flops, kt.nbytes
    add_node = nodes.append
    for k in events:
        raw = k_name(k)
        if raw == MEMORY_EVENT:
            mem_records.append((k_start(k), k_nbytes(k), k_device(k)))
            continue
        if raw == OOM_EVENT:
            oom_records.append(k)
            continue
        if raw in _FILTERED_NAMES or (k_hidden is not None and k_hidden(k)):
            continue
        name = renamed.get(raw)
        if name is None:
            # _rewrite_name(with_wildcard=True): demangled, steps numbered no more
            name = torch._C._demangle(raw) if len(raw) > 1 else raw
            if name.startswith("ProfilerStep#"):
                name = "ProfilerStep*"
            renamed[raw] = name
        tid = k_tid(k)
        cpu = k_device(k) == cpu_device
        in_tree = cpu and not (k_async(k) or tid != k_end_tid(k))
        # (name, label, kind, start, end, thread, cpu, in_tree, shapes, dtypes, flops)
        if name.startswith(SOURCE_PREFIX):
            add_node((name, name[len(SOURCE_PREFIX):], _SOURCE, k_start(k), k_end(k), tid, cpu, in_tree,
                      None, None, 0))
        elif k_python(k) or k_user(k):
            # what _is_operator excludes; its "ProfilerStep#" test never matches a
            # renamed step, which is a user annotation anyway
            add_node((name, None, _OTHER, k_start(k), k_end(k), tid, cpu, in_tree, None, None, 0))
        else:
            op_event[len(nodes)] = k
            add_node((name, None, _OP, k_start(k), k_end(k), tid, cpu, in_tree,
                      k_shapes(k), k_dtypes(k), int(k_flops(k) or 0)))
    n_regular = len(nodes)
    columns = [list(c) for c in zip(*nodes)] if nodes else [[] for _ in range(11)]
    del nodes
    names, labels, kinds, starts, ends, threads, is_cpu, in_tree, shapes, dtypes, flops = columns

    # ---- memory records: totals, and bytes per event by time window
    count = allocated = freed = 0
    mem_records.sort(key=lambda r: r[0])
    mem_times = [r[0] for r in mem_records]
    mem_prefix = [0]
    acc = 0
    live = peak = 0
    for _, nbytes, device in mem_records:
        if device == cpu_device:
            if nbytes > 0:
                count += 1
                allocated += nbytes
            else:
                freed -= nbytes
            live += nbytes
            peak = max(peak, live)
        if device in memory_devices:
            acc += nbytes
        mem_prefix.append(acc)
    # peak_live_bytes: most bytes allocated in the window and alive at once (memory held
    # from before the window is not seen); allocated / peak is how often it turned over
    memory = {"allocations": count, "allocated_bytes": allocated, "freed_bytes": freed, "peak_live_bytes": peak}

    mem_usage = [0] * n_regular
    covered = [0] * (len(mem_records) + 1)  # +1/-1 marks: records inside some CPU event
    if mem_records:
        for i in range(n_regular):
            if is_cpu[i]:
                lo = bisect_left(mem_times, starts[i])
                hi = bisect_right(mem_times, ends[i])
                if lo < hi:
                    mem_usage[i] = mem_prefix[hi] - mem_prefix[lo]
                    covered[lo] += 1
                    covered[hi] -= 1
    top_level_memory = 0
    depth = 0
    for mark in covered[:-1]:
        depth += mark
        if depth == 0:
            top_level_memory += 1

    for k in oom_records:  # torch makes zero-length events of these, with their own bytes
        names.append(OOM_EVENT)
        labels.append(None)
        kinds.append(_OP)  # as _is_operator sees it
        starts.append(k_start(k))
        ends.append(k_start(k))
        threads.append(k_tid(k))
        is_cpu.append(True)
        in_tree.append(True)
        shapes.append([])
        dtypes.append([])
        flops.append(0)
        mem_usage.append(k_nbytes(k) if k_device(k) in memory_devices else 0)

    n = len(names)
    start_us = [(s - trace_start) / 1000 for s in starts]
    dur_us = [(e - trace_start) / 1000 - s for e, s in zip(ends, start_us)]
    order = sorted(range(n), key=lambda i: (starts[i], -ends[i]))

    # ---- nest by time, per thread (EventList._populate_cpu_children)
    parent = [-1] * n
    n_children = [0] * n
    children_us = [0.0] * n
    children_mem = [0] * n
    same_name = []  # candidates for _remove_dup_nodes, in list order
    stacks: dict[int, list[int]] = {}
    for i in order:
        if not in_tree[i]:
            continue
        stack = stacks.get(threads[i])
        if stack is None:
            stack = stacks[threads[i]] = []
        s, e = starts[i], ends[i]
        while stack:
            p = stack[-1]
            if s >= ends[p] or e > ends[p]:
                stack.pop()
            else:
                parent[i] = p
                n_children[p] += 1
                children_us[p] += dur_us[i]
                children_mem[p] += mem_usage[i]
                if names[p] == names[i]:
                    same_name.append(i)
                break
        stack.append(i)

    # ---- EventList._remove_dup_nodes. Parents come before their children in
    # list order, so one pass in that order does what torch's repeated passes do.
    removed = [False] * n
    for i in same_name:
        p = parent[i]
        if removed[p]:
            p = parent[i] = parent[p]
        if n_children[p] == 1:
            removed[i] = True
            n_children[p] = n_children[i]
            children_us[p] = children_us[i]
            children_mem[p] = children_mem[i]

    # ---- rows, attribution overhead and trace, in list order
    source: list[str | None] = [None] * n
    parent_op: list[str] = [""] * n
    signature: list[tuple | None] = [None] * n  # reprs of shapes and dtypes, for operators
    acc_rows: dict[tuple, list] = {}
    attribution_us = 0.0
    n_events = top_level_memory
    traced: list[int] = []
    for i in order:
        if removed[i]:
            continue
        n_events += 1
        kind = kinds[i]
        p = parent[i]
        if p >= 0:
            if removed[p]:
                p = parent[p]
            source[i] = labels[p] if kinds[p] == _SOURCE else source[p]
            parent_op[i] = names[p] if kinds[p] == _OP else parent_op[p]
        if kind == _OTHER:
            continue
        traced.append(i)
        self_us = dur_us[i] - children_us[i] if in_tree[i] else 0
        if kind == _SOURCE:
            attribution_us += self_us
            continue
        src = source[i]
        sig = signature[i] = (repr(shapes[i]), repr(dtypes[i]))
        key = (names[i], sig, None if src == "?" else src, parent_op[i])
        row = acc_rows.get(key)
        if row is None:
            row = acc_rows[key] = [0, 0.0, 0.0, 0, 0, i]
        row[0] += 1
        row[1] += self_us
        row[2] += dur_us[i] if is_cpu[i] else 0
        row[3] += flops[i]
        row[4] += mem_usage[i] - children_mem[i] if in_tree[i] else 0
    rows = [
        {
            "name": name,
            "input_shapes": _jsonable(shapes[first]),
            "dtypes": list(dtypes[first] or []),
            "source": src,
            "parent": parent_name,
            "calls": calls,
            "self_cpu_us": self_us,
            "total_cpu_us": total_us,
            "flops": flop_count,
            "cpu_memory_bytes": mem,
            **_layout(op_event.get(first)),
        }
        for (name, _, src, parent_name), (calls, self_us, total_us, flop_count, mem, first) in acc_rows.items()
    ]

    # ---- trace.json: operator and source spans by start time (the list order).
    # Written line by line with the same text json.dump would give (the test
    # compares bytes with _write_chrome_trace); json.dump of ~100k dicts alone
    # takes seconds.
    kept = traced[:max_events]
    pid = os.getpid()
    quoted: dict[str, str] = {}
    args_json: dict[tuple, str] = {}
    with open(trace_path, "w") as fh:
        fh.write('{"traceEvents": [')
        for c in range(0, len(kept), _TRACE_CHUNK):
            lines = []
            for i in kept[c:c + _TRACE_CHUNK]:
                if kinds[i] == _SOURCE:
                    label = labels[i]
                    name_json = quoted.get(label) or quoted.setdefault(label, json.dumps(label))
                    lines.append(_SOURCE_SPAN % (name_json, start_us[i], dur_us[i], pid, threads[i]))
                else:
                    name = names[i]
                    name_json = quoted.get(name) or quoted.setdefault(name, json.dumps(name))
                    sig = signature[i]
                    args = args_json.get(sig)
                    if args is None:
                        args = args_json[sig] = json.dumps(
                            {"Input Dims": _jsonable(shapes[i]), "Input type": list(dtypes[i] or [])})
                    lines.append(_OP_SPAN % (name_json, start_us[i], dur_us[i], pid, threads[i], args))
            fh.write((", " if c else "") + ", ".join(lines))
        fh.write('], "displayTimeUnit": "ms"}')
    span_us = (start_us[kept[-1]] - start_us[kept[0]]) if kept else 0
    trace = {"events_written": len(kept), "events_total": len(traced), "truncated": len(traced) > len(kept),
             "span_s": span_us / 1e6}
    return {
        "rows": rows,
        "memory": memory,
        "attribution_overhead_us": attribution_us,
        "events": n_events,
        "trace": trace,
    }


def _layout(event) -> dict[str, Any]:
    """Strides and scalar arguments of a row's first call (what a micro-benchmark needs to rebuild it)."""
    if event is None:
        return {}
    out: dict[str, Any] = {}
    try:
        out["input_strides"] = _jsonable(event.structured_input_strides())
    except (AttributeError, RuntimeError):
        pass
    try:
        concrete = event.concrete_inputs()
        if any(c is not None and c != [] for c in concrete):
            out["concrete_inputs"] = _jsonable(concrete)
    except (AttributeError, RuntimeError):
        pass
    return out


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


def _jsonable(shapes) -> list:
    out = []
    for s in shapes or []:
        if isinstance(s, (list, tuple)):
            out.append([_jsonable(x) if isinstance(x, (list, tuple)) else x for x in s])
        else:
            out.append(s)
    return out


# ------------------------------------------- reference: through prof.events()
# The straightforward reduction over torch's FunctionEvents, ~50x slower on
# profiles of many small operators. Kept as the reference reduce_kineto must
# match (tests/unit/test_operators_kineto.py); the recorder does not use it.


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


def _aggregate(events) -> tuple[list[dict[str, Any]], float]:
    """Reduce FunctionEvents to raw rows keyed by (name, shapes, dtypes, source, parent op)."""
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


def _reference_collect(function_events, kineto_events, trace_path: str, max_events: int) -> dict[str, Any]:
    """What reduce_kineto gives, computed the slow way: from `prof.events()` and
    `prof.profiler.kineto_results.events()` (tests only)."""
    events = list(function_events)
    rows, attribution_us = _aggregate(events)
    trace = _write_chrome_trace(events, trace_path, max_events)
    return {"rows": rows, "memory": memory_totals(kineto_events), "attribution_overhead_us": attribution_us,
            "events": len(events), "trace": trace}


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
        layout: dict[str, Any] = {}
        for p in parts:
            if not layout and p.get("input_strides") is not None:
                layout = {"input_strides": p["input_strides"], "concrete_inputs": p.get("concrete_inputs")}
            if p.get("work") and "work" not in layout:
                layout["work"] = p["work"]
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
            input_strides=layout.get("input_strides"),
            contiguous=contiguous_flags(json.loads(shapes), layout.get("input_strides")),
            concrete_inputs=layout.get("concrete_inputs"),
            work=layout.get("work"),
            bytes=(layout["work"]["bytes"] * calls) if (layout.get("work") or {}).get("bytes") else None,
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
