"""Reports of one torchrun job combined into one: a pure function of the reports (pyinstrument's
Session.combine), used by `diagnose merge` (cli.py) on the per-node reports of a multi-node job.

Each node of a multi-node job runs `diagnose --nproc-per-node N
--torchrun-args "<the same rendezvous options>" train.py` and writes its own
report (its ranks, its threads). `combine` makes one of them:
- they must be one job: the same script, arguments and mode, distributed
  reports with the same world size, each node (node rank) once; otherwise
  `check` raises a UsageError (a one-line error, exit 2, nothing written);
- `distributed`: every node's ranks and nodes, then the collectives,
  straggler and observations recomputed over all ranks (report/distributed.py);
- `operators`: one row per (operator, input shapes) summed over the nodes
  (each node's rows are already summed over its ranks) by report/rows.py's
  `sum_rows`, the function that sums a pass's raw rows, shares recomputed;
- `run`: the slowest node's wall times; the first node's error, if any;
- `threads`: the node whose threads waited most (node oversubscription is
  per node; every node's summary stays in distributed.nodes); machine,
  python hotspots, micro-benchmarks and efficiency: the lowest node's;
- findings and artifacts are left empty: the caller derives the findings
  from the combined report, and writing it records its files.
The inputs are not changed. Within one node, torchrun's ranks are combined
earlier, from their raw pass results (diagnose/distributed/collect.py), before
any report exists.
"""

from __future__ import annotations

import copy
import os

from diagnose.errors import UsageError
from diagnose.report.distributed import summarise
from diagnose.report.model import MergedFrom, OperatorSummary, Report
from diagnose.report.rows import sum_rows

ORDER = ("ok", "skipped", "failed")


def _key(report: Report) -> tuple:
    t = report.target
    return (os.path.basename(t.script), tuple(t.argv), t.mode, t.function)


def _node(report: Report) -> int:
    d = report.distributed
    values = ({n.node_rank for n in d.nodes} | {e.node_rank for e in d.ranks}) if d else set()
    values.discard(None)
    return min(values) if values else 0


def check(reports: list[tuple[str, Report]]) -> None:
    """One job, each node once; UsageError otherwise."""
    if len(reports) < 2:
        raise UsageError("give the reports of at least two nodes to merge")
    for path, r in reports:
        if not (r.distributed and r.distributed.ranks):
            raise UsageError(f"{path} is not a distributed report (made with diagnose --nproc-per-node N)")
    first_path, first = reports[0]
    for path, r in reports[1:]:
        if _key(r) != _key(first):
            raise UsageError(f"{path} and {first_path} are not the same job: "
                             f"{_label(r)} vs {_label(first)}")
        if r.distributed.world_size != first.distributed.world_size:
            raise UsageError(f"{path} and {first_path} are not the same job: world size "
                             f"{r.distributed.world_size} vs {first.distributed.world_size}")
    seen: dict[int, str] = {}
    for path, r in reports:
        for e in r.distributed.ranks:
            if e.rank in seen:
                raise UsageError(f"rank {e.rank} is in both {seen[e.rank]} and {path}: "
                                 "give each node's report once")
        for e in r.distributed.ranks:
            seen[e.rank] = path


def _label(r: Report) -> str:
    t = r.target
    return " ".join([f"{t.script}{':' + t.function if t.function else ''}", *t.argv])


def combine(reports: list[tuple[str, Report]]) -> Report:
    """(path, report) per node -> one report, without findings (see the module docstring)."""
    check(reports)
    reports = sorted(reports, key=lambda pr: _node(pr[1]))
    base = copy.deepcopy(reports[0][1])
    all_reports = [r for _, r in reports]
    base.operators = sum_rows(row for r in all_reports for row in r.operators)
    summaries = [r.operator_summary or OperatorSummary() for r in all_reports]
    totals = [s.total_self_cpu_us or 0.0 for s in summaries]
    shares = [s.attributed_share for s in summaries]
    merged = base.operator_summary = base.operator_summary or OperatorSummary()
    merged.total_self_cpu_us = round(sum(totals), 3)
    if all(s is not None for s in shares) and sum(totals):
        merged.attributed_share = round(sum(s * t for s, t in zip(shares, totals)) / sum(totals), 4)
    merged.events = sum(s.events or 0 for s in summaries)
    merged.ranks = sorted(x for s in summaries for x in s.ranks)
    # the run: the slowest node; the first error
    walls = [(r.run.wall_s or 0.0, r) for r in all_reports]
    slowest = max(walls, key=lambda w: w[0])[1]
    base.run.wall_s = slowest.run.wall_s
    base.run.iterations = slowest.run.iterations
    inst = [r for r in all_reports if r.run.instrumented_wall_s is not None]
    if inst:
        worst = max(inst, key=lambda r: r.run.instrumented_wall_s)
        base.run.instrumented_wall_s = worst.run.instrumented_wall_s
        base.run.instrumented_iterations = worst.run.instrumented_iterations
    failed = next((r for r in all_reports if r.run.error or r.run.exit_code), None)
    if failed is not None:
        base.run.exit_code, base.run.error, base.run.traceback = failed.run.exit_code, failed.run.error, failed.run.traceback
    base.run.interrupted = any(r.run.interrupted for r in all_reports)
    base.run.timed_out = any(r.run.timed_out for r in all_reports)
    # threads: the node that queued most
    measured = [r for r in all_reports if r.threads is not None and r.threads.runqueue_wait_share is not None]
    if measured:
        worst = max(measured, key=lambda r: r.threads.runqueue_wait_share)
        base.threads = copy.deepcopy(worst.threads)
        base.threads.node_rank = _node(worst)
    # layers: the worst status of each
    for r in all_reports[1:]:
        for name, status in r.layers.items():
            mine = base.layers.get(name)
            if mine is None or ORDER.index(status.status) > ORDER.index(mine.status):
                base.layers[name] = copy.deepcopy(status)
    # distributed: every node's ranks and nodes, summaries recomputed
    d = base.distributed
    d.ranks = sorted((copy.deepcopy(e) for r in all_reports for e in r.distributed.ranks), key=lambda e: e.rank)
    d.nodes = sorted((copy.deepcopy(n) for r in all_reports for n in r.distributed.nodes), key=lambda n: n.node_rank)
    d.merged_from = [MergedFrom(report=path, node_rank=_node(r), started_at=r.run.started_at,
                                hostname=next((n.hostname for n in r.distributed.nodes), None))
                     for path, r in reports]
    summarise(d)
    present = {n.node_rank for n in d.nodes}
    expected = (d.world_size or 0) // max(1, d.nproc_per_node or 1)
    missing = sorted(set(range(expected)) - present) if expected > 1 else []
    d.notes = [f"merged from {len(reports)} node reports"
               + (f"; node{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} missing" if missing else "")
               + (f"; threads are node {base.threads.node_rank}'s, whose threads waited most" if measured else "")
               + "; trace.json and the call graph stay beside each node's report"]
    base.artifacts = {}
    base.findings = []
    return base
