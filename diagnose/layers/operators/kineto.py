"""Operators layer: the profiler's raw kineto events reduced to raw rows, memory totals and trace.json.

`reduce_kineto` reads the raw events and rebuilds the event tree itself, the
way torch's `prof.events()` builds it (nesting by time per thread, memory by
time window, same-named only children folded), instead of calling
`prof.events()`: torch spends ~100 µs of Python per event there, minutes on a
loop of tiny ops. tests/unit/operators_reference.py keeps the straightforward
reduction over `prof.events()`; the tests check that both give the same rows,
counts and trace.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

SOURCE_PREFIX = "diagnose@"  # record_function label of a user call (recorder.py)
# record_function range a thread opens once when it is first recorded, named after its Python thread
# (recorder.py): the profiler's thread ids are its own, so this names every event of that thread
THREAD_PREFIX = "diagnose#thread\t"
MEMORY_EVENT = "[memory]"


class Label:
    """The name of the record_function range the recorder opens around each torch call from Python:
    `diagnose@USER<TAB>LIBRARY<TAB>MODULE`, the user line, the library line, and `~` + the module path
    ("" when no module's forward runs; `~` alone is the outermost module itself)."""

    ROOT = "root"  # the fourth field of a root module's call label (ModuleTracker), not a torch call's

    @staticmethod
    def text(user: str | None, library: str | None, module: str | None, site: int | str | None = None) -> str:
        """`site`: a call with list arguments, the recorder's index of its ListSite (a fourth field); ROOT for
        the label of a root module's call from Python."""
        text = f"{SOURCE_PREFIX}{user or '?'}\t{library or ''}\t{'' if module is None else '~' + module}"
        return text if site is None else f"{text}\t{site}"

    @staticmethod
    def is_root(name: str) -> bool:
        """A root module's call label (its operators ran below no torch call from Python)."""
        return name.endswith("\t" + Label.ROOT)

    @staticmethod
    def parse(name: str) -> tuple[str | None, str | None, str | None]:
        """(user line, library line, module path) of a label; None where unknown."""
        user, _, rest = name[len(SOURCE_PREFIX):].partition("\t")
        library, _, module = rest.partition("\t")
        module = module.partition("\t")[0]
        return (None if user == "?" else user), (library or None), (module[1:] if module else None)

    @staticmethod
    def site(name: str) -> int | None:
        """The list site of a label (text's `site`), or None."""
        fields = name.split("\t")
        return int(fields[3]) if len(fields) > 3 and fields[3].isdigit() else None

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
_SOURCE_SPAN = ('{"name": %s, "cat": "user_code", "ph": "X", "ts": %r, "dur": %r, "pid": %d, "tid": %d, '
                '"args": %s}')
_NO_CONTEXT = (None, None, None)
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
        k_seq, k_fwd_tid = kt.sequence_nr, kt.fwd_thread_id
    add_node = nodes.append
    parsed: dict[str, tuple] = {}
    thread_names: dict[int, str] = {}  # the profiler's thread id -> the Python thread's name
    for k in events:
        raw = k_name(k)
        if raw.startswith(THREAD_PREFIX):
            thread_names[k_tid(k)] = raw[len(THREAD_PREFIX):]
            continue
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
        # (name, label, kind, start, end, thread, cpu, in_tree, shapes, dtypes, flops, seq, fwd_tid)
        if name.startswith(SOURCE_PREFIX):
            label = parsed.get(name) or parsed.setdefault(name, Label.parse(name))
            add_node((name, label, _SOURCE, k_start(k), k_end(k), tid, cpu, in_tree, None, None, 0, -1, 0))
        elif k_python(k) or k_user(k):
            # what _is_operator excludes; its "ProfilerStep#" test never matches a
            # renamed step, which is a user annotation anyway
            add_node((name, None, _OTHER, k_start(k), k_end(k), tid, cpu, in_tree, None, None, 0, -1, 0))
        else:
            op_event[len(nodes)] = k
            add_node((name, None, _OP, k_start(k), k_end(k), tid, cpu, in_tree,
                      k_shapes(k), k_dtypes(k), int(k_flops(k) or 0), k_seq(k), k_fwd_tid(k)))
    n_regular = len(nodes)
    columns = [list(c) for c in zip(*nodes)] if nodes else [[] for _ in range(13)]
    del nodes
    names, labels, kinds, starts, ends, threads, is_cpu, in_tree, shapes, dtypes, flops, seqs, fwd_tids = columns

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
    in_ops = [0] * (len(mem_records) + 1)  # likewise, inside some operator (not a user-line or step label)
    if mem_records:
        for i in range(n_regular):
            if is_cpu[i]:
                lo = bisect_left(mem_times, starts[i])
                hi = bisect_right(mem_times, ends[i])
                if lo < hi:
                    mem_usage[i] = mem_prefix[hi] - mem_prefix[lo]
                    covered[lo] += 1
                    covered[hi] -= 1
                    if kinds[i] == _OP:
                        in_ops[lo] += 1
                        in_ops[hi] -= 1
    # bytes freed while an operator ran; the rest were freed between operators (a Python decref), which the step
    # budget's allocator slice takes out of the Python time rather than the kernels' (diagnose/budget.py)
    depth = freed_in_ops = 0
    for (_, nbytes, device), mark in zip(mem_records, in_ops):
        depth += mark
        if depth and nbytes < 0 and device == cpu_device:
            freed_in_ops -= nbytes
    memory["freed_in_operators_bytes"] = freed_in_ops
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
        seqs.append(-1)
        fwd_tids.append(0)
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

    # ---- rows, attribution overhead and trace, in list order. An operator's context is the
    # label above it (user line, library line, module); a backward node (an autograd
    # function run for the op with the same sequence number on its forward thread) and
    # what runs under it take the library line and module of that forward op.
    context: list[tuple | None] = [None] * n
    # below a root module's call label with no torch call from Python between: run by C++ that Python called (a
    # scripted or traced module's forward), which cProfile books as the calling Python frame's own time
    unseen = [False] * n
    unseen_us = 0.0
    forward: dict[tuple[int, int], tuple] = {}  # (thread, sequence nr) -> (library, module) of a forward op
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
            context[i] = labels[p] if kinds[p] == _SOURCE else context[p]
            unseen[i] = Label.is_root(names[p]) if kinds[p] == _SOURCE else unseen[p]
            parent_op[i] = names[p] if kinds[p] == _OP else parent_op[p]
        seq = seqs[i]
        if seq >= 0 and context[i] is not None:
            if fwd_tids[i]:
                fwd = forward.get((fwd_tids[i], seq))
                if fwd is not None:
                    context[i] = (context[i][0], *fwd)
            else:
                forward.setdefault((threads[i], seq), context[i][1:])
        if kind == _OTHER:
            continue
        traced.append(i)
        self_us = dur_us[i] - children_us[i] if in_tree[i] else 0
        if kind == _SOURCE:
            attribution_us += self_us
            continue
        ctx = context[i] or _NO_CONTEXT
        if unseen[i]:
            unseen_us += self_us
        sig = signature[i] = (repr(shapes[i]), repr(dtypes[i]))
        # an operator with a TensorList input right under a call's label: that call's list site (recorder.py)
        site = Label.site(names[p]) if p >= 0 and kinds[p] == _SOURCE and "TensorList" in (dtypes[i] or ()) \
            else None
        key = (names[i], sig, ctx, parent_op[i], site, threads[i])
        row = acc_rows.get(key)
        if row is None:
            row = acc_rows[key] = [0, 0.0, 0.0, 0, 0, i, self_us, self_us]
        row[0] += 1
        row[1] += self_us
        row[2] += dur_us[i] if is_cpu[i] else 0
        row[3] += flops[i]
        row[4] += mem_usage[i] - children_mem[i] if in_tree[i] else 0
        if self_us < row[6]:
            row[6] = self_us
        elif self_us > row[7]:
            row[7] = self_us
    rows = [
        {
            "name": name,
            "input_shapes": _jsonable(shapes[first]),
            "dtypes": list(dtypes[first] or []),
            "source": user,
            "library": library,
            "module": module,
            "parent": parent_name,
            "calls": calls,
            "self_cpu_us": self_us,
            "total_cpu_us": total_us,
            "min_self_us": lo,
            "max_self_us": hi,
            "flops": flop_count,
            "cpu_memory_bytes": mem,
            "thread": thread_names.get(tid),
            **_layout(op_event.get(first)),
            **({"list_site": site} if site is not None else {}),
        }
        for (name, _, (user, library, module), parent_name, site, tid), (calls, self_us, total_us, flop_count, mem, first,
                                                                     lo, hi)
        in acc_rows.items()
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
        # Perfetto names each thread's track after the Python thread
        named = [json.dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
                 for tid, name in sorted(thread_names.items())]
        fh.write(", ".join(named))
        for c in range(0, len(kept), _TRACE_CHUNK):
            lines = []
            for i in kept[c:c + _TRACE_CHUNK]:
                if kinds[i] == _SOURCE:
                    label = names[i]
                    span = quoted.get(label) or quoted.setdefault(label, _source_span_json(labels[i]))
                    lines.append(_SOURCE_SPAN % (span[0], start_us[i], dur_us[i], pid, threads[i], span[1]))
                else:
                    name = names[i]
                    name_json = quoted.get(name) or quoted.setdefault(name, json.dumps(name))
                    sig = signature[i]
                    args = args_json.get(sig)
                    if args is None:
                        args = args_json[sig] = json.dumps(
                            {"Input Dims": _jsonable(shapes[i]), "Input type": list(dtypes[i] or [])})
                    lines.append(_OP_SPAN % (name_json, start_us[i], dur_us[i], pid, threads[i], args))
            fh.write((", " if c or named else "") + ", ".join(lines))
        fh.write('], "displayTimeUnit": "ms"}')
    span_us = (start_us[kept[-1]] - start_us[kept[0]]) if kept else 0
    trace = {"events_written": len(kept), "events_total": len(traced), "truncated": len(traced) > len(kept),
             "span_s": span_us / 1e6}
    return {
        "rows": rows,
        "memory": memory,
        "attribution_overhead_us": attribution_us,
        "below_python_us": unseen_us,
        "events": n_events,
        "trace": trace,
    }


def source_span(label: tuple) -> tuple[str, dict[str, Any]]:
    """A user call in trace.json: named after the user line, with its library line and module as args."""
    user, library, module = label
    return user or "?", {"library": library, "module": module}


def _source_span_json(label: tuple) -> tuple[str, str]:
    name, args = source_span(label)
    return json.dumps(name), json.dumps(args)


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


def _jsonable(shapes) -> list:
    """Shapes, strides or recorded arguments as JSON data: a non-finite float (`torch.where(mask, -inf, x)`)
    becomes the string "inf", "-inf" or "nan" (JSON has no such numbers; microbench reads them back)."""
    out = []
    for s in shapes or []:
        if isinstance(s, (list, tuple)):
            out.append(_jsonable(s))
        elif isinstance(s, float) and not math.isfinite(s):
            out.append(repr(s))
        else:
            out.append(s)
    return out
