"""`report.distributed`, parent side: what each rank did in each pass of this run.

Filled pass by pass (`record_pass`, from the outcome's per-rank results,
distributed/collect.py) and completed once the passes ran (`finish`: the
ranks matched to the thread sampler's processes, the node, then
report/distributed.py's `summarise`, the summaries over the ranks that
`diagnose merge` derives the same way). The shapes are the model's
`Distributed` and its parts (diagnose/report/model.py).

The report's `operators` (one row per (operator, input shapes), the
contract's table) is the merge of all ranks: calls and times summed over
ranks, shares of the summed time; each rank keeps its own top rows here.
"""

from __future__ import annotations

from typing import Any

from diagnose.distributed import launcher
from diagnose.distributed.collect import RankOutcome
from diagnose.layers.operators.rows import merge_rows
from diagnose.protocol import DistributedSpec
from diagnose.report import io as report_io
from diagnose.report.distributed import summarise
from diagnose.report.model import CollectiveStat, Distributed, NodeResult, NodeThreads, RankOperator, RankResult, \
    RankThreads

PER_RANK_ROWS = 20
_STATUS_ORDER = ("ok", "stopped", "failed", "missing")
_IDENTITY = ("local_rank", "node_rank", "hostname", "world_size", "local_world_size", "omp_num_threads")


def start(dist: DistributedSpec) -> Distributed:
    return Distributed(launcher=launcher.display_command(dist), nproc_per_node=dist.nproc_per_node,
                       torchrun_args=list(dist.torchrun_args))


def _entry(d: Distributed, r: RankOutcome) -> RankResult:
    e = next((e for e in d.ranks if e.rank == r.rank), None)
    if e is None:
        e = RankResult(rank=r.rank)
        d.ranks.append(e)
        d.ranks.sort(key=lambda x: x.rank)
    for key in _IDENTITY:
        if getattr(r.identity, key) is not None:
            setattr(e, key, getattr(r.identity, key))
    return e


def record_pass(report: Any, pass_name: str, layer: str | None, ranks: list[RankOutcome]) -> None:
    """One pass's per-rank results (distributed/collect.py) into report.distributed."""
    d = report.distributed
    for r in ranks:
        e = _entry(d, r)
        e.passes[pass_name] = r.status
        if r.error:
            e.errors[pass_name] = r.error
        if r.status == "failed" and r.identity.finished_at and e.failed_at is None:
            e.failed_at = r.identity.finished_at
        if _STATUS_ORDER.index(r.status) > _STATUS_ORDER.index(e.status):
            e.status = r.status
        if r.result is None:
            continue
        res = r.result
        intra_op_threads = res.torch.intra_op_threads
        if layer is None and pass_name == "baseline":
            e.pid = r.identity.pid
            e.wall_s = _round(res.wall_s, 4)
            its = sorted(res.iteration_s)
            e.iteration_median_s = _round(its[len(its) // 2], 5) if its else None
            e.intra_op_threads = intra_op_threads
        elif layer == "operators":
            raw = res.raw or {}
            e.instrumented_wall_s = _round(res.wall_s, 4)
            rows = merge_rows(raw["rows"]) if raw.get("rows") else []
            total = sum(row.self_cpu_us for row in rows)
            launches = sum(row.self_cpu_us for row in rows if row.name.startswith("c10d::"))
            coll = raw.get("collectives") or {"busy_us": 0.0, "by_name": []}
            e.operator_self_us = round(total, 3)
            e.compute_us = round(total - launches, 3)
            e.collective_us = coll["busy_us"]
            both = e.compute_us + e.collective_us
            e.collective_share = round(e.collective_us / both, 4) if both else None
            e.collectives = report_io.typed(list[CollectiveStat], coll["by_name"])
            e.operators = [RankOperator(name=row.name, input_shapes=row.input_shapes, calls=row.calls,
                                        self_cpu_us=row.self_cpu_us, self_pct=row.self_pct, source=row.source)
                           for row in rows[:PER_RANK_ROWS]]
            e.other_operators_us = round(sum(row.self_cpu_us for row in rows[PER_RANK_ROWS:]), 3)
            if e.intra_op_threads is None:
                e.intra_op_threads = intra_op_threads


def finish(report: Any) -> None:
    """After the passes: ranks matched to the thread sampler's processes, then the summaries."""
    d = report.distributed
    t = report.threads
    by_pid = {p.pid: p for p in t.processes} if t else {}
    for e in d.ranks:
        p = by_pid.get(e.pid)
        if p is None:
            continue
        p.rank = e.rank  # the sampler's process row says which rank it is
        e.threads = RankThreads(cpu_used=p.cpu_used, mean_runnable=p.mean_runnable, wait_share=p.wait_share,
                                active_threads=sum(p.active_threads.values()), threads=p.threads)
    node_ranks = sorted({e.node_rank for e in d.ranks if e.node_rank is not None})
    usable = report.machine.usable_cpus or None
    d.nodes = []
    for node in node_ranks or [0]:
        here = [e for e in d.ranks if (e.node_rank or 0) == node]
        info = NodeResult(node_rank=node, hostname=next((e.hostname for e in here), None),
                          ranks=[e.rank for e in here], usable_cpus=usable)
        if t is not None and t.mean_runnable is not None:
            active = [e.threads.active_threads for e in here if e.threads]
            info.threads = NodeThreads(
                mean_runnable=t.mean_runnable, runqueue_wait_share=t.runqueue_wait_share,
                compute_processes=t.compute_processes, threads_per_rank=max(active) if active else None,
                fair_threads_per_rank=max(1, (usable or 1) // max(1, len(here))))
        d.nodes.append(info)
    layer = report.layers.get("operators")
    measured = [e.rank for e in d.ranks if e.operator_self_us is not None]
    if layer is not None and measured:
        if report.operator_summary is not None:
            report.operator_summary.ranks = measured
        layer.notes.append(f"operator rows merge rank{'s' if len(measured) > 1 else ''} "
                           f"{', '.join(map(str, measured))}: calls and times summed over ranks "
                           "(each rank's own table is in distributed.ranks)")
    summarise(d)


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)
