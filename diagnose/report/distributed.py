"""`report.distributed`'s summaries over the ranks: a pure function of the per-rank entries.

`summarise(d)` recomputes every derived part of a Distributed section (world
size, failed ranks, backend, collectives, straggler, observations) from
`d.ranks` alone, so the run (distributed/view.py `finish`, once the passes
ran) and `diagnose merge` (report/combine.py, on the ranks of several nodes'
reports) derive them the same way. The shapes are the model's `Distributed`
and its parts (report/model.py).

Observations, not findings (the findings' kinds are fixed by the contract):
- "straggler": the rank with the most compute (operator pass) computes >=
  STRAGGLER_LOW_PCT more than the one with the least, and >= STRAGGLER_MIN_US
  more: `low`, `medium` at >= STRAGGLER_MEDIUM_PCT. The others wait for it
  inside their collectives.
- "collectives": collectives take >= COLLECTIVE_LOW_SHARE of the ranks'
  collective + compute time: `low`, `medium` at >= COLLECTIVE_MEDIUM_SHARE.
Node oversubscription (ranks x intra-op threads > usable CPUs) is the
threads layer's `oversubscription` finding: the sampler watches torchrun and
every rank of the node as one process tree.
"""

from __future__ import annotations

from collections import defaultdict

from diagnose.report import io as report_io
from diagnose.report.model import (CollectiveStat, Collectives, Distributed, FailedRank, Observation, RankOperator,
                                   RankResult, Straggler, StragglerOperator)

STRAGGLER_LOW_PCT = 10.0
STRAGGLER_MEDIUM_PCT = 25.0
STRAGGLER_MIN_US = 2000.0
STRAGGLER_OPERATORS = 5
COLLECTIVE_LOW_SHARE = 0.3
COLLECTIVE_MEDIUM_SHARE = 0.5


def summarise(d: Distributed) -> Distributed:
    """World size, failed ranks, collectives, straggler and observations from d.ranks (in place)."""
    sizes = [e.world_size for e in d.ranks if e.world_size]
    d.world_size = max(sizes) if sizes else (len(d.ranks) or None)
    d.failed_ranks = [
        FailedRank(rank=e.rank, node_rank=e.node_rank, status=e.status,
                   pass_name=next((p for p, s in e.passes.items() if s == e.status), None),
                   error=next(iter(e.errors.values()), None), failed_at=e.failed_at)
        for e in d.ranks if e.status != "ok"]
    timed = [f for f in d.failed_ranks if f.status == "failed" and f.failed_at]
    if timed:  # the others fail because of the first (by the ranks' clocks)
        min(timed, key=lambda f: f.failed_at).first = True
    names = [c.name for e in d.ranks for c in e.collectives]
    d.backend = names[0].split(":", 1)[0] if names else d.backend
    d.collectives = _collectives(d.ranks)
    d.straggler = _straggler(d.ranks)
    d.observations = [o for o in (_straggler_observation(d.straggler), _collective_observation(d.collectives)) if o]
    return d


def _ms(us: float) -> str:
    return f"{us / 1e6:.2f} s" if us >= 1e6 else f"{us / 1e3:.1f} ms"


def _collectives(ranks: list[RankResult]) -> Collectives | None:
    measured = [e for e in ranks if e.compute_us is not None]
    if not measured:
        return None
    coll = sum(e.collective_us or 0.0 for e in measured)
    comp = sum(e.compute_us for e in measured)
    by_name: dict[str, list] = defaultdict(lambda: [0, 0.0, 0])
    for e in measured:
        for c in e.collectives:
            row = by_name[c.name]
            row[0] += c.calls
            row[1] += c.us
            row[2] += c.elements
    return Collectives(
        collective_us=round(coll, 3), compute_us=round(comp, 3),
        share=round(coll / (coll + comp), 4) if coll + comp else None,
        by_name=[CollectiveStat(name=n, calls=c, us=round(us, 3), elements=el)
                 for n, (c, us, el) in sorted(by_name.items(), key=lambda kv: -kv[1][1])],
        ranks=len(measured),
        note="collective time is the wall time with a gloo collective in flight on a rank (it includes "
             "waiting for slower ranks, and overlaps the backward pass under DDP); compute is the rank's "
             "operator self time; both from the operator pass, summed over ranks",
    )


def _by_name(e: RankResult) -> dict[str, tuple[float, RankOperator]]:
    """A rank's operator time by name (over its shapes), with its largest row."""
    out: dict[str, tuple[float, RankOperator]] = {}
    for row in e.operators:
        us, top = out.get(row.name, (0.0, row))
        out[row.name] = (us + row.self_cpu_us, top)
    return out


def _straggler(ranks: list[RankResult]) -> Straggler | None:
    # by compute, not wall time: the ranks wait for each other in collectives, and each
    # rank's wall time also counts its wait at the rendezvous for ranks that started later
    measured = [e for e in ranks if e.compute_us is not None and e.status != "missing"]
    if len(measured) < 2:
        return None
    slow = max(measured, key=lambda e: (e.compute_us, -e.rank))
    fast = min(measured, key=lambda e: (e.compute_us, e.rank))
    slow_v, fast_v = float(slow.compute_us), float(fast.compute_us)
    a, b = _by_name(slow), _by_name(fast)
    diffs = []
    for name in set(a) | set(b):
        s_us, f_us = a[name][0] if name in a else 0.0, b[name][0] if name in b else 0.0
        top = (a[name] if name in a else b[name])[1]
        diffs.append(StragglerOperator(name=name, slow_us=round(s_us, 3), fast_us=round(f_us, 3),
                                       diff_us=round(s_us - f_us, 3), shapes=top.input_shapes, source=top.source))
    diffs.sort(key=lambda x: -x.diff_us)
    return Straggler(
        rank=slow.rank, fastest_rank=fast.rank, measure="compute_us", slow=slow_v, fast=fast_v,
        slower_pct=round(100.0 * (slow_v - fast_v) / fast_v, 1) if fast_v > 0 else None,
        wall_s=slow.wall_s, fastest_wall_s=fast.wall_s, node_rank=slow.node_rank, fastest_node_rank=fast.node_rank,
        fastest_extra_collective_us=round((fast.collective_us or 0.0) - (slow.collective_us or 0.0), 3),
        operators=[x for x in diffs if x.diff_us > 0][:STRAGGLER_OPERATORS],
    )


def _straggler_observation(s: Straggler | None) -> Observation | None:
    if s is None or s.slower_pct is None:
        return None
    pct, diff = s.slower_pct, s.slow - s.fast
    if pct < STRAGGLER_LOW_PCT or diff < STRAGGLER_MIN_US:
        return None
    ops = s.operators
    top = ", ".join(f"{o.name} +{_ms(o.diff_us)}" for o in ops[:3])
    return Observation(
        kind="straggler", severity="medium" if pct >= STRAGGLER_MEDIUM_PCT else "low",
        title=(f"rank {s.rank} computes {pct:.0f}% longer than rank {s.fastest_rank} "
               f"({_ms(diff)} more operator time" + (f": {top}" if top else "") + "); "
               "the other ranks wait for it in every collective"),
        evidence={"slow_rank": s.rank, "fast_rank": s.fastest_rank, "slow_compute_us": s.slow,
                  "fast_compute_us": s.fast, "slower_pct": pct, "threshold_pct": STRAGGLER_LOW_PCT,
                  "fastest_extra_collective_us": s.fastest_extra_collective_us,
                  "operators": report_io.to_dict(ops[:3])},
        suggestion=("Give every rank the same work per step: equal batch sizes and sequence lengths per rank "
                    "(DistributedSampler, drop_last=True, length bucketing), no extra work on one rank inside "
                    "the step (logging, metrics, checkpoints, evaluation: do it outside the step or on every "
                    "rank's share), and the same CPUs and thread count on every rank."
                    + (f" Start with {ops[0].name}"
                       + (f" at {ops[0].source}" if ops[0].source else "")
                       + f", which runs {_ms(ops[0].diff_us)} longer on rank {s.rank}." if ops else "")),
    )


def _collective_observation(c: Collectives | None) -> Observation | None:
    if c is None or c.share is None or c.share < COLLECTIVE_LOW_SHARE:
        return None
    share = c.share
    return Observation(
        kind="collectives", severity="medium" if share >= COLLECTIVE_MEDIUM_SHARE else "low",
        title=f"collectives take {100 * share:.0f}% of the ranks' time against {100 * (1 - share):.0f}% compute",
        evidence={"collective_us": c.collective_us, "compute_us": c.compute_us, "share": share,
                  "threshold_share": COLLECTIVE_LOW_SHARE, "by_name": report_io.to_dict(c.by_name[:4])},
        suggestion=("Communicate less per unit of compute: a larger batch per rank, gradient accumulation "
                    "(model.no_sync() on all but the last micro-batch), larger DDP buckets (bucket_cap_mb); "
                    "on one CPU node, fewer ranks with more threads each often beats many small ranks. "
                    "Collective time includes waiting for a straggler: balance the ranks first."),
    )
