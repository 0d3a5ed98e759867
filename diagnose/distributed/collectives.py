"""Collectives in one rank's operator pass, from the profiler's raw kineto events.

Measured with torch 2.13, gloo on CPU (a DDP step, all_reduce, broadcast,
barrier, all_gather): the main thread records a short operator per call
(`c10d::allreduce_`, `c10d::broadcast_`, `c10d::barrier`, `c10d::allgather_`:
it only enqueues the work), and gloo's worker thread records the collective
itself as an asynchronous user annotation, `gloo:all_reduce`,
`gloo:broadcast`, `gloo:barrier`, `gloo:all_gather`, shapes = the flattened
bucket ([[136714]] for DDP's gradient bucket). No `record_param_comms` event
appears for gloo. The annotation lasts from the start of the exchange until
every peer has contributed: it includes the time this rank waits for slower
ranks. DDP runs it beside the backward pass, so it overlaps compute.

`summarise(results)` gives, per collective name, calls, summed duration and
elements, and `busy_us`: the union of the collectives' intervals, the wall
time during which at least one collective was in flight on this rank.
Other backends' annotations (`nccl:`, `mpi:`, `ucc:`) are counted alike.
"""

from __future__ import annotations

from typing import Any

PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:")
LAUNCH_PREFIX = "c10d::"  # the enqueueing operator on the calling thread


def _numel(shapes: Any) -> int:
    total = 0
    for shape in shapes or []:
        if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
            n = 1
            for d in shape:
                n *= d
            total += n if shape else 0
    return total


def summarise(results: Any) -> dict[str, Any]:
    events = results.events() if results is not None else []
    by_name: dict[str, list] = {}
    intervals: list[tuple[int, int]] = []
    for e in events:
        name = e.name()
        if not name.startswith(PREFIXES):
            continue
        start, end = e.start_ns(), e.end_ns()
        row = by_name.setdefault(name, [0, 0.0, 0])
        row[0] += 1
        row[1] += (end - start) / 1e3
        row[2] += _numel(e.shapes())
        intervals.append((start, end))
    intervals.sort()
    busy_ns, cur_start, cur_end = 0, None, None
    for start, end in intervals:
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                busy_ns += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        busy_ns += cur_end - cur_start
    return {
        "busy_us": round(busy_ns / 1e3, 3),
        "by_name": [{"name": name, "calls": calls, "us": round(us, 3), "elements": elements}
                    for name, (calls, us, elements) in sorted(by_name.items(), key=lambda kv: -kv[1][1])],
    }
