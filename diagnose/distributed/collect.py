"""Parent side of a distributed pass: the ranks' result.json files, merged.

`collect(workdir, spec, returncode)` reads `rank<R>/result.json` of every
rank that ran on this node and returns (merged result, ranks):
- ranks: one dict per rank with its identity (rank, local_rank, node_rank,
  hostname, pid, OMP_NUM_THREADS it saw), status (ok, failed, stopped: torchrun
  ended it after another rank failed or on Ctrl-C/timeout; missing: it wrote
  nothing), error, wall_s, iteration_s, torch and its layer data (`raw`);
- the merged result has the shape of a single-process result.json, so the
  layers analyse it as before: the slowest rank's wall time, per-iteration
  maxima, the lowest rank's torch settings and thread calls; the operator
  pass's rows of all ranks together (the layer then folds them into one row
  per (operator, shapes)), their trace.json files as one trace with a
  process per rank; for other layers the lowest rank's data and files (its
  profile.pstats); and when a rank failed, that rank's exit code and error
  (the earliest failure by the ranks' clocks: the others fail because of it).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from diagnose.distributed import launcher

RESULT = "result.json"
TRACE = "trace.json"
FAILURE_KINDS = ("exception", "exit", "os_exit", "no_function")
_NOT_ARTIFACTS = {RESULT, TRACE, launcher.PID_FILE, "started", "stopped", "spec.json"}


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _rank_entry(rank: int, result: dict[str, Any] | None) -> dict[str, Any]:
    me = (result or {}).get("rank") or {}
    entry: dict[str, Any] = {
        "rank": rank, "local_rank": me.get("local_rank"), "node_rank": me.get("node_rank"),
        "hostname": me.get("hostname"), "pid": me.get("pid"), "world_size": me.get("world_size"),
        "local_world_size": me.get("local_world_size"), "omp_num_threads": me.get("omp_num_threads"),
        "finished_at": me.get("finished_at"),
    }
    if result is None:
        entry.update(status="missing", error="the rank wrote no result (killed, or it never started the runner)")
        return entry
    kind = result.get("error_kind")
    status = "stopped" if kind == "interrupted" else "failed" if result.get("exit_code") else "ok"
    entry.update(status=status, exit_code=result.get("exit_code"), error=result.get("error"), error_kind=kind,
                 traceback=result.get("traceback") or [], wall_s=result.get("wall_s"),
                 iteration_s=result.get("iteration_s") or [], torch=result.get("torch") or {},
                 raw=result.get("raw"), raw_error=result.get("raw_error"))
    return entry


def collect(workdir: str, spec: dict[str, Any], returncode: int | None) -> tuple[dict[str, Any] | None, list[dict]]:
    dist = spec.get("distributed") or {}
    found = [(rank, path, _read(os.path.join(path, RESULT))) for rank, path in launcher.rank_dirs(workdir)]
    ranks = [_rank_entry(rank, result) for rank, _, result in found]
    # local ranks torchrun was asked for that left no directory at all
    known_local = {r["local_rank"] for r in ranks if r["local_rank"] is not None}
    bases = {r["rank"] - r["local_rank"] for r in ranks if r["local_rank"] is not None}
    base = bases.pop() if len(bases) == 1 else None
    known = {r["rank"] for r in ranks}
    for r in ranks:
        if r["local_rank"] is None and base is not None:
            r["local_rank"] = r["rank"] - base
    for local in range(int(dist.get("nproc_per_node") or 0)):
        if base is not None and local not in known_local and base + local not in known:
            ranks.append({**_rank_entry(base + local, None), "local_rank": local})
    ranks.sort(key=lambda r: r["rank"])
    present = [(rank, path, result) for rank, path, result in found if result is not None]
    if not present:
        return None, ranks
    merged = _merge(present, ranks, returncode, spec.get("layer"))
    lead_path = present[0][1]
    if spec.get("layer") == "operators":
        merged["raw"] = _merge_operators(present, workdir)
    else:
        _adopt_files(lead_path, workdir)
    return merged, ranks


def _merge(present, ranks, returncode, layer) -> dict[str, Any]:
    results = [result for _, _, result in present]
    lead = results[0]
    merged = {k: v for k, v in lead.items() if k != "rank"}
    walls = [r["wall_s"] for r in results if r.get("wall_s") is not None]
    merged["wall_s"] = max(walls) if walls else None
    series = [r.get("iteration_s") or [] for r in results]
    if series and all(len(s) == len(series[0]) for s in series):
        merged["iteration_s"] = [max(values) for values in zip(*series)]
    failures = [r for r in ranks if r["status"] == "failed" and r.get("error_kind") in FAILURE_KINDS]
    failures.sort(key=lambda r: (r.get("finished_at") or float("inf"), r["rank"]))
    missing = [r for r in ranks if r["status"] == "missing"]
    if failures:
        root = failures[0]
        result = next(res for rank, _, res in present if rank == root["rank"])
        others = [r["rank"] for r in ranks if r["rank"] != root["rank"] and r["status"] != "ok"]
        merged.update(exit_code=result.get("exit_code"), error_kind=result.get("error_kind"),
                      traceback=result.get("traceback") or [])
        merged["error"] = (f"rank {root['rank']} failed: {result.get('error')}"
                           + (f" (then rank{'s' if len(others) > 1 else ''} "
                              f"{', '.join(map(str, others))} stopped)" if others else ""))
    elif missing and returncode:
        merged.update(exit_code=returncode if returncode > 0 else 1, error_kind="crashed", traceback=[])
        merged["error"] = (f"rank{'s' if len(missing) > 1 else ''} {', '.join(str(r['rank']) for r in missing)} "
                           f"wrote no result: killed, or crashed outside Python (torchrun exited {returncode})")
    elif not any(r.get("error_kind") for r in results):
        merged.update(exit_code=0, error=None, error_kind=None, traceback=[])
    else:  # every rank stopped (Ctrl-C or --timeout reached torchrun, which stopped them all)
        stopped = next(r for r in results if r.get("error_kind"))
        merged.update(exit_code=stopped.get("exit_code"), error=stopped.get("error"),
                      error_kind=stopped.get("error_kind"), traceback=stopped.get("traceback") or [])
    raw_errors = [f"rank {rank}: {res['raw_error']}" for rank, _, res in present if res.get("raw_error")]
    merged["raw_error"] = "; ".join(raw_errors) or None
    merged["ranks_reported"] = len(present)
    return merged


def _merge_operators(present, workdir: str) -> dict[str, Any] | None:
    raws = [(rank, result.get("raw")) for rank, _, result in present if result.get("raw")]
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
    merged["trace"] = _merge_traces(present, workdir, lead.get("trace") or {})
    return merged


def _merge_traces(present, workdir: str, lead_trace: dict[str, Any]) -> dict[str, Any]:
    """One trace.json, one process per rank (named "rank R"), Perfetto shows them stacked."""
    events: list[dict[str, Any]] = []
    summary = {"events_written": 0, "events_total": 0, "truncated": False, "span_s": 0.0}
    for rank, path, result in present:
        data = _read(os.path.join(path, TRACE))
        if not data:
            continue
        rank_events = data.get("traceEvents") or []
        pid = next((e.get("pid") for e in rank_events if "pid" in e), None)
        if pid is not None:
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {rank}"}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": rank}})
        events.extend(rank_events)
        info = (result.get("raw") or {}).get("trace") or {}
        summary["events_written"] += info.get("events_written") or 0
        summary["events_total"] += info.get("events_total") or 0
        summary["truncated"] = summary["truncated"] or bool(info.get("truncated"))
        summary["span_s"] = max(summary["span_s"], info.get("span_s") or 0.0)
    if not events:
        return lead_trace
    with open(os.path.join(workdir, TRACE), "w") as fh:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, fh)
    return summary


def _adopt_files(rank_path: str, workdir: str) -> None:
    """The lowest rank's artifacts (profile.pstats, ...) where the layer looks for them."""
    for name in os.listdir(rank_path):
        src = os.path.join(rank_path, name)
        if name in _NOT_ARTIFACTS or os.path.exists(os.path.join(workdir, name)):
            continue
        shutil.move(src, os.path.join(workdir, name))
