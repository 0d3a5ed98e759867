"""An operator pass of several processes: each one's raw data merged into the one the layer analyses.

Two cases, one merge:
- torchrun (`merged_raw(ranks, workdir)`): each rank profiles itself: its raw
  rows in its result (`RankOutcome.result.raw`, distributed/collect.py) and its
  trace.json in `rank<R>/` under the pass's workdir (distributed/launcher.py);
- processes the target forked (`with_children(raw, children, workdir)`): each
  one recorded itself from its start to its end (children.ChildPass) and wrote
  a protocol.ChildResult and its trace.json in `children/<pid>/`; the target's
  own process leads, and every child's rows carry its role (pool worker,
  DataLoader worker, ...) as `role`.

The merged raw data looks like one process's:
- `rows`: every process's rows together (merge_rows then sums them into one
  row per (operator, input shapes), their roles and threads as its
  `processes`);
- `memory`: summed over the processes, but the peak of live bytes: the
  largest one's; `events` and `attribution_overhead_us` summed;
- `modules`: the lead's (every rank runs the same model); with children, the
  forward calls of each module summed over the processes;
- every other key the lead's (the lowest rank, the target's own process), but
  `collectives`, which is per rank (each rank's own is in
  report.distributed.ranks, distributed/view.py); `ranks`: those ranks;
- `trace`: trace.json written in the pass's workdir, one process per rank
  ("rank R") or per process ("main", "pool worker 1234"), so Perfetto shows
  them stacked, and its summary over them; the lead's summary when none left
  a trace.
The processes' results are not changed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from diagnose import protocol
from diagnose.distributed import launcher
from diagnose.distributed.collect import RankOutcome
from diagnose.protocol import ChildResult

TRACE = "trace.json"


@dataclass
class _Part:
    """One process's raw data, as the merge reads it."""

    label: str  # its process's name in trace.json
    raw: dict[str, Any]
    trace_path: str
    role: str | None = None  # given to each of its rows; None: they keep theirs (the target's own process)


def merged_raw(ranks: list[RankOutcome], workdir: str) -> dict[str, Any] | None:
    """The ranks' raw data as one (see the module docstring); None when no rank wrote any."""
    present = [(r.rank, r.result) for r in sorted(ranks, key=lambda r: r.rank) if r.result is not None]
    parts = [_Part(f"rank {rank}", result.raw, os.path.join(launcher.rank_dir(workdir, rank), TRACE))
             for rank, result in present if result.raw]
    if not parts:
        return None
    merged = _merged(parts, workdir, sum_modules=False)
    merged["ranks"] = [rank for rank, result in present if result.raw]
    merged.pop("collectives", None)
    return merged


def with_children(raw: dict[str, Any], children: list[ChildResult], workdir: str) -> dict[str, Any]:
    """The target's own process's raw data with the rows of the children that recorded some (module docstring)."""
    parts = [_Part(protocol.MAIN, raw, os.path.join(workdir, TRACE))]
    for child in children:
        if child.raw:
            label = f"{child.role} {child.pid}" + (f" ({child.name})" if child.name else "")
            parts.append(_Part(label, child.raw, os.path.join(protocol.child_dir(workdir, child.pid), TRACE),
                               role=child.role))
    return _merged(parts, workdir, sum_modules=True) if len(parts) > 1 else raw


def _merged(parts: list[_Part], workdir: str, sum_modules: bool) -> dict[str, Any]:
    lead = parts[0].raw
    rows = [row if part.role is None else {**row, "role": part.role} for part in parts
            for row in part.raw.get("rows") or []]
    memory: dict[str, int] = {}
    for part in parts:
        for key, value in (part.raw.get("memory") or {}).items():
            if key == "peak_live_bytes":
                memory[key] = max(memory.get(key, 0), value)
            else:
                memory[key] = memory.get(key, 0) + value
    merged = {
        **lead, "rows": rows, "memory": memory,
        "events": sum(part.raw.get("events") or 0 for part in parts),
        "attribution_overhead_us": sum(part.raw.get("attribution_overhead_us") or 0.0 for part in parts),
    }
    if sum_modules:
        modules: dict[str, dict[str, Any]] = {}
        for part in parts:
            for path, seen in (part.raw.get("modules") or {}).items():
                entry = modules.setdefault(path, {"class": seen.get("class"), "calls": 0})
                entry["calls"] += seen.get("calls") or 0
        merged["modules"] = modules
        merged["module_roots"] = sorted({root for part in parts for root in part.raw.get("module_roots") or []})
    merged["trace"] = _merged_trace(parts, workdir, lead.get("trace") or {})
    return merged


def _merged_trace(parts: list[_Part], workdir: str, lead_trace: dict[str, Any]) -> dict[str, Any]:
    """One trace.json, one process per part (named after it), Perfetto shows them stacked."""
    events: list[dict[str, Any]] = []
    summary = {"events_written": 0, "events_total": 0, "truncated": False, "span_s": 0.0}
    for index, part in enumerate(parts):
        data = _read_trace(part.trace_path)
        if not data:
            continue
        part_events = data.get("traceEvents") or []
        pid = next((e.get("pid") for e in part_events if "pid" in e), None)
        if pid is not None:
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": part.label}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": index}})
        events.extend(part_events)
        info = part.raw.get("trace") or {}
        summary["events_written"] += info.get("events_written") or 0
        summary["events_total"] += info.get("events_total") or 0
        summary["truncated"] = summary["truncated"] or bool(info.get("truncated"))
        summary["span_s"] = max(summary["span_s"], info.get("span_s") or 0.0)
    if not events:
        return lead_trace
    with open(os.path.join(workdir, TRACE), "w") as fh:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, fh)
    return summary


def _read_trace(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
