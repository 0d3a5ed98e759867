"""A torchrun operator pass: every rank's raw data merged into the one the layer analyses.

Each rank profiles itself: its raw rows in its result (`RankOutcome.result.raw`,
distributed/collect.py) and its trace.json in `rank<R>/` under the pass's
workdir (distributed/launcher.py). `merged_raw(ranks, workdir)` gives the raw
data of the ranks that wrote some, as one process's would look:
- `rows`: every rank's rows together (merge_rows then sums them into one row
  per (operator, input shapes));
- `memory`: summed over the ranks, but the peak of live bytes: the largest
  rank's; `events` and `attribution_overhead_us` summed; `ranks`: those ranks;
- every other key the lowest rank's, but `collectives`, which is per rank
  (each rank's own is in report.distributed.ranks, distributed/view.py);
- `trace`: trace.json written in the pass's workdir, one process per rank
  (named "rank R", so Perfetto shows them stacked), and its summary over the
  ranks; the lowest rank's summary when no rank left a trace.
The ranks' results are not changed.
"""

from __future__ import annotations

import json
import os
from typing import Any

from diagnose.distributed import launcher
from diagnose.distributed.collect import RankOutcome
from diagnose.protocol import PassResult

TRACE = "trace.json"


def merged_raw(ranks: list[RankOutcome], workdir: str) -> dict[str, Any] | None:
    """The ranks' raw data as one (see the module docstring); None when no rank wrote any."""
    present = [(r.rank, r.result) for r in sorted(ranks, key=lambda r: r.rank) if r.result is not None]
    raws = [(rank, result.raw) for rank, result in present if result.raw]
    if not raws:
        return None
    lead = raws[0][1]
    rows = [row for _, raw in raws for row in raw.get("rows") or []]
    memory: dict[str, int] = {}
    for _, raw in raws:
        for key, value in (raw.get("memory") or {}).items():
            if key == "peak_live_bytes":
                memory[key] = max(memory.get(key, 0), value)
            else:
                memory[key] = memory.get(key, 0) + value
    merged = {
        **lead, "rows": rows, "memory": memory,
        "events": sum(raw.get("events") or 0 for _, raw in raws),
        "attribution_overhead_us": sum(raw.get("attribution_overhead_us") or 0.0 for _, raw in raws),
        "ranks": [rank for rank, _ in raws],
    }
    merged.pop("collectives", None)
    merged["trace"] = _merged_trace(present, workdir, lead.get("trace") or {})
    return merged


def _merged_trace(present: list[tuple[int, PassResult]], workdir: str, lead_trace: dict[str, Any]) -> dict[str, Any]:
    """One trace.json, one process per rank (named "rank R"), Perfetto shows them stacked."""
    events: list[dict[str, Any]] = []
    summary = {"events_written": 0, "events_total": 0, "truncated": False, "span_s": 0.0}
    for rank, result in present:
        data = _read_trace(os.path.join(launcher.rank_dir(workdir, rank), TRACE))
        if not data:
            continue
        rank_events = data.get("traceEvents") or []
        pid = next((e.get("pid") for e in rank_events if "pid" in e), None)
        if pid is not None:
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {rank}"}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": rank}})
        events.extend(rank_events)
        info = (result.raw or {}).get("trace") or {}
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
