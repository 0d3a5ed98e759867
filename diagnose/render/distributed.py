"""The distributed view's rows and lines, shared by the terminal and Markdown renderers."""

from __future__ import annotations

from diagnose.render import fmt
from diagnose.report.model import Distributed, Report


def _d(report: Report) -> Distributed:
    return report.distributed or Distributed()


def heading(report: Report) -> str:
    d = _d(report)
    return (f"Ranks (world size {d.world_size}, {len(d.nodes) or 1} node{'s' if len(d.nodes) > 1 else ''}"
            + (f", {d.backend}" if d.backend else "") + ")")


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def rank_rows(report: Report) -> list[tuple[str, ...]]:
    rows = [("rank", "node", "status", "wall", "compute", "collectives", "coll. share", "threads", "top operator")]
    for e in _d(report).ranks:
        top = e.operators[0] if e.operators else None
        rows.append((
            str(e.rank), _or_dash(e.node_rank), e.status, fmt.duration(e.wall_s),
            fmt.us(e.compute_us) if e.compute_us is not None else "-",
            fmt.us(e.collective_us) if e.collective_us is not None else "-",
            f"{100 * e.collective_share:.0f}%" if e.collective_share is not None else "-",
            _or_dash(e.intra_op_threads),
            f"{top.name} {fmt.shapes(top.input_shapes, 28)} {fmt.us(top.self_cpu_us)}" if top else "-",
        ))
    return rows


def summary_lines(report: Report) -> list[str]:
    d = _d(report)
    out = []
    if d.launcher:
        out.append(f"launched as: {d.launcher}")
    s = d.straggler
    if s is not None and s.measure == "compute_us":
        ops = ", ".join(f"{o.name} +{fmt.us(o.diff_us)}" + (f" ({o.source})" if o.source else "")
                        for o in s.operators[:3])
        out.append(f"slowest rank {s.rank}: {fmt.us(s.slow)} of operator time vs {fmt.us(s.fast)} on rank "
                   f"{s.fastest_rank} ({s.slower_pct:+.0f}%)" + (f"; the difference: {ops}" if ops else ""))
    c = d.collectives
    if c is not None and c.share is not None:
        names = ", ".join(f"{x.name} {x.calls}x {fmt.us(x.us)}" for x in c.by_name[:3])
        out.append(f"collectives {100 * c.share:.0f}% vs compute {100 * (1 - c.share):.0f}% of the ranks' time"
                   + (f" ({names})" if names else "") + "; collective time includes waiting for slower ranks")
    for f in d.failed_ranks:
        out.append(f"rank {f.rank} {f.status}" + (" first" if f.first else "")
                   + (f" in the {f.pass_name} pass" if f.pass_name else "")
                   + (f": {f.error}" if f.error else ""))
    for o in d.observations:
        out.append(f"[{o.severity}] {o.kind}: {o.title}")
        out.append(f"    try: {o.suggestion}")
    out += d.notes
    return out
