"""Parent side of a distributed pass: the ranks' result.json files, merged.

`collect(workdir, spec, returncode)` reads `rank<R>/result.json` of every
rank that ran on this node and returns (merged result, ranks):
- ranks: one RankOutcome per rank: its identity (rank, local_rank, node_rank,
  hostname, pid, OMP_NUM_THREADS it saw), status (ok, failed, stopped: torchrun
  ended it after another rank failed or on Ctrl-C/timeout; missing: it wrote
  nothing), error, and its PassResult;
- the merged result is a PassResult like a single process's, so the
  layers analyse it as before: the slowest rank's wall time, per-iteration
  maxima, the lowest rank's torch settings and thread calls; the operator
  pass's rows of all ranks together (the layer then folds them into one row
  per (operator, shapes)), their trace.json files as one trace with a
  process per rank; for other layers the lowest rank's data and files (its
  profile.pstats); and when a rank failed, that rank's exit code and error
  (the earliest failure by the ranks' clocks: the others fail because of it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from diagnose import protocol
from diagnose.distributed import launcher
from diagnose.protocol import PassResult, PassSpec, RankIdentity, TorchInfo

TRACE = "trace.json"
FAILURE_KINDS = ("exception", "exit", "os_exit", "no_function")
_NOT_ARTIFACTS = {protocol.RESULT_FILE, TRACE, launcher.PID_FILE, "started", "stopped", protocol.SPEC_FILE}


@dataclass
class RankOutcome:
    """One rank of one pass: who it is, how it ended, and what it measured (view.record_pass reads it)."""

    identity: RankIdentity
    status: str  # ok, failed, stopped (torchrun ended it after another rank failed, or on Ctrl-C), missing
    error: str | None = None
    result: PassResult | None = None  # None: the rank wrote nothing (missing)

    @property
    def rank(self) -> int:
        return self.identity.rank

    @property
    def torch(self) -> TorchInfo:
        return self.result.torch if self.result else TorchInfo()


def _outcome(rank: int, result: PassResult | None) -> RankOutcome:
    identity = result.rank if result and result.rank else RankIdentity(rank=rank)
    if result is None:
        return RankOutcome(identity, "missing",
                           "the rank wrote no result (killed, or it never started the runner)")
    status = "stopped" if result.error_kind == "interrupted" else "failed" if result.exit_code else "ok"
    return RankOutcome(identity, status, result.error, result)


def collect(workdir: str, spec: PassSpec, returncode: int | None) -> tuple[PassResult | None, list[RankOutcome]]:
    found = [(rank, path, protocol.read_result(os.path.join(path, protocol.RESULT_FILE)))
             for rank, path in launcher.rank_dirs(workdir)]
    ranks = [_outcome(rank, result) for rank, _, result in found]
    # local ranks torchrun was asked for that left no directory at all
    known_local = {r.identity.local_rank for r in ranks if r.identity.local_rank is not None}
    bases = {r.rank - r.identity.local_rank for r in ranks if r.identity.local_rank is not None}
    base = bases.pop() if len(bases) == 1 else None
    known = {r.rank for r in ranks}
    for r in ranks:
        if r.identity.local_rank is None and base is not None:
            r.identity = dataclasses.replace(r.identity, local_rank=r.rank - base)
    nproc = spec.distributed.nproc_per_node if spec.distributed else 0
    for local in range(nproc):
        if base is not None and local not in known_local and base + local not in known:
            missing = _outcome(base + local, None)
            missing.identity = dataclasses.replace(missing.identity, local_rank=local)
            ranks.append(missing)
    ranks.sort(key=lambda r: r.rank)
    present = [(rank, path, result) for rank, path, result in found if result is not None]
    if not present:
        return None, ranks
    merged = _merge(present, ranks, returncode)
    lead_path = present[0][1]
    if spec.layer == "operators":
        merged.raw = _merge_operators(present, workdir)
    else:
        _adopt_files(lead_path, workdir)
    return merged, ranks


def _merge(present: list[tuple[int, str, PassResult]], ranks: list[RankOutcome], returncode: int | None) -> PassResult:
    results = [result for _, _, result in present]
    merged = dataclasses.replace(results[0], rank=None)
    walls = [r.wall_s for r in results if r.wall_s is not None]
    merged.wall_s = max(walls) if walls else None
    series = [r.iteration_s for r in results]
    if series and all(len(s) == len(series[0]) for s in series):
        merged.iteration_s = [max(values) for values in zip(*series)]
    failures = [r for r in ranks if r.status == "failed" and r.result and r.result.error_kind in FAILURE_KINDS]
    failures.sort(key=lambda r: (r.identity.finished_at or float("inf"), r.rank))
    missing = [r for r in ranks if r.status == "missing"]
    if failures:
        root = failures[0].result
        others = [r.rank for r in ranks if r.rank != failures[0].rank and r.status != "ok"]
        merged.exit_code, merged.error_kind, merged.traceback = root.exit_code, root.error_kind, list(root.traceback)
        merged.error = (f"rank {failures[0].rank} failed: {root.error}"
                        + (f" (then rank{'s' if len(others) > 1 else ''} "
                           f"{', '.join(map(str, others))} stopped)" if others else ""))
    elif missing and returncode:
        merged.exit_code, merged.error_kind, merged.traceback = returncode if returncode > 0 else 1, "crashed", []
        merged.error = (f"rank{'s' if len(missing) > 1 else ''} {', '.join(str(r.rank) for r in missing)} "
                        f"wrote no result: killed, or crashed outside Python (torchrun exited {returncode})")
    elif not any(r.error_kind for r in results):
        merged.exit_code, merged.error, merged.error_kind, merged.traceback = 0, None, None, []
    else:  # every rank stopped (Ctrl-C or --timeout reached torchrun, which stopped them all)
        stopped = next(r for r in results if r.error_kind)
        merged.exit_code, merged.error, merged.error_kind = stopped.exit_code, stopped.error, stopped.error_kind
        merged.traceback = list(stopped.traceback)
    raw_errors = [f"rank {rank}: {res.raw_error}" for rank, _, res in present if res.raw_error]
    merged.raw_error = "; ".join(raw_errors) or None
    merged.ranks_reported = len(present)
    return merged


def _merge_operators(present, workdir: str) -> dict[str, Any] | None:
    raws = [(rank, result.raw) for rank, _, result in present if result.raw]
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
        data = _read_trace(os.path.join(path, TRACE))
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


def _adopt_files(rank_path: str, workdir: str) -> None:
    """The lowest rank's artifacts (profile.pstats, ...) where the layer looks for them."""
    for name in os.listdir(rank_path):
        src = os.path.join(rank_path, name)
        if name in _NOT_ARTIFACTS or os.path.exists(os.path.join(workdir, name)):
            continue
        shutil.move(src, os.path.join(workdir, name))


def _read_trace(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
